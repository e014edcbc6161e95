// Cost model: max-min sharing, each algorithm's structure on small networks, the lower bound,
// the range table, the calibration ratio of the emucloud testbed, and plans scored on a network.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "reorder/cost_model.h"
#include "reorder/packed_trees.h"
#include "reorder/planner.h"
#include "reorder/ring.h"
#include "reorder/synthetic.h"
#include "tests/unit/reorder/test_util.h"

namespace rankmap::reorder {
namespace {

using test::hierarchyOf;

using test::twoRacks;

const AlgoCost& find(const std::vector<AlgoCost>& cs, std::string_view name) {
  for (const auto& c : cs)
    if (algorithmName(c.algo) == name) return c;
  throw std::runtime_error("no " + std::string(name));
}

CostContext context(const NetworkModel& net, std::vector<int> order, int k = 1) {
  CostContext ctx;
  ctx.net = &net;
  ctx.order = std::move(order);
  ctx.ring.ranksPerHost = k;
  return ctx;
}

TEST(MaxMin, SharesTheBottleneckFairlyAndGivesTheRestToOthers) {
  NetworkModel net = twoRacks();
  // Two flows leave rack 0 (share its 250 uplink), one flow stays inside rack 1.
  std::vector<Flow> flows = {{0, 4, 1}, {1, 5, 1}, {6, 7, 1}};
  auto rate = maxMinRates(net, flows);
  EXPECT_DOUBLE_EQ(rate[0], 125);
  EXPECT_DOUBLE_EQ(rate[1], 125);
  EXPECT_DOUBLE_EQ(rate[2], 1000);
  // Equal sizes: done when the slowest is: 1 byte at 125 Mbit/s = 0.064 us.
  EXPECT_DOUBLE_EQ(completionUs(net, flows), 1 / bytesPerUs(125));
  // Unequal sizes: the short crossing flow finishes, then the long one gets the whole uplink.
  std::vector<Flow> unequal = {{0, 4, 1000}, {1, 5, 3000}};
  double first = 1000 / bytesPerUs(125);
  double rest = 2000 / bytesPerUs(250);
  EXPECT_NEAR(completionUs(net, unequal), first + rest, 1e-9);
}

// The reference: progressive filling of every running flow from scratch at each completion.
double completionByResharing(const NetworkModel& net, std::vector<Flow> work) {
  double now = 0;
  std::vector<double> left;
  for (const auto& f : work) left.push_back(f.bytes);
  while (!work.empty()) {
    auto rate = maxMinRates(net, work);
    double dt = std::numeric_limits<double>::infinity();
    for (size_t f = 0; f < work.size(); ++f) dt = std::min(dt, left[f] / bytesPerUs(rate[f]));
    now += dt;
    std::vector<Flow> next;
    std::vector<double> nextLeft;
    for (size_t f = 0; f < work.size(); ++f) {
      double rem = left[f] - dt * bytesPerUs(rate[f]);
      if (rem > 1e-9 * work[f].bytes) {
        next.push_back(work[f]);
        nextLeft.push_back(rem);
      }
    }
    work.swap(next);
    left.swap(nextLeft);
  }
  return now;
}

TEST(MaxMin, IncrementalSimulationEqualsResharingFromScratch) {
  // completionUs re-fills only the flows a completion can affect; it must give the same time
  // as re-sharing everything at every completion. 3 levels (4 pods of 4 racks of 4 hosts),
  // uneven host rates, a few pair caps, unequal sizes with ties (sizes from a small set).
  std::vector<int> rack(64), pod(64);
  for (int h = 0; h < 64; ++h) rack[h] = h / 4, pod[h] = h / 16;
  for (int seed = 1; seed <= 40; ++seed) {
    uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(seed);
    auto next = [&x](int mod) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      return static_cast<int>(x % static_cast<uint64_t>(mod));
    };
    std::vector<double> hosts(64);
    for (auto& r : hosts) r = 500 + 100 * next(6);
    NetworkModel net = modelFromHierarchy(hierarchyOf({rack, pod}), hosts,
                                          {400 + 50.0 * next(4), 300}, 2, {5, 20});
    auto caps = std::make_shared<PairMatrix>(64);
    for (int i = 0; i < 8; ++i) caps->set(next(64), next(64), 50 + 10 * next(10));
    net.caps = caps;
    std::vector<Flow> flows;
    int count = 20 + next(120);
    for (int i = 0; i < count; ++i) flows.push_back({next(64), next(64), 1.0 + next(5)});
    double reference = completionByResharing(net, [&] {
      std::vector<Flow> w;
      for (const auto& f : flows)
        if (f.src != f.dst) w.push_back(f);
      return w;
    }());
    EXPECT_NEAR(completionUs(net, flows), reference, 1e-9 * reference) << "seed " << seed;
  }
}

TEST(MaxMin, PairCapsLimitAFlow) {
  NetworkModel net = twoRacks();
  auto caps = std::make_shared<PairMatrix>(8);
  caps->set(0, 4, 100);
  net.caps = caps;
  auto rate = maxMinRates(net, {{0, 4, 1}, {1, 5, 1}});
  EXPECT_DOUBLE_EQ(rate[0], 100);
  EXPECT_DOUBLE_EQ(rate[1], 150);
}

TEST(CostModel, CalibrationRatioOfTheTestbed) {
  // 8 VMs, 2 racks, host 1000, uplink 250: ring allreduce of 16 MiB with ranks grouped by rack
  // vs an order with 3 ring flows per uplink direction ran ~3x faster on the testbed.
  NetworkModel net = twoRacks(1000, 250);
  auto grouped = find(algorithmCosts(context(net, {0, 1, 2, 3, 4, 5, 6, 7}), "allreduce"), "ring");
  auto three = find(algorithmCosts(context(net, {0, 4, 1, 5, 2, 6, 7, 3}), "allreduce"), "ring");
  double s = 16 << 20;
  double ratio = three.timeUs(s) / grouped.timeUs(s);
  EXPECT_NEAR(ratio, 3.0, 0.05);
  // The bandwidth term: 2 (n-1)/n S at 250 Mbit/s.
  EXPECT_NEAR(grouped.betaUsPerByte, 2.0 * 7 / 8 / bytesPerUs(250), 1e-12);
}

TEST(CostModel, DoubleBinaryTreeIsTwoValidTrees) {
  for (int m : {1, 2, 3, 5, 7, 8, 13, 16}) {
    auto [t1, t2] = doubleBinaryTree(m);
    for (const auto* t : {&t1, &t2}) {
      int roots = 0;
      std::vector<int> children(m, 0);
      for (int r = 0; r < m; ++r) {
        if ((*t)[r] < 0) {
          ++roots;
          continue;
        }
        ASSERT_LT((*t)[r], m);
        ++children[(*t)[r]];
        // Walking up reaches the root without a cycle.
        int x = r, steps = 0;
        while ((*t)[x] >= 0 && steps <= m) x = (*t)[x], ++steps;
        EXPECT_LE(steps, m) << "cycle at m=" << m;
      }
      EXPECT_EQ(roots, 1) << "m=" << m;
      for (int c : children) EXPECT_LE(c, 2) << "m=" << m;
    }
  }
  auto [a, b] = doubleBinaryTree(8);
  EXPECT_EQ(a, (std::vector<int>{-1, 2, 4, 2, 0, 6, 4, 6}));
}

TEST(CostModel, HierBeatsRingWhenUplinksAreTheBottleneck) {
  // Reduce-scatter inside racks, then only S crosses each uplink per direction (the ring: 2 S
  // (n-1)/n).
  NetworkModel net = twoRacks(1000, 250);
  auto cs = algorithmCosts(context(net, {0, 1, 2, 3, 4, 5, 6, 7}), "allreduce");
  const auto& hier = find(cs, "hier");
  ASSERT_TRUE(hier.available);
  // Each in-group ring: 3 steps of S/4 per host link; the last reduce-scatter step and the first
  // allgather step run alongside the cross-rack phase (4 flows of S/4 on one uplink), which
  // they do not slow down: 2 x 2 steps alone + the uplink.
  double step = 1.0 / 4 / bytesPerUs(1000);
  double across = 1.0 / bytesPerUs(250);
  EXPECT_NEAR(hier.betaUsPerByte, 2 * 2 * step + across, 1e-12);
  EXPECT_LT(hier.betaUsPerByte, find(cs, "ring").betaUsPerByte);
}

TEST(CostModel, HierBeatsNearestFirstRhdOnTheTestbedAndEqualsTheRingWhenFlat) {
  // Nearest-first rhd and hier move the same bytes over every link of two racks of four (S per
  // uplink direction, 3/4 S per host link and direction), but rhd's steps run one after the
  // other while hier's in-group steps next to the cross-rack phase overlap it: on the testbed
  // (8 VMs, host 1000, uplink 250) hier measured a median of 776 ms vs rhd 832 ms at 16 MiB
  // over 13 runs each (docs/performance.md).
  NetworkModel net = twoRacks(1000, 250);
  auto cs = algorithmCosts(context(net, {0, 1, 2, 3, 4, 5, 6, 7}), "allreduce");
  const auto& rhd = find(cs, "rhd");
  EXPECT_NEAR(rhd.betaUsPerByte, 2 * 0.75 / bytesPerUs(1000) + 1.0 / bytesPerUs(250), 1e-12);
  EXPECT_LT(find(cs, "hier").betaUsPerByte, 0.95 * rhd.betaUsPerByte);
  auto ranges = chooseRanges(
      cs, "allreduce", 8, lowerBoundUsPerByte(context(net, {0, 1, 2, 3, 4, 5, 6, 7}), "allreduce"));
  EXPECT_EQ(ranges.back().algorithm, Algorithm::kHier);
  EXPECT_LE(ranges.back().minBytes, 64u << 10);
  // Uplinks as fast as the rack's host links together: every host sends 2 (n-1)/n S whatever
  // the algorithm, and the overlap gains nothing.
  NetworkModel flat = twoRacks(1000, 4000);
  auto fs = algorithmCosts(context(flat, {0, 1, 2, 3, 4, 5, 6, 7}), "allreduce");
  EXPECT_NEAR(find(fs, "hier").betaUsPerByte, find(fs, "ring").betaUsPerByte, 1e-12);
}

TEST(CostModel, RhdFoldsNonPowersOfTwo) {
  NetworkModel net = modelFromHierarchy(hierarchyOf({{0, 0, 0, 1, 1, 1}}),
                                        std::vector<double>(6, 1000), {1000}, 1, {1});
  auto cs = algorithmCosts(context(net, {0, 1, 2, 3, 4, 5}), "allreduce");
  const auto& rhd = find(cs, "rhd");
  ASSERT_TRUE(rhd.available);
  // 6 ranks: fold (S), 2 halving steps (S/2, S/4), 2 doubling steps, unfold (S), all at line
  // rate on a non-blocking network: 2 S + 2 (S/2 + S/4).
  EXPECT_NEAR(rhd.betaUsPerByte, (2 + 1.5) / bytesPerUs(1000), 1e-12);
  EXPECT_FALSE(
      find(algorithmCosts(context(net, {0, 1, 2, 3, 4, 5}), "allgather"), "rhd").available);
}

TEST(CostModel, RangesAreContiguousFromZeroAndPickTheFastest) {
  NetworkModel net = twoRacks(1000, 250);
  CostContext ctx = context(net, {0, 1, 2, 3, 4, 5, 6, 7});
  for (std::string coll : {"allreduce", "allgather", "reducescatter", "broadcast"}) {
    auto cs = algorithmCosts(ctx, coll);
    auto ranges = chooseRanges(cs, coll, 8, lowerBoundUsPerByte(ctx, coll));
    ASSERT_FALSE(ranges.empty()) << coll;
    EXPECT_EQ(ranges.front().minBytes, 0u);
    EXPECT_EQ(ranges.back().maxBytes, AlgoRange::kUnbounded);
    for (size_t i = 1; i < ranges.size(); ++i) {
      EXPECT_EQ(ranges[i].minBytes, ranges[i - 1].maxBytes);
      EXPECT_NE(ranges[i].algorithm, ranges[i - 1].algorithm);
    }
    // At sizes across the spectrum the chosen algorithm is the fastest available one.
    for (double s : {8.0, 4096.0, 1e6, 1e9}) {
      std::string chosen;
      for (const auto& r : ranges)
        if (s >= r.minBytes && s < r.maxBytes) chosen = algorithmName(r.algorithm);
      double best = 1e300;
      for (const auto& c : cs)
        if (c.available) best = std::min(best, c.timeUs(s));
      EXPECT_NEAR(find(cs, chosen).timeUs(s), best, 1e-9 * best) << coll << " at " << s;
    }
    for (const auto& r : ranges) {
      EXPECT_GT(r.predictedUs, 0);
      EXPECT_GT(r.predictedBusbwGBps, 0);
      EXPECT_LE(r.lowerBoundUs, r.predictedUs * (1 + 1e-9)) << coll;
    }
  }
}

TEST(CostModel, LowerBoundFormula) {
  // Two racks of four behind 250 Mbit/s uplinks: the cut, S across it for allreduce (a ring's
  // 2 (n-1)/n S is no bound: hier sends S), half of S for allgather.
  NetworkModel net = twoRacks(1000, 250);
  CostContext ctx = context(net, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_NEAR(lowerBoundUsPerByte(ctx, "allreduce"), 1.0 / bytesPerUs(250), 1e-15);
  EXPECT_NEAR(lowerBoundUsPerByte(ctx, "broadcast"), 1.0 / bytesPerUs(250), 1e-15);
  EXPECT_NEAR(lowerBoundUsPerByte(ctx, "allgather"), 0.5 / bytesPerUs(250), 1e-15);
  EXPECT_LE(lowerBoundUsPerByte(ctx, "allreduce"),
            find(algorithmCosts(ctx, "allreduce"), "hier").betaUsPerByte);
  // Uplinks faster than the rack's hosts together: the host links bound, 2 (n-1)/n S each.
  NetworkModel flat = twoRacks(1000, 8000);
  CostContext fctx = context(flat, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_NEAR(lowerBoundUsPerByte(fctx, "allreduce"), 2.0 * 7 / 8 / bytesPerUs(1000), 1e-15);
  EXPECT_NEAR(lowerBoundUsPerByte(fctx, "reducescatter"), 7.0 / 8 / bytesPerUs(1000), 1e-15);
}

TEST(CostModel, PackedTreesBeatTheRingWhenHostRatesDiffer) {
  // One rack; four hosts at 1000, four at 250. Every ring is limited by a slow host carrying
  // 2 (n-1)/n S; trees make the slow hosts leaves (S each) and the fast ones carry the rest.
  std::vector<double> rates = {1000, 250, 1000, 250, 1000, 250, 1000, 250};
  NetworkModel net =
      modelFromHierarchy(hierarchyOf({{0, 0, 0, 0, 0, 0, 0, 0}}), rates, {1000}, 2, {5});
  CostContext ctx = context(net, {0, 1, 2, 3, 4, 5, 6, 7});
  ctx.trees = packTrees(net, ctx.order);
  ASSERT_FALSE(ctx.trees.empty());
  double total = 0;
  for (const auto& t : ctx.trees) {
    total += t.weight;
    int roots = 0;
    for (size_t p = 0; p < t.parent.size(); ++p) {
      if (t.parent[p] < 0) ++roots;
      // Slow hosts are leaves: nobody's parent.
      if (t.parent[p] >= 0) {
        EXPECT_EQ(t.parent[p] % 2, 0) << "slow host as a parent";
      }
    }
    EXPECT_EQ(roots, 1);
  }
  EXPECT_NEAR(total, 1.0, 1e-9);
  auto cs = algorithmCosts(ctx, "allreduce");
  const auto& trees = find(cs, "trees");
  ASSERT_TRUE(trees.available);
  EXPECT_LT(trees.betaUsPerByte, 0.75 * find(cs, "ring").betaUsPerByte);
  // Uniform rates: trees are not offered.
  NetworkModel uniform = twoRacks();
  EXPECT_FALSE(
      find(algorithmCosts(context(uniform, {0, 1, 2, 3, 4, 5, 6, 7}), "allreduce"), "trees")
          .available);
}

TEST(CostModel, SingleHostWithSeveralRanksIsIntraHostOnly) {
  NetworkModel net = modelFromHierarchy(hierarchyOf({{0}}), {1000}, {1000}, 1, {1});
  auto cs = algorithmCosts(context(net, {0}, 4), "allreduce");
  const auto& ring = find(cs, "ring");
  EXPECT_NEAR(ring.betaUsPerByte, 2.0 * 3 / 4 / bytesPerUs(100000), 1e-15);
  EXPECT_TRUE(algorithmCosts(context(net, {0}, 1), "allreduce").empty());
}

}  // namespace
}  // namespace rankmap::reorder

namespace rankmap::reorder {
namespace {

// A simulator's question: what does a plan made from measurements cost on the true network,
// against the plan made from the truth?
TEST(PlanScore, APlanOnTheTrueNetworkAgainstThePlanFromTheTruth) {
  SyntheticSpec s;
  s.levels = {{8, 2000, 10}, {4, 4000, 20}};  // racks 4:1, pods 2:1
  s.topGroups = 2;
  s.hostLatencyUs = 5;
  s.seed = 5;
  s.output = Output::kBoth;  // the truth as links, and noisy measurements of it
  s.noise = 0.1;
  s.missing = 0.05;
  auto syn = makeSynthetic(s);
  std::vector<std::string> names;
  for (const auto& h : syn.topology.hosts) names.push_back(h.name);
  PlanOptions o;
  o.source = "truth";
  const uint64_t bytes = 16ull << 20;
  // The plan from the truth (the link model), and its cost on the truth: the reference.
  PlanResult truth = planTopology(syn.topology, o);
  ASSERT_TRUE(truth.linkModel);
  double optimum = predictedAllreduceUs(syn.model, names, truth.plan, bytes);
  // The plan's own table is the lower envelope of the algorithms on the same network.
  CostContext ctx;
  ctx.net = &syn.model;
  ctx.order = truth.order;
  ctx.chunkWeights = truth.plan.chunkWeights;
  ctx.trees = truth.plan.trees;
  double envelope = std::numeric_limits<double>::infinity();
  for (const auto& c : algorithmCosts(ctx, "allreduce"))
    if (c.available) envelope = std::min(envelope, c.timeUs(static_cast<double>(bytes)));
  EXPECT_NEAR(optimum, envelope, 1e-9 * envelope);
  EXPECT_EQ(predictedUs(ctx, "allreduce", *truth.plan.algorithmFor("allreduce", bytes), bytes),
            optimum);
  // A plan from the noisy matrices: no better than the optimum, far better than the input order.
  Topology measured = syn.topology;
  measured.links.reset();
  measured.measured.clear();
  o.source = "measured";
  Plan fromMeasurements = makePlan(measured, o);
  double got = predictedAllreduceUs(syn.model, names, fromMeasurements, bytes);
  double identity = predictedAllreduceUs(syn.model, names, Plan::identity(names), bytes);
  EXPECT_GE(got, optimum * (1 - 1e-9));
  EXPECT_LT(got, 1.1 * optimum);
  EXPECT_GT(identity, 2 * optimum);
  // The identity plan has no table: scored as a ring in the input order, by the tables' linear
  // model (latency sum and bottleneck, as the ring's row of algorithmCosts).
  std::vector<int> input(names.size());
  std::iota(input.begin(), input.end(), 0);
  const RingCost inputRing = evaluateRing(syn.model, input, {});
  EXPECT_NEAR(
      identity,
      2.0 * 63 / 64 *
          (inputRing.latencyUs + static_cast<double>(bytes) / bytesPerUs(inputRing.bottleneckMbps)),
      1e-9 * identity);
  // Ranks per host come from the plan.
  o.ranksPerHost = 2;
  o.source = "truth";
  Plan two = makePlan(syn.topology, o);
  EXPECT_GT(predictedAllreduceUs(syn.model, names, two, bytes), 0);
  // A plan of other hosts is refused by name.
  Plan other = truth.plan;
  other.order[3] = "ghost";
  EXPECT_THROW(predictedAllreduceUs(syn.model, names, other, bytes), InvalidInput);
  EXPECT_THROW(predictedAllreduceUs(syn.model, {names.begin(), names.end() - 1}, truth.plan, bytes),
               InvalidInput);
}

// The emulated cloud of issue 14 as a link model: 10 hosts (host links 1000 Mbit/s) in racks of
// 4, 3 and 3 behind uplinks of 500, 125 and 250 Mbit/s.
Topology unequalRacks(std::vector<double> uplinks = {500, 125, 250}) {
  Topology t;
  for (int i = 0; i < 10; ++i) t.hosts.push_back({fmt::format("vm{}", i), ""});
  HierarchyLevel rack;
  rack.name = "rack";
  rack.confidence = 1;
  rack.groups = {{"vm0", "vm1", "vm2", "vm3"}, {"vm4", "vm5", "vm6"}, {"vm7", "vm8", "vm9"}};
  t.groups = {rack};
  TopologyLinks links;
  links.hosts.assign(10, LinkCapacity{1000, 1000});
  links.uplinks = {{}};
  for (double u : uplinks) links.uplinks[0].push_back(LinkCapacity{u, u});
  links.hostLatencyUs = 50;
  links.uplinkLatencyUs = {100};
  t.links = links;
  return t;
}

// Unequal racks behind unequal uplinks: hier runs the racks as they are, and chunk weights that
// give the 125 Mbit/s rack no share of the cross-rack exchange let it move the vector only once
// each way over its uplink, where equal shares (by rack size, in rings) make it move 1.3-1.4
// times;
// the plan takes hier with those weights at 16 MiB, at least 1.2x faster than every uniform
// algorithm (ring, tree, rhd, hier without weights).
TEST(CostModel, HierWithWeightsBalancesUnequalUplinks) {
  PlanOptions o;
  o.source = "test";
  PlanResult r = planTopology(unequalRacks(), o);
  const uint64_t S = 16ull << 20;
  ASSERT_EQ(r.plan.algorithmFor("allreduce", S), Algorithm::kHier);
  ASSERT_EQ(r.plan.chunkWeights.size(), 10u);
  // Weights per position of the order: the 125 Mbit/s rack's hosts get none; in each other rack
  // one host, its leader (the first in the order: equal host links), holds the rack's share, so
  // that each pair of racks exchanges over one flow each way.
  std::map<int, std::vector<double>> byRack;  // rack (first host) -> weights in order
  for (size_t p = 0; p < r.order.size(); ++p) {
    const int host = r.order[p];
    byRack[host < 4 ? 0 : host < 7 ? 4 : 7].push_back(r.plan.chunkWeights[p]);
  }
  EXPECT_EQ(byRack[4], std::vector<double>(3, 0.0));
  EXPECT_EQ(byRack[0], (std::vector<double>{0.75, 0, 0, 0}));
  EXPECT_EQ(byRack[7], (std::vector<double>{0.25, 0, 0}));
  CostContext ctx;
  ctx.net = &r.model;
  ctx.order = r.order;
  ctx.chunkWeights = r.plan.chunkWeights;
  const double weighted = predictedUs(ctx, "allreduce", Algorithm::kHier, S);
  ctx.chunkWeights.clear();
  double bestUniform = std::numeric_limits<double>::infinity();
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd, Algorithm::kHier})
    bestUniform = std::min(bestUniform, predictedUs(ctx, "allreduce", a, S));
  EXPECT_GE(bestUniform / weighted, 1.2) << weighted << " us vs " << bestUniform << " us";
  // The slow rack's uplink carries S each way: hier cannot beat S / 125 Mbit/s, and is within
  // the in-rack steps of it.
  const double floor = static_cast<double>(S) / bytesPerUs(125);
  EXPECT_GE(weighted, floor);
  EXPECT_LT(weighted, 1.25 * floor);
  // Uniform hier (rings): the slow rack moves 1.4 S out and 1.3 S in.
  EXPECT_GE(predictedUs(ctx, "allreduce", Algorithm::kHier, S), 1.3 * floor);
}

// The leader of a rack is its fastest host link (vm2 at 1200 Mbit/s, under the 1.5x that would
// make the host rates count as unequal), wherever it is in the order.
TEST(CostModel, HierLeaderIsTheRacksFastestHost) {
  Topology t = unequalRacks();
  t.links->hosts[2] = LinkCapacity{1200, 1200};
  PlanOptions o;
  o.source = "test";
  PlanResult r = planTopology(t, o);
  ASSERT_EQ(r.plan.chunkWeightsBasis, Plan::kWeightsByUplinks);
  ASSERT_EQ(r.plan.chunkWeights.size(), 10u);
  // The 250 Mbit/s rack's hosts are equal: its first in the order leads.
  const int first = *std::find_if(r.order.begin(), r.order.end(), [](int h) { return h >= 7; });
  for (size_t p = 0; p < r.order.size(); ++p) {
    const int host = r.order[p];
    EXPECT_EQ(r.plan.chunkWeights[p], host == 2       ? 0.75
                                      : host == first ? 0.25
                                                      : 0.0)
        << "vm" << host;
  }
}

}  // namespace
}  // namespace rankmap::reorder
