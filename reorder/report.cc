#include "reorder/report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/openmpi.h"
#include "reorder/cost_model.h"
#include "reorder/mesh.h"
#include "reorder/numeric.h"

namespace rankmap::reorder {
namespace {

std::string rangeText(const AlgoRange& r) {
  if (r.maxBytes == AlgoRange::kUnbounded) return fmt::format(">= {}", sizeText(r.minBytes));
  return fmt::format("{} .. {}", sizeText(r.minBytes), sizeText(r.maxBytes));
}

std::string rangeText(uint64_t minBytes, uint64_t maxBytes) {
  return rangeText(AlgoRange{minBytes, maxBytes});
}

// "ring", "binomial seg 128 KiB", "chain seg 32 KiB fan-out 4".
std::string ompiChoiceText(std::string_view collective, const OmpiRange& r) {
  const OmpiCollective* c = findOmpiCollective(collective);
  const OmpiAlgorithm* a = c ? findOmpiAlgorithm(*c, r.algorithm) : nullptr;
  std::string out = a ? std::string(a->name) : fmt::format("#{}", r.algorithm);
  if (r.segsize) out += " seg " + sizeText(r.segsize);
  if (r.faninout) out += fmt::format(" fan-out {}", r.faninout);
  return out;
}

// "4 hosts each", or "3 groups of 4 hosts, 1 group of 2 hosts" (largest first).
std::string sizesText(const std::vector<std::vector<std::string>>& groups) {
  std::map<size_t, size_t> bySize;
  for (const auto& g : groups) ++bySize[g.size()];
  auto hosts = [](size_t k) { return fmt::format("{} host{}", k, k == 1 ? "" : "s"); };
  if (bySize.size() == 1) return hosts(bySize.begin()->first) + " each";
  std::string out;
  for (auto it = bySize.rbegin(); it != bySize.rend(); ++it)
    out += fmt::format("{}{} group{} of {}", out.empty() ? "" : ", ", it->second,
                       it->second == 1 ? "" : "s", hosts(it->first));
  return out;
}

// A rate in bytes per second with an SI prefix, three significant digits: "41.3 kB/s".
std::string rateText(double bytesPerSecond) {
  const char* units[] = {"B/s", "kB/s", "MB/s", "GB/s", "TB/s"};
  int u = 0;
  while (bytesPerSecond >= 999.5 && u < 4) {
    bytesPerSecond /= 1000;
    ++u;
  }
  return fmt::format("{:.3g} {}", bytesPerSecond, units[u]);
}

// The levels the clustering found that are rate classes, not switches (Hierarchy::rateClasses).
std::string rateClassesText(const Hierarchy& h, const std::string& indent) {
  std::string out;
  for (const auto& rc : h.rateClasses) {
    std::vector<size_t> hosts(static_cast<size_t>(rc.groups), 0);
    for (int g : rc.groupOf) ++hosts[static_cast<size_t>(g)];
    std::string sizes;
    for (size_t g = 0; g < hosts.size(); ++g)
      sizes += fmt::format("{}{}", g == 0 ? "" : g + 1 == hosts.size() ? " and " : ", ", hosts[g]);
    out += fmt::format(
        "{}not a level: {} classes of {}s ({} hosts) by uplink rate: flows across them are as "
        "fast as the {}s' own uplinks allow ({:+.0f}% unexplained), no farther (latency "
        "{:+.0f}%), and no shared link spans them: a rate class, not a switch\n",
        indent, rc.groups, rc.below, sizes, rc.below, 100 * (std::exp(rc.unexplainedLog) - 1),
        100 * (std::exp(rc.latencyLog) - 1));
  }
  return out;
}

std::string gainText(const Prediction& p) {
  if (p.planUs <= 0) return "no prediction";
  return fmt::format(
      "{:.2f}x faster than the input order ({}: {} -> {}; ring bottleneck {:.4g} "
      "-> {:.4g} Mbit/s)",
      p.speedup, p.basis, timeText(p.inputOrderUs), timeText(p.planUs), p.inputBottleneckMbps,
      p.bottleneckMbps);
}

}  // namespace

std::string linkModelText(size_t hosts, size_t measured) {
  size_t pairs = hosts * (hosts - 1);
  return fmt::format("link model: {} of {} directed pairs measured, the other {} inferred",
                     measured, pairs, pairs - std::min(pairs, measured));
}

std::string sizeText(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.4g} {}", v, units[u]);
}

std::string timeText(double us) {
  if (us < 999.5) return fmt::format("{:.3g} us", us);
  if (us < 999.5e3) return fmt::format("{:.3g} ms", us / 1e3);
  if (us < 999.5e6) return fmt::format("{:.3g} s", us / 1e6);
  return fmt::format("{:.0f} s", us / 1e6);  // never an exponent
}

