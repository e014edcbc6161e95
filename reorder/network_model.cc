#include "reorder/network_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "common/maxmin.h"
#include "reorder/numeric.h"

namespace rankmap::reorder {
namespace {

// A histogram of rates on a log scale (1% bins), for groups with millions of pairs.
class LogHistogram {
 public:
  static constexpr double kLo = 1e-3, kStep = 0.01;
  static constexpr int kBins = 2400;  // 1e-3 .. ~2.6e7 Mbit/s
  void add(double x) {
    float v = static_cast<float>(std::max(x, kLo) / kLo);
    int b = std::clamp(static_cast<int>(fastLog(v) / kStep), 0, kBins - 1);
    if (bins_.empty()) bins_.assign(kBins, 0);
    ++bins_[b];
    ++total_;
  }
  size_t total() const { return total_; }
  double topBand() const {
    if (total_ == 0) return 0;
    auto center = [](int b) { return kLo * std::exp((b + 0.5) * kStep); };
    int ref = kBins - 1;
    while (ref > 0 && bins_[ref] == 0) --ref;
    double lo = 0.75 * center(ref);
    size_t band = 0;
    int b = ref;
    for (; b >= 0 && center(b) >= lo; --b) band += bins_[b];
    size_t half = band / 2, acc = 0;
    for (b = ref; b >= 0; --b) {
      acc += bins_[b];
      if (acc > half) return center(b);
    }
    return center(ref);
  }

