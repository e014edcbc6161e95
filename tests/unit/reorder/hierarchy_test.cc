// Hierarchy inference: linkage, level cuts, recovery from each signal alone, noise, missing
// pairs, shared links, heterogeneous hosts, and the fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "common/error.h"
#include "common/json.h"
#include "reorder/hierarchy.h"
#include "reorder/linkage.h"
#include "reorder/measurements.h"
#include "reorder/synthetic.h"
#include "tests/unit/reorder/test_util.h"

namespace rankmap::reorder {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Hierarchy infer(const Topology& t) {
  std::vector<std::string> warnings;
  Measurements m = cleanMeasurements(t, "test", warnings);
  std::vector<std::vector<int>> sets;
  for (const auto& s : t.sharedLinks) {
    std::vector<int> set;
    for (const auto& h : s.hosts) set.push_back(t.indexOf(h));
    sets.push_back(set);
  }
  return inferHierarchy(m, sets);
}

// Every true level found, with the same partition.
void expectRecovered(const SyntheticTopology& syn, const Hierarchy& h) {
  ASSERT_EQ(h.levels.size(), syn.truth.levels.size());
  for (size_t l = 0; l < h.levels.size(); ++l) {
    EXPECT_DOUBLE_EQ(adjustedRandIndex(syn.truth.levels[l].groupOf, h.levels[l].groupOf), 1.0)
        << "level " << l;
    EXPECT_GT(h.levels[l].confidence, 0.8) << "level " << l;
  }
}

TEST(Linkage, MergesNearestFirstAndCutsAtTheJump) {
  // Two tight pairs {0,1} {2,3} far apart, and a missing pair that must not matter.
  std::vector<float> d = {kNaN, 1.0f, 10.f, 10.f,  //
                          1.0f, kNaN, 10.f, kNaN,  //
                          10.f, 10.f, kNaN, 1.2f,  //
                          10.f, kNaN, 1.2f, kNaN};
  Dendrogram dg = averageLinkage(d, 4);
  ASSERT_EQ(dg.merges.size(), 3u);
  EXPECT_FLOAT_EQ(dg.merges[0].height, 1.0f);
  EXPECT_FLOAT_EQ(dg.merges[1].height, 1.2f);
  EXPECT_FLOAT_EQ(dg.merges[2].height, 10.f);
  auto cuts = findLevelCuts(dg, 1.0, 4.0);
  ASSERT_EQ(cuts.size(), 1u);
  EXPECT_EQ(cuts[0].merges, 2u);
  EXPECT_EQ(cutDendrogram(dg, 2), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(cutDendrogram(dg, 0), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Linkage, NoCutInUniformNoise) {
  // 30 points with +-10% noise and no structure: no level.
  size_t n = 30;
  std::vector<float> d(n * n, kNaN);
  uint64_t s = 7;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      float v = 1.0f + 0.1f * (static_cast<float>(s >> 40) / float(1 << 24) * 2 - 1);
      d[i * n + j] = d[j * n + i] = std::log(v);
    }
  EXPECT_TRUE(findLevelCuts(averageLinkage(d, n), kMinLogGap, kSpreadFactor).empty());
}

TEST(AdjustedRandIndex, KnownValues) {
  EXPECT_DOUBLE_EQ(adjustedRandIndex({0, 0, 1, 1}, {1, 1, 0, 0}), 1.0);
  EXPECT_LT(adjustedRandIndex({0, 0, 1, 1}, {0, 1, 0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(adjustedRandIndex({0, 0, 0, 0}, {0, 0, 0, 0}), 1.0);
  double partial = adjustedRandIndex({0, 0, 0, 1, 1, 1}, {0, 0, 1, 1, 1, 1});
  EXPECT_GT(partial, 0.0);
  EXPECT_LT(partial, 1.0);
}

TEST(Hierarchy, BandwidthOnly) {
  SyntheticSpec s;
  s.levels = {{4, 250, 10}};
  s.topGroups = 4;
  s.noise = 0.1;
  s.latency = Signal::kFlat;
  auto syn = makeSynthetic(s);
  Hierarchy h = infer(syn.topology);
  expectRecovered(syn, h);
  EXPECT_TRUE(h.features[0].informative);   // bandwidth
  EXPECT_FALSE(h.features[1].informative);  // latency
}

TEST(Hierarchy, LatencyOnly) {
  SyntheticSpec s;
  s.levels = {{4, 10000, 20}};
  s.topGroups = 4;
  s.hostMbps = 10000;
  s.noise = 0.1;
  s.bandwidth = Signal::kFlat;
  auto syn = makeSynthetic(s);
  Hierarchy h = infer(syn.topology);
  expectRecovered(syn, h);
  EXPECT_FALSE(h.features[0].informative);
  EXPECT_TRUE(h.features[1].informative);
}

TEST(Hierarchy, LatencyOnlyWithoutBandwidthMeasurements) {
  SyntheticSpec s;
  s.levels = {{3, 10000, 15}};
  s.topGroups = 5;
  s.noise = 0.1;
  s.bandwidth = Signal::kAbsent;
  auto syn = makeSynthetic(s);
  expectRecovered(syn, infer(syn.topology));
}

TEST(Hierarchy, SharedLinksAloneTellRacksApart) {
  // Host 250, uplink 500: every pair measures 250 and latency is flat.
  SyntheticSpec s;
  s.levels = {{4, 500, 10}};
  s.topGroups = 3;
  s.hostMbps = 250;
  s.noise = 0.05;
  s.bandwidth = Signal::kModel;
  s.latency = Signal::kFlat;
  s.sharedLinks = true;
  auto syn = makeSynthetic(s);
  Hierarchy h = infer(syn.topology);
  EXPECT_FALSE(h.features[0].informative);
  expectRecovered(syn, h);
  // Without the shared links there is nothing to go on.
  Topology bare = syn.topology;
  bare.sharedLinks.clear();
  EXPECT_TRUE(infer(bare).levels.empty());
}

TEST(Hierarchy, FlatNetworkHasNoLevels) {
  SyntheticSpec s;
  s.levels = {{4, 1000, 0}};
  s.topGroups = 4;
  s.noise = 0.1;
  s.bandwidth = Signal::kFlat;
  s.latency = Signal::kFlat;
  auto syn = makeSynthetic(s);
  EXPECT_TRUE(infer(syn.topology).levels.empty());
}

TEST(Hierarchy, ThreeLevelsWithNoiseAndMissingPairs) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SyntheticSpec s;
    s.levels = {{8, 400, 5}, {4, 200, 20}};
    s.topGroups = 2;
    s.noise = 0.1;
    s.missing = 0.05;
    s.seed = seed;
    auto syn = makeSynthetic(s);
    SCOPED_TRACE(seed);
    expectRecovered(syn, infer(syn.topology));
  }
}

TEST(Hierarchy, HeterogeneousHostsDoNotFormTheirOwnLevel) {
  // A third of the hosts have slow NICs: their pairs are slower but they are not a rack.
  SyntheticSpec s;
  s.levels = {{6, 300, 10}};
  s.topGroups = 3;
  s.noise = 0.05;
  s.latency = Signal::kFlat;
  for (int i = 0; i < 18; ++i) s.hostMbpsOverride.push_back(i % 3 == 0 ? 500 : 1000);
  auto syn = makeSynthetic(s);
  expectRecovered(syn, infer(syn.topology));
}

// Racks (sizes `racks`, uplinks `rackMbps`) in pods (`podOf` per rack, uplinks `podMbps`; one pod
// of everything when empty) of 1000 Mbit/s hosts, measured with +-8% noise on bandwidth and a
// flat latency (60 us +-20%): the single-flow rate of a pair is the narrowest link on its path.
Topology rateTree(const std::vector<int>& racks, const std::vector<double>& rackMbps,
                  const std::vector<int>& podOf, const std::vector<double>& podMbps,
                  uint64_t seed) {
  std::vector<Host> hosts;
  std::vector<int> rack;
  for (size_t r = 0; r < racks.size(); ++r)
    for (int k = 0; k < racks[r]; ++k) {
      rack.push_back(static_cast<int>(r));
      hosts.push_back({"h" + std::to_string(hosts.size()), ""});
    }
  Topology t = Topology::empty(hosts);
  std::mt19937_64 g(seed);
  auto noise = [&](double x) { return 1 + x * (2 * double(g() % 10000) / 10000 - 1); };
  for (size_t i = 0; i < hosts.size(); ++i)
    for (size_t j = i + 1; j < hosts.size(); ++j) {
      int a = rack[i], b = rack[j];
      double bw = 1000;
      if (a != b) bw = std::min({bw, rackMbps[a], rackMbps[b]});
      if (!podOf.empty() && podOf[a] != podOf[b])
        bw = std::min({bw, podMbps[podOf[a]], podMbps[podOf[b]]});
      for (auto [x, y] : {std::pair{i, j}, std::pair{j, i}}) {
        t.bandwidthMbps.at(x, y) = bw * noise(0.08);
        double l = 60 * noise(0.2);
        t.latencyUs.at(x, y) = LatencyStats{l, l, l, l};
      }
    }
  return t;
}

TEST(Hierarchy, UplinkRateClassesAreNotALevel) {
  // 3 racks behind 500, 125 and 250 Mbit/s: racks 0 and 2 measure 250 between them and 125 to
  // rack 1, which clusters as two "pods"; but each rate is the narrower of the two racks' own
  // uplinks, and nothing shared shows. 3 racks, no pods.
  Topology fixture = Topology::load(test::fixture("rate_classes.json"));
  Json truth = readJsonFile(test::fixture("fixtures_truth.json"));
  Hierarchy h = infer(fixture);
  ASSERT_EQ(h.levels.size(), 1u);
  EXPECT_EQ(h.levels[0].name, "rack");
  EXPECT_EQ(h.levels[0].groups, 3);
  EXPECT_DOUBLE_EQ(adjustedRandIndex(truth.at("rate_classes").at("rack").get<std::vector<int>>(),
                                     h.levels[0].groupOf),
                   1.0);
  // The clustering did find the two classes (else this test would show nothing): reported as
  // a rate class of the racks, with nothing unexplained by the racks' uplinks.
  ASSERT_EQ(h.rateClasses.size(), 1u);
  EXPECT_EQ(h.rateClasses[0].groups, 2);
  EXPECT_EQ(h.rateClasses[0].below, "rack");
  EXPECT_LT(std::abs(h.rateClasses[0].unexplainedLog), 0.1);

  // The same on 8 racks of 5 with three uplink classes, over seeds.
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Topology t =
        rateTree({5, 5, 5, 5, 5, 5, 5, 5}, {500, 125, 250, 500, 125, 250, 500, 250}, {}, {}, seed);
    Hierarchy classes = infer(t);
    ASSERT_EQ(classes.levels.size(), 1u) << seed;
    EXPECT_EQ(classes.levels[0].groups, 8) << seed;
  }

  // A switch with the same rates is kept: 2 pods of 3 racks, racks behind 500, pods behind a
  // shared 200 (flows across pods are slower than either rack's uplink).
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Topology t = rateTree({4, 4, 4, 4, 4, 4}, {500, 500, 500, 500, 500, 500}, {0, 0, 0, 1, 1, 1},
                          {200, 200}, seed);
    Hierarchy pods = infer(t);
    ASSERT_EQ(pods.levels.size(), 2u) << seed;
    EXPECT_EQ(pods.levels[0].groups, 6) << seed;
    EXPECT_EQ(pods.levels[1].groups, 2) << seed;
    EXPECT_TRUE(pods.rateClasses.empty()) << seed;
  }
  // One level up: 3 pods of 2 racks behind pod uplinks of 250, 100 and 200 Mbit/s (racks 500)
  // are 3 pods, and their rate classes no "zone".
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    Topology t = rateTree({4, 4, 4, 4, 4, 4}, {500, 500, 500, 500, 500, 500}, {0, 0, 1, 1, 2, 2},
                          {250, 100, 200}, seed);
    Hierarchy pods = infer(t);
    ASSERT_EQ(pods.levels.size(), 2u) << seed;
    EXPECT_EQ(pods.levels[0].groups, 6) << seed;
    EXPECT_EQ(pods.levels[1].groups, 3) << seed;
    EXPECT_EQ(pods.levels[1].name, "pod") << seed;
  }
}

