// The planner on a link model (topology.json "links", schema 2): the network is the stated
// links, latency comes from the matrix, the links or the default, host subsets keep the model
// consistent, and 1024 hosts plan in seconds with every rack and pod contiguous.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>

#include "common/error.h"
#include "reorder/planner.h"
#include "reorder/report.h"
#include "reorder/svg.h"
#include "reorder/synthetic.h"
#include "tests/unit/reorder/test_util.h"

namespace rankmap::reorder {
namespace {

using test::quietOptions;

// Pods of racks of hosts at 1000 Mbit/s; a rack's uplink carries its hosts' rate / 4, a pod's
// its racks' uplinks / 2 (the datacenter of tests/sim).
SyntheticSpec tree(int pods, int racksPerPod, int hostsPerRack, Output output) {
  SyntheticSpec s;
  double rack = hostsPerRack * 1000.0 / 4;
  double pod = racksPerPod * rack / 2;
  s.levels = {{hostsPerRack, rack, 10}, {racksPerPod, pod, 20}};
  s.topGroups = pods;
  s.hostMbps = 1000;
  s.hostLatencyUs = 5;
  s.output = output;
  s.seed = 3;
  return s;
}

// Whether each group of each level of `truth` is one contiguous range of `order`.
bool groupsContiguous(const Hierarchy& truth, const std::vector<int>& order) {
  for (const auto& level : truth.levels) {
    std::set<int> done;
    for (size_t p = 0; p < order.size(); ++p) {
      int g = level.groupOf[order[p]];
      if (p > 0 && level.groupOf[order[p - 1]] == g) continue;
      if (!done.insert(g).second) return false;  // the group was left and entered again
    }
  }
  return true;
}

TEST(LinkModel, TheNetworkIsTheStatedLinks) {
  auto syn = makeSynthetic(tree(2, 2, 3, Output::kLinks));
  Topology t = syn.topology;
  ASSERT_FALSE(t.hasMatrices());
  t.links->hosts[4] = {1000, 400};       // the slower direction is the link's capacity
  t.links->uplinks[0][1] = {3000, 500};  // rack 1 (document order)
  PlanResult r = planTopology(t, quietOptions());
  EXPECT_TRUE(r.linkModel);
  EXPECT_FALSE(r.fallback);
  EXPECT_EQ(r.coverage, 1);
  EXPECT_EQ(r.measuredPairs, t.measured.size());
  EXPECT_GT(r.measuredPairs, 0u);
  EXPECT_EQ(r.plan.groups, t.groups);
  EXPECT_EQ(r.model.hostMbps[4], 400);
  int rack1 = r.model.switchAt(t.indexOf(t.groups[0].groups[1][0]), 0);
  EXPECT_EQ(r.model.uplinkMbps[rack1], 500);
  EXPECT_EQ(r.model.caps, nullptr);
  // Latency from the links: both host links and, across racks, the rack uplinks twice.
  EXPECT_EQ(r.model.latency, nullptr);
  for (int a = 0; a < 12; ++a)
    for (int b = 0; b < 12; ++b) {
      if (a == b) continue;
      EXPECT_DOUBLE_EQ(r.model.latencyUs(a, b), *t.pathLatencyUs(a, b)) << a << " -> " << b;
    }
  // No measured matrices to clean, yet a full plan: groups contiguous, a gain over the input.
  EXPECT_TRUE(groupsContiguous(syn.truth, r.order));
  EXPECT_GT(r.plan.predicted.speedup, 1.5);
  EXPECT_EQ(r.plan.confidence, 1);
  EXPECT_NO_THROW(Plan::parse(r.plan.dump(), "plan.json"));
}

TEST(LinkModel, LatencyFromTheMatrixWhenThereIsOne) {
  auto syn = makeSynthetic(tree(1, 2, 4, Output::kBoth));
  Topology t = syn.topology;
  ASSERT_TRUE(t.hasMatrices());
  t.latencyUs.at(0, 1) = LatencyStats{30, 40, 50, 60};
  t.latencyUs.at(1, 0) = LatencyStats{50, 60, 70, 80};
  t.latencyUs.at(2, 3) = t.latencyUs.at(3, 2) = std::nullopt;
  PlanResult r = planTopology(t, quietOptions());
  ASSERT_NE(r.model.latency, nullptr);
  EXPECT_FLOAT_EQ(r.model.latencyUs(0, 1), 40);                      // mean of the two minimums
  EXPECT_FLOAT_EQ(r.model.latencyUs(2, 3), *t.pathLatencyUs(2, 3));  // missing: the link model
  // The bandwidth values play no part: the links say it all.
  Topology noisy = t;
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      if (noisy.bandwidthMbps.at(a, b)) *noisy.bandwidthMbps.at(a, b) *= 0.5 + 0.1 * ((a + b) % 3);
    }
  EXPECT_EQ(planTopology(noisy, quietOptions()).plan.order, r.plan.order);
}

TEST(LinkModel, UnknownCapacitiesAndLatenciesAreFilledWithAWarning) {
  auto syn = makeSynthetic(tree(2, 2, 3, Output::kLinks));
  Topology t = syn.topology;
  t.links->hosts[0] = {0, 1000};
  t.links->uplinks[0][2] = {0, 0};
  t.links->hostLatencyUs = 0;
  t.links->uplinkLatencyUs = {0, 0};
  PlanResult r = planTopology(t, quietOptions());
  EXPECT_EQ(r.model.hostMbps[0], 1000);  // the median of the others
  for (size_t s = 0; s < r.model.switches(); ++s) EXPECT_GT(r.model.uplinkMbps[s], 0) << s;
  EXPECT_DOUBLE_EQ(r.model.latencyUs(0, 11), kDefaultLatencyUs);
  std::string all;
  for (const auto& w : r.warnings) all += w + "\n";
  EXPECT_NE(all.find("1 host link(s) of capacity 0"), std::string::npos) << all;
  EXPECT_NE(all.find("1 rack uplink(s) of capacity 0"), std::string::npos) << all;
  EXPECT_NE(all.find("no latency known"), std::string::npos) << all;
}

TEST(LinkModel, SameRingBottleneckAsFromTheMatrices) {
  // The same network stated as links and measured as matrices: both plans reach the optimal
  // ring bottleneck on the true network (every link crossed once per direction).
  SyntheticSpec s = tree(2, 4, 8, Output::kBoth);
  s.noise = 0.05;
  auto syn = makeSynthetic(s);
  Topology matrices = syn.topology;
  matrices.links.reset();
  matrices.measured.clear();
  for (const Topology* t : {&syn.topology, &matrices}) {
    PlanResult r = planTopology(*t, quietOptions());
    SCOPED_TRACE(t->links ? "links" : "matrices");
    EXPECT_EQ(r.linkModel, t->links.has_value());
    EXPECT_DOUBLE_EQ(evaluateRing(syn.model, r.order, {}).bottleneckMbps,
                     syn.model.ringBoundMbps());
    EXPECT_TRUE(groupsContiguous(syn.truth, r.order));
  }
}

TEST(LinkModel, HostSubsetsKeepLinksGroupsAndMeasuredConsistent) {
  auto syn = makeSynthetic(tree(2, 2, 3, Output::kLinks));
  const Topology& t = syn.topology;
  // Every host of the second rack (document order) goes; the rest in reverse order.
  std::set<std::string> gone(t.groups[0].groups[1].begin(), t.groups[0].groups[1].end());
  std::vector<HostsEntry> keep;
  for (int i = static_cast<int>(t.size()) - 1; i >= 0; --i)
    if (!gone.count(t.hosts[i].name)) keep.push_back({t.hosts[i].name, "", i + 1});
  Topology s = selectHosts(t, keep, "hosts", "t.json");
  ASSERT_EQ(s.size(), 9u);
  EXPECT_FALSE(s.hasMatrices());
  ASSERT_TRUE(s.links);
  ASSERT_EQ(s.groups[0].groups.size(), 3u);
  EXPECT_EQ(s.links->uplinks[0].size(), 3u);
  EXPECT_EQ(s.links->uplinks[1].size(), 2u);
  EXPECT_EQ(s.groups[0].groups[1], t.groups[0].groups[2]);
  EXPECT_EQ(s.links->uplinks[0][1], t.links->uplinks[0][2]);
  // Every pair keeps its path rate, and the measured pairs are those between kept hosts.
  size_t expected = 0;
  for (auto [a, b] : t.measured)
    expected += !gone.count(t.hosts[a].name) && !gone.count(t.hosts[b].name);
  EXPECT_EQ(s.measured.size(), expected);
  for (auto [a, b] : s.measured) {
    int ta = t.indexOf(s.hosts[a].name), tb = t.indexOf(s.hosts[b].name);
    EXPECT_TRUE(std::count(t.measured.begin(), t.measured.end(), std::pair(ta, tb)));
  }
  for (int a = 0; a < 9; ++a)
    for (int b = 0; b < 9; ++b)
      EXPECT_EQ(s.pathMbps(a, b),
                t.pathMbps(t.indexOf(s.hosts[a].name), t.indexOf(s.hosts[b].name)));
  // A valid document, and a plan.
  EXPECT_EQ(Topology::parse(s.dump(), "subset"), s);
  EXPECT_TRUE(planTopology(s, quietOptions()).linkModel);
  // With the matrices too, they are restricted alike.
  auto both = makeSynthetic(tree(2, 2, 3, Output::kBoth)).topology;
  Topology sb = selectHosts(both, keep, "hosts", "t.json");
  EXPECT_TRUE(sb.hasMatrices());
  EXPECT_EQ(Topology::parse(sb.dump(), "subset"), sb);
}

TEST(LinkModel, ReportsAndSvgSayWhatWasMeasured) {
  for (Output output : {Output::kLinks, Output::kBoth}) {
    auto syn = makeSynthetic(tree(2, 2, 4, output));
    const Topology& t = syn.topology;
    SCOPED_TRACE(t.hasMatrices() ? "with matrices" : "without matrices");
    PlanResult r = planTopology(t, quietOptions());
    std::string counts = linkModelText(16, t.measured.size());
    EXPECT_NE(counts.find(" of 240 directed pairs measured"), std::string::npos) << counts;
    std::string summary = planSummary(r);
    EXPECT_NE(summary.find(counts), std::string::npos) << summary;
    std::string shown = describeTopology(t, r);
    EXPECT_NE(shown.find(counts), std::string::npos) << shown;
    EXPECT_NE(shown.find("groups (of the link model)"), std::string::npos) << shown;
    EXPECT_NE(shown.find("rack uplinks 1000"), std::string::npos) << shown;
    EXPECT_EQ(shown.find("matrix pairs by level") != std::string::npos, t.hasMatrices()) << shown;
    std::string svg = renderSvg(t, r.plan);
    EXPECT_NE(svg.find(counts), std::string::npos);
    EXPECT_NE(svg.find(t.hasMatrices() ? "cells show the matrices" : "cells show the link model"),
              std::string::npos);
  }
  // Thousands of hosts without matrices: the heatmaps sample pairs of the link model.
  auto big = makeSynthetic(tree(8, 16, 32, Output::kLinks));
  Plan identity = Plan::identity(planTopology(big.topology, quietOptions()).plan.hosts);
  std::string svg = renderSvg(big.topology, identity);
  EXPECT_NE(svg.find("4096 hosts drawn as 128 x 128 blocks"), std::string::npos);
  EXPECT_EQ(svg.find("fill=\"url(#missing)\"/>\n"), std::string::npos);  // no hatched cell
}

// Eight hosts at 1000 Mbit/s in two racks of four behind 1000 Mbit/s uplinks, listed alternating
// racks (the input ring crosses each uplink four times each way: 250 Mbit/s), with the rings a
// probe measured over them.
Topology alternatingRacks(std::vector<RingCheck> rings) {
  Topology t;
  for (int h = 0; h < 8; ++h) t.hosts.push_back({fmt::format("h{}", h), ""});
  t.groups = {{"rack", 1, {{"h0", "h2", "h4", "h6"}, {"h1", "h3", "h5", "h7"}}}};
  TopologyLinks l;
  l.hosts.assign(8, {1000, 1000});
  l.uplinks = {{{1000, 1000}, {1000, 1000}}};
  l.hostLatencyUs = 5;
  l.uplinkLatencyUs = {5};
  t.links = l;
  t.rings = std::move(rings);
  return t;
}

RingCheck measuredRing(std::string name, std::vector<int> order, double mbps) {
  RingCheck c{std::move(name), std::move(order), {}};
  c.mbps.assign(c.order.size(), mbps);
  return c;
}

// Rings measured as a collective runs them decide the order and the prediction: a measured ring
// that confirms the model is taken with its measured rate (whichever way round the probe read
// it); one that refutes it keeps the input order, with a warning that names the gap.
TEST(LinkModel, MeasuredRingsDecideTheOrderAndThePrediction) {
  auto opts = quietOptions();
  opts.hashTopology = false;
  // Confirmed: the racks' ring read backwards from h6 at 980 Mbit/s.
  auto r =
      planTopology(alternatingRacks({measuredRing("input", {0, 1, 2, 3, 4, 5, 6, 7}, 250),
                                     measuredRing("structure", {6, 4, 2, 0, 7, 5, 3, 1}, 980)}),
                   opts);
  EXPECT_DOUBLE_EQ(r.plan.predicted.bottleneckMbps, 980);
  EXPECT_DOUBLE_EQ(r.plan.predicted.inputBottleneckMbps, 250);
  EXPECT_NEAR(r.plan.predicted.speedup, 3.9, 0.2);
  std::set<std::string> first(r.plan.order.begin(), r.plan.order.begin() + 4);
  EXPECT_TRUE(first == std::set<std::string>({"h0", "h2", "h4", "h6"}) ||
              first == std::set<std::string>({"h1", "h3", "h5", "h7"}));
  EXPECT_TRUE(r.warnings.empty());
  // Refuted: the racks' ring measured no faster than the input's (the groups are wrong).
  r = planTopology(alternatingRacks({measuredRing("input", {0, 1, 2, 3, 4, 5, 6, 7}, 250),
                                     measuredRing("structure", {0, 2, 4, 6, 1, 3, 5, 7}, 260)}),
                   opts);
  EXPECT_EQ(r.plan.order, r.plan.hosts);
  EXPECT_DOUBLE_EQ(r.plan.predicted.bottleneckMbps, 250);
  EXPECT_DOUBLE_EQ(r.plan.predicted.speedup, 1);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("structure ring measured 260 Mbit/s where the link model predicts "
                               "1000"),
            std::string::npos)
      << r.warnings[0];
  // Only the input measured: the model's ring, priced by the input's measured-to-modelled ratio.
  r = planTopology(alternatingRacks({measuredRing("input", {0, 1, 2, 3, 4, 5, 6, 7}, 200)}), opts);
  EXPECT_NE(r.plan.order, r.plan.hosts);
  EXPECT_DOUBLE_EQ(r.plan.predicted.inputBottleneckMbps, 200);
  EXPECT_DOUBLE_EQ(r.plan.predicted.bottleneckMbps, 800);  // 1000 x 200 / 250
  // Rings over other hosts than the plan's do not apply (a host subset, a ring of six).
  auto t = alternatingRacks({measuredRing("structure", {0, 2, 4, 6, 1, 3, 5, 7}, 260)});
  std::vector<HostsEntry> six;
  for (int h = 0; h < 6; ++h) six.push_back({fmt::format("h{}", h), "", h + 1});
  auto subset = selectHosts(t, six, "hosts", "topo");
  EXPECT_TRUE(subset.rings.empty());
  EXPECT_DOUBLE_EQ(planTopology(subset, opts).plan.predicted.bottleneckMbps, 1000);
}