 private:
  std::vector<uint32_t> bins_;
  size_t total_ = 0;
};

// Sampled pairs are random cells of N x N matrices (64 MiB each at 4096 hosts): a cache and
// TLB miss each. Reading them kPrefetchAhead ahead overlaps the misses.
constexpr size_t kPrefetchAhead = 16;
inline void prefetchCell(const PairMatrix& m, int i, int j) {
  __builtin_prefetch(m.row(static_cast<size_t>(i)) + j);
}

void buildSwitches(NetworkModel& net, const Hierarchy& h) {
  size_t n = h.n, L = h.levels.size();
  net.n = n;
  net.levels = L;
  net.switchOf.assign(n * L, -1);
  std::vector<int> offset(L + 1, 0);
  for (size_t l = 0; l < L; ++l) offset[l + 1] = offset[l] + h.levels[l].groups;
  net.switchLevel.assign(offset[L], 0);
  net.switchParent.assign(offset[L], -1);
  net.switchSize.assign(offset[L], 0);
  for (size_t l = 0; l < L; ++l)
    for (size_t x = 0; x < n; ++x) {
      int s = offset[l] + h.levels[l].groupOf[x];
      net.switchOf[x * L + l] = s;
      net.switchLevel[s] = static_cast<int>(l);
      net.switchParent[s] = l + 1 < L ? offset[l + 1] + h.levels[l + 1].groupOf[x] : -1;
      ++net.switchSize[s];
    }
}

}  // namespace

NetworkModel::SwitchTree NetworkModel::switchTree() const {
  SwitchTree t;
  t.hostsOf.resize(switches());
  t.children.resize(switches());
  std::vector<char> seen(switches(), 0);
  for (size_t h = 0; h < n; ++h) {
    if (levels > 0) t.hostsOf[switchAt(static_cast<int>(h), 0)].push_back(static_cast<int>(h));
    for (size_t l = 0; l < levels; ++l) {
      int s = switchAt(static_cast<int>(h), l);
      if (seen[s]) continue;
      seen[s] = 1;
      if (switchParent[s] < 0)
        t.tops.push_back(s);
      else
        t.children[switchParent[s]].push_back(s);
    }
  }
  return t;
}

double NetworkModel::latencyUs(int a, int b) const {
  if (a == b) return 0;
  if (latency) return latency->at(a, b);
  double sum = 0;
  forEachLink(a, b,
              [&](size_t link, bool) { sum += linkLatencyUs.empty() ? 0 : linkLatencyUs[link]; });
  return sum;
}

double NetworkModel::capMbps(int a, int b) const {
  if (!caps || a == b) return kInf;
  float c = caps->at(a, b);
  return std::isnan(c) ? kInf : c;
}

bool NetworkModel::heterogeneousHosts(double ratio) const {
  if (hostMbps.empty()) return false;
  auto [lo, hi] = std::minmax_element(hostMbps.begin(), hostMbps.end());
  return *hi > ratio * *lo;
}

double NetworkModel::ringBoundMbps() const {
  double bound = kInf;
  if (n < 2) return bound;
  for (double r : hostMbps) bound = std::min(bound, r);
  for (size_t s = 0; s < switches(); ++s)
    if (switchSize[s] < static_cast<int>(n)) bound = std::min(bound, uplinkMbps[s]);
  return bound;
}

namespace {

// Everything but the matrices; `levelLat` receives the latency to impute per level.
NetworkModel inferModel(const Measurements& m, const Hierarchy& h,
                        const std::vector<std::vector<int>>& sharedSets,
                        const std::vector<double>& sharedMbps, std::vector<std::string>& warnings,
                        std::vector<double>& levelLat) {
  NetworkModel net;
  buildSwitches(net, h);
  size_t n = m.n, L = net.levels;

  // Host links: flows inside the innermost group cross no uplink.
  std::vector<std::vector<int>> innermost(L > 0 ? net.switches() : 1);
  for (size_t x = 0; x < n; ++x) innermost[L > 0 ? net.switchAt(x, 0) : 0].push_back(x);
  net.hostMbps.assign(n, 0);
  std::vector<double> known;
  for (size_t x = 0; x < n; ++x) {
    std::vector<double> v;
    for (int y : innermost[L > 0 ? net.switchAt(x, 0) : 0])
      if (y != static_cast<int>(x) && m.bandwidthMbps.has(x, y))
        v.push_back(m.bandwidthMbps.at(x, y));
    if (v.empty())  // alone in its group: its flows all leave it
      for (size_t y = 0; y < n; ++y)
        if (m.bandwidthMbps.has(x, y)) v.push_back(m.bandwidthMbps.at(x, y));
    net.hostMbps[x] = topBand(v);
    if (net.hostMbps[x] > 0) known.push_back(net.hostMbps[x]);
  }
  double typical = kDefaultHostMbps;
  if (!known.empty()) {
    std::nth_element(known.begin(), known.begin() + known.size() / 2, known.end());
    typical = known[known.size() / 2];
  } else if (n > 1) {
    warnings.push_back(
        fmt::format("no bandwidth measured: assuming {:g} Mbit/s host links; "
                    "only the latency terms are meaningful",
                    kDefaultHostMbps));
  }
  for (auto& r : net.hostMbps)
    if (r <= 0) r = typical;

  // Uplinks: single flows between sibling groups show the narrowest uplink on their path. Big
  // groups see millions of such pairs; kUplinkSamples of them, drawn by a seeded generator, are
  // plenty for a 1% histogram (and kLatencySamples pairs for the latency medians per level).
  // Small cases are enumerated exhaustively.
  constexpr size_t kUplinkSamples = 8000, kLatencySamples = 200000;
  std::vector<std::vector<int>> hostsOf(net.switches());
  for (size_t x = 0; x < n; ++x)
    for (size_t l = 0; l < L; ++l) hostsOf[net.switchAt(x, l)].push_back(static_cast<int>(x));
  std::vector<int> everyone(n);
  std::iota(everyone.begin(), everyone.end(), 0);
  std::vector<LogHistogram> hist(net.switches());
  std::vector<std::pair<int, int>> sampled;
  for (size_t s = 0; s < net.switches(); ++s) {
    const auto& inside = hostsOf[s];
    int parent = net.switchParent[s];
    const auto& pool = parent < 0 ? everyone : hostsOf[parent];
    size_t outside = pool.size() - inside.size();
    if (outside == 0) continue;
    auto add = [&](int a, int b) {
      float bw = m.bandwidthMbps.at(a, b);
      if (!std::isnan(bw)) hist[s].add(bw);
    };
    if (inside.size() * outside <= kUplinkSamples) {
      for (int a : inside)
        for (int b : pool)
          if (net.switchAt(b, net.switchLevel[s]) != static_cast<int>(s)) add(a, b);
      continue;
    }
    uint64_t state = 0x51ed0000ull + s;
    sampled.clear();
    for (size_t k = 0, tries = 0; k < kUplinkSamples && tries < 64 * kUplinkSamples; ++tries) {
      int a = inside[splitmix64(state) % inside.size()];
      int b = pool[splitmix64(state) % pool.size()];
      if (net.switchAt(b, net.switchLevel[s]) == static_cast<int>(s)) continue;  // inside
      sampled.push_back({a, b});
      ++k;
    }
    // Random cells of an N x N matrix: read them a few ahead (same values, same order).
    for (size_t k = 0; k < sampled.size(); ++k) {
      if (k + kPrefetchAhead < sampled.size())
        prefetchCell(m.bandwidthMbps, sampled[k + kPrefetchAhead].first,
                     sampled[k + kPrefetchAhead].second);
      add(sampled[k].first, sampled[k].second);
    }
  }
  std::vector<std::vector<float>> latByLevel(L + 1);
  auto addLatency = [&](size_t i, size_t j) {
    float v = m.latencyUs.at(i, j);
    if (!std::isnan(v)) latByLevel[net.lcaLevel(i, j)].push_back(v);
  };
  if (m.pairs() <= kLatencySamples) {
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) addLatency(i, j);
  } else {
    // Random pairs under-sample the innermost level (1% of pairs in 4096 hosts with racks of
    // 32); add each host's own group, which is small, exhaustively.
    uint64_t state = 0x1a7e0000ull + n;
    sampled.clear();
    for (size_t k = 0; k < kLatencySamples; ++k) {
      size_t i = splitmix64(state) % n, j = splitmix64(state) % n;
      if (i != j && (L == 0 || net.lcaLevel(i, j) > 0))
        sampled.push_back({static_cast<int>(i), static_cast<int>(j)});
    }
    for (size_t k = 0; k < sampled.size(); ++k) {
      if (k + kPrefetchAhead < sampled.size())
        prefetchCell(m.latencyUs, sampled[k + kPrefetchAhead].first,
                     sampled[k + kPrefetchAhead].second);
      addLatency(sampled[k].first, sampled[k].second);
    }
    if (L > 0)
      for (size_t x = 0; x < n; ++x)
        for (int y : hostsOf[net.switchAt(x, 0)])
          if (static_cast<size_t>(y) > x) addLatency(x, y);
  }
  net.uplinkMbps.assign(net.switches(), 0);
  for (size_t s = 0; s < net.switches(); ++s) net.uplinkMbps[s] = hist[s].topBand();

