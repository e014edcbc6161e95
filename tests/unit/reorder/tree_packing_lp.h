// Test-only: the optimal fractional packing of spanning trees on a network model, to measure
// how far reorder/packed_trees.cc's greedy packing is from it (Blink and ForestColl compute it
// with an LP / max-flow; no LP solver is installed here, so this is a small exact one).
//
// The problem (allreduce over packed trees, as the engine runs it): each tree edge carries its
// tree's piece once in each direction over every link of its path, so a tree T loads link l,
// each way, with u_T(l) = the number of its edges whose path crosses l (a host link: the host's
// degree; an uplink: the edges leaving the group). Maximise the total rate R = sum_T r_T subject
// to sum_T r_T u_T(l) <= c_l for every link: an allreduce of S bytes then moves every link's
// load in S / R, the per-link load bound of the packing with weights r_T / R.
//
// Method: column generation. The master LP over the trees found so far is solved exactly by a
// dense simplex (Bland's rule: no cycling); its duals y_l price a tree at sum_{edges} (sum of y
// over the edge's path), and the cheapest tree is a minimum spanning tree of the complete graph
// of hosts under those edge costs (Prim). A tree cheaper than 1 enters; when none is, the master
// optimum is the LP optimum. sum_l c_l y_l / (cheapest tree) bounds R from above at every round,
// so the result comes with its own certificate (upperBoundMbps).
#pragma once

#include <vector>

#include "common/plan.h"
#include "reorder/network_model.h"

namespace rankmap::reorder::test {

struct TreePacking {
  double rateMbps = 0;            // R
  double upperBoundMbps = 0;      // the dual bound when the search stopped (== R at optimum)
  std::vector<PackedTree> trees;  // parent over host indices; weight = r_T / R
  int rounds = 0;
};

TreePacking optimalTreePacking(const NetworkModel& net, int maxRounds = 2000);

// Per-link load bound of an allreduce over `trees` (parents over positions of `order`), in
// microseconds per byte of the message: max over links of (sum_T w_T u_T(l)) / c_l.
double packingUsPerByte(const NetworkModel& net, const std::vector<PackedTree>& trees,
                        const std::vector<int>& order);

}  // namespace rankmap::reorder::test
