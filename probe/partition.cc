#include "probe/partition.h"

#include <algorithm>
#include <map>
#include <utility>

namespace rankmap::probe {

int Components::find(int x) {
  while (parent_[static_cast<size_t>(x)] != x) {
    auto& p = parent_[static_cast<size_t>(x)];
    p = parent_[static_cast<size_t>(p)];
    x = p;
  }
  return x;
}

bool Components::unite(int a, int b) {
  a = find(a);
  b = find(b);
  if (a == b) return false;
  if (b < a) std::swap(a, b);
  parent_[static_cast<size_t>(b)] = a;
  return true;
}

std::vector<int> renumber(const std::vector<int>& label) {
  std::vector<int> out(label.size(), -1);
  std::map<int, int> seen;
  for (size_t h = 0; h < label.size(); ++h) {
    if (label[h] < 0) continue;
    auto [it, fresh] = seen.emplace(label[h], static_cast<int>(seen.size()));
    out[h] = it->second;
  }
  return out;
}

int groupCount(const std::vector<int>& groupOf) {
  int g = 0;
  for (int x : groupOf) g = std::max(g, x + 1);
  return g;
}

std::vector<std::vector<int>> membersOf(const std::vector<int>& groupOf) {
  std::vector<std::vector<int>> m(static_cast<size_t>(groupCount(groupOf)));
  for (size_t h = 0; h < groupOf.size(); ++h)
    if (groupOf[h] >= 0) m[static_cast<size_t>(groupOf[h])].push_back(static_cast<int>(h));
  return m;
}

}  // namespace rankmap::probe