  // Shared links with exactly a group's hosts give that uplink's capacity directly.
  std::map<std::vector<int>, int> groupKey;
  for (size_t l = 0; l < L; ++l) {
    auto groups = h.members(l);
    for (size_t g = 0; g < groups.size(); ++g)
      groupKey.emplace(groups[g], net.switchAt(groups[g][0], l));
  }
  for (size_t k = 0; k < sharedSets.size(); ++k) {
    std::vector<int> key = sharedSets[k];
    std::sort(key.begin(), key.end());
    key.erase(std::unique(key.begin(), key.end()), key.end());
    auto it = groupKey.find(key);
    if (it != groupKey.end() && sharedMbps[k] > 0) {
      net.uplinkMbps[it->second] = sharedMbps[k];
    } else if (key.size() >= 2 && key.size() < n) {
      RANKMAP_DEBUG(Reorder,
                    "network: shared link {} of {} hosts matches no inferred group; "
                    "its capacity is not used",
                    k, key.size());
    }
  }
  for (size_t l = 0; l < L; ++l) {
    std::vector<double> lv;
    for (size_t s = 0; s < net.switches(); ++s)
      if (net.switchLevel[s] == static_cast<int>(l) && net.uplinkMbps[s] > 0)
        lv.push_back(net.uplinkMbps[s]);
    double fill = 0;
    if (!lv.empty()) {
      std::nth_element(lv.begin(), lv.begin() + lv.size() / 2, lv.end());
      fill = lv[lv.size() / 2];
    }
    for (size_t s = 0; s < net.switches(); ++s) {
      if (net.switchLevel[s] != static_cast<int>(l) || net.uplinkMbps[s] > 0) continue;
      double r = fill;
      if (r <= 0) {  // nothing seen at this level: the group's slowest host link
        r = kInf;
        for (size_t x = 0; x < n; ++x)
          if (net.switchAt(x, l) == static_cast<int>(s)) r = std::min(r, net.hostMbps[x]);
      }
      net.uplinkMbps[s] = r;
    }
  }

  // Say so when no flow could show an uplink: the gain then rests on an assumption.
  for (size_t l = 0; l < L; ++l) {
    size_t hidden = 0, total = 0;
    for (size_t s = 0; s < net.switches(); ++s) {
      if (net.switchLevel[s] != static_cast<int>(l) || net.switchSize[s] >= static_cast<int>(n))
        continue;
      ++total;
      bool fromShared = false;
      for (size_t k = 0; k < sharedSets.size() && !fromShared; ++k)
        fromShared = static_cast<int>(sharedSets[k].size()) == net.switchSize[s] &&
                     net.uplinkMbps[s] == sharedMbps[k];
      if (!fromShared && net.uplinkMbps[s] >= 0.9 * typical) ++hidden;
    }
    if (total > 0 && hidden * 2 > total)
      warnings.push_back(fmt::format(
          "{} uplinks: single flows across {}s run at the host rate, so the uplinks' capacity "
          "cannot be seen; it is assumed to be one flow's rate (oversubscribed), which the "
          "predicted gain rests on",
          h.levels[l].name, h.levels[l].name));
  }

