#include "common/files.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"

namespace rankmap {
namespace {
std::string dirName(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}
// Whether `path` is a file the kubelet projected into a Secret or ConfigMap volume: a symlink
// `name -> ..data/name` beside a symlink `..data` (the atomic writer's layout).
bool isKubeletProjection(const std::string& path) {
  char target[PATH_MAX];
  ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return false;
  std::string_view t(target, static_cast<size_t>(n));
  if (t.substr(0, 7) != "..data/") return false;
  struct stat st {};
  return ::lstat((dirName(path) + "/..data").c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

bool inMyGroups(gid_t gid) {
  if (gid == ::getegid()) return true;
  int n = ::getgroups(0, nullptr);
  if (n <= 0) return false;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  n = ::getgroups(n, groups.data());
  for (int i = 0; i < n; ++i)
    if (groups[static_cast<size_t>(i)] == gid) return true;
  return false;
}

}  // namespace

void checkPrivateFile(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IoError(fmt::format("{} {}: cannot stat: {}", what, path, std::strerror(errno)));
  unsigned mode = st.st_mode & 07777;
  if ((mode & 0077) == 0) return;
  bool groupReadOnly = (mode & 0070) == 0040 && (mode & 0007) == 0;
  if (groupReadOnly && isKubeletProjection(path) && inMyGroups(st.st_gid)) return;
  throw InvalidInput(fmt::format(
      "{} {}: mode {:04o} lets other users read it; expected no group or other permissions "
      "(0600 or 0400, owner only; 0440 only for a Kubernetes Secret of this pod's group). "
      "Fix: chmod 600 {}",
      what, path, mode, path));
}

namespace {

// What writeFileAtomic found at the user's path (phase 1) and so how it writes (phase 2).
struct OutputTarget {
  enum class Kind { kCreate, kReplace, kInPlace };
  Kind kind = Kind::kCreate;
  std::string path;      // kCreate/kReplace: the final target (links resolved); kInPlace: as given
  mode_t keepMode = 0;   // kReplace: the replaced file's permission bits
  bool fifo = false;     // kInPlace: a FIFO (else a character device)
  bool viaLink = false;  // the user's path is a symlink (errors then name its target too)
};

// "PATH" or "PATH (a link to TARGET)": how every error names the output.
std::string outputName(const std::string& path, const OutputTarget& t) {
  if (!t.viaLink || t.path == path) return path;
  return fmt::format("{} (a link to {})", path, t.path);
}

// The final target of a chain of symlinks whose end does not exist (stat() said ENOENT):
// relative targets are relative to their link's folder. Past 40 links: the path itself.
std::string danglingTarget(const std::string& path) {
  std::string p = path;
  for (int hop = 0; hop < 40; ++hop) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    char buf[PATH_MAX];
    ssize_t n = ::readlink(p.c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) return p;
    std::string t(buf, static_cast<size_t>(n));
    p = t[0] == '/' ? t : dirName(p) + "/" + t;
  }
  return path;
}

// Phase 1: what `path` names now, following symlinks. Throws IoError for what is refused.
OutputTarget resolveOutput(const std::string& path) {
  if (path.empty()) throw IoError("cannot write to an empty path: name a file");
  OutputTarget out;
  struct stat st {};
  if (path.back() == '/')
    throw IoError(fmt::format("{}: cannot write: it names a folder; name a file in it", path));
  out.viaLink = ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err != ENOENT) throw IoError(fmt::format("{}: cannot write: {}", path, std::strerror(err)));
    out.kind = OutputTarget::Kind::kCreate;
    out.path = out.viaLink ? danglingTarget(path) : path;
    return out;
  }
  if (S_ISREG(st.st_mode)) {
    // realpath() also resolves /proc/self/fd/N (/dev/stdout) to the file it names.
    char buf[PATH_MAX];
    out.kind = OutputTarget::Kind::kReplace;
    out.path = out.viaLink && ::realpath(path.c_str(), buf) ? std::string(buf) : path;
    out.keepMode = st.st_mode & 07777;
    return out;
  }
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
    // Opened through the user's path: the kernel follows /proc/self/fd's links to the pipe or
    // terminal itself, which no name on disk reaches.
    out.kind = OutputTarget::Kind::kInPlace;
    out.path = path;
    out.fifo = S_ISFIFO(st.st_mode);
    return out;
  }
  std::string_view what =
      S_ISDIR(st.st_mode)    ? "is a folder; name a file in it"
      : S_ISBLK(st.st_mode)  ? "is a block device; rankmap does not write onto disks"
      : S_ISSOCK(st.st_mode) ? "is a socket, which cannot be opened as a file"
                             : "is not a regular file, a FIFO or a character device";
  throw IoError(fmt::format("{}: cannot write: it {}", path, what));
}

// Why creating a file in `dir` failed, in the user's terms: " (the folder X does not exist)".
std::string createHint(int err, const std::string& dir) {
  struct stat st {};
  if (err == ENOENT && ::stat(dir.c_str(), &st) != 0)
    return fmt::format(" (the folder {} does not exist)", dir);
  if (err == ENOTDIR) return fmt::format(" ({} is not a folder)", dir);
  if (err == EACCES || err == EPERM)
    return fmt::format(
        " (rankmap writes a new file in the folder {} and renames it into place, which needs "
        "write permission on the folder)",
        dir);
  return "";
}

// Blocks SIGPIPE in the calling thread while a FIFO is written, and discards a SIGPIPE that the
// writes raised: write(2) has no MSG_NOSIGNAL, and the process's disposition is not ours to
// change (this runs inside other programs through the shims). A SIGPIPE already pending when it
// started is left pending.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    wasPending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!wasPending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec zero{};
        while (::sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool wasPending_ = false;
};

