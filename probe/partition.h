// Partitions of hosts into groups, as the probe round's phases build and pass them: a label per
// host (0.. in order of the lowest member; -1 for a host in no group), and the union-find the
// structure phases merge groups with.
#pragma once

#include <cstddef>
#include <numeric>
#include <vector>

namespace rankmap::probe {

// Union-find over 0..n-1 (path halving; the root is the lowest member).
class Components {
 public:
  explicit Components(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int find(int x);
  // False when a and b were already together.
  bool unite(int a, int b);

 private:
  std::vector<int> parent_;
};

// Labels renumbered 0.. in order of their lowest host; -1 stays -1.
std::vector<int> renumber(const std::vector<int>& label);
// Groups of a partition (the largest label + 1).
int groupCount(const std::vector<int>& groupOf);
// Members of each group, ascending.
std::vector<std::vector<int>> membersOf(const std::vector<int>& groupOf);

}  // namespace rankmap::probe
