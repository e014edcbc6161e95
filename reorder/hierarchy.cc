#include "reorder/hierarchy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "reorder/linkage.h"
#include "reorder/numeric.h"

namespace rankmap::reorder {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kLogLatencyFloorUs = 0.05f;  // latencies below read as this before the log

std::vector<int> sampleHosts(size_t n) {
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  if (n <= kAnalysisHosts) return idx;
  uint64_t s = 0x5eed0000ull + n;
  for (size_t i = n - 1; i > 0; --i) std::swap(idx[i], idx[splitmix64(s) % (i + 1)]);
  idx.resize(kAnalysisHosts);
  std::sort(idx.begin(), idx.end());
  return idx;
}

// Per-pair feature values; NaN when not measured.
class Features {
 public:
  Features(const Measurements& m, const std::vector<std::vector<int>>& sharedSets) : m_(m) {
    size_t n = m.n;
    logRate_.assign(n, 0);
    std::vector<double> band;
    for (size_t i = 0; i < n; ++i) {
      // topBand without collecting the whole row: the maximum, then the values near it.
      const float* row = m.bandwidthMbps.row(i);
      // The maximum (NaN never wins) in eight independent lanes: one chain of compares would
      // wait on each other (the order of a maximum does not matter).
      float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      size_t j = 0;
      for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; ++k)
          if (row[j + k] > lane[k]) lane[k] = row[j + k];  // false for NaN
      float top = 0;
      for (; j < n; ++j)
        if (row[j] > top) top = row[j];
      for (float x : lane)
        if (x > top) top = x;
      band.clear();
      for (size_t j = 0; j < n; ++j)
        if (row[j] >= 0.75f * top) band.push_back(row[j]);
      double r = top > 0 ? topBand(band) : 0;
      logRate_[i] = r > 0 ? fastLog(static_cast<float>(r)) : 0;
    }
    memberOf_.assign(n, {});
    for (size_t s = 0; s < sharedSets.size(); ++s) {
      if (sharedSets[s].size() < 2 || sharedSets[s].size() >= n) continue;  // no information
      for (int h : sharedSets[s]) memberOf_[h].push_back(static_cast<int>(s));
      haveShared_ = true;
    }
    for (auto& v : memberOf_) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
  }

  bool haveShared() const { return haveShared_; }

  float bandwidth(size_t i, size_t j) const {
    float bw = m_.bandwidthMbps.at(i, j);
    if (std::isnan(bw)) return kNaN;
    return std::min(logRate_[i], logRate_[j]) - fastLog(bw);
  }
  float latency(size_t i, size_t j) const {
    float l = m_.latencyUs.at(i, j);
    if (std::isnan(l)) return kNaN;
    return fastLog(std::max(l, kLogLatencyFloorUs));
  }
  // Shared links containing exactly one of i and j.
  float shared(size_t i, size_t j) const {
    const auto& a = memberOf_[i];
    const auto& b = memberOf_[j];
    size_t common = 0, x = 0, y = 0;
    while (x < a.size() && y < b.size()) {
      if (a[x] == b[y]) {
        ++common;
        ++x;
        ++y;
      } else if (a[x] < b[y]) {
        ++x;
      } else {
        ++y;
      }
    }
    return static_cast<float>(a.size() + b.size() - 2 * common);
  }
  float value(int f, size_t i, size_t j) const {
    return f == 0 ? bandwidth(i, j) : f == 1 ? latency(i, j) : shared(i, j);
  }

 private:
  const Measurements& m_;
  std::vector<float> logRate_;
  std::vector<std::vector<int>> memberOf_;
  bool haveShared_ = false;
};

struct FeatureFit {
  FeatureReport report;
  double center = 0;  // median within the finest groups: the level-0 value, subtracted
};

