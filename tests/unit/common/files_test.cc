#include "common/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/unit/common/fifo_reader.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap {
namespace {

TEST(Files, AtomicWriteReplacesAndLeavesNoTemporaries) {
  char dir[] = "/tmp/rankmap_files_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/plan.json";
  writeFileAtomic(path, "one");
  EXPECT_EQ(readFile(path), "one");
  writeFileAtomic(path, std::string(1 << 20, 'x'));
  EXPECT_EQ(readFile(path).size(), 1u << 20);
  int entries = 0;  // hidden ones too: the temporary file is `.plan.json.rankmap-...`
  DIR* d = opendir(dir);
  while (auto* e = readdir(d))
    entries += std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0;
  closedir(d);
  EXPECT_EQ(entries, 1);
  unlink(path.c_str());
  rmdir(dir);
}

// The user's path, the reason and the fix; not the temporary file, not a source location.
TEST(Files, ErrorsNameThePath) {
  try {
    writeFileAtomic("/nonexistent/dir/plan.json", "x");
    FAIL();
  } catch (const IoError& e) {
    std::string m = e.what();
    EXPECT_EQ(m,
              "/nonexistent/dir/plan.json: cannot write: No such file or directory (the folder "
              "/nonexistent/dir does not exist)");
    EXPECT_EQ(m.find(".tmp"), std::string::npos) << m;
    EXPECT_EQ(m.find("rankmap-"), std::string::npos) << m;
    EXPECT_EQ(m.find(".cc:"), std::string::npos) << m;
  }
  EXPECT_THROW(readFile("/nonexistent/x"), IoError);
}

std::string lstatKind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "absent";
  if (S_ISLNK(st.st_mode)) return "link";
  if (S_ISREG(st.st_mode)) return "file";
  if (S_ISFIFO(st.st_mode)) return "fifo";
  if (S_ISCHR(st.st_mode)) return "chr";
  if (S_ISSOCK(st.st_mode)) return "sock";
  if (S_ISDIR(st.st_mode)) return "dir";
  return "other";
}

