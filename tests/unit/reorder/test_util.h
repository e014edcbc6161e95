// Shared helpers for the planner's tests.
#pragma once

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "common/topology.h"
#include "reorder/hierarchy.h"
#include "reorder/network_model.h"
#include "reorder/planner.h"
#include "reorder/ring.h"

namespace rankmap::reorder::test {

inline std::string fixture(const std::string& name) {
  return std::string(RANKMAP_TEST_DATA_DIR) + "/topologies/" + name;
}

// A hierarchy from explicit per-level labels (innermost first).
inline Hierarchy hierarchyOf(const std::vector<std::vector<int>>& labels) {
  Hierarchy h;
  h.n = labels.empty() ? 0 : labels.front().size();
  for (size_t l = 0; l < labels.size(); ++l) {
    Hierarchy::Level level;
    level.name = levelName(l);
    level.confidence = 1;
    // Relabel by lowest member, as the library does.
    std::vector<int> map(h.n + 1, -1);
    int next = 0;
    for (int g : labels[l]) {
      if (map[g] < 0) map[g] = next++;
      level.groupOf.push_back(map[g]);
    }
    level.groups = next;
    h.levels.push_back(std::move(level));
  }
  return h;
}

// The minimum ring objective by full enumeration (host 0 first): the reference the exact search
// and the planner are checked against. (n-1)! rings: 9! at 10 hosts.
inline double bruteForceObjective(const NetworkModel& net, const RingParams& p) {
  std::vector<int> ring(net.n);
  std::iota(ring.begin(), ring.end(), 0);
  double best = std::numeric_limits<double>::infinity();
  do {
    best = std::min(best, evaluateRing(net, ring, p).objectiveUs);
  } while (std::next_permutation(ring.begin() + 1, ring.end()));
  return best;
}

// Is `v` a permutation of 0..n-1?
inline bool isPermutation(std::vector<int> v, size_t n) {
  if (v.size() != n) return false;
  std::vector<char> seen(n, 0);
  for (int x : v) {
    if (x < 0 || static_cast<size_t>(x) >= n || seen[x]) return false;
    seen[x] = 1;
  }
  return true;
}

// Planner options for tests: source "test", everything else at its default.
inline PlanOptions quietOptions() {
  PlanOptions o;
  o.source = "test";
  return o;
}

// 8 hosts in two racks (hosts 0-3, 4-7), host links `host`, uplinks `uplink` (Mbit/s); the
// defaults are the calibration testbed.
inline NetworkModel twoRacks(double host = 1000, double uplink = 250) {
  return modelFromHierarchy(hierarchyOf({{0, 0, 0, 0, 1, 1, 1, 1}}), std::vector<double>(8, host),
                            {uplink}, 2, {10});
}

}  // namespace rankmap::reorder::test