FeatureFit analyseFeature(const Features& fx, int f, const std::vector<int>& sample,
                          size_t measuredPairs) {
  FeatureFit fit;
  fit.report.name = f == 0 ? "bandwidth" : "latency";
  fit.report.pairs = measuredPairs;
  size_t s = sample.size();
  if (measuredPairs == 0 || s < 2) return fit;
  std::vector<float> d(s * s, kNaN);
  for (size_t a = 0; a < s; ++a)
    for (size_t b = a + 1; b < s; ++b) {
      float v = fx.value(f, sample[a], sample[b]);
      d[a * s + b] = d[b * s + a] = v;
    }
  Dendrogram dg = averageLinkage(d, s);
  auto cuts = findLevelCuts(dg, kMinLogGap, kSpreadFactor);
  if (cuts.empty()) return fit;
  fit.report.informative = true;
  fit.report.levels = static_cast<int>(cuts.size());
  for (const auto& c : cuts) fit.report.gap = std::max(fit.report.gap, c.gap());
  auto label = cutDendrogram(dg, cuts.front().merges);
  std::vector<double> within;
  for (size_t a = 0; a < s; ++a)
    for (size_t b = a + 1; b < s; ++b)
      if (label[a] == label[b] && !std::isnan(d[a * s + b])) within.push_back(d[a * s + b]);
  double sd = 0;
  if (within.size() >= 2) {
    double mean = std::accumulate(within.begin(), within.end(), 0.0) / within.size();
    double sq = 0;
    for (double v : within) sq += (v - mean) * (v - mean);
    sd = std::sqrt(sq / within.size());
    fit.center = upperMedian(within);
  } else if (within.size() == 1) {
    fit.center = within.front();
  }
  fit.report.sigma = std::max(sd, kMinFeatureSigma);
  return fit;
}

// What shows a switch at level `l` over the kept level `k` below it (see hierarchy.h), from
// the sampled hosts' pairs (bandwidth: means per pair of groups below; latency: medians) and
// the shared links (all hosts).
struct SwitchEvidence {
  double unexplained = std::numeric_limits<double>::quiet_NaN();  // bandwidth, log units
  double latency = std::numeric_limits<double>::quiet_NaN();      // log units
  bool shared = false;
};

SwitchEvidence switchEvidence(const Hierarchy& h, size_t k, size_t l, const Features& fx,
                              const std::vector<int>& sample,
                              const std::vector<std::vector<int>>& sharedSets) {
  const auto& below = h.levels[k].groupOf;
  const auto& above = h.levels[l].groupOf;
  SwitchEvidence e;
  // The groups below with sampled members, numbered 0..g-1; per pair of them the mean
  // bandwidth dissimilarity of their sampled pairs (flat g x g sums: g <= kAnalysisHosts).
  std::vector<int> index(static_cast<size_t>(h.levels[k].groups), -1);
  std::vector<int> up;
  for (int x : sample)
    if (index[below[x]] < 0) {
      index[below[x]] = static_cast<int>(up.size());
      up.push_back(above[x]);
    }
  const size_t g = up.size();
  std::vector<double> sum(g * g, 0);
  std::vector<int> count(g * g, 0);
  std::vector<float> latWithin, latAcross;
  for (size_t a = 0; a < sample.size(); ++a)
    for (size_t b = a + 1; b < sample.size(); ++b) {
      int i = sample[a], j = sample[b];
      if (below[i] == below[j]) continue;
      size_t x = static_cast<size_t>(index[below[i]]), y = static_cast<size_t>(index[below[j]]);
      size_t cell = std::min(x, y) * g + std::max(x, y);
      float v = fx.bandwidth(i, j);
      if (!std::isnan(v)) {
        sum[cell] += v;
        ++count[cell];
      }
      float t = fx.latency(i, j);
      if (!std::isnan(t)) (above[i] == above[j] ? latWithin : latAcross).push_back(t);
    }
  // Each group's uplink deficit: its least dissimilarity to any other group. A flow between two
  // groups shows the narrower of their uplinks, so under uplinks of their own the
  // dissimilarity of a pair is the larger of the two deficits; what exceeds it is shared.
  std::vector<double> deficit(g, std::numeric_limits<double>::infinity());
  for (size_t x = 0; x < g; ++x)
    for (size_t y = x + 1; y < g; ++y)
      if (count[x * g + y] > 0) {
        double m = sum[x * g + y] / count[x * g + y];
        deficit[x] = std::min(deficit[x], m);
        deficit[y] = std::min(deficit[y], m);
      }
  std::vector<double> excess;
  for (size_t x = 0; x < g; ++x)
    for (size_t y = x + 1; y < g; ++y)
      if (count[x * g + y] > 0 && up[x] != up[y])
        excess.push_back(sum[x * g + y] / count[x * g + y] - std::max(deficit[x], deficit[y]));
  if (!excess.empty()) e.unexplained = upperMedian(std::move(excess));
  auto medianF = [](std::vector<float>& v) {
    auto mid = v.begin() + static_cast<long>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return static_cast<double>(*mid);
  };
  if (!latWithin.empty() && !latAcross.empty()) e.latency = medianF(latAcross) - medianF(latWithin);
  // A shared link over hosts of several groups below, inside one group of this level: the
  // contention probe saw their flows contend on a link above the groups below.
  for (const auto& set : sharedSets) {
    if (set.size() < 2 || set.size() >= h.n) continue;
    bool one = true, several = false;
    for (int x : set) {
      one = one && above[x] == above[set.front()];
      several = several || below[x] != below[set.front()];
    }
    e.shared = e.shared || (one && several);
  }
  return e;
}

