#include "common/hosts_file.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace rankmap {
namespace {

std::string errorOf(std::string_view text, HostAddress a) {
  try {
    parseHostsFile(text, "hosts", a);
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

// One format for every reader: the probe's (addresses required) and plan's or xgboost's
// (addresses optional) read the same file alike.
TEST(HostsFile, OneFormatWhetherAddressesAreRequiredOrNot) {
  std::string text = "# provider order\nvm1 10.0.0.2:9000  # second\n\n  vm0\t10.0.0.1\n";
  for (HostAddress a : {HostAddress::kRequired, HostAddress::kOptional}) {
    auto h = parseHostsFile(text, "hosts", a);
    ASSERT_EQ(h.size(), 2u);
    EXPECT_EQ(h[0].name, "vm1");
    EXPECT_EQ(h[0].address, "10.0.0.2:9000");
    EXPECT_EQ(h[0].line, 2);
    EXPECT_EQ(h[1].name, "vm0");
    EXPECT_EQ(h[1].address, "10.0.0.1");
    EXPECT_EQ(h[1].line, 4);
  }
  auto names = parseHostsFile("vm0\nvm1 10.0.0.2\n", "hosts", HostAddress::kOptional);
  EXPECT_EQ(names[0].address, "");
  EXPECT_EQ(names[1].address, "10.0.0.2");
}

TEST(HostsFile, ErrorsNameTheSourceLineAndWhatWasExpected) {
  EXPECT_EQ(errorOf("vm0\n", HostAddress::kRequired),
            "hosts:1: expected 'NAME ADDRESS[:PORT]', got only \"vm0\"");
  EXPECT_EQ(errorOf("vm0\n", HostAddress::kOptional), "");
  EXPECT_EQ(errorOf("vm0 a b\n", HostAddress::kOptional),
            "hosts:1: expected 'NAME [ADDRESS[:PORT]]', got extra field \"b\"");
  EXPECT_EQ(errorOf("vm0\nvm1\nvm0 1.2.3.4\n", HostAddress::kOptional),
            "hosts:3: duplicate host \"vm0\" (first on line 1)");
  EXPECT_EQ(errorOf("a/b 1.2.3.4\n", HostAddress::kRequired),
            "hosts:1: host name \"a/b\": expected 1..64 characters of [A-Za-z0-9._-]");
  EXPECT_EQ(errorOf("# nothing\n\n", HostAddress::kOptional),
            "hosts: no hosts (expected 'NAME [ADDRESS[:PORT]]' lines)");
  std::string many;
  for (size_t i = 0; i <= kMaxHosts; ++i) many += "h" + std::to_string(i) + "\n";
  EXPECT_NE(errorOf(many, HostAddress::kOptional).find("more than 4096 hosts"), std::string::npos);
}

}  // namespace
}  // namespace rankmap
