#include "common/files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/error.h"
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
  int entries = 0;
  DIR* d = opendir(dir);
  while (auto* e = readdir(d)) entries += e->d_name[0] != '.';
  closedir(d);
  EXPECT_EQ(entries, 1);
  unlink(path.c_str());
  rmdir(dir);
}

TEST(Files, ErrorsNameThePath) {
  try {
    writeFileAtomic("/nonexistent/dir/plan.json", "x");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/plan.json"), std::string::npos);
  }
  EXPECT_THROW(readFile("/nonexistent/x"), IoError);
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
