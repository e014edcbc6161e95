// Scenarios (tests/sim/scenario.h): settings parsed with errors that name the key, the datacenter
// they describe, and the scoring of a ring on the true network.
#include "tests/sim/scenario.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/error.h"

namespace rankmap::sim {
namespace {

std::string errorOf(const std::vector<std::string>& settings) {
  try {
    Scenario::parse(settings);
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(Scenario, BadSettingsNameTheKeyAndWhatWasExpected) {
  EXPECT_NE(errorOf({"hosts=x"}).find("hosts=x: expected a number"), std::string::npos);
  EXPECT_NE(errorOf({"hosts=1"}).find("expected a whole number >= 2"), std::string::npos);
  EXPECT_NE(errorOf({"noise=1"}).find("noise=1"), std::string::npos);
  EXPECT_NE(errorOf({"slow=2"}).find("slow=2: expected a fraction"), std::string::npos);
  EXPECT_NE(errorOf({"rack_sizes=4,,8"}).find("rack_sizes"), std::string::npos);
  EXPECT_NE(errorOf({"colour=red"}).find("unknown key \"colour\""), std::string::npos);
  EXPECT_NE(errorOf({"hosts"}).find("expected KEY=VALUE"), std::string::npos);
  EXPECT_NE(errorOf({"pods=2", "racks_per_pod=3"}).find("both given"), std::string::npos);
  EXPECT_NE(errorOf({"hosts=8", "dead=8"}).find("dead=8"), std::string::npos);
  EXPECT_EQ(errorOf({"hosts=64", "rack_sizes=1,48", "racks_per_pod=2,3", "jitter_us=5"}), "");
}

TEST(Scenario, RacksPodsAndTheProvidersOrder) {
  auto sc = Scenario::parse({"hosts=100", "rack_sizes=8,16", "racks_per_pod=2,3", "dead=2",
                             "slow=0.1", "thin=2", "shuffle=0", "seed=3"});
  Datacenter dc(sc.spec());
  ASSERT_EQ(dc.hosts(), 100u);
  // 8, 16, 8, 16, 8, 16, 8, 16 = 96, then 4: nine racks, pods of 2, 3, 2, 2 racks.
  EXPECT_EQ(dc.racks(), 9);
  EXPECT_EQ(dc.pods(), 4);
  EXPECT_EQ(dc.rackOf(0), 0);
  EXPECT_EQ(dc.rackOf(8), 1);
  EXPECT_EQ(dc.rackOf(99), 8);
  EXPECT_EQ(dc.podOf(99), 3);
  EXPECT_EQ(dc.spec().deadHosts.size(), 2u);
  EXPECT_EQ(dc.spec().slowHosts.size(), 10u);
  EXPECT_EQ(dc.spec().thinRacks.size(), 2u);
  // Shuffled: the same racks, dealt in another order.
  sc.shuffle = true;
  Datacenter dealt(sc.spec());
  std::map<int, int> sizes, dealtSizes;
  bool moved = false;
  for (int h = 0; h < 100; ++h) {
    ++sizes[dc.rackOf(h)];
    ++dealtSizes[dealt.rackOf(h)];
    moved = moved || dc.rackOf(h) != dealt.rackOf(h);
  }
  EXPECT_EQ(sizes, dealtSizes);
  EXPECT_TRUE(moved);
}

// Two racks of two hosts at 100 Mbit/s, 50 Mbit/s uplinks, 10 us round trips inside a rack and
// 30 us across: a ring crossing each uplink once runs at 50, one crossing twice at 25.
TEST(Scenario, TrueRingTimeIsTheSlowestHopPerStep) {
  DatacenterSpec s;
  s.pods = 1;
  s.racksPerPod = 2;
  s.rackOfHost = {0, 1, 0, 1};
  s.hostMbps = 100;
  s.rackUplinkMbps = 50;
  s.hostLatencyUs = 2.5;
  s.rackLatencyUs = 5;
  s.noise = 0;
  Datacenter dc(s);
  const uint64_t bytes = 4000000;  // a step's chunk: 1 MB = 8e6 bits
  // Racks contiguous (0, 2 | 1, 3): two hops cross at 50 Mbit/s (160000 us), two inside at
  // 100 (80000 us); one way 15 us across, 5 inside. The slowest send decides, each of its six
  // back to back, and its last chunk still has to cross.
  EXPECT_NEAR(trueRingUs(dc, {0, 2, 1, 3}, bytes), 6 * (8e6 / 50) + 15, 1e-6);
  // Alternating (0, 1, 2, 3): four crossings, two per uplink direction: 25 Mbit/s.
  EXPECT_NEAR(trueRingUs(dc, {0, 1, 2, 3}, bytes), 6 * (8e6 / 25 + 15), 1e-6);
  // Latency decides where transfers are short: the mean hop, not the slowest one.
  EXPECT_NEAR(trueRingUs(dc, {0, 2, 1, 3}, 4),
              6 * std::max(8.0 / 50, (2 * 8.0 / 50 + 2 * 8.0 / 100 + 2 * 15 + 2 * 5) / 4), 1e-9);
}

}  // namespace
}  // namespace rankmap::sim
