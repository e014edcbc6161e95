#include "launch/process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"

extern char** environ;

namespace rankmap::launch {
namespace {

// The child that runAndWait() forwards signals to; 0 when none.
volatile sig_atomic_t gChild = 0;

// Async-signal-safe: only kill(2).
void forwardSignal(int sig) {
  if (gChild > 0) ::kill(static_cast<pid_t>(gChild), sig);
}

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// Owns posix_spawn's attribute and file-action objects for one call.
struct SpawnSetup {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  SpawnSetup() {
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&actions);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

// A pipe whose ends are closed unless handed on.
struct Pipe {
  int read = -1, write = -1;
  ~Pipe() {
    if (read >= 0) ::close(read);
    if (write >= 0) ::close(write);
  }
};

}  // namespace

bool ExitStatus::signaled() const { return WIFSIGNALED(raw); }

int ExitStatus::code() const {
  if (WIFEXITED(raw)) return WEXITSTATUS(raw);
  if (WIFSIGNALED(raw)) return 128 + WTERMSIG(raw);
  return 1;
}

std::string ExitStatus::describe() const {
  if (WIFSIGNALED(raw)) return fmt::format("was killed by signal {}", WTERMSIG(raw));
  return fmt::format("exited with status {}", code());
}

Child::Child(Child&& o) noexcept
    : pid_(o.pid_), group_(o.group_), out_(o.out_), err_(o.err_), status_(o.status_) {
  o.pid_ = -1;
  o.out_ = o.err_ = -1;
}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    release();
    pid_ = o.pid_;
    group_ = o.group_;
    out_ = o.out_;
    err_ = o.err_;
    status_ = o.status_;
    o.pid_ = -1;
    o.out_ = o.err_ = -1;
  }
  return *this;
}

Child::~Child() { release(); }

void Child::release() {
  closeStdout();
  closeStderr();
  if (pid_ > 0 && !status_) {
    kill(SIGKILL);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

void Child::closeStdout() {
  if (out_ >= 0) ::close(out_);
  out_ = -1;
}

void Child::closeStderr() {
  if (err_ >= 0) ::close(err_);
  err_ = -1;
}

std::optional<ExitStatus> Child::poll() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = ExitStatus{st};
  return status_;
}

ExitStatus Child::wait() {
  RANKMAP_ASSERT(pid_ > 0);
  if (status_) return *status_;
  int st = 0;
  while (::waitpid(pid_, &st, 0) == -1) {
    if (errno != EINTR) throw SystemError(fmt::format("waitpid for pid {}", pid_), errno);
  }
  status_ = ExitStatus{st};
  return *status_;
}

std::optional<ExitStatus> Child::wait(Deadline deadline) {
  RANKMAP_ASSERT(pid_ > 0);
  // waitpid has no timeout: poll it, backing off from 1 ms to 20 ms (a child that ends at once,
  // as a captured one does after closing its output, costs about a millisecond).
  auto step = std::chrono::milliseconds(1);
  while (!poll()) {
    if (deadline.expired()) {
      kill(SIGKILL);
      int st = 0;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
      status_ = ExitStatus{st};
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(step, deadline.remaining()));
    step = std::min(step * 2, std::chrono::milliseconds(20));
  }
  return status_;
}

void Child::kill(int sig) {
  if (pid_ <= 0 || status_) return;
  ::kill(group_ ? -pid_ : pid_, sig);
}

std::optional<std::string> findOnPath(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) return name;
  // PATH is the environment's business, not a RANKMAP_* setting: exec reads it.
  const char* env = std::getenv("PATH");
  std::string path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = path.find(':', b);
    if (e == std::string::npos) e = path.size();
    std::string cand = (e > b ? path.substr(b, e - b) : ".") + "/" + name;
    struct stat st {};
    if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(cand.c_str(), X_OK) == 0)
      return cand;
    b = e + 1;
  }
  return std::nullopt;
}