// A measured ring's slow hops through uplinks the model tells apart: the plan states the ring at
// its slowest hops' reading, not at the median of every slow reading. Ten racks of two, listed
// rack by rack (the measured ring is the input order); racks 0 and 1 behind 200 Mbit/s uplinks,
// the rest 240, so three crossing hops run at 200 and seven at 240.
TEST(LinkModel, AMeasuredRingIsStatedAtTheHopsTheModelRatesSlowest) {
  Topology t;
  t.groups = {{"rack", 1, {}}};
  for (int h = 0; h < 20; ++h) {
    t.hosts.push_back({fmt::format("h{:02}", h), ""});
    if (h % 2 == 0) t.groups[0].groups.emplace_back();
    t.groups[0].groups.back().push_back(t.hosts.back().name);
  }
  TopologyLinks l;
  l.hosts.assign(20, {1000, 1000});
  l.uplinks = {std::vector<LinkCapacity>(10, {240, 240})};
  l.uplinks[0][0] = l.uplinks[0][1] = {200, 200};
  l.hostLatencyUs = 5;
  l.uplinkLatencyUs = {5};
  t.links = l;
  RingCheck ring{"input", {}, {}};
  for (int h = 0; h < 20; ++h) {
    ring.order.push_back(h);
    ring.mbps.push_back(980.0);  // inside a rack
  }
  const std::vector<double> crossing{205, 215, 235, 238, 240, 243, 245, 248, 250, 210};
  for (size_t k = 0; k < crossing.size(); ++k) ring.mbps[2 * k + 1] = crossing[k];
  t.rings = {ring};
  auto opts = quietOptions();
  opts.hashTopology = false;
  auto r = planTopology(t, opts);
  EXPECT_EQ(ring.bottleneckMbps(), 235.0);  // the median of the eight within 20% of 205
  EXPECT_DOUBLE_EQ(r.plan.predicted.inputBottleneckMbps, 205);
  EXPECT_DOUBLE_EQ(r.plan.predicted.bottleneckMbps, 205);
}