TEST(Hierarchy, FromLevelsChecksNesting) {
  std::vector<std::string> names = {"a", "b", "c", "d"};
  std::vector<HierarchyLevel> good = {{"rack", 1, {{"a", "b"}, {"c"}, {"d"}}},
                                      {"pod", 1, {{"a", "b", "c"}, {"d"}}}};
  Hierarchy h = hierarchyFromLevels(good, names, "t.json");
  EXPECT_EQ(h.levels[0].groupOf, (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(h.lcaLevel(0, 2), 1);
  EXPECT_EQ(h.lcaLevel(0, 3), 2);
  std::vector<HierarchyLevel> bad = {{"rack", 1, {{"a", "b"}, {"c", "d"}}},
                                     {"pod", 1, {{"a", "c"}, {"b", "d"}}}};
  try {
    hierarchyFromLevels(bad, names, "t.json");
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("t.json: at /groups/1"), std::string::npos) << e.what();
  }
}

// The fixtures: every one recovers its hidden racks (fixtures_truth.json).
class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, RecoversTheRacks) {
  Topology t = Topology::load(test::fixture(GetParam() + ".json"));
  Json truth = readJsonFile(test::fixture("fixtures_truth.json"));
  std::vector<int> rack = truth.at(GetParam()).at("rack").get<std::vector<int>>();
  Hierarchy h = infer(t);
  ASSERT_EQ(h.levels.size(), 1u);
  EXPECT_DOUBLE_EQ(adjustedRandIndex(rack, h.levels[0].groupOf), 1.0);
  EXPECT_GT(h.levels[0].confidence, 0.5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest,
                         ::testing::Values("latency_only", "bandwidth_only", "shared_links_only",
                                           "noisy", "missing_pairs", "heterogeneous",
                                           "testbed_8vm_2rack", "rate_classes"));

TEST(Measurements, AsymmetryBeyondToleranceIsAnErrorNamingTheEntry) {
  Topology t = Topology::load(test::fixture("bad_asymmetric.json"));
  std::vector<std::string> warnings;
  try {
    cleanMeasurements(t, "bad_asymmetric.json", warnings);
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("bad_asymmetric.json: at /bandwidth_mbps/"), std::string::npos) << msg;
    EXPECT_NE(msg.find("asymmetric"), std::string::npos) << msg;
  }
}

