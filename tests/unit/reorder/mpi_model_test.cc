// Open MPI's algorithms in the cost model: Open MPI's trees, each algorithm's bytes per link on
// the testbed's shape (two racks of four, host links 1000, uplinks 250 Mbit/s), the fabric bound,
// and the decision table with the engine's advice.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "common/error.h"
#include "common/openmpi.h"
#include "reorder/cost_model.h"
#include "reorder/planner.h"
#include "tests/unit/reorder/test_util.h"

namespace rankmap::reorder {
namespace {

using test::hierarchyOf;

NetworkModel racks(const std::vector<int>& rackOf, double host = 1000, double uplink = 250) {
  return modelFromHierarchy(hierarchyOf({rackOf}), std::vector<double>(rackOf.size(), host),
                            {uplink}, 2, {10});
}

CostContext context(const NetworkModel& net, int k = 1) {
  CostContext ctx;
  ctx.net = &net;
  ctx.order.resize(net.n);
  std::iota(ctx.order.begin(), ctx.order.end(), 0);
  ctx.ring.ranksPerHost = k;
  return ctx;
}

const MpiAlgoCost& find(const std::vector<MpiAlgoCost>& cs, int id, uint32_t seg = 0) {
  for (const auto& c : cs)
    if (c.algorithm == id && c.segsize == seg) return c;
  throw std::runtime_error("no algorithm " + std::to_string(id));
}

double perByte(double mbps) { return 1.0 / bytesPerUs(mbps); }

TEST(MpiTrees, AsOpenMpiBuildsThem) {
  // coll_base_topo.c's own example: fanout 2, 7 ranks: 0 -> 1 2, 1 -> 3 5, 2 -> 4 6.
  EXPECT_EQ(mpiTree(MpiTree::kFanout, 7, 2), (std::vector<int>{-1, 0, 0, 1, 2, 1, 2}));
  EXPECT_EQ(mpiTree(MpiTree::kBinomial, 8), (std::vector<int>{-1, 0, 0, 1, 0, 1, 2, 3}));
  // In-order binomial: 0 -> 1 2 4, 2 -> 3, 4 -> 5 6, 6 -> 7 (coll_base_topo.c's picture).
  EXPECT_EQ(mpiTree(MpiTree::kInOrderBinomial, 8), (std::vector<int>{-1, 0, 0, 2, 0, 4, 4, 6}));
  EXPECT_EQ(mpiTree(MpiTree::kKnomial, 8, 4), (std::vector<int>{-1, 0, 0, 0, 0, 4, 4, 4}));
  // 7 ranks below the root in 4 chains: the first 3 one longer.
  EXPECT_EQ(mpiTree(MpiTree::kChain, 8, 4), (std::vector<int>{-1, 0, 1, 0, 3, 0, 5, 0}));
  EXPECT_EQ(mpiTree(MpiTree::kChain, 5, 1), (std::vector<int>{-1, 0, 1, 2, 3}));
  for (int w : {1, 2, 3, 5, 7, 8, 13, 16}) {
    for (auto kind : {MpiTree::kFanout, MpiTree::kBinomial, MpiTree::kInOrderBinomial,
                      MpiTree::kKnomial, MpiTree::kChain, MpiTree::kInOrderBinary}) {
      auto parent = mpiTree(kind, w, 4);
      ASSERT_EQ(parent.size(), static_cast<size_t>(w));
      int roots = 0;
      for (int r = 0; r < w; ++r) {
        if (parent[r] < 0) {
          ++roots;
          EXPECT_EQ(r, kind == MpiTree::kInOrderBinary ? w - 1 : 0);
          continue;
        }
        int x = r, steps = 0;
        while (parent[x] >= 0 && steps <= w) x = parent[x], ++steps;
        EXPECT_LE(steps, w) << "cycle, w=" << w;
      }
      EXPECT_EQ(roots, 1) << "w=" << w;
    }
    // In-order binary: a node's subtree is a contiguous range of ranks below it.
    auto io = mpiTree(MpiTree::kInOrderBinary, w);
    std::vector<int> children(w, 0);
    for (int r = 0; r < w; ++r)
      if (io[r] >= 0) {
        EXPECT_GT(io[r], r) << "w=" << w;
        ++children[io[r]];
      }
    for (int c : children) EXPECT_LE(c, 2);
  }
}

TEST(MpiModel, AllreduceInPlanOrderOnTwoRacks) {
  // Ranks 0-3 in rack 0, 4-7 in rack 1: the plan's order.
  NetworkModel net = racks({0, 0, 0, 0, 1, 1, 1, 1});
  auto cs = mpiAlgorithmCosts(context(net), "allreduce");
  // Ring: 2 (n-1)/n S over the uplink, crossed by one flow each way.
  EXPECT_NEAR(find(cs, 4).betaUsPerByte, 2.0 * 7 / 8 * perByte(250), 1e-12);
  // Recursive doubling: the whole buffer at distance 1 and 2 (in the rack), then 4 (four flows
  // on each uplink direction).
  EXPECT_NEAR(find(cs, 3).betaUsPerByte, 2 * perByte(1000) + perByte(250 / 4.0), 1e-12);
  // Rabenseifner: halves at distance 1 and quarters at 2 in the rack, eighths across, twice.
  EXPECT_NEAR(find(cs, 6).betaUsPerByte, 2 * (0.75 * perByte(1000) + 0.125 * perByte(250 / 4.0)),
              1e-12);
  // Basic linear: the root receives the buffer from each rank in turn (3 in its rack, 4 across
  // the uplink), then sends it to all 7 at once (the 4 across share the uplink).
  EXPECT_NEAR(find(cs, 1).betaUsPerByte, 3 * perByte(1000) + 4 * perByte(250) + perByte(62.5),
              1e-12);
  // The segmented ring moves the ring's bytes in more steps: never below the ring.
  for (uint32_t seg : kMpiSegments) {
    EXPECT_GT(find(cs, 5, seg).betaUsPerByte, find(cs, 4).betaUsPerByte);
    EXPECT_EQ(find(cs, 5, seg).alphaUs, find(cs, 4).alphaUs);
  }
  // Steps: 14 for the ring, 3 for recursive doubling, 6 for Rabenseifner.
  double hop = net.latencyUs(0, 4);
  EXPECT_NEAR(find(cs, 4).alphaUs, 14 * hop, 1e-9);
  EXPECT_NEAR(find(cs, 3).alphaUs, 2 * net.latencyUs(0, 1) + hop, 1e-9);
  EXPECT_NEAR(find(cs, 6).alphaUs, 2 * (2 * net.latencyUs(0, 1) + hop), 1e-9);
}

TEST(MpiModel, AlternatingRacksMakeRecursiveDoublingCrossTheUplinkEveryStep) {
  // Provider order alternating racks: recursive doubling's partners at distance 1 are in the
  // other rack (the whole buffer, four flows per uplink direction), those at 2 and 4 in its own.
  NetworkModel net = racks({0, 1, 0, 1, 0, 1, 0, 1});
  auto cs = mpiAlgorithmCosts(context(net), "allreduce");
  EXPECT_NEAR(find(cs, 3).betaUsPerByte, perByte(250 / 4.0) + 2 * perByte(1000), 1e-12);
  // Rabenseifner sends its largest halves across: worse than in plan order.
  NetworkModel grouped = racks({0, 0, 0, 0, 1, 1, 1, 1});
  EXPECT_GT(find(cs, 6).betaUsPerByte,
            find(mpiAlgorithmCosts(context(grouped), "allreduce"), 6).betaUsPerByte);
}

TEST(MpiModel, NonPowersOfTwoFold) {
  // 6 ranks on a non-blocking network at 1000: recursive doubling folds 2 extra ranks (the whole
  // buffer), exchanges it twice, unfolds; Rabenseifner swaps halves, hands a half over, halves
  // and doubles over 4 ranks, then sends the whole result back.
  NetworkModel net = racks({0, 0, 0, 0, 0, 0}, 1000, 100000);
  auto cs = mpiAlgorithmCosts(context(net), "allreduce");
  EXPECT_NEAR(find(cs, 3).betaUsPerByte, 4 * perByte(1000), 1e-12);
  EXPECT_NEAR(find(cs, 6).betaUsPerByte, (0.5 + 0.5 + 2 * 0.75 + 1) * perByte(1000), 1e-12);
  auto ag = mpiAlgorithmCosts(context(net), "allgather");
  EXPECT_FALSE(find(ag, 3).available);  // recursive doubling: powers of two only
  EXPECT_TRUE(find(ag, 5).available);   // neighbour exchange: even counts
  // Allgather ring: n-1 steps of S/n.
  EXPECT_NEAR(find(ag, 4).betaUsPerByte, 5.0 / 6 * perByte(1000), 1e-12);
}

TEST(MpiModel, PipelinedTreesStreamSegmentsDownEveryEdge) {
  // A pipeline (chain) bcast over 4 ranks in one rack: every edge carries the whole buffer at
  // once (one flow per host link direction), plus one hop of overhead per segment.
  NetworkModel net = racks({0, 0, 0, 0});
  CostContext ctx = context(net);
  ctx.ring.stepOverheadUs = 50;
  auto cs = mpiAlgorithmCosts(ctx, "bcast");
  for (uint32_t seg : kMpiSegments) {
    // Segments above the eager limit go by rendezvous: a round trip more each.
    double hop = (net.latencyUs(0, 1) + 50) * (seg >= kOmpiEagerLimit ? 3 : 1);
    const auto& pipe = find(cs, 3, seg);
    EXPECT_NEAR(pipe.betaUsPerByte, perByte(1000) + hop / seg, 1e-12);
    // The last segment crosses 3 hops: 2 more segment times after the first.
    EXPECT_NEAR(pipe.alphaUs, 3 * hop + 2 * seg * perByte(1000) - hop, 1e-6);
  }
  // The binary tree's root feeds two children over one host link: half the pipeline's rate.
  EXPECT_NEAR(find(cs, 5, kMpiSegments[0]).betaUsPerByte,
              2 * perByte(1000) + (net.latencyUs(0, 1) + 50) / kMpiSegments[0], 1e-12);
}

TEST(MpiModel, RendezvousAboveTheEagerLimit) {
  // Each step whose messages pass 64 KiB waits a round trip more for the receiver.
  NetworkModel net = racks({0, 0, 0, 0, 1, 1, 1, 1});
  CostContext ctx = context(net);
  ctx.ring.stepOverheadUs = 100;
  auto cs = mpiAlgorithmCosts(ctx, "allreduce");
  double in = net.latencyUs(0, 1) + 100, cross = net.latencyUs(0, 4) + 100;
  // Recursive doubling sends the whole buffer each step: from 64 KiB on, every step.
  const auto& rd = find(cs, 3);
  double below = rd.timeUs(kOmpiEagerLimit - 1), at = rd.timeUs(kOmpiEagerLimit);
  EXPECT_NEAR(at - below, 2 * (2 * in + cross) + rd.betaUsPerByte, 1e-6);
  // The ring sends S/8 per step: from 512 KiB on, its 14 steps.
  const auto& ring = find(cs, 4);
  double s = 8 * kOmpiEagerLimit;
  EXPECT_NEAR(ring.timeUs(s) - ring.timeUs(s - 1), 14 * 2 * cross + ring.betaUsPerByte, 1e-6);
  // Rabenseifner: halves from 128 KiB, quarters from 256 KiB, eighths (across) from 512 KiB.
  const auto& rab = find(cs, 6);
  EXPECT_NEAR(rab.timeUs(2 * kOmpiEagerLimit) - rab.timeUs(2 * kOmpiEagerLimit - 1),
              2 * 2 * in + rab.betaUsPerByte, 1e-6);
  // The decision follows the jumps: at each size, the fastest candidate.
  auto ranges = chooseMpiRanges(cs);
  for (double size = 1024; size < 1e9; size *= 1.37) {
    double best = 1e300, got = 1e300;
    const OmpiRange* chosen = nullptr;
    for (const auto& r : ranges)
      if (size >= r.minBytes && size < r.maxBytes) chosen = &r;
    ASSERT_NE(chosen, nullptr);
    for (const auto& c : cs) {
      if (!c.available) continue;
      best = std::min(best, c.timeUs(size));
      if (c.algorithm == chosen->algorithm && c.segsize == chosen->segsize)
        got = std::min(got, c.timeUs(size));
    }
    EXPECT_NEAR(got, best, 1e-9 * best) << size;
  }
}

TEST(MpiModel, FabricBoundsTheAggregate) {
  NetworkModel net = racks({0, 0, 0, 0, 0, 0, 0, 0}, 1000, 100000);
  std::vector<Flow> eight;
  for (int r = 0; r < 8; ++r) eight.push_back({r, (r + 1) % 8, 1e6});
  double free = completionUs(net, eight);
  EXPECT_NEAR(free, 1e6 * perByte(1000), 1e-6);
  net.fabricMbps = 2000;  // 8 flows of 1000 wanted, 2000 in all: a quarter each
  EXPECT_NEAR(completionUs(net, eight), 4 * free, 1e-6);
  // The engine's ring and Open MPI's ring both see it.
  auto mpi = mpiAlgorithmCosts(context(net), "allreduce");
  EXPECT_NEAR(find(mpi, 4).betaUsPerByte, 2.0 * 7 / 8 * perByte(250), 1e-12);
  auto eng = algorithmCosts(context(net), "allreduce");
  EXPECT_NEAR(eng[0].betaUsPerByte, 2.0 * 7 / 8 * perByte(250), 1e-12);
}

TEST(MpiModel, AFabricBurstLetsShortPhasesOutrunTheFabric) {
  NetworkModel free = racks({0, 0, 0, 0, 1, 1, 1, 1});
  NetworkModel sustained = free;
  sustained.fabricMbps = 2000;
  NetworkModel burst = sustained;
  burst.fabricBurstBytes = 512 << 10;
  auto f = mpiAlgorithmCosts(context(free), "allreduce");
  auto s = mpiAlgorithmCosts(context(sustained), "allreduce");
  auto b = mpiAlgorithmCosts(context(burst), "allreduce");
  const auto &rabFree = find(f, 6), &rabSustained = find(s, 6), &rabBurst = find(b, 6);
  // Rabenseifner's in-rack phases move 8 x S/2 (halves) and 8 x S/4 (quarters) at once, each
  // way: above the fabric's 2000 Mbit/s from S = 512 KiB / (8 x 1/2 at 2000 - 1/2 at 1000) and
  // 512 KiB / (8 x 1/4 at 2000 - 1/4 at 1000); its eighths across are the uplink's.
  double burstUs = (512 << 10) / bytesPerUs(2000);
  ASSERT_EQ(rabBurst.slopes.size(), 2u);
  EXPECT_NEAR(rabBurst.slopes[0].first, burstUs / (4 * perByte(2000) - 0.5 * perByte(1000)), 1e-6);
  EXPECT_NEAR(rabBurst.slopes[1].first, burstUs / (2 * perByte(2000) - 0.25 * perByte(1000)), 1e-6);
  // Below both, the links alone; far above, the sustained rate but for four bursts.
  EXPECT_NEAR(rabBurst.timeUs(128 << 10), rabFree.timeUs(128 << 10), 1e-6);
  EXPECT_GT(rabSustained.timeUs(128 << 10), 1.5 * rabFree.timeUs(128 << 10));
  EXPECT_NEAR(rabSustained.timeUs(64 << 20) - rabBurst.timeUs(64 << 20), 4 * burstUs, 1e-6);
  // Every algorithm lies between the two bounds, each parameter set by itself.
  ASSERT_EQ(f.size(), b.size());
  for (size_t i = 0; i < b.size(); ++i)
    for (double bytes : {1e3, 65536.0, 3e5, 1e6, 4e6, 64e6}) {
      EXPECT_LE(f[i].timeUs(bytes), b[i].timeUs(bytes) * (1 + 1e-12)) << i << " at " << bytes;
      EXPECT_LE(b[i].timeUs(bytes), s[i].timeUs(bytes) * (1 + 1e-12)) << i << " at " << bytes;
    }
}

TEST(MpiModel, DecisionTableIsContiguousAndPicksTheFastest) {
  NetworkModel net = racks({0, 0, 0, 1, 1, 1, 2, 2, 2, 2});
  // Also with a fabric that bursts: slope changes split the table as jumps do.
  NetworkModel bursting = net;
  bursting.fabricMbps = 2000;
  bursting.fabricBurstBytes = 512 << 10;
  for (const NetworkModel* model : {&net, &bursting})
    for (const auto& coll : ompiCollectives()) {
      CostContext ctx = context(*model);
      ctx.ring.stepOverheadUs = 200;
      auto cs = mpiAlgorithmCosts(ctx, coll.name);
      ASSERT_FALSE(cs.empty()) << coll.name;
      for (const auto& c : cs) ASSERT_NE(findOmpiAlgorithm(coll, c.algorithm), nullptr);
      auto ranges = chooseMpiRanges(cs);
      ASSERT_FALSE(ranges.empty());
      EXPECT_EQ(ranges.front().minBytes, 0u);
      EXPECT_EQ(ranges.back().maxBytes, AlgoRange::kUnbounded);
      for (size_t i = 1; i < ranges.size(); ++i) {
        EXPECT_EQ(ranges[i].minBytes, ranges[i - 1].maxBytes);
        EXPECT_FALSE(ranges[i].algorithm == ranges[i - 1].algorithm &&
                     ranges[i].segsize == ranges[i - 1].segsize &&
                     ranges[i].faninout == ranges[i - 1].faninout)
            << coll.name << ": neighbours with one choice are merged";
      }
      for (double s : {1024.0, 65536.0, 2e5, 4e5, 1e6, 16e6, 256e6}) {
        const OmpiRange* chosen = nullptr;
        for (const auto& r : ranges)
          if (s >= r.minBytes && s < r.maxBytes) chosen = &r;
        ASSERT_NE(chosen, nullptr);
        double best = 1e300, got = 1e300;
        for (const auto& c : cs) {
          if (!c.available) continue;
          best = std::min(best, c.timeUs(s));
          if (c.algorithm == chosen->algorithm && c.segsize == chosen->segsize &&
              c.faninout == chosen->faninout)
            got = std::min(got, c.timeUs(s));
        }
        EXPECT_NEAR(got, best, 1e-9 * best) << coll.name << " at " << s;
      }
    }
}

TEST(MpiModel, EngineAdviceSplitsRangesWhereTheEngineIsFaster) {
  // One Open MPI line, and an engine that is 2x faster per byte but slower at 0: the engine is
  // advised from where 1.1 x its time drops below Open MPI's.
  std::vector<MpiAlgoCost> mpi(1);
  mpi[0].algorithm = 4;
  mpi[0].alphaUs = 100;
  mpi[0].betaUsPerByte = 0.01;
  std::vector<AlgoCost> eng(1);
  eng[0].alphaUs = 1000;
  eng[0].betaUsPerByte = 0.005;
  auto ranges = chooseMpiRanges(mpi, &eng);
  ASSERT_EQ(ranges.size(), 2u);
  // 1.1 (1000 + 0.005 S) = 100 + 0.01 S  =>  S = 1000 / 0.0045
  EXPECT_NEAR(static_cast<double>(ranges[0].maxBytes), 1000 / 0.0045, 1);
  EXPECT_EQ(ranges[0].algorithm, 4);
  EXPECT_EQ(ranges[1].algorithm, 4);
  EXPECT_GT(ranges[0].engineUs * kEngineAdviceRatio, ranges[0].predictedUs);
  EXPECT_LT(ranges[1].engineUs * kEngineAdviceRatio, ranges[1].predictedUs);
  // Without the engine: one range, no engine time.
  auto alone = chooseMpiRanges(mpi);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].engineUs, 0);
}