  // Latency: measured, missing pairs imputed by the median of their level.
  levelLat.assign(L + 1, 0);
  std::vector<float> all;
  for (size_t l = 0; l <= L; ++l) {
    all.insert(all.end(), latByLevel[l].begin(), latByLevel[l].end());
    levelLat[l] = upperMedianInPlace(latByLevel[l]);
  }
  double global = all.empty() ? kDefaultLatencyUs : upperMedianInPlace(all);
  if (all.empty() && n > 1)
    warnings.push_back(fmt::format("no latency measured: assuming {:g} us per pair", global));
  for (auto& v : levelLat)
    if (std::isnan(v)) v = global;
  return net;
}

// The measured latency (missing pairs imputed by their level's median) becomes the model's, and
// so do the measured rates of the pairs that are anomalies: slower than kAnomalyRatio times what
// the tree allows them. Only those cap flows; the rest is measurement noise, and capping by
// noise would make the ring chase it.
void attachMatrices(NetworkModel& net, PairMatrix latency, PairMatrix bandwidth,
                    const std::vector<double>& levelLat) {
  size_t n = net.n, L = net.levels;
  size_t anomalies = 0;
  // What the tree allows a flow from x that climbs to level t: the narrowest of x's host link
  // and its groups' uplinks below t. A pair's rate is the smaller of its two ends'.
  std::vector<double> allows(n * (L + 1));
  for (size_t x = 0; x < n; ++x) {
    double r = net.hostMbps[x];
    allows[x * (L + 1)] = r;
    for (size_t l = 0; l < L; ++l) {
      r = std::min(r, net.uplinkMbps[net.switchAt(static_cast<int>(x), l)]);
      allows[x * (L + 1) + l + 1] = r;
    }
  }
  // Tiles: set() writes both (i, j) and (j, i); a tile keeps the second write in cache.
  constexpr size_t kTile = 64;
  for (size_t bi = 0; bi < n; bi += kTile)
    for (size_t bj = bi; bj < n; bj += kTile)
      for (size_t i = bi; i < std::min(n, bi + kTile); ++i) {
        const float* row = latency.row(i);
        const float* bw = bandwidth.row(i);
        for (size_t j = std::max(bj, i + 1); j < std::min(n, bj + kTile); ++j) {
          bool noLat = std::isnan(row[j]), hasBw = !std::isnan(bw[j]);
          if (!noLat && !hasBw) continue;
          size_t top = net.lcaLevel(static_cast<int>(i), static_cast<int>(j));
          if (noLat) latency.set(i, j, static_cast<float>(levelLat[top]));
          if (!hasBw) continue;
          double tree = std::min(allows[i * (L + 1) + top], allows[j * (L + 1) + top]);
          if (bw[j] >= kAnomalyRatio * tree)
            bandwidth.set(i, j, std::numeric_limits<float>::quiet_NaN());
          else
            ++anomalies;
        }
      }
  if (anomalies > 0)
    RANKMAP_DEBUG(Reorder,
                  "network: {} pair(s) measured below {:g}x of what the tree allows; "
                  "they cap their flows",
                  anomalies, kAnomalyRatio);
  net.latency = std::make_shared<const PairMatrix>(std::move(latency));
  net.caps = std::make_shared<const PairMatrix>(std::move(bandwidth));
}

}  // namespace

NetworkModel inferNetwork(const Measurements& m, const Hierarchy& h,
                          const std::vector<std::vector<int>>& sharedSets,
                          const std::vector<double>& sharedMbps,
                          std::vector<std::string>& warnings) {
  std::vector<double> levelLat;
  NetworkModel net = inferModel(m, h, sharedSets, sharedMbps, warnings, levelLat);
  attachMatrices(net, m.latencyUs, m.bandwidthMbps, levelLat);
  return net;
}