namespace {
// The mesh's predicted step in the plan's order against the world ring's plan and the input
// order, and each dimension alone.
std::string meshSummary(const PlanMesh& m, size_t world, const std::string& basis) {
  std::string dims = meshText(m.dims);
  auto ratio = [&](double other) {
    return m.stepUs > 0 ? fmt::format("{:.2f}x", other / m.stepUs) : std::string("-");
  };
  std::string out = fmt::format(
      "  mesh {}: step {} ({}); world ring's order {} ({}), input order {} ({})\n", dims,
      timeText(m.stepUs), basis.empty() ? "placed" : basis, timeText(m.worldRingStepUs),
      ratio(m.worldRingStepUs), timeText(m.inputStepUs), ratio(m.inputStepUs));
  for (const auto& d : m.dims)
    out += fmt::format("    {} ({} groups of {}): {} {} each, all groups at once {}\n", d.name,
                       world / static_cast<size_t>(d.size), d.size, d.collective, sizeText(d.bytes),
                       timeText(d.predictedUs));
  return out;
}

// Up to this many groups per dimension are listed by `rankmap show`, the slowest first.
constexpr size_t kMeshGroupsShown = 8;

// Each dimension's groups: their ranks, hosts and innermost groups (racks), and each group's
// predicted time alone (PlanMesh's groupsUs), the slowest first.
std::string meshGroupsText(const Plan& p) {
  const PlanMesh& m = *p.mesh;
  std::string out = meshSummary(m, p.worldSize(), "");
  std::map<std::string, size_t> rackOf;
  if (!p.groups.empty())
    for (size_t g = 0; g < p.groups.front().groups.size(); ++g)
      for (const auto& h : p.groups.front().groups[g]) rackOf[h] = g;
  size_t rph = static_cast<size_t>(std::max(1, p.ranksPerHost));
  auto listed = [](const auto& items, size_t limit) {
    std::string s;
    for (size_t i = 0; i < items.size() && i < limit; ++i)
      s += fmt::format("{}{}", i ? " " : "", items[i]);
    if (items.size() > limit) s += fmt::format(" ... ({} more)", items.size() - limit);
    return s;
  };
  for (size_t d = 0; d < m.dims.size(); ++d) {
    const MeshDim& dim = m.dims[d];
    std::vector<std::vector<int>> groups = meshGroups(m.dims, d);
    bool timed = dim.groupsUs.size() == groups.size();
    std::vector<size_t> byTime(groups.size());
    std::iota(byTime.begin(), byTime.end(), 0);
    if (timed)
      std::stable_sort(byTime.begin(), byTime.end(),
                       [&](size_t a, size_t b) { return dim.groupsUs[a] > dim.groupsUs[b]; });
    out += fmt::format("    {} groups{}:\n", dim.name, timed ? ", each alone, slowest first" : "");
    for (size_t i = 0; i < byTime.size() && i < kMeshGroupsShown; ++i) {
      const auto& g = groups[byTime[i]];
      std::vector<std::string> hosts;
      std::vector<size_t> racks;
      for (int r : g) {
        const std::string& h = p.order[static_cast<size_t>(r) / rph];
        if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
        if (auto it = rackOf.find(h);
            it != rackOf.end() && std::find(racks.begin(), racks.end(), it->second) == racks.end())
          racks.push_back(it->second);
      }
      out += fmt::format("      [{}] ranks {} on {}", byTime[i], listed(g, 8), listed(hosts, 8));
      if (!p.groups.empty())
        out += fmt::format(" ({} {})",
                           racks.size() == 1 ? p.groups.front().name : p.groups.front().name + "s",
                           listed(racks, 8));
      out += timed ? fmt::format(": {}\n", timeText(dim.groupsUs[byTime[i]])) : "\n";
    }
    if (groups.size() > kMeshGroupsShown) {
      out += fmt::format("      ... ({} more groups", groups.size() - kMeshGroupsShown);
      if (timed) {
        std::vector<double> t = dim.groupsUs;
        std::sort(t.begin(), t.end());
        out += fmt::format("; all {}: fastest {}, median {}", groups.size(), timeText(t.front()),
                           timeText(t[t.size() / 2]));
      }
      out += ")\n";
    }
  }
  return out;
}
}  // namespace

