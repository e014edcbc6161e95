#include "probe/round.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "common/error.h"
#include "common/log.h"
#include "probe/partition.h"
#include "probe/stats.h"

namespace rankmap::probe {

// ---- RoundState ----------------------------------------------------------------------------

RoundState::RoundState(Fleet& fleet, const RoundOptions& opts, Deadline d,
                       const RoundProgressFn& progress, const std::atomic<bool>* cancel)
    : fleet_(fleet),
      opts_(opts),
      deadline_(d),
      progress_(progress),
      cancel_(cancel),
      live_(fleet.size(), 1),
      strikes_(fleet.size(), 0) {}

bool RoundState::stopped() const { return cancelled() || deadline_.expired(); }

std::vector<int> RoundState::liveHosts() const {
  std::vector<int> out;
  for (size_t h = 0; h < live_.size(); ++h)
    if (live_[h]) out.push_back(static_cast<int>(h));
  return out;
}

void RoundState::drop(int h, const std::string& why) {
  if (!live_[static_cast<size_t>(h)]) return;
  live_[static_cast<size_t>(h)] = 0;
  dropped.push_back(fleet_.host(h).name);
  RANKMAP_WARN(Probe, "probe round: host {} ({}) is out of this round: {}", fleet_.host(h).name,
               fleet_.host(h).address, why);
}

void RoundState::report(const RoundProgress& p) const {
  if (progress_) progress_(p);
}

template <typename T>
void RoundState::judge(const std::vector<HostPair>& pairs, const std::vector<Outcome<T>>& out) {
  for (size_t k = 0; k < pairs.size(); ++k) {
    const auto& o = out[k];
    if (o.value) continue;
    failures[o.reason.empty() ? "peer" : o.reason]++;
    int culprit = o.culprit >= 0 ? o.culprit : pairs[k].second;
    if (!o.asked || !live(culprit)) continue;
    // Not accepting connections is final (the fleet retried them); a slow answer gets a second
    // chance.
    strikes_[static_cast<size_t>(culprit)] += o.reason == "connect" ? kMaxStrikes : 1;
    if (strikes_[static_cast<size_t>(culprit)] >= kMaxStrikes)
      drop(culprit, fmt::format("{} -> {}: {} ({})", fleet_.host(pairs[k].first).name,
                                fleet_.host(pairs[k].second).name, o.message, o.reason));
  }
}

std::vector<std::optional<LatencyStats>> RoundState::ping(const std::vector<HostPair>& pairs,
                                                          const std::string& phase,
                                                          const LatencyOptions* latency) {
  std::vector<std::optional<LatencyStats>> res(pairs.size());
  if (pairs.empty() || stopped()) return res;
  auto out = fleet_.latency(pairs, latency ? *latency : opts_.latency, deadline_);
  judge(pairs, out);
  for (size_t k = 0; k < pairs.size(); ++k) {
    res[k] = out[k].value;
    if (res[k])
      readings.push_back({pairs[k].first, pairs[k].second, "latency", res[k]->minUs, phase, true});
  }
  return res;
}

std::vector<std::optional<double>> RoundState::run(const std::vector<HostPair>& flows,
                                                   const std::string& phase, bool alone,
                                                   const std::vector<int>& units, bool splittable,
                                                   const BandwidthOptions* window,
                                                   LoadedPings* pings) {
  std::vector<std::optional<double>> res(flows.size());
  // Parts: consecutive runs of whole units up to maxFlowsPerTrial flows.
  std::vector<std::pair<size_t, size_t>> parts;
  size_t cap = splittable && opts_.maxFlowsPerTrial > 0 ? opts_.maxFlowsPerTrial : flows.size();
  for (size_t begin = 0; begin < flows.size();) {
    size_t end = begin;
    while (end < flows.size()) {
      size_t unitEnd = end + 1;
      while (!units.empty() && unitEnd < flows.size() && units[unitEnd] == units[end]) ++unitEnd;
      if (end > begin && unitEnd - begin > cap) break;
      end = unitEnd;
    }
    parts.emplace_back(begin, end);
    begin = end;
  }
  for (auto [begin, end] : parts) {
    if (stopped()) break;
    std::vector<HostPair> part;
    std::vector<size_t> at;
    for (size_t k = begin; k < end; ++k)
      if (live(flows[k].first) && live(flows[k].second)) {
        part.push_back(flows[k]);
        at.push_back(k);
      }
    if (part.empty()) continue;
    // A part's pings: those of its live senders to live hosts.
    LoadedPings partPings;
    std::vector<size_t> pingAt;
    if (pings && begin == 0) {
      pings->us.assign(pings->pairs.size(), std::nullopt);
      std::vector<char> sender(fleet_.size(), 0);
      for (const auto& f : part) sender[static_cast<size_t>(f.first)] = 1;
      for (size_t k = 0; k < pings->pairs.size(); ++k) {
        auto [a, b] = pings->pairs[k];
        if (sender[static_cast<size_t>(a)] && live(b) && a != b) {
          partPings.pairs.emplace_back(a, b);
          pingAt.push_back(k);
        }
      }
    }
    auto out = fleet_.bandwidth(part, window ? *window : opts_.bandwidth, deadline_,
                                pingAt.empty() ? nullptr : &partPings);
    for (size_t i = 0; i < pingAt.size() && i < partPings.us.size(); ++i)
      pings->us[pingAt[i]] = partPings.us[i];
    judge(part, out);
    for (size_t i = 0; i < part.size(); ++i) {
      res[at[i]] = out[i].value;
      if (out[i].value)
        readings.push_back(
            {part[i].first, part[i].second, "bandwidth", *out[i].value, phase, alone});
    }
  }
  return res;
}

// ---- 1. liveness -----------------------------------------------------------------------------

std::vector<bool> checkLiveness(RoundState& s) {
  s.report({"liveness", 0, s.fleet().size(), ""});
  auto up = s.fleet().alive(s.deadline());
  for (size_t h = 0; h < up.size(); ++h)
    if (!up[h]) {
      s.failures["connect"]++;
      s.drop(static_cast<int>(h), "not answering");
    }
  return up;
}

// ---- the round ------------------------------------------------------------------------------

RoundOutcome runRound(Fleet& fleet, const RoundOptions& opts, Deadline d,
                      const RoundProgressFn& progress, const std::atomic<bool>* cancel) {
  RoundState s(fleet, opts, d, progress, cancel);
  RoundOutcome res;
  double t0 = fleet.cost().seconds;
  double mark = t0;
  auto endPhase = [&](const std::string& name) {
    double now = fleet.cost().seconds;
    res.phaseSeconds[name] = now - mark;
    mark = now;
  };
  checkLiveness(s);
  endPhase("liveness");
  res.structure = findStructure(s);
  endPhase("structure");
  TopologyLinks links;
  if (opts.bandwidthEnabled && !s.stopped()) links = measureLinks(s, res.structure);
  endPhase("links");
  std::vector<RingCheck> rings;
  if (opts.bandwidthEnabled && !s.stopped()) rings = measureRings(s, res.structure, links);
  endPhase("rings");
  res.topology = assembleTopology(s, res.structure, links);
  res.topology.rings = std::move(rings);
  res.topology.time = utcNow();
  res.degradedHosts = degradedHosts(res.topology);
  if (!res.degradedHosts.empty())
    RANKMAP_WARN(Probe, "probe round: degraded host links: {}", fmt::join(res.degradedHosts, ", "));
  res.failures = s.failures;
  res.deadHosts = s.dropped;
  res.readings = std::move(s.readings);
  res.cost = fleet.cost();
  res.cancelled = s.cancelled();
  s.report({"done", 1, 1, ""});
  return res;
}

RoundSummary summarize(const RoundOutcome& out) {
  const Topology& t = out.topology;
  const bool bandwidthEnabled = t.probe.bandwidthMaxMs > 0;
  const size_t n = t.size();
  RoundSummary s;
  s.hosts = n;
  s.pairsTotal = n * (n - 1) / 2;
  std::vector<char> dead(n, 0);
  for (const auto& name : out.deadHosts)
    if (int i = t.indexOf(name); i >= 0) dead[static_cast<size_t>(i)] = 1;
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      bool gone = dead[a] || dead[b];
      if (t.hasMatrices()) {
        gone = !t.latencyUs.at(a, b) && !t.bandwidthMbps.at(a, b) && !t.bandwidthMbps.at(b, a);
        if (bandwidthEnabled)
          s.flowsMissing +=
              !t.bandwidthMbps.at(a, b).has_value() + !t.bandwidthMbps.at(b, a).has_value();
      } else if (gone) {
        s.flowsMissing += 2;
      }
      s.pairsMissing += gone;
    }
  if (out.cancelled || (n >= 2 && s.pairsMissing == s.pairsTotal))
    s.status = "failed";
  else if (s.pairsMissing > 0 || s.flowsMissing > 0 || !out.deadHosts.empty())
    s.status = "partial";
  else
    s.status = "ok";
  std::string phases;
  for (const auto& [name, secs] : out.phaseSeconds) phases += fmt::format(" {} {:.2f}", name, secs);
  s.text = fmt::format(
      "{}: {} hosts, structure from {} ({} levels), {} bandwidth flows in {} trials, {} pings; "
      "{} of {} pairs missing, {} dead ({});{}",
      out.structure.signal == "topology" ? "group re-probe" : "probe round", n,
      out.structure.signal, out.structure.levels.size(), out.cost.bandwidthFlows, out.cost.trials,
      out.cost.latencyPairs, s.pairsMissing, s.pairsTotal, out.deadHosts.size(), s.status, phases);
  return s;
}

}  // namespace rankmap::probe