NetworkModel inferNetwork(Measurements&& m, const Hierarchy& h,
                          const std::vector<std::vector<int>>& sharedSets,
                          const std::vector<double>& sharedMbps,
                          std::vector<std::string>& warnings) {
  std::vector<double> levelLat;
  NetworkModel net = inferModel(m, h, sharedSets, sharedMbps, warnings, levelLat);
  attachMatrices(net, std::move(m.latencyUs), std::move(m.bandwidthMbps), levelLat);
  return net;
}

NetworkModel modelFromHierarchy(const Hierarchy& h, std::vector<double> hostMbps,
                                const std::vector<double>& uplinkMbpsByLevel, double hostLatencyUs,
                                const std::vector<double>& uplinkLatencyByLevel) {
  NetworkModel net;
  buildSwitches(net, h);
  RANKMAP_ASSERT(hostMbps.size() == h.n);
  RANKMAP_ASSERT(uplinkMbpsByLevel.size() == net.levels);
  RANKMAP_ASSERT(uplinkLatencyByLevel.size() == net.levels);
  net.hostMbps = std::move(hostMbps);
  net.uplinkMbps.resize(net.switches());
  net.linkLatencyUs.assign(net.links(), hostLatencyUs);
  for (size_t s = 0; s < net.switches(); ++s) {
    net.uplinkMbps[s] = uplinkMbpsByLevel[net.switchLevel[s]];
    net.linkLatencyUs[net.n + s] = uplinkLatencyByLevel[net.switchLevel[s]];
  }
  return net;
}

namespace {

double medianOfKnown(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !(x > 0); }), v.end());
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The topology's latency matrix as the model's: one value per pair (the mean of the two
// directions' minimum), missing pairs from `fill(i, j)`.
template <typename Fill>
PairMatrix latencyFromMatrix(const Topology& t, Fill&& fill) {
  size_t n = t.size();
  PairMatrix m(n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      const auto& a = t.latencyUs.at(i, j);
      const auto& b = t.latencyUs.at(j, i);
      double v = a && b ? 0.5 * (a->minUs + b->minUs) : a ? a->minUs : b ? b->minUs : fill(i, j);
      m.set(i, j, static_cast<float>(v));
    }
  return m;
}

}  // namespace

NetworkModel networkFromLinks(const Topology& t, const Hierarchy& h,
                              std::vector<std::string>& warnings) {
  RANKMAP_ASSERT(t.links && h.n == t.size() && h.levels.size() == t.groups.size());
  const TopologyLinks& links = *t.links;
  NetworkModel net;
  buildSwitches(net, h);
  size_t n = net.n, L = net.levels;
  RANKMAP_ASSERT(links.hosts.size() == n && links.uplinks.size() == L &&
                 links.uplinkLatencyUs.size() == L);

  net.hostMbps.resize(n);
  for (size_t x = 0; x < n; ++x)
    net.hostMbps[x] = std::min(links.hosts[x].outMbps, links.hosts[x].inMbps);
  double typicalHost = medianOfKnown(net.hostMbps);
  if (typicalHost <= 0) typicalHost = kDefaultHostMbps;
  size_t unknownHosts = 0;
  for (auto& r : net.hostMbps)
    if (!(r > 0)) {
      r = typicalHost;
      ++unknownHosts;
    }
  if (unknownHosts > 0)
    warnings.push_back(
        fmt::format("links: {} host link(s) of capacity 0 (unknown): taken to be "
                    "{:g} Mbit/s, the median of the others",
                    unknownHosts, typicalHost));

  // Document group g of level l is the switch of its first member (the hierarchy relabels
  // groups by lowest member; the switches follow the hierarchy).
  std::unordered_map<std::string_view, int> index;
  for (size_t x = 0; x < n; ++x) index.emplace(t.hosts[x].name, static_cast<int>(x));
  net.uplinkMbps.assign(net.switches(), 0);
  for (size_t l = 0; l < L; ++l) {
    const auto& groups = t.groups[l].groups;
    RANKMAP_ASSERT(links.uplinks[l].size() == groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      int s = net.switchAt(index.at(groups[g].front()), l);
      net.uplinkMbps[s] = std::min(links.uplinks[l][g].outMbps, links.uplinks[l][g].inMbps);
    }
  }
  for (size_t l = 0; l < L; ++l) {
    std::vector<double> known;
    for (size_t s = 0; s < net.switches(); ++s)
      if (net.switchLevel[s] == static_cast<int>(l)) known.push_back(net.uplinkMbps[s]);
    double fill = medianOfKnown(known);
    size_t unknown = 0;
    for (size_t s = 0; s < net.switches(); ++s) {
      if (net.switchLevel[s] != static_cast<int>(l) || net.uplinkMbps[s] > 0) continue;
      double r = fill;
      if (r <= 0) {  // nothing known at this level: the group's slowest host link
        r = kInf;
        for (size_t x = 0; x < n; ++x)
          if (net.switchAt(static_cast<int>(x), l) == static_cast<int>(s))
            r = std::min(r, net.hostMbps[x]);
      }
      net.uplinkMbps[s] = r;
      ++unknown;
    }
    if (unknown > 0)
      warnings.push_back(
          fmt::format("links: {} {} uplink(s) of capacity 0 (unknown): taken to "
                      "be the median of the level's others (or the slowest host "
                      "link below)",
                      unknown, h.levels[l].name));
  }

  // Latency: the matrix, the link latencies, or the default, in that order of preference.
  bool linkLatency = links.hostLatencyUs > 0;
  for (double v : links.uplinkLatencyUs) linkLatency = linkLatency || v > 0;
  net.linkLatencyUs.assign(net.links(), 0);
  if (linkLatency) {
    for (size_t x = 0; x < n; ++x) net.linkLatencyUs[x] = links.hostLatencyUs;
    for (size_t s = 0; s < net.switches(); ++s)
      net.linkLatencyUs[n + s] = links.uplinkLatencyUs[net.switchLevel[s]];
  }
  bool matrix = false;
  if (t.hasMatrices())
    for (size_t i = 0; i < n && !matrix; ++i)
      for (size_t j = 0; j < n && !matrix; ++j) matrix = t.latencyUs.at(i, j).has_value();
  if (matrix) {
    double median = 0;
    if (!linkLatency) {
      std::vector<double> all;
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j)
          if (const auto& v = t.latencyUs.at(i, j)) all.push_back(v->minUs);
      median = medianOfKnown(all);
    }
    net.latency = std::make_shared<const PairMatrix>(latencyFromMatrix(t, [&](size_t i, size_t j) {
      return linkLatency ? net.latencyUs(static_cast<int>(i), static_cast<int>(j)) : median;
    }));
  } else if (!linkLatency) {
    // Half the default on each host link: every pair kDefaultLatencyUs, as when nothing was
    // measured on the inference path.
    for (size_t x = 0; x < n; ++x) net.linkLatencyUs[x] = kDefaultLatencyUs / 2;
    if (n > 1)
      warnings.push_back(
          fmt::format("links: no latency known: assuming {:g} us per pair", kDefaultLatencyUs));
  }
  return net;
}