std::string planSummary(const PlanResult& r) {
  const Plan& p = r.plan;
  std::string out =
      fmt::format("rankmap plan: {} hosts x {} rank(s)", p.hosts.size(), p.ranksPerHost);
  if (r.fallback) {
    out += ": identity order (fallback), confidence 0\n";
  } else {
    out += fmt::format(", confidence {:.3g}\n", p.confidence);
    if (r.linkModel) out += "  " + linkModelText(p.hosts.size(), r.measuredPairs) + "\n";
    if (p.groups.empty()) out += "  groups: none found (the network looks flat)\n";
    for (const auto& g : p.groups)
      out += fmt::format("  {}: {} groups ({}), confidence {:.3g}\n", g.name, g.groups.size(),
                         sizesText(g.groups), g.confidence);
    out += rateClassesText(r.hierarchy, "  ");
    out += "  predicted: " + gainText(p.predicted) + "\n";
    if (p.mesh) out += meshSummary(*p.mesh, p.worldSize(), r.meshBasis);
    for (const auto& [coll, ranges] : p.collectives) {
      out += fmt::format("  {}:", coll);
      for (const auto& range : ranges)
        out += fmt::format(" {} {};", range.algorithm, rangeText(range));
      out.back() = '\n';
    }
    // Every algorithm at the design size, as the engine would run it with this plan.
    if (auto it = r.algorithms.find("allreduce"); it != r.algorithms.end() && !it->second.empty()) {
      const double s = static_cast<double>(r.designBytes);
      out += fmt::format("  allreduce {} predicted:", sizeText(r.designBytes));
      for (const auto& c : it->second)
        out += c.available ? fmt::format(" {} {};", c.algo, timeText(c.timeUs(s)))
                           : fmt::format(" {} n/a;", c.algo);
      out.back() = '\n';
    }
    if (!p.chunkWeights.empty())
      out += p.chunkWeightsBasis == Plan::kWeightsByUplinks
                 ? "  chunk weights: hier's shares balance the groups' uplinks (rankmap show)\n"
                 : "  chunk weights: hier's shares follow the host link rates (rankmap show)\n";
    if (!p.ringWeights.empty())
      out += fmt::format(
          "  ring weights: the engine's ring relieves slow host links, {} (equal "
          "blocks {})\n",
          timeText(p.predicted.ringWeightsUs), timeText(p.predicted.planUs));
    for (const auto& [coll, ranges] : p.openMpi) {
      out += fmt::format("  Open MPI {}:", coll);
      for (const auto& range : ranges)
        out += fmt::format(" {} {};", ompiChoiceText(coll, range),
                           rangeText(range.minBytes, range.maxBytes));
      out.back() = '\n';
    }
  }
  if (p.prior) {
    std::string text = priorText(*p.prior, p.hosts.size());
    // Indented under the summary's first line.
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      out += "  " + text.substr(pos, nl + 1 - pos);
      pos = nl + 1;
    }
  }
  for (const auto& w : r.warnings) out += "  warning: " + w + "\n";
  return out;
}

namespace {

// "h1, h4, h9 and 3 more".
std::string namesText(const std::vector<std::string>& names, size_t show = 8) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < show; ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  if (names.size() > show) out += fmt::format(" and {} more", names.size() - show);
  return out;
}

// The rate measured for `host`, or NaN.
double rateOf(const std::map<std::string, double>& hostMbps, const std::string& host) {
  auto it = hostMbps.find(host);
  return it == hostMbps.end() ? std::nan("") : it->second;
}

// The message sizes for which a plan runs `algo`: "allreduce 64 KiB .. 1 MiB; ..." or "".
std::string sizesUsing(const Plan& p, Algorithm algo) {
  std::string out;
  for (const auto& [coll, ranges] : p.collectives)
    for (const auto& r : ranges)
      if (r.algorithm == algo)
        out += fmt::format("{}{} {}", out.empty() ? "" : "; ", coll, rangeText(r));
  return out;
}

}  // namespace

std::vector<double> treeLoads(const Plan& p) {
  std::vector<double> load(p.order.size(), 0);
  for (const auto& t : p.trees)
    for (size_t i = 0; i < t.parent.size() && i < load.size(); ++i) {
      int up = t.parent[i];
      if (up < 0 || static_cast<size_t>(up) >= load.size()) continue;
      load[i] += t.weight;
      load[static_cast<size_t>(up)] += t.weight;
    }
  return load;
}

namespace {

// Weights that balance the uplinks (Plan::kWeightsByUplinks): each innermost group's share of
// the cross-group phase, with its uplink's rate when known.
std::string uplinkSharesText(const Plan& p, const std::map<std::string, double>& uplinkMbps,
                             const std::string& used) {
  std::string out = fmt::format(
      "\nchunk weights (hier's shards, used for {}):\n"
      "  balanced by the groups' uplinks: in hier's cross-group phase every group owns its share\n"
      "  of each piece and exchanges it directly with the other m-1 groups, a group of share x\n"
      "  moving 1 + (m-2)x of the buffer each way through its uplink; a group behind a slower\n"
      "  uplink owns less (share 0: its uplink is too slow to help; it still sends and receives\n"
      "  the buffer once each way). Inside a group one host, its leader, holds the group's share:\n"
      "  the others chain-reduce the buffer to it over the host links and get the result back, so\n"
      "  that each pair of groups exchanges over one flow each way.\n",
      used);
  if (p.groups.empty()) return out;
  std::map<std::string, double> weightOf;
  std::map<std::string, size_t> positionOf;
  for (size_t i = 0; i < p.order.size(); ++i) {
    weightOf[p.order[i]] = p.chunkWeights[i];
    positionOf[p.order[i]] = i;
  }
  double total = 0;
  for (double x : p.chunkWeights) total += x;
  const HierarchyLevel& level = p.groups.front();
  for (size_t g = 0; g < level.groups.size(); ++g) {
    double share = 0;
    // The holder: the member of the largest weight; the first in the order when all weigh 0
    // (collectives/algorithms/hier.cc).
    std::string leader;
    int holders = 0;
    for (const auto& h : level.groups[g]) {
      const double x = weightOf.count(h) ? weightOf[h] : 0;
      share += x;
      holders += x > 0 ? 1 : 0;
      if (!positionOf.count(h)) continue;
      if (leader.empty() || x > weightOf[leader] ||
          (x == weightOf[leader] && positionOf[h] < positionOf[leader]))
        leader = h;
    }
    out += fmt::format("  {} {} ({}): {:.3g} of each piece", level.name, g + 1,
                       namesText(level.groups[g], 4), total > 0 ? share / total : 0);
    if (!leader.empty() && holders <= 1) out += fmt::format(", leader {}", leader);
    if (!level.groups[g].empty())
      if (auto it = uplinkMbps.find(level.groups[g].front()); it != uplinkMbps.end())
        out += fmt::format(", uplink {:.4g} Mbit/s", it->second);
    out += "\n";
  }
  return out;
}

}  // namespace

