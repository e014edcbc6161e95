// The ring on tree-shaped networks measured with noise: every group of every inferred level is
// contiguous in the ring (cyclically), i.e. the ring crosses each level's group boundaries
// exactly once per group, on synthetic 3-level topologies (pods / racks / hosts, 64-1024 hosts)
// measured with latency only, bandwidth only and both, +-10% noise and 5% missing pairs.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "reorder/planner.h"
#include "reorder/synthetic.h"

namespace rankmap::reorder {
namespace {

// Ring hops whose two hosts are in different groups of `level`.
size_t crossings(const Hierarchy::Level& level, const std::vector<int>& ring) {
  size_t c = 0, n = ring.size();
  for (size_t i = 0; i < n; ++i) c += level.groupOf[ring[i]] != level.groupOf[ring[(i + 1) % n]];
  return c;
}

// A random 3-level tree (pods of racks of hosts) of `minHosts`..`maxHosts` hosts whose levels
// show in the signals measured: uplinks narrower than what they aggregate (rack 300-600 Mbit/s
// under 1000 Mbit/s hosts, pods at least 1.5x narrower), and latency growing per level.
SyntheticSpec randomTree(std::mt19937_64& g, size_t minHosts, size_t maxHosts) {
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(g() % (hi - lo + 1)); };
  SyntheticSpec s;
  do {
    double rack = pick(300, 600), pod = rack / (1.5 + pick(0, 10) / 10.0);
    s.levels = {{pick(2, 16), rack, double(pick(4, 10))}, {pick(2, 8), pod, double(pick(20, 40))}};
    s.topGroups = pick(2, 6);
  } while (s.totalHosts() < minHosts || s.totalHosts() > maxHosts);
  s.noise = 0.1;
  s.missing = 0.05;
  return s;
}

TEST(RingGroups, EveryGroupOfEveryLevelIsContiguous) {
  struct Regime {
    const char* name;
    Signal bandwidth, latency;
  };
  const Regime regimes[] = {{"latency only", Signal::kFlat, Signal::kModel},
                            {"bandwidth only", Signal::kModel, Signal::kFlat},
                            {"both", Signal::kModel, Signal::kModel}};
  std::mt19937_64 g(14);
  int planned = 0;
  for (const Regime& regime : regimes) {
    // Eight topologies of 64-320 hosts per regime, and one of 512-1024 (a sample of the large
    // sizes: they take most of the time).
    for (int k = 0; k < 9; ++k) {
      SyntheticSpec s = k < 8 ? randomTree(g, 64, 320) : randomTree(g, 512, 1024);
      s.bandwidth = regime.bandwidth;
      s.latency = regime.latency;
      s.seed = g();
      SyntheticTopology syn = makeSynthetic(s);
      PlanOptions o;
      o.source = "synthetic";
      o.hashTopology = false;
      PlanResult r = planTopology(syn.topology, o);
      SCOPED_TRACE(::testing::Message()
                   << regime.name << ", " << s.topGroups << " pods x " << s.levels[1].fanout
                   << " racks x " << s.levels[0].fanout << " hosts, seed " << s.seed);
      ASSERT_FALSE(r.fallback);
      // The groups are the truth (what makes the property about the network, not about
      // whatever was inferred), then every group of every level is contiguous.
      ASSERT_EQ(r.hierarchy.levels.size(), 2u);
      for (size_t l = 0; l < 2; ++l) {
        EXPECT_DOUBLE_EQ(
            adjustedRandIndex(syn.truth.levels[l].groupOf, r.hierarchy.levels[l].groupOf), 1.0)
            << "level " << l;
        EXPECT_EQ(crossings(r.hierarchy.levels[l], r.order),
                  static_cast<size_t>(r.hierarchy.levels[l].groups))
            << r.hierarchy.levels[l].name << "s";
      }
      ++planned;
    }
  }
  EXPECT_EQ(planned, 27);
}

}  // namespace
}  // namespace rankmap::reorder
