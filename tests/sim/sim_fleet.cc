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
  double pingMs = 0;
  if (pings && !pings->pairs.empty()) {
    pings->us = dc_.loadedRttUs(flows, pings->pairs);
    cost_.latencyPairs += pings->pairs.size();
    pingMs = timing_.perLoadedPingMs * static_cast<double>(pings->pairs.size());
  }
  const double barrierMs = static_cast<double>(probe::trialBarrier(flows.size()).count());
  double longestMs = 0;
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
  }
  ++cost_.trials;
  cost_.seconds += (timing_.callOverheadMs + barrierMs + longestMs +
                    timing_.perFlowMs * static_cast<double>(flows.size()) + pingMs) /
                   1000;
  return out;
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
