// tree_packing_bench: reorder/packed_trees.cc's greedy packing against the optimal fractional
// spanning-tree packing (the exact LP of tests/unit/reorder/tree_packing_lp.h) on synthetic
// topologies (reorder/synthetic.cc, as link models) and on the emulated cloud's 4+3+3 racks
// behind 500/125/250 Mbit/s uplinks; and, next to them, what the cost model predicts at 16 MiB
// for the engine's ring, hier (uniform and with the plan's chunk weights) and packed trees
// (greedy and optimal), in the plan's order.
//
// Columns: "greedy" and "optimal" are the per-link load bounds of an allreduce over the packing
// (ms for 16 MiB; what the LP optimises), "gap" their ratio; the rest are the cost model's
// predictions (max-min sharing and latency, ms). Usage: tree_packing_bench (no arguments).
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "reorder/cost_model.h"
#include "reorder/packed_trees.h"
#include "reorder/planner.h"
#include "reorder/synthetic.h"
#include "tests/unit/reorder/tree_packing_lp.h"

namespace rankmap::reorder {
namespace {

constexpr uint64_t kBytes = 16ull << 20;

struct Case {
  std::string name;
  Topology topology;
};

Case synthetic(std::string name, std::vector<SyntheticLevel> levels, int top,
               std::vector<double> rates) {
  SyntheticSpec s;
  s.levels = std::move(levels);
  s.topGroups = top;
  s.shuffle = false;
  s.output = Output::kLinks;
  for (size_t h = 0; h < s.totalHosts(); ++h) s.hostMbpsOverride.push_back(rates[h % rates.size()]);
  return {std::move(name), makeSynthetic(s).topology};
}

// The emulated cloud of issue 14: 10 VMs in racks of 4, 3 and 3, host links `host` (cycled).
Case emulatedCloud(std::string name, std::vector<double> host) {
  Topology t;
  for (int i = 0; i < 10; ++i) t.hosts.push_back({fmt::format("vm{}", i), ""});
  HierarchyLevel rack;
  rack.name = "rack";
  rack.confidence = 1;
  rack.groups = {{"vm0", "vm1", "vm2", "vm3"}, {"vm4", "vm5", "vm6"}, {"vm7", "vm8", "vm9"}};
  t.groups = {rack};
  TopologyLinks links;
  for (int i = 0; i < 10; ++i) {
    double r = host[static_cast<size_t>(i) % host.size()];
    links.hosts.push_back({r, r});
  }
  links.uplinks = {{{500, 500}, {125, 125}, {250, 250}}};
  links.hostLatencyUs = 50;
  links.uplinkLatencyUs = {100};
  t.links = links;
  return {std::move(name), t};
}

double ms(double us) { return us / 1000; }

int run() {
  std::vector<Case> cases = {
      synthetic("1 rack x 8, hosts 1000/250", {{8, 1e6, 5}}, 1, {1000, 250}),
      synthetic("2 racks x 4 (up 1000), hosts 1000/1000/250/100", {{4, 1000, 10}}, 2,
                {1000, 1000, 250, 100}),
      synthetic("4 racks x 4 (up 2000), hosts 2500/1000/400", {{4, 2000, 10}}, 4,
                {2500, 1000, 400}),
      synthetic("2 pods x 2 racks x 4 (2000/2000), hosts 1000/400", {{4, 2000, 10}, {2, 2000, 20}},
                2, {1000, 400}),
      synthetic("4 racks x 8 (up 2000), hosts 1000/250", {{8, 2000, 10}}, 4, {1000, 250}),
      synthetic("8 racks x 8 (up 4000), hosts 1000/1000/1000/250", {{8, 4000, 10}}, 8,
                {1000, 1000, 1000, 250}),
      synthetic("2 racks x 4 (up 250), hosts 1000 (uniform)", {{4, 250, 10}}, 2, {1000}),
      emulatedCloud("emulated cloud 4+3+3, up 500/125/250, hosts 1000", {1000}),
      emulatedCloud("emulated cloud 4+3+3, up 500/125/250, hosts 1000/250", {1000, 250}),
  };
  fmt::print(
      "# tree_packing_bench: allreduce of 16 MiB, ms (greedy/optimal: load bound of the "
      "packing; the rest: cost model)\n");
  fmt::print("{:<58} {:>5} {:>7} {:>8} {:>8} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
             "topology", "hosts", "trees", "greedy", "optimal", "gap", "rounds", "ring", "hier-u",
             "hier-w", "trees-g", "trees-o");
  for (const auto& c : cases) {
    PlanOptions o;
    o.source = c.name;
    PlanResult r = planTopology(c.topology, o);
    const NetworkModel& net = r.model;
    const size_t n = net.n;
    auto greedy = packTrees(net, r.order);
    auto opt = test::optimalTreePacking(net);
    // The optimal trees over positions of the plan's order.
    std::vector<int> posOf(n);
    for (size_t p = 0; p < n; ++p) posOf[static_cast<size_t>(r.order[p])] = static_cast<int>(p);
    std::vector<PackedTree> optByPos;
    for (const auto& t : opt.trees) {
      PackedTree pt{t.weight, std::vector<int>(n, -1)};
      for (size_t h = 0; h < n; ++h)
        if (t.parent[h] >= 0)
          pt.parent[static_cast<size_t>(posOf[h])] = posOf[static_cast<size_t>(t.parent[h])];
      optByPos.push_back(std::move(pt));
    }
    const double g = test::packingUsPerByte(net, greedy, r.order) * kBytes;
    const double best = test::packingUsPerByte(net, optByPos, r.order) * kBytes;
    CostContext ctx;
    ctx.net = &net;
    ctx.order = r.order;
    const double ring = predictedUs(ctx, "allreduce", Algorithm::kRing, kBytes);
    const double hierU = predictedUs(ctx, "allreduce", Algorithm::kHier, kBytes);
    ctx.chunkWeights = r.plan.chunkWeights;
    const double hierW = predictedUs(ctx, "allreduce", Algorithm::kHier, kBytes);
    ctx.trees = greedy;
    const double treesG = predictedUs(ctx, "allreduce", Algorithm::kTrees, kBytes);
    ctx.trees = optByPos;
    const double treesO = predictedUs(ctx, "allreduce", Algorithm::kTrees, kBytes);
    fmt::print(
        "{:<58} {:>5} {:>3}/{:<3} {:>8.1f} {:>8.1f} {:>6.3f} {:>7} {:>8.1f} {:>8.1f} {:>8.1f} "
        "{:>8.1f} {:>8.1f}\n",
        c.name, n, greedy.size(), optByPos.size(), ms(g), ms(best), g / best, opt.rounds, ms(ring),
        ms(hierU), ms(hierW), ms(treesG), ms(treesO));
  }
  return 0;
}

}  // namespace
}  // namespace rankmap::reorder

int main() { return rankmap::reorder::run(); }
