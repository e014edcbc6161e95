#include "common/files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/error.h"

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

}  // namespace
}  // namespace rankmap
