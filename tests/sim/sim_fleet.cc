#include "tests/sim/sim_fleet.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.h"
#include "probe/measure.h"
#include "probe/stats.h"

namespace rankmap::sim {

SimFleet::SimFleet(Datacenter& dc, SimTiming timing) : dc_(dc), timing_(timing) {
  for (size_t h = 0; h < dc.hosts(); ++h)
    hosts_.push_back({fmt::format("h{:04}", h),
                      fmt::format("10.{}.{}.{}", 1 + h / 65536, (h / 256) % 256, h % 256)});
}

std::vector<bool> SimFleet::alive(Deadline) {
  std::vector<bool> up(size());
  bool anyDead = false;
  for (size_t h = 0; h < size(); ++h) {
    up[h] = dc_.alive(static_cast<int>(h));
    anyDead |= !up[h];
  }
  // The coordinator's hellos: one per host, and one more to each host that did not answer.
  cost_.requests += size() + static_cast<size_t>(std::count(up.begin(), up.end(), false));
  cost_.seconds += (timing_.callOverheadMs + (anyDead ? timing_.deadHostMs : 0)) / 1000;
  return up;
}

std::vector<probe::Outcome<LatencyStats>> SimFleet::latency(
    const std::vector<probe::HostPair>& pairs, const probe::LatencyOptions& opts, Deadline) {
  std::vector<probe::Outcome<LatencyStats>> out(pairs.size());
  // As the agents answer a latency step: one request per pinging host, its peers one after the
  // other (probe/agent_fleet.h).
  std::map<int, double> spentByPinger;
  std::vector<double> samples;
  const std::vector<double> stalls = dc_.pingStalls();
  for (size_t k = 0; k < pairs.size(); ++k) {
    auto [a, b] = pairs[k];
    samples.clear();
    double spentUs = 0;
    const double stall = std::max(stalls[static_cast<size_t>(a)], stalls[static_cast<size_t>(b)]);
    for (int i = 0; i < opts.warmup + opts.samples; ++i) {
      auto rtt = dc_.rttUs(a, b);
      if (!rtt) break;
      *rtt *= stall;
      spentUs += *rtt;
      // Whole nanoseconds, as the agents' clocks give them (and as topology.json then holds).
      if (i >= opts.warmup) samples.push_back(std::round(*rtt * 1000) / 1000);
    }
    ++cost_.latencyPairs;
    if (samples.empty()) {
      out[k].culprit = dc_.alive(a) ? b : a;
      out[k].asked = !dc_.alive(a);
      out[k].reason = "connect";
      out[k].message = "simulated host is dead";
      spentByPinger[a] += timing_.deadHostMs * 1000;
      continue;
    }
    out[k].value = probe::summarizeLatency(samples);
    spentByPinger[a] += spentUs + timing_.handshakeRtts * samples.front();
  }
  double longestUs = 0;
  for (const auto& [h, us] : spentByPinger) longestUs = std::max(longestUs, us);
  cost_.requests += spentByPinger.size();
  cost_.seconds += (timing_.callOverheadMs + longestUs / 1000) / 1000;
  return out;
}

std::vector<probe::Outcome<double>> SimFleet::bandwidth(const std::vector<probe::HostPair>& flows,
                                                        const probe::BandwidthOptions& opts,
                                                        Deadline, probe::LoadedPings* pings) {
  std::vector<probe::Outcome<double>> out(flows.size());
  auto rates = dc_.measure(flows);
  const bool pinged = pings && !pings->pairs.empty();
  if (pinged) {
    pings->us = dc_.loadedRttUs(flows, pings->pairs);
    cost_.latencyPairs += pings->pairs.size();
  }
  const double barrierMs = static_cast<double>(probe::trialBarrier(flows.size()).count());
  double longestMs = 0;
  std::map<int, double> windowOfSender;  // its first flow's, which carries its round trips
  for (size_t k = 0; k < flows.size(); ++k) {
    ++cost_.bandwidthFlows;
    ++cost_.requests;
    if (!rates[k]) {
      out[k].culprit = dc_.alive(flows[k].first) ? flows[k].second : flows[k].first;
      out[k].asked = !dc_.alive(flows[k].first);
      out[k].reason = "connect";
      out[k].message = "simulated host is dead";
      longestMs = std::max(longestMs, timing_.deadHostMs);
      continue;
    }
    out[k].value = *rates[k];
    const double bytesPerMs = std::max(*rates[k], 1e-9) * 1e6 / 8 / 1000;
    const double windowMs = std::min<double>(static_cast<double>(opts.maxMs),
                                             static_cast<double>(opts.maxBytes) / bytesPerMs);
    cost_.bulkBytes += bytesPerMs * windowMs;
    longestMs = std::max(longestMs, windowMs + timing_.queueBytes / bytesPerMs);
    windowOfSender.emplace(flows[k].first, windowMs);
  }
  if (pinged && timing_.sharedCores == 0) {
    // On machines of their own, what else a pinger's reply waits for: its samples start at
    // kLoadedPingAt of its window and each round waits for its slowest Pong (probe/measure.h
    // loadedRoundTrips), at most until the transfer's end (bulkEnd). On shared cores that wait is
    // in perLoadedPingMs, measured as the trial's wall time.
    std::map<int, double> slowestUs;
    for (size_t p = 0; p < pings->pairs.size(); ++p)
      if (pings->us[p]) {
        double& s = slowestUs[pings->pairs[p].first];
        s = std::max(s, *pings->us[p]);
      }
    for (const auto& [pinger, us] : slowestUs) {
      auto w = windowOfSender.find(pinger);
      if (w == windowOfSender.end()) continue;
      const double endMs = probe::kLoadedPingAt * w->second + probe::kLoadedPingSamples * us / 1000;
      longestMs = std::max(
          longestMs, std::min(endMs, 2 * w->second + static_cast<double>(probe::kBulkGraceMs)));
    }
  }
  ++cost_.trials;
  cost_.seconds += (timing_.callOverheadMs + barrierMs + longestMs +
                    trialCpuMs(flows, pinged ? pings->pairs : std::vector<probe::HostPair>{})) /
                   1000;
  return out;
}

double SimFleet::trialCpuMs(const std::vector<probe::HostPair>& flows,
                            const std::vector<probe::HostPair>& pings) const {
  if (timing_.sharedCores > 0)
    return (timing_.perFlowMs * static_cast<double>(flows.size()) +
            timing_.perLoadedPingMs * static_cast<double>(pings.size())) *
           SimTiming::kMeasuredOnCores / timing_.sharedCores;
  std::vector<double> agentMs(hosts_.size(), 0);
  for (const auto& [a, b] : flows) {
    agentMs[static_cast<size_t>(a)] += timing_.agentFlowEndMs;
    agentMs[static_cast<size_t>(b)] += timing_.agentFlowEndMs;
  }
  for (const auto& [a, b] : pings) {
    agentMs[static_cast<size_t>(a)] += timing_.agentPingEndMs;
    agentMs[static_cast<size_t>(b)] += timing_.agentPingEndMs;
  }
  const double busiest = agentMs.empty() ? 0 : *std::max_element(agentMs.begin(), agentMs.end());
  return std::max(busiest, timing_.coordinatorRequestMs * static_cast<double>(flows.size()) +
                               timing_.coordinatorPingMs * static_cast<double>(pings.size()));
}

Topology truthTopology(const Datacenter& dc, const SimFleet& fleet) {
  Topology t;
  const auto& spec = dc.spec();
  for (size_t h = 0; h < dc.hosts(); ++h) t.hosts.push_back(fleet.host(static_cast<int>(h)));
  TopologyLinks links;
  links.hostLatencyUs = spec.hostLatencyUs;
  links.uplinkLatencyUs = {spec.rackLatencyUs, spec.podLatencyUs};
  for (size_t h = 0; h < dc.hosts(); ++h)
    links.hosts.push_back(
        {dc.hostOutMbps(static_cast<int>(h)), dc.hostInMbps(static_cast<int>(h))});
  HierarchyLevel racks{"rack", 1, {}}, pods{"pod", 1, {}};
  racks.groups.resize(static_cast<size_t>(dc.racks()));
  pods.groups.resize(static_cast<size_t>(dc.pods()));
  for (size_t h = 0; h < dc.hosts(); ++h) {
    racks.groups[static_cast<size_t>(dc.rackOf(static_cast<int>(h)))].push_back(t.hosts[h].name);
    pods.groups[static_cast<size_t>(dc.podOf(static_cast<int>(h)))].push_back(t.hosts[h].name);
  }
  links.uplinks.resize(2);
  for (int r = 0; r < dc.racks(); ++r)
    links.uplinks[0].push_back({dc.rackUplinkMbps(r), dc.rackInMbps(r)});
  for (int p = 0; p < dc.pods(); ++p)
    links.uplinks[1].push_back({dc.podUplinkMbps(p), dc.podInMbps(p)});
  t.groups = {racks, pods};
  t.links = std::move(links);
  return t;
}

}  // namespace rankmap::sim