TEST(Measurements, AFewAsymmetricPairsAreDroppedWithAWarning) {
  SyntheticSpec s;
  s.levels = {{8, 250, 10}};
  s.topGroups = 8;  // 64 hosts, 2016 pairs
  auto syn = makeSynthetic(s);
  Topology t = syn.topology;
  *t.bandwidthMbps.at(3, 9) *= 20;  // one pair
  std::vector<std::string> warnings;
  Measurements m = cleanMeasurements(t, "x", warnings);
  EXPECT_EQ(m.droppedAsymmetric, 1u);
  EXPECT_FALSE(m.bandwidthMbps.has(3, 9));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("/bandwidth_mbps/3/9"), std::string::npos) << warnings[0];
}

TEST(Measurements, SymmetrisesAndCountsCoverage) {
  Topology t = Topology::empty({{"a", ""}, {"b", ""}, {"c", ""}});
  t.bandwidthMbps.at(0, 1) = 100;
  t.bandwidthMbps.at(1, 0) = 120;
  t.bandwidthMbps.at(1, 2) = 50;
  t.latencyUs.at(2, 0) = LatencyStats{10, 11, 12, 13};
  std::vector<std::string> warnings;
  Measurements m = cleanMeasurements(t, "x", warnings);
  EXPECT_FLOAT_EQ(m.bandwidthMbps.at(1, 0), 110);
  EXPECT_FLOAT_EQ(m.bandwidthMbps.at(2, 1), 50);
  EXPECT_FLOAT_EQ(m.latencyUs.at(0, 2), 10);
  EXPECT_EQ(m.anyPairs, 3u);
  EXPECT_DOUBLE_EQ(m.coverage(), 1.0);
  EXPECT_TRUE(warnings.empty());
}

}  // namespace
}  // namespace rankmap::reorder
