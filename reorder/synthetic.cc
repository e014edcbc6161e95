#include "reorder/synthetic.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include <fmt/format.h>

#include "common/error.h"

namespace rankmap::reorder {
namespace {

// Uniform in [0, 1) from the raw generator (std distributions differ between libraries).
double unit(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

// The true network as topology.json's link model, the true groups, and the measured sample.
void addLinkModel(const SyntheticSpec& spec, const Hierarchy& truth, const NetworkModel& net,
                  Topology& t) {
  size_t n = t.size();
  std::vector<std::string> names;
  for (const auto& h : t.hosts) names.push_back(h.name);
  t.groups = truth.toLevels(names);
  TopologyLinks links;
  for (size_t h = 0; h < n; ++h) links.hosts.push_back({net.hostMbps[h], net.hostMbps[h]});
  for (size_t l = 0; l < truth.levels.size(); ++l) {
    // toLevels lists a level's groups by label, the order of the model's switches.
    double up = spec.levels[l].uplinkMbps;
    links.uplinks.emplace_back(static_cast<size_t>(truth.levels[l].groups), LinkCapacity{up, up});
    links.uplinkLatencyUs.push_back(spec.levels[l].latencyUs);
  }
  links.hostLatencyUs = spec.hostLatencyUs;
  t.links = std::move(links);
  // A generator of its own, so that kBoth draws the matrices exactly as kMatrices does.
  std::mt19937_64 gen(spec.seed ^ 0x6d65617375726564ull);
  std::set<std::pair<int, int>> seen;
  for (size_t a = 0; a < n && n > 1; ++a)
    for (int k = 0; k < spec.measuredPerHost; ++k) {
      int b = static_cast<int>(gen() % (n - 1));
      if (b >= static_cast<int>(a)) ++b;
      std::pair<int, int> pair(static_cast<int>(a), b);
      if (t.hasMatrices() && !t.bandwidthMbps.at(a, b)) continue;
      if (seen.insert(pair).second) t.measured.push_back(pair);
    }
}

}  // namespace

size_t SyntheticSpec::totalHosts() const {
  size_t n = static_cast<size_t>(std::max(topGroups, 0));
  for (const auto& l : levels) n *= static_cast<size_t>(std::max(l.fanout, 0));
  return n;
}

SyntheticTopology makeSynthetic(const SyntheticSpec& spec) {
  size_t n = spec.totalHosts();
  if (n == 0 || spec.levels.empty())
    throw InvalidInput("synthetic topology: expected at least one level and one host");
  if (!spec.hostMbpsOverride.empty() && spec.hostMbpsOverride.size() != n)
    throw InvalidInput(fmt::format("synthetic topology: {} host rates for {} hosts",
                                   spec.hostMbpsOverride.size(), n));
  std::mt19937_64 gen(spec.seed);
  // Hidden permutation: true host t (tree order) is topology host perm[t].
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  if (spec.shuffle)
    for (size_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[gen() % (i + 1)]);

  SyntheticTopology out;
  std::vector<Host> hosts;
  for (size_t h = 0; h < n; ++h) hosts.push_back({fmt::format("h{:04}", h), ""});
  Hierarchy& truth = out.truth;
  truth.n = n;
  size_t span = 1;
  for (size_t l = 0; l < spec.levels.size(); ++l) {
    span *= static_cast<size_t>(spec.levels[l].fanout);
    std::vector<int> raw(n);
    for (size_t t = 0; t < n; ++t) raw[perm[t]] = static_cast<int>(t / span);
    // Canonical labels: by lowest member.
    std::vector<int> relabel(n / span + 1, -1);
    Hierarchy::Level level;
    level.name = levelName(l);
    level.confidence = 1;
    level.groupOf.resize(n);
    int next = 0;
    for (size_t h = 0; h < n; ++h) {
      if (relabel[raw[h]] < 0) relabel[raw[h]] = next++;
      level.groupOf[h] = relabel[raw[h]];
    }
    level.groups = next;
    truth.levels.push_back(std::move(level));
  }
  std::vector<double> rates(n, spec.hostMbps);
  if (!spec.hostMbpsOverride.empty())
    for (size_t t = 0; t < n; ++t) rates[perm[t]] = spec.hostMbpsOverride[t];
  std::vector<double> up, upLat;
  for (const auto& l : spec.levels) {
    up.push_back(l.uplinkMbps);
    upLat.push_back(l.latencyUs);
  }
  out.model = modelFromHierarchy(truth, rates, up, spec.hostLatencyUs, upLat);
  const NetworkModel& net = out.model;

  const bool matrices = spec.output != Output::kLinks;
  Topology t;
  if (matrices)
    t = Topology::empty(std::move(hosts));
  else
    t.hosts = std::move(hosts);
  t.probe.latencySamples = 1000;
  t.probe.bandwidthMaxMs = 1000;
  t.probe.bandwidthMaxBytes = 64 << 20;
  t.probe.contention = spec.sharedLinks;
  auto factor = [&]() { return 1 + spec.noise * (2 * unit(gen) - 1); };
  double flatLatency = 2 * spec.hostLatencyUs;
  for (size_t i = 0; i < n && matrices; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (spec.missing > 0 && unit(gen) < spec.missing) continue;
      double bw = kDefaultHostMbps, lat = flatLatency;
      if (spec.bandwidth == Signal::kModel) {
        bw = std::numeric_limits<double>::infinity();
        net.forEachLink(i, j, [&](size_t link, bool) { bw = std::min(bw, net.linkMbps(link)); });
      } else if (spec.bandwidth == Signal::kFlat) {
        bw = spec.hostMbps;
      }
      if (spec.latency == Signal::kModel) lat = net.latencyUs(i, j);
      for (auto [a, b] : {std::pair{i, j}, std::pair{j, i}}) {
        if (spec.bandwidth != Signal::kAbsent) t.bandwidthMbps.at(a, b) = bw * factor();
        if (spec.latency != Signal::kAbsent) {
          double v = lat * factor();
          t.latencyUs.at(a, b) = LatencyStats{v, 1.1 * v, 1.3 * v, 1.5 * v};
        }
      }
    }
  }
  if (spec.sharedLinks) {
    for (size_t l = 0; l < truth.levels.size(); ++l) {
      for (const auto& g : truth.members(l)) {
        if (g.size() >= n) continue;
        SharedLink s;
        for (int h : g) s.hosts.push_back(t.hosts[h].name);
        s.capacityMbps = spec.levels[l].uplinkMbps;
        t.sharedLinks.push_back(std::move(s));
      }
    }
  }
  if (spec.output != Output::kMatrices) addLinkModel(spec, out.truth, net, t);
  out.topology = std::move(t);
  return out;
}

}  // namespace rankmap::reorder