TEST(MpiModel, ThePlanCarriesOpenMpisDecision) {
  // The testbed's shape through the planner (racks alternating in the input order), with the
  // emulated cloud's CPUs as a fabric of 2000 Mbit/s: every modelled collective, for 8 ranks.
  PlanOptions o;
  o.collectives = {"allreduce", "broadcast"};
  o.fabricMbps = 2000;
  Topology t;
  for (int h = 0; h < 8; ++h) t.hosts.push_back({"vm" + std::to_string(h), ""});
  t.groups = {{"rack", 1.0, {{"vm0", "vm2", "vm4", "vm6"}, {"vm1", "vm3", "vm5", "vm7"}}}};
  TopologyLinks links;
  for (int h = 0; h < 8; ++h) links.hosts.push_back({1000, 1000});
  links.uplinks = {{{250, 250}, {250, 250}}};
  links.hostLatencyUs = 20;
  links.uplinkLatencyUs = {10};
  t.links = links;
  Plan p = makePlan(t, o);
  ASSERT_EQ(p.openMpi.size(), ompiCollectives().size());
  for (const auto& [name, ranges] : p.openMpi) {
    ASSERT_FALSE(ranges.empty()) << name;
    for (const auto& r : ranges) EXPECT_GT(r.predictedUs, 0) << name;
    bool engine = name == "allreduce" || name == "bcast";
    for (const auto& r : ranges) EXPECT_EQ(r.engineUs > 0, engine) << name;
  }
  // Large allreduces: the ring, which crosses each uplink once per direction in plan order and
  // moves less through the fabric than Rabenseifner's steps inside the racks.
  EXPECT_EQ(p.openMpi.at("allreduce").back().algorithm, 4);
  EXPECT_EQ(p.order,
            (std::vector<std::string>{"vm0", "vm2", "vm4", "vm6", "vm1", "vm3", "vm5", "vm7"}));
  // The plan round-trips through JSON with its decision, and the decision is in the hash.
  Plan back = Plan::parse(p.dump(), "plan.json");
  EXPECT_EQ(back.openMpi, p.openMpi);
  Plan without = p;
  without.openMpi.clear();
  EXPECT_NE(without.computeHash(), p.hash);
  o.openMpi = false;
  EXPECT_TRUE(makePlan(t, o).openMpi.empty());
}

TEST(MpiModel, UnknownCollectiveIsBadInput) {
  NetworkModel net = racks({0, 0});
  EXPECT_THROW(mpiAlgorithmCosts(context(net), "alltoall"), InvalidInput);
}

}  // namespace
}  // namespace rankmap::reorder
