#include "launch/run_dir.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"

namespace rankmap::launch {

RunDir::RunDir(const std::string& base) {
  std::string tmpl = base + "/rankmap-run-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr)
    throw SystemError(fmt::format("mkdtemp in {}", base), errno);
  path_ = buf.data();
}

RunDir::~RunDir() {
  for (const auto& f : written_) ::unlink(f.c_str());
  ::rmdir(path_.c_str());
}

void RunDir::write(const std::vector<std::pair<std::string, std::string>>& files) {
  for (const auto& [path, content] : files) {
    RANKMAP_ASSERT(path.rfind(path_ + "/", 0) == 0);
    written_.push_back(path);
    writeFileAtomic(path, content, 0644);
  }
}

std::string runDirBase(const std::string& setting) {
  if (!setting.empty()) return setting;
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

}  // namespace rankmap::launch
