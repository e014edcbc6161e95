// Ring order: cost model of a ring, the exact oracle against brute force, the heuristic against
// the oracle, and properties on random instances.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"
#include "reorder/measurements.h"
#include "reorder/ring.h"
#include "reorder/synthetic.h"
#include "tests/unit/reorder/test_util.h"

namespace rankmap::reorder {
namespace {

using test::hierarchyOf;
using test::isPermutation;

using test::twoRacks;

// Full enumeration: the reference for the branch-and-bound search.
double bruteForce(const NetworkModel& net, const RingParams& p) {
  return test::bruteForceObjective(net, p);
}

// A random network that is not tree-shaped: random pair latencies and random pair caps on top
// of a random two-level tree.
NetworkModel randomNetwork(size_t n, uint64_t seed, bool treeShaped) {
  std::mt19937_64 g(seed);
  std::vector<int> rack(n), pod(n);
  int racks = 1 + static_cast<int>(g() % 4);
  for (size_t i = 0; i < n; ++i) {
    rack[i] = static_cast<int>(g() % racks);
    pod[i] = rack[i] / 2;
  }
  std::vector<double> rates(n);
  for (auto& r : rates) r = 200 + static_cast<double>(g() % 800);
  NetworkModel net =
      modelFromHierarchy(hierarchyOf({rack, pod}), rates,
                         {100 + double(g() % 400), 50 + double(g() % 300)}, 3, {5, 15});
  if (!treeShaped) {
    auto lat = std::make_shared<PairMatrix>(n);
    auto caps = std::make_shared<PairMatrix>(n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) {
        lat->set(i, j, static_cast<float>(1 + g() % 50));
        if (g() % 3 == 0) caps->set(i, j, static_cast<float>(50 + g() % 500));
      }
    net.latency = lat;
    net.caps = caps;
  }
  return net;
}

TEST(Ring, GroupedOrderCrossesEachUplinkOnce) {
  NetworkModel net = twoRacks();
  RingParams p;
  RingCost grouped = evaluateRing(net, {0, 1, 2, 3, 4, 5, 6, 7}, p);
  EXPECT_DOUBLE_EQ(grouped.bottleneckMbps, 250);
  // Alternating racks: every hop crosses, 4 flows per uplink direction.
  RingCost alternating = evaluateRing(net, {0, 4, 1, 5, 2, 6, 3, 7}, p);
  EXPECT_DOUBLE_EQ(alternating.bottleneckMbps, 62.5);
  // Three flows per uplink direction: the calibration order.
  RingCost three = evaluateRing(net, {0, 4, 1, 5, 2, 6, 7, 3}, p);
  EXPECT_DOUBLE_EQ(three.bottleneckMbps, 250.0 / 3);
  // Latency: 6 in-rack hops of 4 us, 2 crossing hops of 24 us.
  EXPECT_DOUBLE_EQ(grouped.latencyUs, 6 * 4 + 2 * 24);
  EXPECT_GT(alternating.objectiveUs, three.objectiveUs);
  EXPECT_GT(three.objectiveUs, grouped.objectiveUs);
}

TEST(Ring, AllreduceTimeFormula) {
  RingCost c;
  c.latencyUs = 100;
  c.bottleneckMbps = 800;  // 100 bytes/us
  EXPECT_DOUBLE_EQ(ringAllreduceUs(c, 4, 1000), 2.0 * 3 / 4 * (100 + 10));
  EXPECT_DOUBLE_EQ(ringAllreduceUs(c, 1, 1000), 0);
}

// One hop at 800 Mbit/s and three at 8000: a step is the slowest transfer where transfers are
// long (the faster hops wait for it, their latency hidden), the mean hop where latency decides.
TEST(Ring, AllreduceStepIsTheSlowestTransferOrTheMeanHop) {
  RingCost c;
  c.latencyUs = 100;
  c.bottleneckMbps = 800;                     // 100 bytes/us
  c.inverseRateSum = 1.0 / 800 + 3.0 / 8000;  // 1/100 + 3/1000 us per byte
  // 1 MB: chunks of 250 000 bytes, 2 500 us on the slow hop; mean hop (100 + 3 250) / 4.
  EXPECT_DOUBLE_EQ(ringAllreduceUs(c, 4, 1e6), 6 * 2500.0);
  // 1 kB: chunks of 250 bytes, 2.5 us on the slow hop; mean hop (100 + 3.25) / 4.
  EXPECT_DOUBLE_EQ(ringAllreduceUs(c, 4, 1e3), 6 * (100 + 3.25) / 4);
}

TEST(Ring, EvaluateRingSumsEveryHopsInverseRate) {
  NetworkModel net = twoRacks();
  RingParams p;
  // Six hops inside the racks at the hosts' 1000 Mbit/s, two across at the uplinks' 250.
  EXPECT_DOUBLE_EQ(evaluateRing(net, {0, 1, 2, 3, 4, 5, 6, 7}, p).inverseRateSum,
                   6 / 1000.0 + 2 / 250.0);
  // Four ranks per host add 24 hops at the intra-host rate.
  p.ranksPerHost = 4;
  EXPECT_DOUBLE_EQ(evaluateRing(net, {0, 1, 2, 3, 4, 5, 6, 7}, p).inverseRateSum,
                   6 / 1000.0 + 2 / 250.0 + 24 / p.intraHostMbps);
}

TEST(Ring, RanksPerHostAddIntraHostHops) {
  NetworkModel net = twoRacks();
  RingParams p;
  p.ranksPerHost = 4;
  p.intraHostLatencyUs = 1;
  RingCost c = evaluateRing(net, {0, 1, 2, 3, 4, 5, 6, 7}, p);
  EXPECT_DOUBLE_EQ(c.latencyUs, 6 * 4 + 2 * 24 + 8 * 3 * 1);
  EXPECT_DOUBLE_EQ(c.bottleneckMbps, 250);
}

TEST(Ring, HierarchicalRingIsGroupedAndOptimalOnATree) {
  NetworkModel net = modelFromHierarchy(
      hierarchyOf({{0, 1, 2, 0, 1, 2, 3, 3, 0, 1, 2, 3}, {0, 0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1}}),
      std::vector<double>(12, 1000), {300, 150}, 2, {5, 20});
  std::vector<int> ring = hierarchicalRing(net);
  ASSERT_TRUE(isPermutation(ring, 12));
  EXPECT_EQ(ring, (std::vector<int>{0, 3, 8, 1, 4, 9, 2, 5, 10, 6, 7, 11}));
  EXPECT_DOUBLE_EQ(evaluateRing(net, ring, {}).bottleneckMbps, net.ringBoundMbps());
}

TEST(Ring, ExactSearchMatchesBruteForce) {
  int kept = 0, replaced = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    for (bool tree : {true, false}) {
      size_t n = 5 + seed % 4;  // 5..8 hosts: 8! / 8 rings at most
      NetworkModel net = randomNetwork(n, seed, tree);
      RingParams p;
      p.noise = 0;                           // strict: the minimum itself
      p.bytes = seed % 2 ? 16 << 20 : 4096;  // bandwidth- and latency-bound
      std::vector<int> start(n);
      std::iota(start.begin(), start.end(), 0);
      std::vector<int> exact = exactRing(net, start, p);
      ASSERT_TRUE(isPermutation(exact, n));
      double optimum = bruteForce(net, p);
      EXPECT_NEAR(evaluateRing(net, exact, p).objectiveUs, optimum, 1e-9)
          << "seed " << seed << " tree " << tree;
      // With noise, the start stays unless the minimum is faster beyond the noise of what
      // differs between the two.
      RingParams noisy = p;
      noisy.noise = 0.1;
      std::vector<int> got = exactRing(net, start, noisy);
      double startUs = evaluateRing(net, start, noisy).objectiveUs;
      if (got == start) {
        ++kept;
        EXPECT_LE(startUs - optimum, ringNoiseUs(net, start, exact, noisy) * (1 + 1e-9));
      } else {
        ++replaced;
        EXPECT_NEAR(evaluateRing(net, got, noisy).objectiveUs, optimum, 1e-9);
        EXPECT_GT(startUs - optimum, ringNoiseUs(net, start, got, noisy));
      }
    }
  }
  EXPECT_GE(replaced, 6);  // the input order is poor on most of these networks
}

TEST(Ring, NoiseOfADifferenceRestsOnWhatDiffers) {
  NetworkModel net = twoRacks();  // hosts 0-3 and 4-7; host links 1000, uplinks 250
  RingParams p;                   // 16 MiB, noise 0.1
  std::vector<int> grouped = {0, 1, 2, 3, 4, 5, 6, 7};
  // The same ring: nothing differs.
  EXPECT_EQ(ringNoiseUs(net, grouped, grouped, p), 0);
  // Two rings that differ in two hops inside racks and share the bottleneck (each uplink
  // crossed twice): only those hops' latencies are uncertain, 10% of them.
  std::vector<int> swapped = {0, 2, 1, 3, 4, 5, 6, 7};
  double scale = 2.0 * 7 / 8;
  EXPECT_NEAR(ringNoiseUs(net, grouped, swapped, p), scale * 0.1 * (4 * 4), 1e-9);
  // One uplink crossed 3 times per direction against once: the same links limit both, so only
  // the difference of the bandwidth terms is uncertain, not each term.
  std::vector<int> alternating = {0, 4, 1, 5, 2, 6, 3, 7};
  double bits = 8.0 * (16 << 20);
  double noise = ringNoiseUs(net, grouped, alternating, p);
  EXPECT_GT(noise, scale * 0.1 * bits * (4.0 / 250 - 1.0 / 250));
  EXPECT_LT(noise, scale * 0.1 * bits * (4.0 / 250));
}

TEST(Ring, LinkLoadsCompareLeximin) {
  NetworkModel net = twoRacks();
  std::vector<int> grouped = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<int> three = {0, 4, 1, 5, 2, 6, 7, 3};  // 3 flows per uplink direction
  EXPECT_EQ(compareLinkLoads(net, grouped, three), -1);
  EXPECT_EQ(compareLinkLoads(net, three, grouped), 1);
  EXPECT_EQ(compareLinkLoads(net, grouped, {4, 5, 6, 7, 3, 2, 1, 0}), 0);
}

// 2 pods of 2 racks of 3 hosts; rack uplinks 400, pod uplinks 100 (the bottleneck), and every
// pair at the same latency: how often a ring crosses a rack uplink changes nothing in its time
// as long as the pod uplinks are crossed once per direction.
NetworkModel podBound() {
  return modelFromHierarchy(
      hierarchyOf({{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}, {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}}),
      std::vector<double>(12, 1000), {400, 100}, 3, {0, 0});
}

TEST(Ring, AmongEqualTimesTheLocalSearchTidiesTheLinks) {
  NetworkModel net = podBound();
  // Pods contiguous, racks interleaved inside them: 6 crossings per rack uplink, as fast as the
  // tidy ring (the pod uplinks limit both, all hops alike).
  std::vector<int> interleaved = {0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11};
  for (double noise : {0.0, 0.1}) {
    RingParams p;
    p.noise = noise;
    EXPECT_DOUBLE_EQ(evaluateRing(net, interleaved, p).objectiveUs,
                     evaluateRing(net, hierarchicalRing(net), p).objectiveUs);
    std::vector<int> ring = improveRing(net, interleaved, p);
    ASSERT_TRUE(isPermutation(ring, 12));
    EXPECT_EQ(compareLinkLoads(net, ring, hierarchicalRing(net)), 0) << "noise " << noise;
    EXPECT_DOUBLE_EQ(evaluateRing(net, ring, p).objectiveUs,
                     evaluateRing(net, interleaved, p).objectiveUs);
  }
}

TEST(Ring, LocalSearchDoesNotChaseNoise) {
  // The pod-bound network measured with +-10% noise on each pair's latency: from the walk, a
  // search that takes any gain reorders hosts across racks for a few percent of latency that
  // is not there; one that wants a gain beyond the noise keeps the walk.
  NetworkModel net = podBound();
  auto noisy = std::make_shared<PairMatrix>(12);
  std::mt19937_64 g(3);
  for (size_t i = 0; i < 12; ++i)
    for (size_t j = i + 1; j < 12; ++j)
      noisy->set(i, j, static_cast<float>(6 * (0.9 + 0.2 * double(g() % 1000) / 1000)));
  net.latency = noisy;
  RingParams p;
  p.bytes = 4096;  // latency-bound: the noise is all there is to chase
  std::vector<int> walk = hierarchicalRing(net);
  EXPECT_EQ(improveRing(net, walk, p), walk);
  p.noise = 0;
  EXPECT_EQ(compareLinkLoads(net, improveRing(net, walk, p), walk), 1)
      << "the strict search should chase the noise here (else this test shows nothing)";
}

TEST(Ring, ExactSearchMatchesBruteForceAtNineAndTenHosts) {
  // The largest sizes full enumeration affords in a unit test (8! and 9! rings), from a poor
  // incumbent (the input order) so that the search has to find the optimum itself.
  struct Case {
    size_t n;
    uint64_t seed;
    bool tree;
  };
  for (Case c : {Case{9, 21, false}, Case{9, 22, true}, Case{10, 23, false}}) {
    NetworkModel net = randomNetwork(c.n, c.seed, c.tree);
    RingParams p;
    p.noise = 0;  // the exact oracle: strictly the minimum
    p.bytes = c.seed % 2 ? 16 << 20 : 4096;
    std::vector<int> start(c.n);
    std::iota(start.begin(), start.end(), 0);
    std::vector<int> exact = exactRing(net, start, p);
    ASSERT_TRUE(isPermutation(exact, c.n));
    double optimum = bruteForce(net, p);
    EXPECT_NEAR(evaluateRing(net, exact, p).objectiveUs, optimum, 1e-9 * optimum)
        << "n " << c.n << " seed " << c.seed;
  }
}

TEST(Ring, ExactSearchFindsTheTreeOptimumAtElevenAndTwelveHosts) {
  // Beyond enumeration, a known optimum: on a tree with per-link latencies, every ring crosses
  // each host link twice and each uplink of a group smaller than the job at least twice, and
  // the depth-first walk crosses each exactly twice, so it minimises the latency sum and the
  // bottleneck at once. The exact search, started from the input order, must reach it.
  int improved = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    size_t n = 11 + seed % 2;
    NetworkModel net = randomNetwork(n, 300 + seed, true);
    RingParams p;
    p.noise = 0;  // the exact oracle: strictly the minimum
    p.bytes = seed % 3 == 0 ? 4096 : 16 << 20;
    std::vector<int> start(n);
    std::iota(start.begin(), start.end(), 0);
    double optimum = evaluateRing(net, hierarchicalRing(net), p).objectiveUs;
    double input = evaluateRing(net, start, p).objectiveUs;
    std::vector<int> exact = exactRing(net, start, p);
    ASSERT_TRUE(isPermutation(exact, n));
    EXPECT_NEAR(evaluateRing(net, exact, p).objectiveUs, optimum, 1e-9 * optimum)
        << "n " << n << " seed " << seed;
    improved += input > optimum * (1 + 1e-6);
  }
  EXPECT_GE(improved, 4) << "the input order should rarely be optimal already";
}

