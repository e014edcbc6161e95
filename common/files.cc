#include "common/files.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

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

void writeFileAtomic(const std::string& path, std::string_view content, int mode) {
  std::random_device rd;
  std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, getpid(), rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw IoError(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError(fmt::format("{}: write failed: {}", tmp, std::strerror(err)));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: fsync/close failed: {}", tmp, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: rename into place failed: {}", path, std::strerror(err)));
  }
  int dfd = ::open(dirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
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

}  // namespace rankmap