// What the probe found, in words: the levels and the ring check's verdict.
TEST(LinkModel, StructureTextSaysWhatTheRingsShow) {
  auto confirmed =
      structureText(alternatingRacks({measuredRing("input", {0, 1, 2, 3, 4, 5, 6, 7}, 250),
                                      measuredRing("structure", {0, 2, 4, 6, 1, 3, 5, 7}, 980)}));
  EXPECT_NE(confirmed.find("structure: rack 2 groups (4 hosts each), confidence 1"),
            std::string::npos)
      << confirmed;
  EXPECT_NE(confirmed.find("the structure's ring measured 980 Mbit/s, the input order's 250 "
                           "(3.92x)\n"),
            std::string::npos)
      << confirmed;
  auto refuted =
      structureText(alternatingRacks({measuredRing("input", {0, 1, 2, 3, 4, 5, 6, 7}, 250),
                                      measuredRing("structure", {0, 2, 4, 6, 1, 3, 5, 7}, 260)}));
  EXPECT_NE(refuted.find("not faster beyond the probe's noise, plans keep the input order"),
            std::string::npos)
      << refuted;
  Topology flat = alternatingRacks({});
  flat.groups.clear();
  flat.links->uplinks.clear();
  flat.links->uplinkLatencyUs.clear();
  EXPECT_NE(structureText(flat).find("structure: none found"), std::string::npos);
  Topology weak = alternatingRacks({});
  weak.groups[0].confidence = 0.4;
  EXPECT_NE(structureText(weak).find("rack is weak (confidence 0.4)"), std::string::npos);
}

