#include "reorder/linkage.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.h"

namespace rankmap::reorder {

Dendrogram averageLinkage(const std::vector<float>& d, size_t n) {
  RANKMAP_ASSERT(d.size() == n * n);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  LinkageMatrix cells(n * n);
  for (size_t i = 0; i < n * n; ++i) {
    bool has = !std::isnan(d[i]);
    cells[i] = {has ? d[i] : kInf, has ? 1.0f : 0.0f};
  }
  return averageLinkage(std::move(cells), n);
}

Dendrogram averageLinkage(LinkageMatrix cell, size_t n) {
  RANKMAP_ASSERT(cell.size() == n * n);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  Dendrogram out;
  out.n = n;
  if (n < 2) return out;
  // cell[a*n+x]: mean of the measured pairs between clusters a and x, and how many there are.
  //
  // Only rows are ever written. The value for a pair lives in the row of whichever of the two
  // clusters was formed last (created[] counts merges), because a merge rewrites the merged
  // cluster's row for every active cluster, and nothing else changes. Writing the column too
  // would stride by a whole row per cluster (one cache miss each, ~N^2/2 in all); reading the
  // other row instead only strides for clusters formed after the one being read, which the
  // chain keeps few: it works through one neighbourhood at a time.
  using Cell = LinkageCell;
  std::vector<int> created(n, 0);
  int clock = 0;
  auto at = [&](int a, int x) -> const Cell& {
    return created[x] > created[a] ? cell[static_cast<size_t>(x) * n + a]
                                   : cell[static_cast<size_t>(a) * n + x];
  };
  std::vector<int> active(n);
  std::iota(active.begin(), active.end(), 0);
  std::vector<int> chain;
  chain.reserve(n);
  out.merges.reserve(n - 1);

  while (active.size() > 1) {
    if (chain.empty()) chain.push_back(active.front());
    int a = chain.back();
    int prev = chain.size() >= 2 ? chain[chain.size() - 2] : -1;
    int best = -1;
    float bestD = kInf;
    for (int x : active) {
      if (x == a) continue;
      float v = at(a, x).mean;
      if (best < 0 || v < bestD) {
        best = x;
        bestD = v;
      }
    }
    if (prev >= 0 && at(a, prev).mean <= bestD) best = prev;
    if (best != prev) {
      chain.push_back(best);
      continue;
    }
    // a and prev are mutual nearest neighbours: merge into the lower slot.
    chain.pop_back();
    chain.pop_back();
    int keep = std::min(a, prev), drop = std::max(a, prev);
    out.merges.push_back({keep, drop, static_cast<double>(at(a, prev).mean)});
    Cell* ck = &cell[static_cast<size_t>(keep) * n];
    for (int x : active) {
      if (x == keep || x == drop) continue;
      const Cell k = at(keep, x);
      const Cell& d = at(drop, x);
      float c = k.count + d.count;
      float mean = kInf;
      if (c > 0) {
        double sum = (k.count > 0 ? static_cast<double>(k.mean) * k.count : 0.0) +
                     (d.count > 0 ? static_cast<double>(d.mean) * d.count : 0.0);
        mean = static_cast<float>(sum / c);
      }
      ck[x] = {mean, c};
    }
    created[keep] = ++clock;
    active.erase(std::find(active.begin(), active.end(), drop));
  }
  std::stable_sort(out.merges.begin(), out.merges.end(),
                   [](const Merge& x, const Merge& y) { return x.height < y.height; });
  return out;
}

std::vector<int> cutDendrogram(const Dendrogram& dg, size_t merges) {
  size_t n = dg.n;
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];
      x = parent[x];
    }
    return x;
  };
  for (size_t k = 0; k < merges && k < dg.merges.size(); ++k) {
    int ra = find(dg.merges[k].a), rb = find(dg.merges[k].b);
    if (ra != rb) parent[std::max(ra, rb)] = std::min(ra, rb);
  }
  std::vector<int> label(n, -1), rootLabel(n, -1);
  int next = 0;
  for (size_t i = 0; i < n; ++i) {
    int r = find(static_cast<int>(i));
    if (rootLabel[r] < 0) rootLabel[r] = next++;
    label[i] = rootLabel[r];
  }
  return label;
}

std::vector<LevelCut> findLevelCuts(const Dendrogram& dg, double minGap, double spreadFactor) {
  std::vector<LevelCut> cuts;
  const auto& m = dg.merges;
  size_t finite = 0;
  while (finite < m.size() && std::isfinite(m[finite].height)) ++finite;
  size_t start = 0;
  double sum = 0, sumSq = 0;
  for (size_t k = 0; k + 1 < finite; ++k) {
    double h = m[k].height;
    sum += h;
    sumSq += h * h;
    size_t cnt = k - start + 1;
    double mean = sum / cnt;
    double sd = std::sqrt(std::max(0.0, sumSq / cnt - mean * mean));
    double gap = m[k + 1].height - h;
    if (gap >= minGap && gap >= spreadFactor * sd) {
      cuts.push_back({k + 1, h, m[k + 1].height});
      start = k + 1;
      sum = sumSq = 0;
    }
  }
  return cuts;
}

}  // namespace rankmap::reorder
