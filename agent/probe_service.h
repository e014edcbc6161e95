// What an agent does when another agent (the coordinator) asks over the probe protocol:
// "hello" (liveness), "passive" (this host's view of job traffic: agent/passive.h, Summary; with
// "rebase" the drift it reports counts as acted on; "probed_s": [from, to], seconds ago, the
// coordinator's last probing, whose windows do not count), "latency" (round trips to each peer
// of "peers", in turn; or to one "peer") and "bandwidth" (measure against a named peer),
// "topology" (store a topology the coordinator assembled, and forward it to
// the hosts of its "relay" list: agent/topology_push.h). Runs on the probe server's connection
// threads.
//
// Requests are JSON objects with an "op"; replies are JSON objects. A measurement that fails
// because of the peer is a normal reply {"error": ..., "reason": ...}: this agent is fine and
// the coordinator learns which side failed. Bad requests throw InvalidInput (an Error frame).
// Every measurement is bounded by the request's "timeout_ms" and by the server's deadline.
// Peers need not be in this agent's hosts file, but bulk data only flows to a peer that
// completes the authenticated handshake, so a key holder cannot aim traffic at arbitrary hosts.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "agent/metrics.h"
#include "common/json.h"
#include "common/topology.h"
#include "probe/measure.h"
#include "probe/wire.h"

namespace rankmap::agent {

// At most this many peers in one latency request ("peers"): a round's latency step asks each
// agent once, with all the peers it is to ping.
inline constexpr size_t kMaxLatencyPeers = 4096;

class ProbeService {
 public:
  struct Hooks {
    std::function<std::optional<int64_t>()> topologyVersion;  // latest stored, if any
    std::function<bool(const Topology&)> storeTopology;       // true if new
    // agent/passive.h: this host's view, after the coordinator's last probing (seconds before
    // the request, from and to; PassiveLedger::probed) when it names one.
    struct ProbedAgo {
      double from = 0, to = 0;
    };
    std::function<Json(bool rebase, std::optional<ProbedAgo> probed)> passiveSummary;
  };
  // The measurement itself, against `peer`. Empty: probe/measure.h over the network, as every
  // rankmapd measures. Set only by the hollow agents of tests/bench/hollow_agents, whose round
  // trips and bulk flows a simulated datacenter answers (tests/sim/hollow_network.h) while
  // everything around them (server, wire, key, store, push, coordinator) is the real agent.
  struct Measure {
    std::function<LatencyStats(const Host& peer, const probe::LatencyOptions&, Deadline)> latency;
    // send: this host sends to `peer` (else receives from it); the receiver's reading. With
    // `pings` (send only), `pingsUs` gets their loaded round trips (probe/measure.h
    // loadedRoundTrips), one per peer.
    std::function<probe::BulkResult(const Host& peer, const probe::BandwidthOptions&, bool send,
                                    const std::vector<Host>& pings,
                                    std::vector<std::optional<double>>& pingsUs, Deadline)>
        bulk;
  };
  // `key` must outlive the service.
  ProbeService(const probe::ProbeKey& key, std::string self, Hooks hooks, Metrics* metrics,
               Measure measure = {});

  Json handle(const Json& request, const std::string& peer, Deadline d);

 private:
  Json latencyList(const JsonReader& r, const std::string& source, Deadline d,
                   const std::function<void(const std::string&)>& count);
  LatencyStats latency(const Host& peer, const probe::LatencyOptions& lo, Deadline d);
  probe::BulkResult bulk(const Host& peer, const probe::BandwidthOptions& bo, bool send,
                         const std::vector<Host>& pings,
                         std::vector<std::optional<double>>& pingsUs, Deadline d);
  const probe::ProbeKey& key_;
  std::string self_;
  Hooks hooks_;
  Metrics* metrics_;
  Measure measure_;
};

}  // namespace rankmap::agent