std::string ringWeightsText(const Plan& p) {
  if (p.ringWeights.empty()) return "";
  const double total = std::accumulate(p.ringWeights.begin(), p.ringWeights.end(), 0.0);
  std::string out = fmt::format(
      "\nring weights (the engine's ring allreduce: each host reduces its share of the vector; "
      "{} against {} with equal blocks):\n",
      timeText(p.predicted.ringWeightsUs), timeText(p.predicted.planUs));
  for (size_t i = 0; i < p.order.size(); ++i)
    if (p.ringWeights[i] > 0)
      out += fmt::format("  {:<24} {:.1f}%\n", p.order[i], 100 * p.ringWeights[i] / total);
  if (const auto idle = std::count(p.ringWeights.begin(), p.ringWeights.end(), 0.0); idle > 0)
    out += fmt::format("  the other {} hosts reduce nothing and forward the vector twice\n", idle);
  return out;
}

std::string chunkWeightsText(const Plan& p, const std::map<std::string, double>& hostMbps,
                             const std::map<std::string, double>& uplinkMbps) {
  const auto& w = p.chunkWeights;
  if (w.empty() || w.size() != p.order.size()) return "";
  double top = *std::max_element(w.begin(), w.end());
  if (!(top > 0)) return "";
  if (p.chunkWeightsBasis == Plan::kWeightsByUplinks)
    return uplinkSharesText(p, uplinkMbps,
                            sizesUsing(p, Algorithm::kHier).empty()
                                ? "no size: hier was not chosen"
                                : sizesUsing(p, Algorithm::kHier));
  std::string out = fmt::format(
      "\nchunk weights (hier's shards, used for {}):\n"
      "  hier gives each rank a share of its group's buffer in proportion to its weight, the\n"
      "  link rate measured for its host: a shard's owner carries the whole shard across\n"
      "  groups, so an equal share would let the slowest host link hold up its group.\n",
      sizesUsing(p, Algorithm::kHier).empty() ? "no size: hier was not chosen"
                                              : sizesUsing(p, Algorithm::kHier));
  // Classes of hosts by share relative to the largest (two digits), largest first.
  std::map<long, std::vector<size_t>, std::greater<>> classes;
  for (size_t i = 0; i < w.size(); ++i) classes[std::lround(100 * w[i] / top)].push_back(i);
  double fastest = 0;
  for (const auto& h : p.order) fastest = std::max(fastest, rateOf(hostMbps, h));
  for (const auto& [key, positions] : classes) {
    std::vector<std::string> names;
    std::vector<double> rates;
    for (size_t i : positions) {
      names.push_back(p.order[i]);
      double r = rateOf(hostMbps, p.order[i]);
      if (!std::isnan(r)) rates.push_back(r);
    }
    double rel = key / 100.0;
    out += fmt::format("  {} host(s) at {:.2g}x the largest share ({:.4g} each): {}\n",
                       positions.size(), rel, w[positions.front()], namesText(names));
    if (key >= 100) continue;
    if (!rates.empty() && fastest > 0)
      out += fmt::format(
          "    smaller because their host links measured {:.4g} Mbit/s against {:.4g} for the "
          "fastest\n",
          upperMedian(rates), fastest);
    else
      out += fmt::format(
          "    smaller because their host links measured {:.2g}x the fastest's (show the "
          "plan with --topology for the rates)\n",
          rel);
  }
  return out;
}