double secondsOf(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// Phase 2, a FIFO or character device: open without O_CREAT/O_TRUNC and O_NONBLOCK (an open of
// a FIFO without a reader fails with ENXIO instead of blocking; it is retried every 10 ms until
// `deadline`), then writes that wait in poll(2) until `deadline` when the reader is slow.
void writeInPlace(const OutputTarget& t, std::string_view content, Deadline deadline) {
  const std::string& path = t.path;
  auto started = Deadline::Clock::now();
  auto waited = [&] { return secondsOf(Deadline::Clock::now() - started); };
  SigpipeGuard sigpipe;
  int fd = -1;
  for (;;) {
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0) break;
    int err = errno;
    if (err == EINTR) continue;
    if (err == ENXIO && t.fifo) {
      if (deadline.expired())
        throw TimeoutError(fmt::format(
            "{}: cannot write: it is a FIFO and no process opened it for reading within {:.1f} "
            "s; start its reader first (for example `cat {} &`)",
            path, waited(), path));
      ::usleep(static_cast<useconds_t>(std::min<int64_t>(
          10'000,
          std::chrono::duration_cast<std::chrono::microseconds>(deadline.remaining()).count())));
      continue;
    }
    throw IoError(fmt::format("{}: cannot write: {}", path, std::strerror(err)));
  }
  const char* kind = t.fifo ? "the FIFO's reader" : "the device";
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n >= 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      pollfd p{fd, POLLOUT, 0};
      int rc = ::poll(&p, 1, deadline.pollTimeoutMs());
      if (rc > 0 || (rc < 0 && errno == EINTR)) continue;  // writable, or POLLERR: write says
      if (rc < 0) {
        err = errno;
        ::close(fd);
        throw IoError(fmt::format("{}: cannot write: poll: {}", path, std::strerror(err)));
      }
      ::close(fd);
      throw TimeoutError(
          fmt::format("{}: cannot write: {} took {} of {} bytes and no more within {:.1f} s", path,
                      kind, off, content.size(), waited()));
    }
    ::close(fd);
    if (err == EPIPE)
      throw IoError(
          fmt::format("{}: cannot write: the FIFO's reader closed it after {} of {} bytes", path,
                      off, content.size()));
    throw IoError(fmt::format("{}: cannot write: {} (after {} of {} bytes)", path,
                              std::strerror(err), off, content.size()));
  }
  if (::close(fd) != 0 && errno != EINTR)
    throw IoError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
}

// Phase 2, nothing or a regular file at t.path: a hidden temporary file beside it, fsync,
// rename, fsync of the folder. `name` is how errors call the output.
void replaceAtomically(const OutputTarget& t, const std::string& name, std::string_view content,
                       int mode) {
  const std::string dir = dirName(t.path);
  std::string base = t.path.substr(t.path.find_last_of('/') + 1);
  // Short enough for NAME_MAX (255) with the suffix, whatever the user's name.
  if (base.size() > 200) base.resize(200);
  std::random_device rd;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = fmt::format("{}/.{}.rankmap-{:08x}{:08x}", dir, base, rd(), rd());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0 && errno != EINTR && (errno != EEXIST || attempt >= 8)) {
      int err = errno;
      throw IoError(
          fmt::format("{}: cannot write: {}{}", name, std::strerror(err), createHint(err, dir)));
    }
  }
  auto fail = [&](std::string_view what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: cannot write: {}: {}", name, what, std::strerror(err)));
  };
  if (t.kind == OutputTarget::Kind::kReplace) {
    mode_t keep = (mode & 077) == 0 ? (t.keepMode & static_cast<mode_t>(mode)) : t.keepMode;
    if (::fchmod(fd, keep) != 0) fail("setting the permissions", errno);
  }
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync", errno);
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: cannot write: close: {}", name, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), t.path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: cannot write: rename into place: {}", name, std::strerror(err)));
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

void writeFileAtomic(const std::string& path, std::string_view content, int mode,
                     Deadline deadline) {
  OutputTarget t = resolveOutput(path);
  if (t.kind == OutputTarget::Kind::kInPlace) {
    writeInPlace(t, content, deadline);
    return;
  }
  replaceAtomically(t, outputName(path, t), content, mode);
}

void writeFileAtomic(const std::string& path, std::string_view content, int mode) {
  writeFileAtomic(path, content, mode, Deadline::after(kOutputWait));
}

std::string readFile(const std::string& path, size_t maxBytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      throw IoError(fmt::format("{}: read failed: {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > maxBytes) {
      ::close(fd);
      throw IoError(fmt::format("{}: larger than the {} byte limit", path, maxBytes));
    }
  }
  ::close(fd);
  return out;
}

FileIdentity fileIdentity(const std::string& path) {
  struct stat st {};
  FileIdentity id;
  if (::stat(path.c_str(), &st) != 0) return id;
  id.exists = true;
  id.inode = st.st_ino;
  id.size = st.st_size;
  id.mtimeNs = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

std::string readSecretFile(const std::string& path, size_t minBytes, std::string_view what) {
  checkPrivateFile(path, what);
  std::string text = readFile(path, 4096);
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  text = text.substr(b, e - b);
  if (text.size() < minBytes)
    throw InvalidInput(fmt::format("{} {}: {} characters; expected at least {}", what, path,
                                   text.size(), minBytes));
  return text;
}

std::string fileNameOf(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace rankmap