// Drops the levels above the innermost that no signal shows to be a switch (hierarchy.h), and
// names the levels left by their place.
void keepSwitchLevels(Hierarchy& h, const Features& fx, const FeatureFit (&fits)[2],
                      const std::vector<int>& sample,
                      const std::vector<std::vector<int>>& sharedSets) {
  size_t k = 0;  // the kept level below the one judged
  for (size_t l = 1; l < h.levels.size();) {
    SwitchEvidence e = switchEvidence(h, k, l, fx, sample, sharedSets);
    auto shows = [&](int f, double x) {
      return fits[f].report.informative && !std::isnan(x) &&
             x >= kSwitchSigmas * fits[f].report.sigma;
    };
    if (shows(0, e.unexplained) || shows(1, e.latency) || e.shared) {
      k = l++;
      continue;
    }
    Hierarchy::RateClass rc;
    rc.groups = h.levels[l].groups;
    rc.groupOf = h.levels[l].groupOf;
    rc.below = h.levels[k].name;
    rc.unexplainedLog = std::isnan(e.unexplained) ? 0 : e.unexplained;
    rc.latencyLog = std::isnan(e.latency) ? 0 : e.latency;
    RANKMAP_INFO(Reorder,
                 "hierarchy: {} groups above the {}s are a rate class, not a switch (flows across "
                 "them {:+.0f}% slower than the {}s' own uplinks explain, latency {:+.0f}%, no "
                 "shared link): not a level",
                 rc.groups, rc.below, 100 * (std::exp(rc.unexplainedLog) - 1), rc.below,
                 100 * (std::exp(rc.latencyLog) - 1));
    h.rateClasses.push_back(std::move(rc));
    h.levels.erase(h.levels.begin() + static_cast<long>(l));
  }
  for (size_t l = 0; l < h.levels.size(); ++l) h.levels[l].name = levelName(l);
}

}  // namespace

int Hierarchy::lcaLevel(int a, int b) const {
  for (size_t l = 0; l < levels.size(); ++l)
    if (levels[l].groupOf[a] == levels[l].groupOf[b]) return static_cast<int>(l);
  return static_cast<int>(levels.size());
}

std::vector<std::vector<int>> Hierarchy::members(size_t l) const {
  std::vector<std::vector<int>> out(levels.at(l).groups);
  for (size_t h = 0; h < n; ++h) out[levels[l].groupOf[h]].push_back(static_cast<int>(h));
  return out;
}

std::vector<HierarchyLevel> Hierarchy::toLevels(const std::vector<std::string>& names) const {
  std::vector<HierarchyLevel> out;
  for (size_t l = 0; l < levels.size(); ++l) {
    HierarchyLevel hl;
    hl.name = levels[l].name;
    hl.confidence = levels[l].confidence;
    for (const auto& g : members(l)) {
      std::vector<std::string> gn;
      for (int h : g) gn.push_back(names[h]);
      hl.groups.push_back(std::move(gn));
    }
    out.push_back(std::move(hl));
  }
  return out;
}

