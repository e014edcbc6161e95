#include "probe/contention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace rankmap::probe {
namespace {

// A hidden cloud: hosts in racks, host links H, uplinks U; flows get max-min fair rates
// (the simulator is the model the fit assumes) plus multiplicative noise.
struct Cloud {
  std::vector<int> rack;
  double hostMbps, uplinkMbps;
  // An emulated cloud's CPUs: all flows of a trial together get at most this much.
  double cpuMbps = kUnlimited;

  LinkModel model() const {
    LinkModel m;
    m.groupOf = rack;
    int racks = *std::max_element(rack.begin(), rack.end()) + 1;
    m.hostOut.assign(rack.size(), hostMbps);
    m.hostIn.assign(rack.size(), hostMbps);
    m.upOut.assign(static_cast<size_t>(racks), uplinkMbps);
    m.upIn.assign(static_cast<size_t>(racks), uplinkMbps);
    m.total = cpuMbps;
    return m;
  }

  ObservedTrial run(const std::vector<HostPair>& flows, std::mt19937& rng, double noise) const {
    auto rates = maxMinRates(model(), flows);
    std::uniform_real_distribution<double> u(1 - noise, 1 + noise);
    ObservedTrial t;
    for (size_t k = 0; k < flows.size(); ++k)
      t.push_back({flows[k].first, flows[k].second, rates[k] * u(rng)});
    return t;
  }
};

Cloud hiddenCloud(int n, int racks, double h, double u, unsigned seed) {
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::mt19937 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  Cloud c{std::vector<int>(static_cast<size_t>(n)), h, u};
  for (int pos = 0; pos < n; ++pos)
    c.rack[static_cast<size_t>(order[static_cast<size_t>(pos)])] = pos % racks;
  return c;
}

// Same partition up to renaming.
bool samePartition(const std::vector<int>& a, const std::vector<int>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a.size(); ++j)
      if ((a[i] == a[j]) != (b[i] == b[j])) return false;
  return true;
}

// The trials a full probe with the contention probe runs: both directions of every
// round-robin round, then the contention trials.
std::vector<ObservedTrial> probeTrials(const Cloud& c, int n, std::mt19937& rng, double noise,
                                       bool contention) {
  std::vector<ObservedTrial> trials;
  for (const auto& round : roundRobin(n)) {
    std::vector<HostPair> fwd, back;
    for (auto [a, b] : round) {
      fwd.emplace_back(a, b);
      back.emplace_back(b, a);
    }
    trials.push_back(c.run(fwd, rng, noise));
    trials.push_back(c.run(back, rng, noise));
  }
  if (contention)
    for (const auto& t : contentionTrials(n, 2 * (n - 1), 42))
      trials.push_back(c.run(t, rng, noise));
  return trials;
}

TEST(MaxMinRates, SharesABottleneckFairly) {
  Cloud c{{0, 0, 0, 1, 1, 1}, 250, 500};
  // Three flows out of rack 0 into rack 1: the 500 uplink splits three ways.
  auto r = maxMinRates(c.model(), {{0, 3}, {1, 4}, {2, 5}});
  for (double x : r) EXPECT_NEAR(x, 500.0 / 3, 1e-9);
  // Two flows fit: each gets its host rate.
  r = maxMinRates(c.model(), {{0, 3}, {1, 4}});
  for (double x : r) EXPECT_NEAR(x, 250, 1e-9);
  // Intra-rack flows do not touch the uplink.
  r = maxMinRates(c.model(), {{0, 1}, {1, 2}, {2, 0}});
  for (double x : r) EXPECT_NEAR(x, 250, 1e-9);
}

struct Case {
  int n, racks;
  double host, uplink;
  bool contention;
  double cpu = kUnlimited;
};

class InferTest : public ::testing::TestWithParam<Case> {};

TEST_P(InferTest, RecoversHiddenRacks) {
  const Case& k = GetParam();
  for (unsigned seed : {1u, 2u, 3u}) {
    Cloud c = hiddenCloud(k.n, k.racks, k.host, k.uplink, seed);
    c.cpuMbps = k.cpu;
    std::mt19937 rng(seed * 7 + 1);
    auto trials = probeTrials(c, k.n, rng, 0.04, k.contention);
    Inference inf = inferGroups(k.n, trials);
    EXPECT_TRUE(samePartition(inf.model.groupOf, c.rack))
        << "n=" << k.n << " racks=" << k.racks << " seed=" << seed;
    auto shared = inf.sharedGroups();
    EXPECT_EQ(static_cast<int>(shared.size()), k.racks) << "seed " << seed;
    for (int g = 0; g < inf.groupCount(); ++g)
      EXPECT_NEAR(inf.uplinkCapacity(g), k.uplink, 0.1 * k.uplink);
    EXPECT_GT(inf.confidence(), 0.8);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Clouds, InferTest,
    ::testing::Values(Case{8, 2, 1000, 250, false}, Case{16, 4, 1000, 250, false},
                      Case{8, 2, 250, 500, true}, Case{16, 4, 250, 500, true},
                      Case{12, 3, 250, 500, true}, Case{13, 3, 1000, 250, false},
                      // CPU-bound emulation: every trial's flows share 1500 Mbit/s in all.
                      Case{8, 2, 1000, 250, false, 1500}, Case{8, 2, 250, 500, true, 1500}));

TEST(Infer, NoSharedLinksWhenUplinksAreNeverTheBottleneck) {
  // Uplinks carry every host at full rate: nothing is shared, whatever the racks.
  Cloud c = hiddenCloud(8, 2, 250, 2000, 5);
  std::mt19937 rng(11);
  auto trials = probeTrials(c, 8, rng, 0.04, true);
  Inference inf = inferGroups(8, trials);
  EXPECT_TRUE(inf.sharedGroups().empty());
}

}  // namespace
}  // namespace rankmap::probe
