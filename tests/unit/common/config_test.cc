#include "common/config.h"

#include <unistd.h>

#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/unit/common/config_util.h"

namespace rankmap {
namespace {

using testing::isolatedLoad;

TEST(Config, DefaultsMatchRegistry) {
  Config cfg;
  EXPECT_EQ(cfg.get(settings::kLog), "info");
  EXPECT_EQ(cfg.get(settings::kTimeout), std::chrono::seconds(300));
  EXPECT_EQ(cfg.get(settings::kRank), -1);
  for (const auto& s : settingRegistry()) {
    EXPECT_EQ(cfg.originText(s.id), "default") << s.name;
    EXPECT_EQ(s.name.rfind("RANKMAP_", 0), 0u) << s.name;
    EXPECT_FALSE(s.doc.empty()) << s.name;
  }
}

TEST(Config, RegistryNamesAreUnique) {
  std::set<std::string_view> names;
  for (const auto& s : settingRegistry()) EXPECT_TRUE(names.insert(s.name).second) << s.name;
}

TEST(Config, EnvironmentOverridesDefault) {
  auto cfg = Config::load(isolatedLoad({{"RANKMAP_RANK", "3"}, {"RANKMAP_TIMEOUT", "250ms"}}));
  EXPECT_EQ(cfg.get(settings::kRank), 3);
  EXPECT_EQ(cfg.get(settings::kTimeout), std::chrono::milliseconds(250));
  EXPECT_EQ(cfg.origin(SettingId::kRank), Config::Origin::Environment);
}

TEST(Config, PrecedenceCommandLineEnvUserSystem) {
  char sysPath[] = "/tmp/rankmap_sys_XXXXXX";
  char userPath[] = "/tmp/rankmap_user_XXXXXX";
  int a = mkstemp(sysPath), b = mkstemp(userPath);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  close(a);
  close(b);
  std::ofstream(sysPath) << "# system\nRANKMAP_ALGO=ring\nRANKMAP_LOG=debug\nRANKMAP_RANK=1\n";
  std::ofstream(userPath) << "RANKMAP_ALGO=tree\nRANKMAP_RANK=2\n";
  Config::LoadOptions o;
  o.env = std::map<std::string, std::string>{{"RANKMAP_RANK", "5"}};
  o.systemFile = sysPath;
  o.userFile = userPath;
  o.overrides = {{"RANKMAP_LOG", "error"}};
  auto cfg = Config::load(o);
  EXPECT_EQ(cfg.get(settings::kAlgo), "tree");   // user file beats system file
  EXPECT_EQ(cfg.get(settings::kRank), 5);        // environment beats files
  EXPECT_EQ(cfg.get(settings::kLog), "error");   // command line beats everything
  EXPECT_EQ(cfg.originText(SettingId::kAlgo), std::string(userPath) + ":1");
  unlink(sysPath);
  unlink(userPath);
}

TEST(Config, BadValueNamesSourceSettingAndExpectation) {
  try {
    Config::load(isolatedLoad({{"RANKMAP_RANK", "three"}}));
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("environment"), std::string::npos) << m;
    EXPECT_NE(m.find("RANKMAP_RANK"), std::string::npos) << m;
    EXPECT_NE(m.find("integer"), std::string::npos) << m;
  }
  EXPECT_THROW(Config::load(isolatedLoad({{"RANKMAP_TIMEOUT", "soon"}})), InvalidInput);
  EXPECT_THROW(Config::load(isolatedLoad({{"RANKMAP_TIMEOUT", "-5s"}})), InvalidInput);
}

// Ranges are declared with the setting (settings.def) and checked on load, whatever the source:
// RANKMAP_TCP_STREAMS=-5 was taken until a transport was made, and not at all by commands
// that make none (issue 45).
TEST(Config, IntegersOutsideTheirDeclaredRangeAreRefused) {
  auto refusal = [](const std::string& name, const std::string& value) {
    try {
      Config::load(isolatedLoad({{name, value}}));
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal("RANKMAP_TCP_STREAMS", "-5"),
            "environment: RANKMAP_TCP_STREAMS=\"-5\": expected a whole number from 1 to 64");
  EXPECT_NE(refusal("RANKMAP_TCP_STREAMS", "65"), "");
  EXPECT_NE(refusal("RANKMAP_TCP_STREAMS", "two"), "");
  EXPECT_EQ(refusal("RANKMAP_PLAN_VOTE_EVERY", "0"),
            "environment: RANKMAP_PLAN_VOTE_EVERY=\"0\": expected a whole number of at least 1");
  EXPECT_NE(refusal("RANKMAP_IB_GID_INDEX", "-2"), "");
  auto ok = Config::load(isolatedLoad({{"RANKMAP_TCP_STREAMS", "64"}, {"RANKMAP_IB_GID_INDEX", "-1"}}));
  EXPECT_EQ(ok.get(settings::kTcpStreams), 64);
  EXPECT_EQ(ok.get(settings::kIbGidIndex), -1);
  const SettingInfo* streams = findSetting("RANKMAP_TCP_STREAMS");
  ASSERT_NE(streams, nullptr);
  const std::pair<int64_t, int64_t> oneTo64{1, 64};
  EXPECT_EQ(streams->range, oneTo64);
  EXPECT_FALSE(findSetting("RANKMAP_RANK")->range);
}

TEST(Config, BadFileLineNamesFileAndLine) {
  char path[] = "/tmp/rankmap_bad_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "RANKMAP_ALGO=ring\nthis is not a setting\n";
  auto o = isolatedLoad();
  o.userFile = path;
  try {
    Config::load(o);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find(std::string(path) + ":2"), std::string::npos) << e.what();
  }
  unlink(path);
}

// A configuration file the user named that cannot be read is an error naming the setting; the
// default user file, missing, is skipped as before.
TEST(Config, ANamedConfigurationFileThatIsMissingIsAnError) {
  auto o = isolatedLoad({{"RANKMAP_CONF_FILE", "/nonexistent/rankmap-user.conf"}});
  o.userFile.reset();
  try {
    Config::load(o);
    FAIL() << "a missing RANKMAP_CONF_FILE was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("RANKMAP_CONF_FILE=\"/nonexistent/rankmap-user.conf\" "
                                         "(environment): cannot read it: No such file"),
              std::string::npos)
        << e.what();
  }
  auto quiet = isolatedLoad();
  quiet.userFile.reset();  // the default (~/.config/rankmap/config), wherever HOME is
  EXPECT_NO_THROW(Config::load(quiet));
}