std::string packedTreesText(const Plan& p, const std::map<std::string, double>& hostMbps) {
  if (p.trees.empty()) return "";
  const size_t n = p.order.size();
  std::string used = sizesUsing(p, Algorithm::kTrees);
  std::string out = fmt::format(
      "\npacked trees ({} tree(s), used for {}):\n"
      "  the buffer is split by tree weight; each piece is reduced up its tree to the root and\n"
      "  broadcast back down, pipelined. A host's link carries its tree's piece once per tree\n"
      "  edge at the host, each way: a leaf carries one piece, a centre one more per child.\n",
      p.trees.size(), used.empty() ? "no size" : used);
  const size_t shown = 8;
  for (size_t t = 0; t < p.trees.size() && t < shown; ++t) {
    const PackedTree& tree = p.trees[t];
    std::vector<int> children(n, 0);
    std::string root = "?";
    for (size_t i = 0; i < tree.parent.size() && i < n; ++i) {
      if (tree.parent[i] < 0)
        root = p.order[i];
      else if (static_cast<size_t>(tree.parent[i]) < n)
        ++children[static_cast<size_t>(tree.parent[i])];
    }
    std::vector<size_t> inner;
    size_t leaves = 0;
    for (size_t i = 0; i < n; ++i) (children[i] > 0 ? inner.push_back(i) : void(++leaves));
    std::stable_sort(inner.begin(), inner.end(),
                     [&](size_t a, size_t b) { return children[a] > children[b]; });
    std::string centres;
    for (size_t k = 0; k < inner.size() && k < 6; ++k)
      centres += fmt::format("{}{} ({})", k ? ", " : "", p.order[inner[k]], children[inner[k]]);
    if (inner.size() > 6) centres += fmt::format(" and {} more", inner.size() - 6);
    out += fmt::format(
        "  tree {}: weight {:.4g} ({:.3g}% of the buffer), root {}; centres (children): {}; {} "
        "leaves\n",
        t + 1, tree.weight, 100 * tree.weight, root, centres.empty() ? "none" : centres, leaves);
  }
  if (p.trees.size() > shown) out += fmt::format("  ... ({} more trees)\n", p.trees.size() - shown);
  // What each host's link carries over all trees, against a ring's 2(n-1)/n on every host.
  std::vector<double> load = treeLoads(p);
  auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  std::vector<std::string> most, least;
  for (size_t i = 0; i < n; ++i) {
    if (load[i] >= *hi - 1e-9) most.push_back(p.order[i]);
    if (load[i] <= *lo + 1e-9) least.push_back(p.order[i]);
  }
  double ring = n > 0 ? 2.0 * (n - 1) / n : 0;
  out += fmt::format(
      "  per host link, each way: at most {:.3g}x the buffer ({}), at least {:.3g}x ({}); a "
      "ring carries {:.3g}x on every host\n",
      *hi, namesText(most, 6), *lo, namesText(least, 6), ring);
  // The slowest hosts (by measured rate, else by chunk weight) and what they carry.
  std::vector<double> key(n, std::nan(""));
  for (size_t i = 0; i < n; ++i) key[i] = rateOf(hostMbps, p.order[i]);
  bool byRate = std::none_of(key.begin(), key.end(), [](double x) { return std::isnan(x); });
  if (!byRate && p.chunkWeights.size() == n) key = p.chunkWeights;
  if (byRate || p.chunkWeights.size() == n) {
    auto [slow, fast] = std::minmax_element(key.begin(), key.end());
    if (*fast > kHeterogeneousRatio * *slow) {
      std::vector<std::string> names;
      double carried = 0;
      for (size_t i = 0; i < n; ++i)
        if (key[i] < kHeterogeneousRatio * *slow) {
          names.push_back(p.order[i]);
          carried = std::max(carried, load[i]);
        }
      out += fmt::format("  the slowest hosts ({}{}) carry at most {:.3g}x\n", namesText(names, 6),
                         byRate ? fmt::format(", {:.4g} Mbit/s", *slow) : "", carried);
    }
  }
  return out;
}

std::string priorText(const PlanPrior& p, size_t planHosts) {
  std::string out = fmt::format(
      "prior: {} ({}), levels {}: {} host(s) declared, {} of the plan's {} covered\n", p.source,
      p.format, fmt::join(p.levels, " > "), p.declared, p.hosts.size(), planHosts);
  if (p.hosts.empty())
    return out +
           "  not compared: it names none of the plan's hosts (hosts match by name, by "
           "address or through host_names)\n";
  if (p.measuredLevel.empty())
    return out + "  not compared: the plan fell back to identity order (no measured groups)\n";
  const bool flat = p.measuredLevel == "network";
  auto group = [&](int g) {
    return flat ? std::string("the network") : fmt::format("{} {}", p.measuredLevel, g);
  };
  auto mbps = [](double x) { return x > 0 ? fmt::format("{:.4g} Mbit/s", x) : "not measured"; };
  std::string where = flat ? "the measurements, which show no level (one group)"
                           : fmt::format("the measured {}s", p.measuredLevel);
  std::string rates = fmt::format("measured within one group {}, across groups {}",
                                  mbps(p.sameGroupMbps), mbps(p.crossGroupMbps));
  if (p.disagreements.empty())
    return out + fmt::format("  agrees with {} at its lowest level ({}; {})\n", where,
                             p.levels.back(), rates);
  out += fmt::format("  {} disagreement(s) with {} at its lowest level ({}; {}):\n",
                     p.disagreements.size(), where, p.levels.back(), rates);
  for (const auto& d : p.disagreements) {
    std::string parts;
    bool together = d.kind == PriorDisagreement::kDeclaredTogether;
    for (size_t k = 0; k < d.parts.size(); ++k) {
      std::string label = together ? group(d.measured[k]) : "switch " + d.declared[k];
      parts += fmt::format("{}{} ({})",
                           k == 0                    ? ""
                           : k + 1 == d.parts.size() ? " and "
                                                     : ", ",
                           label, namesText(d.parts[k]));
    }
    if (together)
      out += fmt::format(
          "  declared together, measured apart: switch {} holds hosts of {}; {} between them\n",
          d.declared[0], parts, mbps(d.betweenMbps));
    else
      out += fmt::format(
          "  declared apart, measured together: {} holds hosts declared behind {}; {} between "
          "them\n",
          group(d.measured[0]), parts, mbps(d.betweenMbps));
  }
  return out;
}