TEST(LinkModel, ANetworkWithoutLevelsIsOneSwitch) {
  auto syn = makeSynthetic(tree(2, 2, 3, Output::kLinks));
  Topology t = syn.topology;
  t.groups.clear();
  t.links->uplinks.clear();
  t.links->uplinkLatencyUs.clear();
  PlanResult r = planTopology(Topology::parse(t.dump(), "flat"), quietOptions());
  EXPECT_TRUE(r.linkModel);
  EXPECT_FALSE(r.fallback);
  EXPECT_TRUE(r.plan.groups.empty());
  EXPECT_EQ(r.plan.order, r.plan.hosts);          // nothing to gain on one switch
  EXPECT_DOUBLE_EQ(r.model.latencyUs(0, 1), 10);  // two host links of 5 us
}

TEST(LinkModel, GroupsThatDoNotNestAreNamed) {
  auto syn = makeSynthetic(tree(2, 2, 3, Output::kLinks));
  Topology t = syn.topology;
  // Swap one host between pods, leaving its rack in the other pod.
  auto& pods = t.groups[1].groups;
  std::swap(pods[0][0], pods[1][0]);
  try {
    planTopology(t, quietOptions());
    ADD_FAILURE() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(
        std::string(e.what()).find("test: at /groups/1: expected groups made of whole groups"),
        std::string::npos)
        << e.what();
  }
}

