// Packed spanning trees for allreduce on networks whose hosts have different link rates
// (Blink's idea, on our tree-shaped network model).
//
// An allreduce over a weighted set of spanning trees splits the buffer by the weights; each
// piece is reduced up its tree to the root and broadcast back down, pipelined. A tree edge
// carries its piece once in each direction, so a host's link carries (its degree) x (piece) in
// each direction, and a group's uplink carries (tree edges leaving the group) x (piece). A ring
// makes every host carry 2(n-1)/n of the buffer whatever its rate; trees let fast hosts carry
// more (higher degree) and slow hosts less (leaves carry exactly one piece), and they cross
// every uplink once per tree.
//
// Construction: kTrees trees of equal weight, each a hierarchy of stars: in every innermost
// group the members attach to a centre; the centres of the groups under one parent attach to
// one of them, and so on up to the root. Each tree crosses every uplink once, and the uplink of
// the group whose centre takes its siblings once per sibling. Centres are chosen greedily, tree
// by tree, as the candidate whose most loaded link would be least loaded relative to its rate
// after taking the role: its host link and its uplinks below the level being joined. That
// spreads the load in proportion to rate and keeps the siblings' fan-in off slow uplinks.
// Identical trees are merged (weights added). tests/unit/reorder/tree_packing_lp.h compares
// this with the optimal packing (docs/planner.md).
#pragma once

#include <cstddef>
#include <vector>

#include "common/plan.h"
#include "reorder/network_model.h"

namespace rankmap::reorder {

inline constexpr size_t kTrees = 32;
inline constexpr size_t kMaxTreeHosts = 1024;  // beyond this the trees are not built

// Trees over positions in `order` (host indices by position). Empty when n < 2 or n >
// kMaxTreeHosts.
std::vector<PackedTree> packTrees(const NetworkModel& net, const std::vector<int>& order);

}  // namespace rankmap::reorder
