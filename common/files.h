// File helpers shared by modules that persist state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace rankmap {

// Writes `content` to `path` atomically: a temporary file in the same directory, fsync, rename,
// fsync of the directory. Readers see the old file or the new one, never a torn one.
// Throws IoError naming the path.
void writeFileAtomic(const std::string& path, std::string_view content, int mode = 0644);

// Reads a whole file; throws IoError naming the path. Refuses files larger than maxBytes.
std::string readFile(const std::string& path, size_t maxBytes = 1ull << 30);

// Refuses a secret file (probe key, API token) that users other than its owner may read:
// InvalidInput naming `what`, the path, its mode, what is expected and the fix (chmod 600).
// Accepted: no group or other permission bits (0600, 0400). One exception, for Kubernetes
// Secret volumes: a file projected by the kubelet (the path is a symlink into the volume's
// `..data` directory) may also be group-readable (0440, 0640) when its group is one of this
// process's groups, because the kubelet adds group read for the pod's fsGroup and that group is
// the pod's own. Write or execute bits for the group, and any bit for others, are always refused.
// Throws IoError if the file cannot be examined.
void checkPrivateFile(const std::string& path, std::string_view what);

// Reads a secret file (token or key): private to its owner (checkPrivateFile), trimmed, at least
// `minBytes`. InvalidInput otherwise.
std::string readSecretFile(const std::string& path, size_t minBytes, std::string_view what);

// What a watcher of a file that is replaced atomically (writeFileAtomic, Plan::save) compares to
// know that it changed: whether it exists, its inode, size and modification time in ns. A
// rename gives a new inode, so a replacement is seen even within one mtime tick.
struct FileIdentity {
  bool exists = false;
  ino_t inode = 0;
  off_t size = 0;
  int64_t mtimeNs = 0;
  bool operator==(const FileIdentity&) const = default;
};

// The identity of `path` now: one stat(2), never throws; `exists` is false when it cannot be
// stat()ed (absent or unreadable).
FileIdentity fileIdentity(const std::string& path);

}  // namespace rankmap