std::string describePlan(const Plan& p, const std::map<std::string, double>& hostMbps,
                         const std::map<std::string, double>& uplinkMbps) {
  std::string out = fmt::format(
      "plan: {} hosts x {} rank(s) = {} ranks, confidence {:.3g}, "
      "epoch {}\n",
      p.hosts.size(), p.ranksPerHost, p.worldSize(), p.confidence, p.epoch);
  if (!p.topologyHash.empty()) out += fmt::format("from topology {}\n", p.topologyHash);
  if (p.confidence == 0) out += "identity order: the planner fell back (see its warnings)\n";

  out += "\ngroups:\n";
  if (p.groups.empty()) out += "  none (flat network, or fallback)\n";
  for (const auto& level : p.groups) {
    out += fmt::format("  {}: {} groups ({}), confidence {:.3g}\n", level.name, level.groups.size(),
                       sizesText(level.groups), level.confidence);
    size_t shown = 0;
    for (size_t g = 0; g < level.groups.size() && shown < 12; ++g, ++shown) {
      out += fmt::format("    [{}]", g);
      for (size_t m = 0; m < level.groups[g].size() && m < 16; ++m) out += " " + level.groups[g][m];
      if (level.groups[g].size() > 16)
        out += fmt::format(" ... ({} more)", level.groups[g].size() - 16);
      out += "\n";
    }
    if (level.groups.size() > shown)
      out += fmt::format("    ... ({} more groups)\n", level.groups.size() - shown);
  }

  // Ring with group boundaries ('|' innermost, '||' outer levels).
  std::map<std::string, std::vector<int>> groupOf;
  for (const auto& level : p.groups)
    for (size_t g = 0; g < level.groups.size(); ++g)
      for (const auto& h : level.groups[g]) groupOf[h].push_back(static_cast<int>(g));
  out += "\nring (new rank order):\n ";
  size_t limit = 96;
  for (size_t i = 0; i < p.order.size() && i < limit; ++i) {
    if (i > 0 && !p.groups.empty()) {
      const auto& a = groupOf[p.order[i - 1]];
      const auto& b = groupOf[p.order[i]];
      size_t differ = 0;
      for (size_t l = 0; l < a.size() && l < b.size(); ++l) differ += a[l] != b[l];
      if (differ > 0) out += differ > 1 ? " ||" : " |";
    }
    out += " " + p.order[i];
  }
  if (p.order.size() > limit) out += fmt::format(" ... ({} more)", p.order.size() - limit);
  out += "\n";
  if (p.mesh) out += "\nthe job's groups:\n" + meshGroupsText(p);

  // Every prediction is for one size of its range (representativeBytes), named in the row; the
  // lower bound is any algorithm's at that size (lowerBoundUsPerByte), so never above it.
  for (const auto& [coll, ranges] : p.collectives) {
    out += fmt::format("\n{} ({} ranks):\n  {:<24} {:<9} {:>12} {:>11} {:>12} {:>12}\n", coll,
                       p.worldSize(), "message size", "algorithm", "at", "predicted", "busbw",
                       "lower bound");
    for (const auto& r : ranges)
      out += fmt::format(
          "  {:<24} {:<9} {:>12} {:>11} {:>12} {:>12}\n", rangeText(r), r.algorithm,
          sizeText(
              static_cast<uint64_t>(std::llround(representativeBytes(r.minBytes, r.maxBytes)))),
          timeText(r.predictedUs), rateText(r.predictedBusbwGBps * 1e9), timeText(r.lowerBoundUs));
  }
  for (const auto& [coll, ranges] : p.openMpi) {
    out += fmt::format(
        "\nOpen MPI {} (coll_tuned rules for {} ranks):\n  {:<24} {:<30} {:>12} {:>11} {:>16}\n",
        coll, p.worldSize(), "message size", "algorithm", "at", "predicted", "engine");
    for (const auto& r : ranges) {
      // Rows with the same algorithm differ in whether the included engine is kEngineAdviceRatio
      // faster there (the planner's advice): said, so that no two rows read alike.
      std::string engine = "-";
      if (r.engineUs > 0)
        engine = timeText(r.engineUs) +
                 (kEngineAdviceRatio * r.engineUs < r.predictedUs ? ", faster" : "");
      out += fmt::format("  {:<24} {:<30} {:>12} {:>11} {:>16}\n",
                         rangeText(r.minBytes, r.maxBytes), ompiChoiceText(coll, r),
                         sizeText(static_cast<uint64_t>(
                             std::llround(representativeBytes(r.minBytes, r.maxBytes)))),
                         timeText(r.predictedUs), engine);
    }
  }
  out += chunkWeightsText(p, hostMbps, uplinkMbps);
  out += ringWeightsText(p);
  out += packedTreesText(p, hostMbps);
  if (p.prior) out += "\n" + priorText(*p.prior, p.hosts.size());
  out += "\npredicted: " + gainText(p.predicted) + "\n";
  return out;
}

namespace {

// describeTopology()'s parts.

// What the topology holds: hosts, pairs, what was measured, shared links, version and time.
std::string topologyHeader(const Topology& t) {
  size_t n = t.size();
  size_t pairs = n * (n - 1) / 2;
  std::string tail = fmt::format("{} shared link(s); version {}{}", t.sharedLinks.size(), t.version,
                                 t.time.empty() ? "" : ", measured " + t.time);
  if (t.links)
    return fmt::format("topology: {} hosts, {} pairs; {}; matrices {}; {}\n", n, pairs,
                       linkModelText(n, t.measured.size()),
                       t.hasMatrices() ? "present (measured and inferred values)" : "omitted",
                       tail);
  size_t bw = 0, lat = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      bw += t.bandwidthMbps.at(i, j) || t.bandwidthMbps.at(j, i);
      lat += t.latencyUs.at(i, j) || t.latencyUs.at(j, i);
    }
  return fmt::format(
      "topology: {} hosts, {} pairs: bandwidth measured for {}, latency for {}; {}\n", n, pairs, bw,
      lat, tail);
}

