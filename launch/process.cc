#include "launch/process.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"

extern char** environ;

namespace rankmap::launch {
namespace {

volatile sig_atomic_t gChild = 0;

// Async-signal-safe: only kill(2).
void forwardSignal(int sig) {
  if (gChild > 0) ::kill(static_cast<pid_t>(gChild), sig);
}

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

}  // namespace

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

int runAndWait(const std::vector<std::string>& argv) {
  RANKMAP_ASSERT(!argv.empty());
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  struct sigaction sa {};
  sa.sa_handler = forwardSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old[std::size(kForwarded)];
  for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &sa, &old[i]);
  auto restore = [&] {
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &old[i], nullptr);
  };

  // The child starts with default dispositions for the forwarded signals.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : kForwarded) sigaddset(&defaults, s);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, cargv[0], nullptr, &attr, cargv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    restore();
    throw SystemError(fmt::format("cannot run {}", argv[0]), rc);
  }
  gChild = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) == -1) {
    if (errno != EINTR) {
      int err = errno;
      gChild = 0;
      restore();
      throw SystemError(fmt::format("waitpid for {} (pid {})", argv[0], pid), err);
    }
  }
  gChild = 0;
  restore();
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string executableDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

}  // namespace rankmap::launch