mode_t permissions(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

// A new file gets the mode asked for (less the umask); a replaced one keeps its permission bits,
// except that a secret's mode (no group or other bits) is never widened by them.
TEST(Files, NewFilesGetTheModeReplacedFilesKeepTheirs) {
  rankmap::testing::TempDir dir;
  mode_t oldMask = ::umask(022);
  std::string f = dir.file("plan.json");
  writeFileAtomic(f, "one", 0664);
  EXPECT_EQ(permissions(f), 0644u);
  ASSERT_EQ(::chmod(f.c_str(), 0600), 0);
  writeFileAtomic(f, "two", 0644);
  EXPECT_EQ(permissions(f), 0600u);
  ASSERT_EQ(::chmod(f.c_str(), 0664), 0);
  writeFileAtomic(f, "three", 0644);
  EXPECT_EQ(permissions(f), 0664u);
  EXPECT_EQ(readFile(f), "three");
  writeFileAtomic(f, "secret", 0600);
  EXPECT_EQ(permissions(f), 0600u);
  ::umask(oldMask);
}

// A FIFO with a reader gets the content in place (1 MiB: more than a pipe holds, so the writer
// waits for the reader) and is still a FIFO afterwards.
TEST(Files, AFifoIsWrittenInPlace) {
  rankmap::testing::TempDir dir;
  std::string fifo = dir.file("out");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string content(1 << 20, 'p');
  for (size_t i = 0; i < content.size(); i += 4093) content[i] = static_cast<char>('a' + i % 26);
  rankmap::testing::FifoReader reader(fifo);
  writeFileAtomic(fifo, content);
  const std::string& got = reader.data();
  EXPECT_EQ(got.size(), content.size());
  EXPECT_TRUE(got == content) << "the bytes read differ from those written";
  EXPECT_EQ(lstatKind(fifo), "fifo");
}

// No reader: a TimeoutError naming the FIFO and the fix once the deadline passes, not a hang;
// still a FIFO, nothing created beside it.
TEST(Files, AFifoWithoutAReaderIsAnErrorInBoundedTime) {
  rankmap::testing::TempDir dir;
  std::string fifo = dir.file("out");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto start = std::chrono::steady_clock::now();
  try {
    writeFileAtomic(fifo, "x", 0644, Deadline::afterMs(300));
    FAIL();
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_EQ(
        m.rfind(fifo + ": cannot write: it is a FIFO and no process opened it for reading", 0), 0u)
        << m;
    EXPECT_NE(m.find("start its reader first"), std::string::npos) << m;
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(290));
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_EQ(lstatKind(fifo), "fifo");
}

// A reader that stops reading: a TimeoutError saying how far it got. A reader that closes its
// end early: an IoError, and the SIGPIPE the write raised neither kills the process nor stays
// pending.
TEST(Files, AFifoReaderThatStallsOrLeavesIsAnError) {
  rankmap::testing::TempDir dir;
  std::string fifo = dir.file("out");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string content(1 << 20, 'x');
  {
    int stalled = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    ASSERT_GE(stalled, 0);
    try {
      writeFileAtomic(fifo, content, 0644, Deadline::afterMs(300));
      ADD_FAILURE() << "a stalled reader accepted 1 MiB";
    } catch (const TimeoutError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(fifo + ": cannot write: the FIFO's reader took "), std::string::npos) << m;
      EXPECT_NE(m.find(" of 1048576 bytes and no more within "), std::string::npos) << m;
    }
    ::close(stalled);
  }
  rankmap::testing::FifoReader leaving(fifo, 1000);
  try {
    writeFileAtomic(fifo, content);
    ADD_FAILURE() << "a reader that left accepted 1 MiB";
  } catch (const IoError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(fifo + ": cannot write: the FIFO's reader closed it after "),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(leaving.data().size(), 1000u);
  sigset_t pending;
  ASSERT_EQ(::sigpending(&pending), 0);
  EXPECT_EQ(sigismember(&pending, SIGPIPE), 0);
  EXPECT_EQ(lstatKind(fifo), "fifo");
}

// A character device of the test's own (the null device's numbers): written in place, still the
// same device afterwards. Making one needs root.
TEST(Files, ACharacterDeviceIsWrittenInPlace) {
  rankmap::testing::TempDir dir;
  std::string dev = dir.file("null");
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod of a character device needs root (" << std::strerror(errno) << ")";
  writeFileAtomic(dev, "{}\n");
  struct stat st {};
  ASSERT_EQ(::lstat(dev.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
  // Through a link: the link stays a link, the device a device.
  std::string link = dir.file("link");
  ASSERT_EQ(::symlink("null", link.c_str()), 0);
  writeFileAtomic(link, "{}\n");
  EXPECT_EQ(lstatKind(link), "link");
  EXPECT_EQ(lstatKind(dev), "chr");
}

// A symlink is followed, not replaced: the target gets the content (and keeps its mode), the
// temporary file goes beside the target; a dangling link's target is created.
TEST(Files, SymlinksAreFollowedNotReplaced) {
  rankmap::testing::TempDir dir;
  ASSERT_EQ(::mkdir(dir.file("sub").c_str(), 0755), 0);
  std::string real = dir.write("sub/real.json", "old");
  ASSERT_EQ(::chmod(real.c_str(), 0640), 0);
  std::string link = dir.file("plan.json");
  ASSERT_EQ(::symlink("sub/real.json", link.c_str()), 0);
  writeFileAtomic(link, "new");
  EXPECT_EQ(lstatKind(link), "link");
  char target[256] = {};
  ASSERT_GT(::readlink(link.c_str(), target, sizeof(target) - 1), 0);
  EXPECT_STREQ(target, "sub/real.json");
  EXPECT_EQ(readFile(real), "new");
  EXPECT_EQ(permissions(real), 0640u);
  int entries = 0;
  DIR* d = opendir(dir.file("sub").c_str());
  while (auto* e = readdir(d))
    entries += std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0;
  closedir(d);
  EXPECT_EQ(entries, 1);

  // Dangling, through two links: the last one's target is made.
  std::string first = dir.file("first.json");
  ASSERT_EQ(::symlink("second.json", first.c_str()), 0);
  ASSERT_EQ(::symlink("sub/made.json", dir.file("second.json").c_str()), 0);
  writeFileAtomic(first, "made");
  EXPECT_EQ(lstatKind(first), "link");
  EXPECT_EQ(lstatKind(dir.file("second.json")), "link");
  EXPECT_EQ(lstatKind(dir.file("sub/made.json")), "file");
  EXPECT_EQ(readFile(dir.file("sub/made.json")), "made");

  // A dangling link into a missing folder: the error names the link and its target.
  std::string lost = dir.file("lost.json");
  ASSERT_EQ(::symlink("gone/x.json", lost.c_str()), 0);
  try {
    writeFileAtomic(lost, "x");
    ADD_FAILURE() << "wrote through a link into a missing folder";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), lost + " (a link to " + dir.path() +
                                         "/gone/x.json): cannot write: No such file or "
                                         "directory (the folder " +
                                         dir.path() + "/gone does not exist)");
  }
}

// A folder and a socket are refused, naming the path and what it is; both are left as they were.
TEST(Files, FoldersAndSocketsAreRefused) {
  rankmap::testing::TempDir dir;
  try {
    writeFileAtomic(dir.path(), "x");
    ADD_FAILURE() << "wrote over a folder";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.path() + ": cannot write: it is a folder; name a file in it");
  }
  std::string sock = dir.file("sock");
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  try {
    writeFileAtomic(sock, "x");
    ADD_FAILURE() << "wrote over a socket";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()),
              sock + ": cannot write: it is a socket, which cannot be opened as a file");
  }
  ::close(fd);
  EXPECT_EQ(lstatKind(sock), "sock");
  EXPECT_EQ(lstatKind(dir.path()), "dir");
}

