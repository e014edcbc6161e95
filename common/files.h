// File helpers shared by modules that persist state.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/deadline.h"

namespace rankmap {

// How long writeFileAtomic waits, by default, for a FIFO's reader to open it and to take every
// byte (and for a character device to take them): a shell's `cat FIFO &` started just before or
// just after rankmap has that long to come.
inline constexpr std::chrono::seconds kOutputWait{30};

// The one writer of every file rankmap makes for a user or for itself (plan --out, show --svg,
// export -o, Topology::save, Plan::save, run directories, metrics). What happens depends on what
// `path` names when it is called:
//  - nothing, or a regular file: the content goes to a temporary file in the same folder, fsync,
//    rename over `path`, fsync of the folder. Readers see the old file or the new one, never a
//    torn one. A new file gets `mode` (less the umask). A replaced file keeps its permission bits
//    (what users expect of a save), except that a `mode` with no group or other bits (a secret,
//    0600) is never widened by them. Ownership is that of the writing process. The temporary
//    file is hidden (`.NAME.rankmap-RANDOM`) and removed on every failure.
//  - a symlink: followed to its final target, which is replaced as above, so the link stays a
//    link; a dangling link's target is created. /dev/stdout naming a regular file replaces it.
//  - a character device or a FIFO (/dev/null, a terminal, `mkfifo`, /dev/stdout into a pipe):
//    never renamed over; the content is written in place (opened without creating or
//    truncating; no fsync). A FIFO must get a reader by `deadline` (no reader: TimeoutError),
//    and the reader must take every byte by `deadline` (TimeoutError); a reader that closes
//    early is an IoError, and its SIGPIPE is caught in this thread and discarded (the process's
//    signal dispositions are left alone: this code also runs inside other people's processes).
//  - a block device, a socket or a folder: refused (IoError), nothing is written. Writing a plan
//    onto a disk is never meant; a socket cannot be opened as a file.
// Errors name `path` as the user gave it (and the link's target when they differ), never the
// temporary file, with the reason and, where known, the fix (a missing folder, a folder without
// write permission).
void writeFileAtomic(const std::string& path, std::string_view content, int mode,
                     Deadline deadline);
// The same with a deadline of kOutputWait from now (it matters only for FIFOs and devices).
void writeFileAtomic(const std::string& path, std::string_view content, int mode = 0644);

// Reads a whole file; throws IoError naming the path. Refuses files larger than maxBytes.
std::string readFile(const std::string& path, size_t maxBytes = 1ull << 30);

// The last component of `path` ("/usr/bin/mpirun" -> "mpirun"; "mpirun" as it is).
std::string fileNameOf(std::string_view path);

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
