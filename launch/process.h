// Child processes for `rankmap run` and the `rankmap` command line: the one place that starts a
// program, captures its output, waits for it and looks it up on PATH.
//
// Contract: a program is found with findOnPath() and started with posix_spawn(2); a Child owns its
// process until it is reaped (its destructor kills and reaps one still running, so no child is
// left behind by an exception). Every wait takes a Deadline and kills the child when it passes,
// except Child::wait(), which is for the job `rankmap run` was asked to run: its length is the
// user's business. Nothing here reads a RANKMAP_* setting.
//
// Threading: a Child is used by one thread. runAndWait() installs process-wide signal handlers
// while it runs, so only one runs at a time (the `rankmap` command line runs one job).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"

namespace rankmap::launch {

// How a child ended: the raw waitpid(2) status.
struct ExitStatus {
  int raw = 0;
  bool signaled() const;
  // The exit status, 128 + the signal when one ended it (the shell's convention), else 1.
  int code() const;
  // "exited with status 3", "was killed by signal 9".
  std::string describe() const;
};

// What becomes of a child's standard stream.
enum class Stdio { kInherit, kNull, kPipe };

struct SpawnOptions {
  Stdio in = Stdio::kInherit;   // kInherit or kNull: nothing here writes to a child's stdin
  Stdio out = Stdio::kInherit;  // kPipe: read it from Child::stdoutFd()
  Stdio err = Stdio::kInherit;  // kPipe: read it from Child::stderrFd()
  // The child leads a new process group: Child::kill() then reaches everything it started
  // (ssh and the remote command, a shell's children).
  bool newProcessGroup = false;
  // Signals whose disposition is reset to the default in the child (those the parent catches).
  std::vector<int> defaultSignals;
  // Names the child in error messages ("XGBoost worker 3"); empty = the program's name only.
  std::string what;
};

class Child {
 public:
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  // A child still running is killed (SIGKILL, its group when it leads one) and reaped.
  ~Child();

  pid_t pid() const { return pid_; }
  // The read ends of the pipes asked for with Stdio::kPipe (O_CLOEXEC), else -1. Owned by the
  // Child; closeStdout()/closeStderr() close them early (the child then gets SIGPIPE on writes).
  int stdoutFd() const { return out_; }
  int stderrFd() const { return err_; }
  void closeStdout();
  void closeStderr();

  // The status once it has ended (reaped here), without blocking; nullopt while it runs.
  std::optional<ExitStatus> poll();
  // Blocks until it ends (EINTR from a caught signal is retried). No deadline: for the job
  // itself, which runs as long as the user's command does.
  ExitStatus wait();
  // Waits until it ends or `deadline` passes; then it is killed with SIGKILL (its group when it
  // leads one) and reaped, and the result is nullopt.
  std::optional<ExitStatus> wait(Deadline deadline);
  // Sends `sig` to the child, or to its process group when it leads one. No-op once reaped.
  void kill(int sig);
  bool running() const { return !status_.has_value(); }
  const std::optional<ExitStatus>& status() const { return status_; }

 private:
  friend Child spawn(const std::vector<std::string>& argv, const SpawnOptions& opts);
  Child() = default;
  void release();
  pid_t pid_ = -1;
  bool group_ = false;
  int out_ = -1;
  int err_ = -1;
  std::optional<ExitStatus> status_;
};

// Where execvp(3) would find `name`: `name` itself when it holds a '/', else the first directory
// of $PATH (an empty entry is the current directory; /usr/local/bin:/usr/bin:/bin when PATH is
// unset) holding an executable regular file of that name. nullopt when there is none.
std::optional<std::string> findOnPath(const std::string& name);

// Starts argv (argv[0] through findOnPath) with the environment of this process. Throws
// SystemError "cannot run <argv[0]> [for <what>]" with the reason (ENOENT when it is not found)
// when it cannot be started.
Child spawn(const std::vector<std::string>& argv, const SpawnOptions& opts = {});

// Runs argv with stdin from /dev/null and stderr discarded, and returns what it wrote on stdout
// when it exits 0 by `deadline`. nullopt when it cannot be started, exits non-zero or by a
// signal, writes more than `maxBytes`, or outlives the deadline (it is then killed and reaped).
std::optional<std::string> captureStdout(const std::vector<std::string>& argv, Deadline deadline,
                                         size_t maxBytes = 1u << 20);

// Runs argv with its standard streams on /dev/null, leading its own process group, and waits
// for it: true when it exits 0 by `deadline`. When it cannot be started, fails, or outlives the
// deadline (its whole group is then killed: mpirun and the ssh it started), false.
bool runQuietly(const std::vector<std::string>& argv, Deadline deadline);

// Runs argv (standard streams inherited) and waits for it, as `rankmap run` runs a job. SIGINT,
// SIGTERM, SIGHUP and SIGQUIT that reach this process meanwhile are forwarded to the child, which
// decides (mpirun tears the job down); the child starts with their default dispositions. Returns
// ExitStatus::code(). Throws SystemError when the command cannot be started.
int runAndWait(const std::vector<std::string>& argv);

// Directory of the running executable (/proc/self/exe), for finding files installed beside it.
std::string executableDir();

// One of our libraries that is loaded by path (the MPI and NCCL shims, the tuner plugin), for
// the running rankmap: in the build tree (../<buildFolder>/<file>) or where it is installed (the
// plugin directory, RANKMAP_INSTALL_PLUGINDIR, relative to the binary's). The resolved path, or
// "" when neither exists.
std::string findOurLibrary(const std::string& buildFolder, const std::string& file);

}  // namespace rankmap::launch