Child spawn(const std::vector<std::string>& argv, const SpawnOptions& opts) {
  RANKMAP_ASSERT(!argv.empty());
  std::string who = opts.what.empty() ? argv[0] : fmt::format("{} for {}", argv[0], opts.what);
  auto program = findOnPath(argv[0]);
  if (!program) throw SystemError(fmt::format("cannot run {}", who), ENOENT);

  SpawnSetup s;
  short flags = 0;
  if (opts.newProcessGroup) {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&s.attr, 0);
  }
  if (!opts.defaultSignals.empty()) {
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : opts.defaultSignals) sigaddset(&defaults, sig);
    posix_spawnattr_setsigdefault(&s.attr, &defaults);
    flags |= POSIX_SPAWN_SETSIGDEF;
  }
  posix_spawnattr_setflags(&s.attr, flags);

  RANKMAP_ASSERT(opts.in != Stdio::kPipe);  // nothing writes to a child's stdin
  if (opts.in == Stdio::kNull)
    posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0);
  // The parent's ends of the pipes asked for; the child's ends are closed here once it started.
  Pipe out, err;
  auto output = [&](Stdio how, int fd, Pipe& p) {
    if (how == Stdio::kNull) {
      posix_spawn_file_actions_addopen(&s.actions, fd, "/dev/null", O_WRONLY, 0);
    } else if (how == Stdio::kPipe) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) throw SystemError(fmt::format("pipe for {}", who), errno);
      p.read = fds[0];
      p.write = fds[1];
      // The child's copy made by dup2 has no O_CLOEXEC; the originals close at exec.
      posix_spawn_file_actions_adddup2(&s.actions, p.write, fd);
    }
  };
  output(opts.out, 1, out);
  output(opts.err, 2, err);

  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, program->c_str(), &s.actions, &s.attr, cargv.data(), environ);
  if (rc != 0) throw SystemError(fmt::format("cannot run {}", who), rc);
  Child c;
  c.pid_ = pid;
  c.group_ = opts.newProcessGroup;
  std::swap(c.out_, out.read);
  std::swap(c.err_, err.read);
  return c;
}

std::optional<std::string> captureStdout(const std::vector<std::string>& argv, Deadline deadline,
                                         size_t maxBytes) {
  SpawnOptions opts;
  opts.in = Stdio::kNull;
  opts.out = Stdio::kPipe;
  opts.err = Stdio::kNull;
  std::optional<Child> child;
  try {
    child = spawn(argv, opts);
  } catch (const SystemError&) {
    return std::nullopt;
  }
  std::string out;
  for (;;) {
    pollfd p{child->stdoutFd(), POLLIN, 0};
    int n = ::poll(&p, 1, deadline.pollTimeoutMs());
    if (n == 0) return std::nullopt;  // deadline: ~Child kills and reaps it
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    char buf[4096];
    ssize_t r = ::read(child->stdoutFd(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::nullopt;
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
    if (out.size() > maxBytes) return std::nullopt;
  }
  child->closeStdout();
  auto st = child->wait(deadline);
  if (!st || st->raw != 0) return std::nullopt;
  return out;
}

bool runQuietly(const std::vector<std::string>& argv, Deadline deadline) {
  SpawnOptions opts;
  opts.in = Stdio::kNull;
  opts.out = Stdio::kNull;
  opts.err = Stdio::kNull;
  opts.newProcessGroup = true;
  std::optional<Child> child;
  try {
    child = spawn(argv, opts);
  } catch (const SystemError&) {
    return false;
  }
  auto st = child->wait(deadline);
  return st && st->raw == 0;
}

int runAndWait(const std::vector<std::string>& argv) {
  struct sigaction sa {};
  sa.sa_handler = forwardSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old[std::size(kForwarded)];
  for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &sa, &old[i]);
  struct Restore {
    struct sigaction* old;
    ~Restore() {
      gChild = 0;
      for (size_t i = 0; i < std::size(kForwarded); ++i)
        ::sigaction(kForwarded[i], &old[i], nullptr);
    }
  } restore{old};

  SpawnOptions opts;
  opts.defaultSignals.assign(std::begin(kForwarded), std::end(kForwarded));
  Child child = spawn(argv, opts);
  gChild = child.pid();
  return child.wait().code();
}

std::string findOurLibrary(const std::string& buildFolder, const std::string& file) {
  const std::string dir = executableDir();
  for (const std::string& sub : {"../" + buildFolder, std::string(RANKMAP_PLUGINDIR_FROM_BINDIR)}) {
    const std::string p = dir + "/" + sub + "/" + file;
    char buf[PATH_MAX];
    if (::access(p.c_str(), R_OK) == 0 && ::realpath(p.c_str(), buf) != nullptr) return buf;
  }
  return "";
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