TEST(Ring, HeuristicReachesTheOracleBottleneckOnTrees) {
  // On tree-shaped networks the depth-first ring plus local search has the optimal bottleneck
  // (and, for these sizes, the optimal time) at up to 12 hosts.
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    size_t n = 9 + seed % 4;
    NetworkModel net = randomNetwork(n, 100 + seed, true);
    RingParams p;
    p.noise = 0;  // the exact oracle: strictly the minimum
    std::vector<int> heuristic = improveRing(net, hierarchicalRing(net), p);
    std::vector<int> exact = exactRing(net, heuristic, p);
    RingCost h = evaluateRing(net, heuristic, p), e = evaluateRing(net, exact, p);
    EXPECT_DOUBLE_EQ(h.bottleneckMbps, e.bottleneckMbps) << "seed " << seed;
    EXPECT_NEAR(h.objectiveUs, e.objectiveUs, 1e-6 * e.objectiveUs) << "seed " << seed;
  }
}

TEST(Ring, ExactSearchAtTwelveHosts) {
  NetworkModel net = randomNetwork(12, 77, false);
  RingParams p;
  std::vector<int> start(12);
  std::iota(start.begin(), start.end(), 0);
  std::vector<int> heuristic = improveRing(net, start, p);
  std::vector<int> exact = exactRing(net, heuristic, p);
  ASSERT_TRUE(isPermutation(exact, 12));
  EXPECT_LE(evaluateRing(net, exact, p).objectiveUs, evaluateRing(net, heuristic, p).objectiveUs);
  EXPECT_THROW(exactRing(randomNetwork(13, 1, true), std::vector<int>(13), p), InvalidInput);
}