Hierarchy inferHierarchy(const Measurements& m, const std::vector<std::vector<int>>& sharedSets) {
  Hierarchy h;
  size_t n = m.n;
  h.n = n;
  if (n < 2) return h;
  Features fx(m, sharedSets);
  auto sample = sampleHosts(n);

  FeatureFit fits[2] = {analyseFeature(fx, 0, sample, m.bandwidthPairs),
                        analyseFeature(fx, 1, sample, m.latencyPairs)};
  double weight[2] = {0, 0};
  int informative = 0;
  for (int f = 0; f < 2; ++f) {
    h.features.push_back(fits[f].report);
    if (fits[f].report.informative) {
      weight[f] = 1.0 / fits[f].report.sigma;
      ++informative;
    }
  }
  FeatureReport shared;
  shared.name = "shared_links";
  shared.pairs = fx.haveShared() ? m.pairs() : 0;
  shared.informative = fx.haveShared();
  h.features.push_back(shared);
  if (informative == 0 && !fx.haveShared()) {
    RANKMAP_INFO(Reorder, "hierarchy: no signal shows any level: the network looks flat");
    return h;
  }
  double totalWeight = weight[0] + weight[1];

  // The combined dissimilarity in noise units, straight into the linkage's working matrix.
  // The confidence needs the values again after the linkage has consumed them: keep a
  // deterministic sample of at most kConfidencePairs pairs.
  constexpr size_t kTile = 64;  // both writes of a pair stay in cache
  constexpr double kConfidencePairs = 2e6;
  auto combined = [&](size_t i, size_t j) {
    double num = 0, w = 0;
    for (int f = 0; f < 2; ++f) {
      if (weight[f] == 0) continue;
      float v = fx.value(f, i, j);
      if (std::isnan(v)) continue;
      num += weight[f] * (v - fits[f].center);
      w += weight[f];
    }
    double v = std::numeric_limits<double>::quiet_NaN();
    if (w > 0) v = num / w * totalWeight;
    if (fx.haveShared()) v = (std::isnan(v) ? 0 : v) + kSharedLinkSigmas * fx.shared(i, j);
    return static_cast<float>(v);
  };
  struct PairValue {
    int i, j;
    float v;
  };
  double keep = std::min(1.0, kConfidencePairs / std::max<double>(1, m.pairs()));
  std::vector<PairValue> kept;
  kept.reserve(static_cast<size_t>(keep * m.pairs() * 1.05) + 16);
  // Every off-diagonal cell is written below. The values are finite or NaN (fastLog is finite
  // for every non-NaN float), as the linkage requires of measured values (never +inf).
  LinkageMatrix cells(n * n);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (size_t bi = 0; bi < n; bi += kTile)
    for (size_t bj = bi; bj < n; bj += kTile)
      for (size_t i = bi; i < std::min(n, bi + kTile); ++i)
        for (size_t j = std::max(bj, i + 1); j < std::min(n, bj + kTile); ++j) {
          float v = combined(i, j);
          bool has = !std::isnan(v);
          cells[i * n + j] = cells[j * n + i] = has ? v : kInf;
          if (has && (keep >= 1 || pairHash(i, j) < keep))
            kept.push_back({static_cast<int>(i), static_cast<int>(j), v});
        }
  double minGap =
      informative > 0 ? kMinSigmaGap * std::sqrt(double(informative)) : 0.5 * kSharedLinkSigmas;
  Dendrogram dg = averageLinkage(std::move(cells), n);
  auto cuts = findLevelCuts(dg, minGap, kSpreadFactor);
  for (size_t l = 0; l < cuts.size(); ++l) {
    Hierarchy::Level level;
    level.name = levelName(l);
    level.groupOf = cutDendrogram(dg, cuts[l].merges);
    level.groups = *std::max_element(level.groupOf.begin(), level.groupOf.end()) + 1;
    level.gap = cuts[l].gap();
    h.levels.push_back(std::move(level));
  }

  // Confidence: balanced accuracy of the cut as a pair classifier, times margin and coverage.
  size_t L = cuts.size();
  std::vector<double> withinOk(L, 0), within(L, 0), acrossOk(L, 0), across(L, 0);
  for (const auto& p : kept)
    for (size_t l = 0; l < L; ++l) {
      double t = 0.5 * (cuts[l].below + cuts[l].above);
      if (h.levels[l].groupOf[p.i] == h.levels[l].groupOf[p.j]) {
        within[l] += 1;
        withinOk[l] += p.v < t;
      } else {
        across[l] += 1;
        acrossOk[l] += p.v > t;
      }
    }
  double coverage = std::min(1.0, m.coverage() / 0.8);
  if (fx.haveShared()) coverage = std::max(coverage, 0.9);
  for (size_t l = 0; l < L; ++l) {
    double wa = within[l] > 0 ? withinOk[l] / within[l] : 1.0;
    double aa = across[l] > 0 ? acrossOk[l] / across[l] : 1.0;
    double balanced = std::clamp(2 * (0.5 * (wa + aa)) - 1, 0.0, 1.0);
    double margin = std::min(1.0, cuts[l].gap() / (2 * minGap));
    h.levels[l].confidence = std::round(balanced * margin * coverage * 1000) / 1000;
    RANKMAP_DEBUG(Reorder,
                  "hierarchy: level {} ({} groups): gap {:.1f}, pairs within {:.3f} "
                  "across {:.3f} consistent, confidence {:.3f}",
                  h.levels[l].name, h.levels[l].groups, cuts[l].gap(), wa, aa,
                  h.levels[l].confidence);
  }
  keepSwitchLevels(h, fx, fits, sample, sharedSets);
  return h;
}