// The signals the hierarchy was inferred from, and the groups found.
std::string signalsText(const PlanResult& r) {
  std::string out = "\nsignals:\n";
  for (const auto& f : r.hierarchy.features) {
    if (f.pairs == 0) {
      out += fmt::format("  {:<13} absent\n", f.name);
    } else if (f.name == "shared_links") {
      out += fmt::format("  {:<13} present: hosts sharing an uplink count as closer\n", f.name);
    } else if (f.informative) {
      out += fmt::format(
          "  {:<13} shows {} level(s); noise within groups {:.1f}%, largest jump "
          "{:.2f}x\n",
          f.name, f.levels, 100 * f.sigma, std::exp(f.gap));
    } else {
      out += fmt::format("  {:<13} shows no levels (ignored)\n", f.name);
    }
  }
  out += "\ninferred groups:\n";
  if (r.hierarchy.levels.empty()) out += "  none: the network looks flat\n";
  for (const auto& level : r.plan.groups)
    out += fmt::format("  {}: {} groups ({}), confidence {:.3g}\n", level.name, level.groups.size(),
                       sizesText(level.groups), level.confidence);
  out += rateClassesText(r.hierarchy, "  ");
  return out;
}

// The groups of a link model: stated by the probe, not inferred here.
std::string linkModelGroupsText(const Topology& t, const PlanResult& r) {
  std::string out = "\ngroups (of the link model):\n";
  if (t.groups.empty()) out += "  none: one switch\n";
  for (const auto& level : r.plan.groups)
    out += fmt::format("  {}: {} groups ({}), confidence {:.3g}\n", level.name, level.groups.size(),
                       sizesText(level.groups), level.confidence);
  return out;
}

// Medians of the matrices per level of the lowest common group.
std::string mediansByLevelText(const Topology& t, const PlanResult& r) {
  const Hierarchy& h = r.hierarchy;
  size_t n = t.size();
  size_t L = h.levels.size();
  std::vector<std::vector<double>> bwBy(L + 1), latBy(L + 1);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      size_t l = static_cast<size_t>(h.lcaLevel(i, j));
      for (auto [a, b] : {std::pair{i, j}, std::pair{j, i}}) {
        if (t.bandwidthMbps.at(a, b)) bwBy[l].push_back(*t.bandwidthMbps.at(a, b));
        if (t.latencyUs.at(a, b)) latBy[l].push_back(t.latencyUs.at(a, b)->minUs);
      }
    }
  std::string out = fmt::format(
      "\n{} pairs by level (medians of both directions):\n  {:<20} {:>8} "
      "{:>16} {:>14}\n",
      t.links ? "matrix" : "measured", "", "values", "bandwidth Mbit/s", "latency us");
  for (size_t l = 0; l <= L; ++l) {
    std::string label = l == 0 ? (L == 0 ? "all pairs" : "within " + h.levels[0].name)
                               : "across " + h.levels[l - 1].name + "s" +
                                     (l < L ? ", within " + h.levels[l].name : "");
    out += fmt::format("  {:<20} {:>8} {:>16.4g} {:>14.4g}\n", label,
                       std::max(bwBy[l].size(), latBy[l].size()), upperMedian(bwBy[l]),
                       upperMedian(latBy[l]));
  }
  return out;
}

}  // namespace

std::string structureText(const Topology& t) {
  std::string out;
  if (t.groups.empty()) {
    out +=
        "structure: none found (round trips showed no tiers, bandwidth trials no congested "
        "uplink): plans keep the input order unless the link model shows a gain\n";
  } else {
    std::vector<std::string> levels;
    for (const auto& l : t.groups)
      levels.push_back(fmt::format("{} {} groups ({}), confidence {:.3g}", l.name, l.groups.size(),
                                   sizesText(l.groups), l.confidence));
    out += fmt::format("structure: {}\n", fmt::join(levels, "; "));
    for (const auto& l : t.groups)
      if (l.confidence < 0.9)
        out += fmt::format(
            "structure: {} is weak (confidence {:.3g}): some of its groups were never told apart "
            "by a measurement\n",
            l.name, l.confidence);
  }
  const RingCheck* input = nullptr;
  const RingCheck* found = nullptr;
  for (const auto& c : t.rings) {
    if (c.name == "input") input = &c;
    if (c.name == "structure") found = &c;
  }
  auto rate = [](const RingCheck* c) { return c ? c->bottleneckMbps() : std::nullopt; };
  if (rate(input) && rate(found)) {
    const double gain = *rate(found) / *rate(input);
    out += fmt::format(
        "ring check: the structure's ring measured {:.4g} Mbit/s, the input order's {:.4g} "
        "({:.2f}x){}\n",
        *rate(found), *rate(input), gain,
        gain > 1 / (1 - kProbeNoise)
            ? ""
            : ": not faster beyond the probe's noise, plans keep the input order");
  } else if (rate(input)) {
    out += fmt::format("ring check: the input order's ring measured {:.4g} Mbit/s\n", *rate(input));
  }
  return out;
}