TEST(Files, ReadRefusesOversizeFiles) {
  char path[] = "/tmp/rankmap_big_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "0123456789", 10), 10);
  close(fd);
  EXPECT_THROW(readFile(path, 5), IoError);
  EXPECT_EQ(readFile(path, 10).size(), 10u);
  unlink(path);
}

// Secret files: owner-only modes pass; anything another user could read is refused with the
// path, the mode, what is expected and the fix; a Kubernetes Secret projection (symlink into
// `..data`) may be group-readable when the group is ours, never world-readable.
TEST(Files, PrivateFilesRefuseGroupAndOtherPermissions) {
  rankmap::testing::TempDir dir;
  std::string f = dir.write("token", "secret");
  for (mode_t ok : {0600, 0400, 0700}) {
    ASSERT_EQ(::chmod(f.c_str(), ok), 0);
    EXPECT_NO_THROW(checkPrivateFile(f, "token file")) << std::oct << ok;
  }
  for (mode_t bad : {0644, 0640, 0604, 0660, 0440, 0602}) {
    ASSERT_EQ(::chmod(f.c_str(), bad), 0);
    try {
      checkPrivateFile(f, "token file");
      ADD_FAILURE() << "mode " << std::oct << bad << " accepted";
    } catch (const InvalidInput& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("token file " + f), std::string::npos) << m;
      EXPECT_NE(m.find(fmt::format("mode {:04o}", bad)), std::string::npos) << m;
      EXPECT_NE(m.find("chmod 600 " + f), std::string::npos) << m;
    }
  }
  EXPECT_THROW(checkPrivateFile(dir.file("none"), "token file"), IoError);

  // The kubelet's layout: key -> ..data/key, ..data -> ..2026_11_26_..., files 0440 root:fsGroup.
  ASSERT_EQ(::mkdir(dir.file("vol").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.file("vol/..2026_11_26").c_str(), 0755), 0);
  std::string real = dir.write("vol/..2026_11_26/key", "secret");
  ASSERT_EQ(::symlink("..2026_11_26", dir.file("vol/..data").c_str()), 0);
  ASSERT_EQ(::symlink("..data/key", dir.file("vol/key").c_str()), 0);
  ASSERT_EQ(::chown(real.c_str(), 0, ::getegid()), 0);
  ASSERT_EQ(::chmod(real.c_str(), 0440), 0);
  EXPECT_NO_THROW(checkPrivateFile(dir.file("vol/key"), "probe key"));
  // The same file by its real path is not a projection: group read is refused there.
  EXPECT_THROW(checkPrivateFile(real, "probe key"), InvalidInput);
  for (mode_t bad : {0444, 0460, 0644}) {
    ASSERT_EQ(::chmod(real.c_str(), bad), 0);
    EXPECT_THROW(checkPrivateFile(dir.file("vol/key"), "probe key"), InvalidInput)
        << std::oct << bad;
  }
  // A group that is not ours (65533 is no group of this test's process) is refused.
  if (::getegid() != 65533) {
    ASSERT_EQ(::chmod(real.c_str(), 0440), 0);
    if (::chown(real.c_str(), 0, 65533) == 0) {
      EXPECT_THROW(checkPrivateFile(dir.file("vol/key"), "probe key"), InvalidInput);
    }
  }
}

}  // namespace
}  // namespace rankmap
