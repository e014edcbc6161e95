// The files `rankmap run` writes for a rewritten command (a hostfile, an adapted plan): a private
// directory that lives as long as the run.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace rankmap::launch {

// A fresh directory `<base>/rankmap-run-XXXXXX` (mode 0700), removed with the files written
// through it when the RunDir is destroyed. Throws SystemError naming the base directory.
class RunDir {
 public:
  explicit RunDir(const std::string& base);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes every (path, content); the paths must lie in path(). Throws IoError.
  void write(const std::vector<std::pair<std::string, std::string>>& files);

 private:
  std::string path_;
  std::vector<std::string> written_;
};

// The directory for RunDir: `setting` when non-empty, else $TMPDIR, else /tmp.
std::string runDirBase(const std::string& setting);

}  // namespace rankmap::launch
