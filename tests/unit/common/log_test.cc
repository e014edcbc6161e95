#include "common/log.h"

#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/config.h"
#include "common/error.h"
#include "common/json.h"
#include "tests/unit/common/config_util.h"

namespace rankmap {
namespace {

using testing::configFrom;

// Errors quote outside text with fmt's debug format ({:?}). Debian's libspdlog exports an older
// copy of that code, which aborted on a string ending in a truncated UTF-8 sequence; the binaries
// link libfmt first so that fmt's own copy is the one bound (common/CMakeLists.txt).
TEST(Log, DebugFormatOfInvalidUtf8) {
  EXPECT_EQ(fmt::format("got {:?}", std::string(">\xe6")), "got \">\\xe6\"");
  EXPECT_EQ(fmt::format("{:?}", std::string("\xe6\x80")), "\"\\xe6\\x80\"");
  EXPECT_EQ(fmt::format("{:?}", std::string("caf\xc3\xa9\n")), "\"caf\xc3\xa9\\n\"");
}

TEST(Log, LevelsAndSubsystemMask) {
  log::configure(configFrom({{"RANKMAP_LOG", "warn"}, {"RANKMAP_LOG_SUBSYS", "probe,coll"}}));
  EXPECT_TRUE(log::enabled(log::Subsys::Probe, log::Level::Warn));
  EXPECT_FALSE(log::enabled(log::Subsys::Probe, log::Level::Info));
  EXPECT_FALSE(log::enabled(log::Subsys::Agent, log::Level::Error));
  log::configure(configFrom({{"RANKMAP_LOG", "debug"}, {"RANKMAP_LOG_SUBSYS", "^net"}}));
  EXPECT_TRUE(log::enabled(log::Subsys::Agent, log::Level::Debug));
  EXPECT_FALSE(log::enabled(log::Subsys::Net, log::Level::Error));
  log::configure(Config());
}

TEST(Log, BadSettingsNameTheVariable) {
  try {
    log::configure(configFrom({{"RANKMAP_LOG_SUBSYS", "probe,bogus"}}));
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("RANKMAP_LOG_SUBSYS"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos);
  }
  EXPECT_THROW(log::configure(configFrom({{"RANKMAP_LOG", "loud"}})), InvalidInput);
  EXPECT_THROW(log::configure(configFrom({{"RANKMAP_LOG_FORMAT", "xml"}})), InvalidInput);
}

// 2026-12-03T03:21:04.123Z
const std::regex kUtcStamp(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");

// Text lines start with the UTC time, as a log collector or a reader comparing two hosts' logs
// expects.
TEST(Log, TextLinesStartWithTheTime) {
  char path[] = "/tmp/rankmap_log_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  log::configure(configFrom({{"RANKMAP_LOG_FILE", path}}));
  RANKMAP_WARN(Agent, "agent a: {}", "something");
  log::configure(Config());
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  std::smatch m;
  ASSERT_TRUE(
      std::regex_match(line, m, std::regex(R"((\S+) rankmap warn \[agent\] agent a: something)")))
      << line;
  EXPECT_TRUE(std::regex_match(m[1].str(), kUtcStamp)) << line;
  unlink(path);
}

TEST(Log, JsonLinesAreValidJsonEvenWithHostileText) {
  char path[] = "/tmp/rankmap_log_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  log::configure(configFrom({{"RANKMAP_LOG_FORMAT", "json"}, {"RANKMAP_LOG_FILE", path}}));
  RANKMAP_INFO(Probe, "pair {}->{}: \"quoted\" {{braces}} \n newline \x01 and bad utf8 \xff", 3, 5);
  log::configure(Config());
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    auto j = parseJson(line, "log line");
    EXPECT_EQ(j["subsys"], "probe");
    EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(), kUtcStamp)) << j["time"];
    EXPECT_EQ(j["level"], "info");
    EXPECT_NE(j["msg"].get<std::string>().find("pair 3->5"), std::string::npos);
  }
  EXPECT_EQ(lines, 1);
  unlink(path);
}

}  // namespace
}  // namespace rankmap
