// Packed spanning trees: the exact packing solver of tree_packing_lp.h against closed forms, and
// the planner's greedy packing (reorder/packed_trees.cc) against it on synthetic topologies
// (reorder/synthetic.cc). tests/bench/tree_packing_bench prints the same comparison as a table
// (docs/planner.md reports it).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "reorder/cost_model.h"
#include "reorder/packed_trees.h"
#include "reorder/synthetic.h"
#include "tests/unit/reorder/test_util.h"
#include "tests/unit/reorder/tree_packing_lp.h"

namespace rankmap::reorder {
namespace {

using test::hierarchyOf;
using test::optimalTreePacking;
using test::packingUsPerByte;

std::vector<int> identity(size_t n) {
  std::vector<int> o(n);
  std::iota(o.begin(), o.end(), 0);
  return o;
}

// Every tree of a packing spans the hosts, and its weights sum to 1.
void expectSpanning(const std::vector<PackedTree>& trees, size_t n) {
  double total = 0;
  for (const auto& t : trees) {
    total += t.weight;
    ASSERT_EQ(t.parent.size(), n);
    int roots = 0;
    for (size_t x = 0; x < n; ++x) {
      if (t.parent[x] < 0) ++roots;
      int y = static_cast<int>(x);
      for (size_t steps = 0; y >= 0; ++steps) {
        ASSERT_LE(steps, n) << "a loop";
        y = t.parent[static_cast<size_t>(y)];
      }
    }
    EXPECT_EQ(roots, 1);
  }
  EXPECT_NEAR(total, 1, 1e-9);
}

TEST(TreePackingLp, ClosedForms) {
  // One switch, n hosts of rate r: every tree has 2 (n-1) edge ends over n host links, so R <=
  // n r / (2 (n-1)), which symmetric packings reach: the ring's bound, 2 (n-1)/n S / r.
  NetworkModel one = modelFromHierarchy(hierarchyOf({{0, 0, 0, 0, 0}}),
                                        std::vector<double>(5, 1000), {1e6}, 2, {5});
  auto p = optimalTreePacking(one);
  EXPECT_NEAR(p.rateMbps, 5 * 1000.0 / 8, 1e-6);
  EXPECT_NEAR(p.upperBoundMbps, p.rateMbps, 1e-6 * p.rateMbps);
  expectSpanning(p.trees, 5);
  EXPECT_NEAR(packingUsPerByte(one, p.trees, identity(5)), 1 / bytesPerUs(p.rateMbps), 1e-9);
  // Two racks of 4 behind 250 Mbit/s uplinks: every tree crosses them at least once: R = 250.
  NetworkModel two = modelFromHierarchy(hierarchyOf({{0, 0, 0, 0, 1, 1, 1, 1}}),
                                        std::vector<double>(8, 1000), {250}, 2, {10});
  EXPECT_NEAR(optimalTreePacking(two).rateMbps, 250, 1e-6);
  // Four slow hosts (250) and four fast ones (1000) on one switch: slow hosts are leaves (R <=
  // 250), the fast ones carry the other 10 edge ends of each tree (2.5 R <= 1000): R = 250, where
  // a ring's bottleneck is the slow host at 2 (n-1)/n: trees are 1.75x faster.
  NetworkModel mixed =
      modelFromHierarchy(hierarchyOf({{0, 0, 0, 0, 0, 0, 0, 0}}),
                         {1000, 250, 1000, 250, 1000, 250, 1000, 250}, {1e6}, 2, {5});
  auto pm = optimalTreePacking(mixed);
  EXPECT_NEAR(pm.rateMbps, 250, 1e-6);
  expectSpanning(pm.trees, 8);
}

// The greedy packing is never better than the optimum (a check of both), and stays within a
// bounded factor of it on synthetic topologies with heterogeneous hosts (the planner packs trees
// only then). The bound is what tree_packing_bench measured, with a margin.
TEST(TreePackingLp, GreedyAgainstOptimal) {
  struct Spec {
    std::vector<SyntheticLevel> levels;
    int top;
    std::vector<double> rates;  // cycled over hosts
  };
  const std::vector<Spec> specs = {
      {{{8, 1e6, 5}}, 1, {1000, 250}},
      {{{4, 1000, 10}}, 2, {1000, 1000, 250, 100}},
      {{{4, 2000, 10}}, 4, {2500, 1000, 400}},
      {{{4, 2000, 10}, {2, 2000, 20}}, 2, {1000, 400}},
  };
  for (const auto& spec : specs) {
    SyntheticSpec s;
    s.levels = spec.levels;
    s.topGroups = spec.top;
    s.shuffle = false;
    for (size_t h = 0; h < s.totalHosts(); ++h)
      s.hostMbpsOverride.push_back(spec.rates[h % spec.rates.size()]);
    auto syn = makeSynthetic(s);
    const auto order = identity(syn.model.n);
    auto greedy = packTrees(syn.model, order);
    ASSERT_FALSE(greedy.empty());
    auto opt = optimalTreePacking(syn.model);
    expectSpanning(opt.trees, syn.model.n);
    EXPECT_NEAR(opt.upperBoundMbps, opt.rateMbps, 1e-6 * opt.rateMbps);
    const double g = packingUsPerByte(syn.model, greedy, order);
    const double o = packingUsPerByte(syn.model, opt.trees, order);
    EXPECT_NEAR(o, 1 / bytesPerUs(opt.rateMbps), 1e-9 * o);
    EXPECT_GE(g, o * (1 - 1e-9));
    EXPECT_LE(g, 1.6 * o) << syn.model.n << " hosts";
  }
}

}  // namespace
}  // namespace rankmap::reorder