TEST(Config, UnknownNamesAreReportedNotFatal) {
  auto cfg = Config::load(isolatedLoad({{"RANKMAP_TIMEOTU", "5s"}}));
  ASSERT_EQ(cfg.unknownNames().size(), 1u);
  EXPECT_NE(cfg.unknownNames()[0].find("RANKMAP_TIMEOTU"), std::string::npos);
  EXPECT_THROW(Config::load([] {
                 auto o = isolatedLoad();
                 o.overrides = {{"RANKMAP_NOPE", "1"}};
                 return o;
               }()),
               InvalidInput);
}

TEST(Config, ParseDuration) {
  EXPECT_EQ(parseDuration("5"), std::chrono::seconds(5));
  EXPECT_EQ(parseDuration("250ms"), std::chrono::milliseconds(250));
  EXPECT_EQ(parseDuration("2m"), std::chrono::minutes(2));
  EXPECT_EQ(parseDuration("1.5s"), std::chrono::milliseconds(1500));
  EXPECT_EQ(parseDuration("1h"), std::chrono::hours(1));
  EXPECT_EQ(parseDuration("7d"), std::chrono::hours(24 * 7));
  EXPECT_FALSE(parseDuration(""));
  EXPECT_FALSE(parseDuration("5 parsecs"));
  EXPECT_FALSE(parseDuration("1e400"));
}

TEST(Config, ParseSize) {
  EXPECT_EQ(parseSize("64"), 64u);
  EXPECT_EQ(parseSize("64K"), 65536u);
  EXPECT_EQ(parseSize("16M"), 16u << 20);
  EXPECT_EQ(parseSize("1G"), 1ull << 30);
  EXPECT_EQ(parseSize("4KiB"), 4096u);
  EXPECT_EQ(parseSize("2MB"), 2u << 20);
  EXPECT_FALSE(parseSize("1.5"));  // fractional bytes
  EXPECT_FALSE(parseSize("12Q"));
  EXPECT_FALSE(parseSize("-1"));
  EXPECT_FALSE(parseSize("99999999999T"));
}

TEST(Config, ParseBool) {
  const SettingInfo info{SettingId::kCount, "RANKMAP_X", SettingType::Bool, "0", "doc", {}};
  EXPECT_EQ(std::get<bool>(parseSettingValue(info, "yes", "t")), true);
  EXPECT_EQ(std::get<bool>(parseSettingValue(info, "OFF", "t")), false);
  EXPECT_THROW(parseSettingValue(info, "maybe", "t"), InvalidInput);
}

}  // namespace
}  // namespace rankmap
