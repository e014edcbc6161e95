#include "reorder/linkage.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

#include "common/error.h"

namespace rankmap::reorder {

namespace {

struct MeanCount {
  float mean;
  float count;
};

float bitSelect(bool first, float a, float b) {  // first ? a : b, without a branch
  uint32_t x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  uint32_t mask = 0u - static_cast<uint32_t>(first);
  uint32_t r = (x & mask) | (y & ~mask);
  float out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

// Rows of clusters: a leaf's is n floats (means; the count of a leaf pair is implied: +inf has
// none, any other value one measured pair) or n (mean, count) cells when `leafCells` is given;
// a merged cluster's is n (mean, count) cells from a slab. Either way a row is read at
// row[o] + (other << shift) floats, the shift (0 or 1) kept in the row pointer's lowest bit: the count, where there is one, sits next to the mean,
// so a read down a column costs one cache miss, not two.
Dendrogram linkage(float* means, MeanCount* leafCells, size_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  Dendrogram out;
  out.n = n;
  if (n < 2) return out;
  // Only rows are ever written. The value for a pair lives in the row of whichever of the two
  // clusters was formed last (created[] counts merges), because a merge rewrites the merged
  // cluster's row for every active cluster, and nothing else changes. Writing the column too
  // would stride by a whole row per cluster (one cache miss each, ~N^2/2 in all); reading the
  // other row instead only strides for clusters formed after the one being read, which the
  // chain keeps few: it works through one neighbourhood at a time.
  std::vector<int> created(n, 0);
  int clock = 0;
  // One load per row lookup: the pointer (4-byte aligned) with the shift in bit 0.
  std::vector<uintptr_t> row(n);
  auto tag = [](float* p, uintptr_t shift) { return reinterpret_cast<uintptr_t>(p) | shift; };
  for (size_t i = 0; i < n; ++i)
    row[i] = leafCells ? tag(&leafCells[i * n].mean, 1) : tag(means + i * n, 0);
  // The cell of pair (a, x): in the row of the later-formed of the two.
  auto cell = [&](int a, int x) -> const float* {
    bool xo = created[x] > created[a];
    int o = xo ? x : a, other = xo ? a : x;
    uintptr_t r = row[o];
    return reinterpret_cast<const float*>(r & ~uintptr_t{1}) + (static_cast<size_t>(other) << (r & 1));
  };
  auto at = [&](int a, int x) -> float { return *cell(a, x); };
  // Mean and count of pair (a, x). A cell without a count is a leaf pair: 1 or, at +inf, 0.
  auto meanCount = [&](int a, int x, float& m, float& c) {
    bool xo = created[x] > created[a];
    int o = xo ? x : a, other = xo ? a : x;
    uintptr_t r = row[o];
    uint32_t s = static_cast<uint32_t>(r & 1);
    const float* p = reinterpret_cast<const float*>(r & ~uintptr_t{1}) + (static_cast<size_t>(other) << s);
    m = p[0];
    c = bitSelect(s != 0, p[s], m != kInf ? 1.0f : 0.0f);
  };
  // Merged clusters' rows come from one slab (huge pages where the kernel offers them),
  // recycled last in, first out, so only the most rows alive at once are ever touched. At most
  // n/2 merged clusters exist at once (each holds two leaves or more), plus the one being
  // formed.
  const size_t maxRows = n / 2 + 2;
  std::unique_ptr<MeanCount, void (*)(MeanCount*)> slab(
      static_cast<MeanCount*>(allocateLarge(maxRows * n * sizeof(MeanCount))),
      [](MeanCount* p) { std::free(p); });
  size_t usedRows = 0;
  std::vector<MeanCount*> freeRows;
  std::vector<MeanCount*> ownRow(n, nullptr);
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
    const size_t na = active.size();
    for (size_t k = 0; k < na; ++k) {
      int x = active[k];
      if (x == a) continue;
      float v = at(a, x);
      if (best < 0 || v < bestD) {
        best = x;
        bestD = v;
      }
    }
    if (prev >= 0 && at(a, prev) <= bestD) best = prev;
    if (best != prev) {
      chain.push_back(best);
      continue;
    }
    // a and prev are mutual nearest neighbours: merge into the lower slot.
    chain.pop_back();
    chain.pop_back();
    int keep = std::min(a, prev), drop = std::max(a, prev);
    out.merges.push_back({keep, drop, static_cast<double>(at(a, prev))});
    MeanCount* ck = ownRow[keep];
    if (!ck) {  // a leaf: give it a row of its own
      if (freeRows.empty()) {
        RANKMAP_ASSERT(usedRows < maxRows);
        freeRows.push_back(slab.get() + usedRows++ * n);  // every entry read is written first
      }
      ck = freeRows.back();
      freeRows.pop_back();
    }
    for (size_t k = 0; k < na; ++k) {
      int x = active[k];
      if (x == keep || x == drop) continue;
      float km, kc, dm, dc;
      meanCount(keep, x, km, kc);
      meanCount(drop, x, dm, dc);
      float c = kc + dc;
      float m = kInf;
      if (c > 0) {
        double sum = (kc > 0 ? static_cast<double>(km) * kc : 0.0) +
                     (dc > 0 ? static_cast<double>(dm) * dc : 0.0);
        m = static_cast<float>(sum / c);
      }
      ck[x] = {m, c};
    }
    ownRow[keep] = ck;
    row[keep] = tag(&ck->mean, 1);
    if (ownRow[drop]) freeRows.push_back(ownRow[drop]);
    created[keep] = ++clock;
    active.erase(std::find(active.begin(), active.end(), drop));
  }
  std::stable_sort(out.merges.begin(), out.merges.end(),
                   [](const Merge& x, const Merge& y) { return x.height < y.height; });
  return out;
}

}  // namespace

Dendrogram averageLinkage(const std::vector<float>& d, size_t n) {
  RANKMAP_ASSERT(d.size() == n * n);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  bool measuredInf = false;
  for (size_t i = 0; i < n * n; ++i) measuredInf = measuredInf || d[i] == kInf;
  if (!measuredInf) {
    LinkageMatrix means(n * n);
    for (size_t i = 0; i < n * n; ++i) means[i] = std::isnan(d[i]) ? kInf : d[i];
    return linkage(means.data(), nullptr, n);
  }
  // A measured +inf: its count cannot be implied; every leaf row keeps its counts.
  std::vector<MeanCount> cells(n * n);
  for (size_t i = 0; i < n * n; ++i) {
    bool has = !std::isnan(d[i]);
    cells[i] = {has ? d[i] : kInf, has ? 1.0f : 0.0f};
  }
  return linkage(nullptr, cells.data(), n);
}

Dendrogram averageLinkage(LinkageMatrix means, size_t n) {
  RANKMAP_ASSERT(means.size() == n * n);
  return linkage(means.data(), nullptr, n);
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