Hierarchy hierarchyFromLevels(const std::vector<HierarchyLevel>& levels,
                              const std::vector<std::string>& names, std::string_view source) {
  Hierarchy h;
  h.n = names.size();
  std::map<std::string, int> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = static_cast<int>(i);
  for (size_t l = 0; l < levels.size(); ++l) {
    Hierarchy::Level level;
    level.name = levels[l].name;
    level.confidence = levels[l].confidence;
    level.groupOf.assign(h.n, -1);
    // Relabel groups by lowest member, as inference does.
    std::vector<std::pair<int, size_t>> firsts;
    for (size_t g = 0; g < levels[l].groups.size(); ++g) {
      int lo = std::numeric_limits<int>::max();
      for (const auto& name : levels[l].groups[g]) {
        auto it = index.find(name);
        if (it == index.end())
          throw InvalidInput(
              fmt::format("{}: at /groups/{}/groups/{}: host '{}' is not one of the "
                          "planned hosts",
                          source, l, g, name));
        lo = std::min(lo, it->second);
      }
      firsts.push_back({lo, g});
    }
    std::sort(firsts.begin(), firsts.end());
    for (size_t k = 0; k < firsts.size(); ++k)
      for (const auto& name : levels[l].groups[firsts[k].second])
        level.groupOf[index.at(name)] = static_cast<int>(k);
    for (size_t i = 0; i < h.n; ++i)
      if (level.groupOf[i] < 0)
        throw InvalidInput(
            fmt::format("{}: at /groups/{}: host '{}' is in no group", source, l, names[i]));
    level.groups = static_cast<int>(firsts.size());
    if (l > 0) {
      const auto& finer = h.levels.back().groupOf;
      std::map<int, int> up;
      for (size_t i = 0; i < h.n; ++i) {
        auto [it, fresh] = up.emplace(finer[i], level.groupOf[i]);
        if (!fresh && it->second != level.groupOf[i])
          throw InvalidInput(
              fmt::format("{}: at /groups/{}: expected groups made of whole groups "
                          "of level {} ('{}' splits one)",
                          source, l, l - 1, names[i]));
      }
    }
    h.levels.push_back(std::move(level));
  }
  return h;
}

double adjustedRandIndex(const std::vector<int>& a, const std::vector<int>& b) {
  RANKMAP_ASSERT(a.size() == b.size());
  size_t n = a.size();
  if (n < 2) return 1.0;
  std::map<std::pair<int, int>, double> cell;
  std::map<int, double> ra, rb;
  for (size_t i = 0; i < n; ++i) {
    cell[{a[i], b[i]}] += 1;
    ra[a[i]] += 1;
    rb[b[i]] += 1;
  }
  auto c2 = [](double x) { return x * (x - 1) / 2; };
  double index = 0, sa = 0, sb = 0;
  for (const auto& [k, v] : cell) index += c2(v);
  for (const auto& [k, v] : ra) sa += c2(v);
  for (const auto& [k, v] : rb) sb += c2(v);
  double expected = sa * sb / c2(static_cast<double>(n));
  double maxIndex = 0.5 * (sa + sb);
  if (maxIndex == expected) return 1.0;  // both trivial (all singletons or one group)
  return (index - expected) / (maxIndex - expected);
}

}  // namespace rankmap::reorder
