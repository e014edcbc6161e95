// The side effects of `rankmap run`: a private directory for the files a rewritten command needs,
// and running the command as a child with signals forwarded.
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

// Runs argv (PATH lookup) as a child and waits for it. SIGINT, SIGTERM, SIGHUP and SIGQUIT that
// reach rankmap run are forwarded to the child, which decides (mpirun tears the job down).
// Returns the child's exit status, or 128 + signal when a signal ended it. Throws SystemError
// when the command cannot be started (not found, not executable).
int runAndWait(const std::vector<std::string>& argv);

// Directory of the running executable (/proc/self/exe), for finding files installed beside it.
std::string executableDir();

}  // namespace rankmap::launch