TEST(Ring, LocalSearchNeverWorsensAndKeepsAPermutation) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    size_t n = 20 + seed * 7;
    NetworkModel net = randomNetwork(n, 500 + seed, seed % 2 == 0);
    RingParams p;
    p.bytes = seed % 3 == 0 ? 1024 : 64 << 20;
    std::vector<int> identity(n);
    std::iota(identity.begin(), identity.end(), 0);
    p.noise = seed % 2 ? 0.1 : 0.0;
    std::vector<int> ring = improveRing(net, identity, p);
    ASSERT_TRUE(isPermutation(ring, n)) << seed;
    // Never worse with noise 0; within the noise of the fastest ring seen otherwise.
    EXPECT_LE(evaluateRing(net, ring, p).objectiveUs,
              evaluateRing(net, identity, p).objectiveUs * (1 + p.noise));
    std::vector<int> rotated = rotateToBoundary(net, ring);
    ASSERT_TRUE(isPermutation(rotated, n));
    EXPECT_DOUBLE_EQ(evaluateRing(net, rotated, p).objectiveUs,
                     evaluateRing(net, ring, p).objectiveUs);
  }
}

TEST(Ring, RotationStartsAtAGroupBoundary) {
  NetworkModel net = twoRacks();
  std::vector<int> r = rotateToBoundary(net, {1, 2, 3, 4, 5, 6, 7, 0});
  EXPECT_EQ(r, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace rankmap::reorder
