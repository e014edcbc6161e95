#include "probe/hosts.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "probe/stats.h"

namespace rankmap::probe {
namespace {

TEST(HostsFile, ParsesNamesAddressesPortsAndComments) {
  auto h = parseHosts("# job hosts\nvm0 10.0.0.1\n\n  vm1   10.0.0.2:9000  # second\nvm2 [::1]:7\n",
                      "hosts");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].name, "vm0");
  EXPECT_EQ(hostEndpoint(h[0]), (Endpoint{"10.0.0.1", kDefaultProbePort}));
  EXPECT_EQ(hostEndpoint(h[1]), (Endpoint{"10.0.0.2", 9000}));
  EXPECT_EQ(hostEndpoint(h[2]), (Endpoint{"::1", 7}));
}

TEST(HostsFile, RejectsMalformedFilesNamingTheLine) {
  struct Bad {
    const char* text;
    const char* mention;
  };
  for (auto [text, mention] :
       {Bad{"", "no hosts"}, Bad{"# only comments\n", "no hosts"}, Bad{"vm0\n", "hosts:1"},
        Bad{"vm0 1.2.3.4 extra\n", "extra"},
        Bad{"vm0 1.2.3.4\nvm0 1.2.3.5\n", "duplicate host 'vm0'"},
        Bad{"a 1.2.3.4\nb 1.2.3.4:7411\n", "duplicate address"}, Bad{"a host.example\n", "numeric"},
        Bad{"a 1.2.3.4:99999\n", "port"}, Bad{"bad/name 1.2.3.4\n", "host name"}}) {
    try {
      parseHosts(text, "hosts");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  }
}

TEST(HostsFile, SameAddressOnDifferentPortsIsFine) {
  EXPECT_EQ(parseHosts("a 127.0.0.1:1\nb 127.0.0.1:2\n", "h").size(), 2u);
}

TEST(Stats, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(percentile(v, 0.5), 50);
  EXPECT_EQ(percentile(v, 0.9), 90);
  EXPECT_EQ(percentile(v, 0.99), 99);
  EXPECT_EQ(percentile(v, 0), 1);
  EXPECT_EQ(percentile(v, 1), 100);
  auto s = summarizeLatency({5, 1, 3});
  EXPECT_EQ(s.minUs, 1);
  EXPECT_EQ(s.medianUs, 3);
  EXPECT_EQ(s.p99Us, 5);
  EXPECT_THROW(summarizeLatency({}), InvalidInput);
}

}  // namespace
}  // namespace rankmap::probe