std::vector<double> maxMinRates(const NetworkModel& net, const std::vector<Flow>& flows) {
  // Directed links: 2 * link (up) and 2 * link + 1 (down).
  std::vector<double> room(2 * net.links());
  for (size_t d = 0; d < room.size(); ++d) room[d] = net.linkMbps(d / 2);
  FlowLinks paths;
  std::vector<double> cap(flows.size(), kInf);
  for (size_t f = 0; f < flows.size(); ++f) {
    if (flows[f].src != flows[f].dst) {
      net.forEachLink(flows[f].src, flows[f].dst, [&](size_t link, bool down) {
        paths.push(static_cast<uint32_t>(2 * link + (down ? 1 : 0)));
      });
      cap[f] = net.capMbps(flows[f].src, flows[f].dst);
    }
    paths.endFlow();  // intra-host flows cross nothing and have no cap: unlimited
  }
  return maxMinFill(room, paths, cap);
}

namespace {

// Event-driven fluid simulation of max-min fair sharing with re-sharing at each completion.
//
// Rates are the exact max-min allocation of the flows still running, as progressive filling
// gives them (common/maxmin.h: O((F + L) log) for F flows on L links). At a
// completion the allocation is not recomputed from scratch: progressive filling below the
// lowest rate r of the finished flows is unchanged by their removal (they cross no link that
// saturates below r, and take nothing from links they do not cross), so every flow slower than
// r keeps its rate. The flows of rate >= r that are connected to the finished ones through links
// (directly, or through other flows of rate >= r) are filled again on what the slower flows
// leave; the others share no link with them and so keep theirs too. Each event therefore costs
// the size of that neighbourhood, not of the whole set (hier at 2048 hosts: ~4000 flows,
// mostly one-flow neighbourhoods).
class FluidSim {
 public:
  FluidSim(const NetworkModel& net, const std::vector<Flow>& flows)
      : F_(flows.size()), D_(2 * net.links()) {
    capacity_.resize(D_);
    for (size_t d = 0; d < D_; ++d) capacity_[d] = net.linkMbps(d / 2);
    pathStart_.assign(F_ + 1, 0);
    std::vector<int> count(D_ + 1, 0);
    for (size_t f = 0; f < F_; ++f) {
      net.forEachLink(flows[f].src, flows[f].dst, [&](size_t link, bool down) {
        int d = static_cast<int>(2 * link + (down ? 1 : 0));
        path_.push_back(d);
        ++count[d + 1];
      });
      pathStart_[f + 1] = static_cast<int>(path_.size());
      cap_.push_back(net.capMbps(flows[f].src, flows[f].dst));
      bytes_.push_back(flows[f].bytes);
    }
    linkStart_.assign(D_ + 1, 0);
    for (size_t d = 0; d < D_; ++d) linkStart_[d + 1] = linkStart_[d] + count[d + 1];
    linkFlows_.resize(path_.size());
    std::vector<int> fill(linkStart_.begin(), linkStart_.end() - 1);
    for (size_t f = 0; f < F_; ++f)
      for (int i = pathStart_[f]; i < pathStart_[f + 1]; ++i)
        linkFlows_[fill[path_[i]]++] = static_cast<int>(f);
    rate_.assign(F_, 0);
    left_ = bytes_;
    since_.assign(F_, 0);
    version_.assign(F_, 0);
    active_.assign(F_, 1);
    setMark_.assign(F_, 0);
    linkMark_.assign(D_, 0);
    local_.assign(D_, 0);
  }