TEST(LinkModel, AThousandHostsPlanInSecondsWithRacksAndPodsContiguous) {
  // 4 pods x 8 racks x 32 hosts, rack oversubscription 4, pod 2: what a sparse probe of 1024
  // hosts writes (links, groups, ~8 measured pairs per host, no matrices).
  auto syn = makeSynthetic(tree(4, 8, 32, Output::kLinks));
  ASSERT_EQ(syn.topology.size(), 1024u);
  PlanOptions o = quietOptions();
  o.collectives = {"allreduce", "allgather", "reducescatter", "broadcast"};
  auto start = std::chrono::steady_clock::now();
  PlanResult r = planTopology(syn.topology, o);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("plan_seconds", std::to_string(seconds));
  EXPECT_TRUE(r.linkModel);
  EXPECT_FALSE(r.fallback);
  EXPECT_TRUE(test::isPermutation(r.order, 1024));
  // The ring enters every rack once and every pod once: each crosses its boundary once.
  EXPECT_TRUE(groupsContiguous(syn.truth, r.order));
  EXPECT_DOUBLE_EQ(evaluateRing(syn.model, r.order, {}).bottleneckMbps, syn.model.ringBoundMbps());
  EXPECT_GT(r.plan.predicted.speedup, 2.0);
  for (const auto& coll : o.collectives) EXPECT_FALSE(r.plan.collectives.at(coll).empty()) << coll;
}

}  // namespace
}  // namespace rankmap::reorder