namespace {

// The lowest and the highest uplink rate of the switches of level `l`.
std::pair<double, double> uplinkRange(const NetworkModel& net, size_t l) {
  double lo = 1e300, hi = 0;
  for (size_t s = 0; s < net.switches(); ++s)
    if (net.switchLevel[s] == static_cast<int>(l)) {
      lo = std::min(lo, net.uplinkMbps[s]);
      hi = std::max(hi, net.uplinkMbps[s]);
    }
  return {lo, hi};
}

}  // namespace

std::string describeTopology(const Topology& t, const PlanResult& r) {
  std::string out = topologyHeader(t);
  out += structureText(t);
  for (const auto& w : r.warnings) out += "warning: " + w + "\n";
  if (r.fallback) {
    out += "not enough data to infer groups\n";
    if (r.plan.prior) out += "\n" + priorText(*r.plan.prior, r.plan.hosts.size());
    return out;
  }
  out += r.linkModel ? linkModelGroupsText(t, r) : signalsText(r);
  if (t.hasMatrices()) out += mediansByLevelText(t, r);
  const NetworkModel& net = r.model;
  auto [lo, hi] = std::minmax_element(net.hostMbps.begin(), net.hostMbps.end());
  out += fmt::format("\nnetwork model: host links {:.4g}", *lo);
  if (*hi > *lo) out += fmt::format(" .. {:.4g}", *hi);
  out += " Mbit/s";
  for (size_t l = 0; l < net.levels; ++l) {
    auto [a, b] = uplinkRange(net, l);
    out += fmt::format("; {} uplinks {:.4g}", r.hierarchy.levels[l].name, a);
    if (b > a) out += fmt::format(" .. {:.4g}", b);
    out += " Mbit/s";
  }
  out += "\n";
  out += "\npredicted for the best order: " + gainText(r.plan.predicted) + "\n";
  if (r.plan.prior) out += "\n" + priorText(*r.plan.prior, r.plan.hosts.size());
  return out;
}

// The plan's own JSON (Plan::toJson: groups, ranges, prediction, under its field names) with what
// `show` derives: each range's size (at_bytes), busbw in bytes/s, the engine's advice.
Json planReport(const Plan& p) {
  const Json doc = p.toJson();
  Json collectives = doc.at("collectives");
  for (const auto& [coll, ranges] : p.collectives)
    for (size_t i = 0; i < ranges.size(); ++i) {
      const AlgoRange& r = ranges[i];
      Json& row = collectives[coll][i];
      row["at_bytes"] = std::llround(representativeBytes(r.minBytes, r.maxBytes));
      row["busbw_bytes_per_second"] = r.predictedBusbwGBps * 1e9;
    }
  Json openMpi = doc.value("open_mpi", Json::object());
  for (const auto& [coll, ranges] : p.openMpi)
    for (size_t i = 0; i < ranges.size(); ++i) {
      const OmpiRange& r = ranges[i];
      Json& row = openMpi[coll][i];
      row["at_bytes"] = std::llround(representativeBytes(r.minBytes, r.maxBytes));
      row["engine_faster"] = r.engineUs > 0 && kEngineAdviceRatio * r.engineUs < r.predictedUs;
    }
  Json report = {{"kind", "plan"},
                 {"hosts", p.hosts.size()},
                 {"ranks_per_host", p.ranksPerHost},
                 {"ranks", p.worldSize()},
                 {"confidence", p.confidence},
                 {"epoch", p.epoch},
                 {"topology_hash", p.topologyHash},
                 {"groups", doc.at("groups")},
                 {"order", p.order},
                 {"collectives", std::move(collectives)},
                 {"open_mpi", std::move(openMpi)},
                 {"predicted", doc.at("predicted")}};
  // The mesh as plan.json has it, each dimension with its groups' ranks (groups_us's order).
  if (p.mesh) {
    Json mesh = doc.at("mesh");
    for (size_t d = 0; d < p.mesh->dims.size(); ++d)
      mesh["dims"][d]["groups"] = meshGroups(p.mesh->dims, d);
    report["mesh"] = std::move(mesh);
  }
  return report;
}

Json topologyReport(const Topology& t, const PlanResult& r) {
  Json out = {{"kind", "topology"},
              {"hosts", t.hosts.size()},
              {"warnings", r.warnings},
              {"groups", r.fallback ? Json::array() : hierarchyToJson(r.plan.groups)}};
  if (r.fallback) return out;
  const NetworkModel& net = r.model;
  auto [lo, hi] = std::minmax_element(net.hostMbps.begin(), net.hostMbps.end());
  Json uplinks = Json::array();
  for (size_t l = 0; l < net.levels; ++l) {
    auto [a, b] = uplinkRange(net, l);
    uplinks.push_back({{"level", r.hierarchy.levels[l].name}, {"min_mbps", a}, {"max_mbps", b}});
  }
  out["network_model"] = {{"host_min_mbps", *lo}, {"host_max_mbps", *hi}, {"uplinks", uplinks}};
  out["predicted"] = r.plan.toJson().at("predicted");
  return out;
}

}  // namespace rankmap::reorder