  double run() {
    std::vector<int> all(F_);
    std::iota(all.begin(), all.end(), 0);
    fill(all);
    for (size_t f = 0; f < F_; ++f) schedule(static_cast<int>(f), 0);
    size_t live = F_;
    double now = 0;
    std::vector<int> done, affected, queue;
    while (live > 0) {
      // The next completion, and every flow within rounding of finishing with it.
      done.clear();
      while (!events_.empty()) {
        auto [t, f, v] = events_.top();
        if (v != version_[f] || !active_[f]) {
          events_.pop();
          continue;
        }
        if (done.empty()) {
          if (!std::isfinite(t)) return kInf;  // a flow that gets no rate never finishes
          now = t;
        } else if (left_[f] - bytesPerUs(rate_[f]) * (now - since_[f]) > 1e-9 * bytes_[f]) {
          break;
        }
        events_.pop();
        done.push_back(f);
      }
      double slowest = kInf;
      for (int f : done) {
        active_[f] = 0;
        slowest = std::min(slowest, rate_[f]);
      }
      live -= done.size();
      if (live == 0) break;
      // Flows of rate >= the slowest finished one, connected to the finished ones.
      double threshold = slowest * (1 - 1e-9);
      ++epoch_;
      affected.clear();
      queue.clear();
      auto visitLinks = [&](int f) {
        for (int i = pathStart_[f]; i < pathStart_[f + 1]; ++i) {
          int d = path_[i];
          if (linkMark_[d] != epoch_) {
            linkMark_[d] = epoch_;
            queue.push_back(d);
          }
        }
      };
      for (int f : done) visitLinks(f);
      for (size_t q = 0; q < queue.size(); ++q) {
        int d = queue[q];
        for (int i = linkStart_[d]; i < linkStart_[d + 1]; ++i) {
          int g = linkFlows_[i];
          if (!active_[g] || setMark_[g] == epoch_ || rate_[g] < threshold) continue;
          setMark_[g] = epoch_;
          affected.push_back(g);
          visitLinks(g);
        }
      }
      if (affected.empty()) continue;
      std::sort(affected.begin(), affected.end());  // the filling's tie order: by flow index
      for (int g : affected) {
        left_[g] -= bytesPerUs(rate_[g]) * (now - since_[g]);
        since_[g] = now;
      }
      fill(affected);
      for (int g : affected) schedule(g, now);
    }
    return now;
  }

 private:
  void schedule(int f, double now) {
    ++version_[f];
    double t = rate_[f] > 0 ? now + left_[f] / bytesPerUs(rate_[f]) : kInf;
    events_.push({t, f, version_[f]});
  }

