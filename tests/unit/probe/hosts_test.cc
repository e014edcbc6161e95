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
        Bad{"vm0 1.2.3.4\nvm0 1.2.3.5\n", "duplicate host \"vm0\""},
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

TEST(Stats, FittedRateIsTheSlopeOfACountingLine) {
  std::vector<RateSample> line;
  for (int i = 0; i <= 100; ++i) line.push_back({i * 1e-3, 1000.0 + 31250.0 * i});  // 250 Mbit/s
  EXPECT_NEAR(*fittedRate(line), 31.25e6, 1.0);
  EXPECT_FALSE(fittedRate({{0, 0}, {1, 10}}));                  // two samples: no fit
  EXPECT_FALSE(fittedRate({{0.5, 0}, {0.5, 10}, {0.5, 20}}));  // no spread in time
}

// The case the fit is for: the count at the start of the window was taken while 10 ms of
// arrivals were still unprocessed. Two end points read 10% high; the fit barely moves.
TEST(Stats, FittedRateShrugsOffOneLateCount) {
  std::vector<RateSample> s;
  for (int i = 0; i <= 100; ++i) s.push_back({i * 1e-3, 31250.0 * i});
  s.front().bytes -= 10 * 31250.0;
  double ends = (s.back().bytes - s.front().bytes) / (s.back().seconds - s.front().seconds);
  EXPECT_NEAR(ends / 31.25e6, 1.10, 0.001);
  EXPECT_NEAR(*fittedRate(s) / 31.25e6, 1.0, 0.01);
}

}  // namespace
}  // namespace rankmap::probe