  // Max-min filling (common/maxmin.h) of the flows in `set` (active) on what the other active
  // flows leave of each link; the other flows keep their rates.
  void fill(const std::vector<int>& set) {
    ++epoch_;
    for (int f : set) setMark_[f] = epoch_;
    links_.clear();
    subPaths_.clear();
    for (int f : set) {
      for (int i = pathStart_[f]; i < pathStart_[f + 1]; ++i) {
        int d = path_[i];
        if (linkMark_[d] != epoch_) {
          linkMark_[d] = epoch_;
          local_[d] = static_cast<uint32_t>(links_.size());
          links_.push_back(d);
        }
        subPaths_.push(local_[d]);
      }
      subPaths_.endFlow();
    }
    subRoom_.resize(links_.size());
    for (size_t k = 0; k < links_.size(); ++k) {
      int d = links_[k];
      double room = capacity_[d];
      for (int i = linkStart_[d]; i < linkStart_[d + 1]; ++i) {
        int g = linkFlows_[i];
        if (active_[g] && setMark_[g] != epoch_) room -= rate_[g];
      }
      subRoom_[k] = std::max(room, 0.0);
    }
    subCap_.resize(set.size());
    for (size_t k = 0; k < set.size(); ++k) subCap_[k] = cap_[set[k]];
    filler_.fill(subRoom_, subPaths_, subCap_, subRate_);
    for (size_t k = 0; k < set.size(); ++k) rate_[set[k]] = subRate_[k];
  }

  size_t F_, D_;
  std::vector<double> capacity_;  // per directed link
  std::vector<int> pathStart_, path_, linkStart_, linkFlows_;
  std::vector<double> cap_, bytes_, rate_, left_, since_;
  std::vector<int> version_;
  std::vector<char> active_;
  std::vector<unsigned> setMark_, linkMark_;
  unsigned epoch_ = 0;
  std::vector<int> links_;       // directed links of the set being filled
  std::vector<uint32_t> local_;  // directed link -> its index in links_
  FlowLinks subPaths_;
  std::vector<double> subRoom_, subCap_, subRate_;
  MaxMinFiller filler_;
  using Event = std::tuple<double, int, int>;  // finish time, flow, version
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
};

}  // namespace

namespace {
double workCompletionUs(const NetworkModel& net, const std::vector<Flow>& work);

// The inter-host flows of `flows` with bytes, and their bytes together.
double interHost(const std::vector<Flow>& flows, std::vector<Flow>& work) {
  double total = 0;
  for (const auto& f : flows)
    if (f.src != f.dst && f.bytes > 0) {
      work.push_back(f);
      total += f.bytes;
    }
  return total;
}
}  // namespace

double completionUs(const NetworkModel& net, const std::vector<Flow>& flows) {
  std::vector<Flow> work;
  double total = interHost(flows, work);
  if (work.empty()) return 0;
  double t = workCompletionUs(net, work);
  if (std::isfinite(net.fabricMbps)) t = std::max(t, total / bytesPerUs(net.fabricMbps));
  return t;
}

double linksCompletionUs(const NetworkModel& net, const std::vector<Flow>& flows) {
  std::vector<Flow> work;
  interHost(flows, work);
  return work.empty() ? 0 : workCompletionUs(net, work);
}

namespace {
double workCompletionUs(const NetworkModel& net, const std::vector<Flow>& work) {
  bool equal = std::all_of(work.begin(), work.end(),
                           [&](const Flow& f) { return f.bytes == work.front().bytes; });
  if (equal) {
    // The first flows progressive filling freezes are the slowest, at the most loaded link's
    // fair share or at a cap; no later re-sharing slows them (see the header).
    std::vector<int> users(2 * net.links(), 0);
    double slowest = kInf;
    for (const auto& f : work) {
      net.forEachLink(f.src, f.dst,
                      [&](size_t link, bool down) { ++users[2 * link + (down ? 1 : 0)]; });
      slowest = std::min(slowest, net.capMbps(f.src, f.dst));
    }
    for (size_t d = 0; d < users.size(); ++d)
      if (users[d] > 0) slowest = std::min(slowest, net.linkMbps(d / 2) / users[d]);
    return work.front().bytes / bytesPerUs(slowest);
  }
  if (work.size() > kMaxSimulatedFlows) {
    std::vector<double> load(2 * net.links(), 0);
    double t = 0;
    for (const auto& f : work) {
      net.forEachLink(f.src, f.dst,
                      [&](size_t link, bool down) { load[2 * link + (down ? 1 : 0)] += f.bytes; });
      t = std::max(t, f.bytes / bytesPerUs(net.capMbps(f.src, f.dst)));
    }
    for (size_t d = 0; d < load.size(); ++d)
      t = std::max(t, load[d] / bytesPerUs(net.linkMbps(d / 2)));
    return t;
  }
  return FluidSim(net, work).run();
}
}  // namespace

}  // namespace rankmap::reorder
