// The network of hollow agents (tests/bench/hollow_agents): real rankmapd agents, many in one
// process, whose measurements only (round trips and bulk flows, agent/probe_service.h Measure)
// a simulated Datacenter answers. Everything around a measurement is real: the coordinator's
// requests, the wire, the key, each agent's server, store and topology push.
//
// Bulk flows: the coordinator starts a trial's flows together, and tags each request with its
// trial and the trial's number of flows (probe/measure.h BandwidthOptions::trial). The network
// prices a trial once all its flows have asked, or kTrialGather after its first start: the
// rates of all of them at once (max-min sharing, measure()); each flow returns its receiver's
// reading when the window a real transfer would take (the shorter of maxMs and maxBytes at
// that rate) has passed, or when its trial is priced, whichever is later. Grouping by the tag,
// not by the flows' start times, because a few thousand agents sharing two cores take a
// trial's requests in seconds apart (4096 agents: 36 904 flows priced in 8 694 sets by time).
// An untagged flow is a trial of its own. A flow whose request arrives after its trial was
// priced runs alone, as a late real flow would find the others done. A sender's loaded round
// trips (probe/measure.h loadedRoundTrips) are priced with its trial's flows
// (Datacenter::loadedRttUs) and come back with its reading. Round trips: the datacenter's
// round trips, samples as a real ping takes them, returned after the time they took. A flow or ping
// with a dead end (a datacenter dead host) fails as a connection to a dead agent does.
//
// Thread-safe: agents' connection threads call it at once; the datacenter is used under one
// lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/json.h"
#include "common/net.h"
#include "common/topology.h"
#include "probe/measure.h"
#include "tests/sim/datacenter.h"

namespace rankmap::sim {

class HollowNetwork {
 public:
  // `hosts[i]` is datacenter host i (by name, as the agents name their peers).
  HollowNetwork(Datacenter& dc, const std::vector<Host>& hosts);

  LatencyStats latency(int from, const Host& peer, const probe::LatencyOptions& opts, Deadline d);
  // `from` sends to `peer` (send) or receives from it, the bytes from `start` (what
  // opts.startInMs names, on the steady clock); what the receiver reads. `pingsUs` gets the
  // round trips from `from` to `pings` while its trial's flows run (Datacenter::loadedRttUs;
  // nullopt with a dead end), priced with the trial.
  probe::BulkResult bulk(int from, const Host& peer, const probe::BandwidthOptions& opts, bool send,
                         const std::vector<Host>& pings,
                         std::vector<std::optional<double>>& pingsUs,
                         std::chrono::steady_clock::time_point start, Deadline d);

  // Bulk flows asked for, and those that came after their trial was priced (and ran alone): a
  // harness too busy to keep its agents' flows together reads other rates than the network has.
  struct Counts {
    size_t flows = 0;   // bulk flows asked for
    size_t late = 0;    // of them, after their trial was priced
    size_t trials = 0;  // trials priced (flows that started together)
  };
  Counts counts();

  // A tagged trial is priced at the latest this long after its first flow's start (a flow that
  // never asks: its agent died).
  static constexpr std::chrono::seconds kTrialGather{5};

 private:
  using Clock = std::chrono::steady_clock;
  struct Trial {
    int64_t tag = 0;      // BandwidthOptions::trial (0: untagged, a trial of one flow)
    size_t expected = 0;  // flows the tag says it has
    Clock::time_point start;
    std::vector<std::pair<int, int>> flows;
    std::vector<std::optional<double>> mbps;  // once priced
    std::vector<std::pair<int, int>> pings;   // every flow's loaded round trips, in order
    std::vector<size_t> pingsFrom;            // flow k's are pings[pingsFrom[k] ..]
    std::vector<std::optional<double>> pingsUs;
    bool priced = false;
  };
  int indexOf(const Host& peer) const;
  probe::BulkResult finish(double mbps, const Host& peer, const probe::BandwidthOptions& opts,
                           bool send, Clock::time_point start, Deadline d);

  Datacenter& dc_;
  std::map<std::string, int> index_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Trial>> open_;  // trials not yet priced
  std::set<int64_t> pricedTags_;              // tagged trials priced: a later flow runs alone
  std::condition_variable complete_;          // a tagged trial has all its flows
  Counts counts_;
};

// The network of agents in several processes (an agent's descriptors, times thousands, pass
// what one process may hold): one process serves its HollowNetwork on a loopback port
// (HollowNetworkServer), the agents' processes call it (HollowNetworkClient: the same two
// calls, each a length-prefixed JSON request and reply on a connection of the client's pool,
// served by a thread per connection: a round makes about 50 calls per host). Trials are joined by
// the machine's monotonic clock, which every process shares. Errors come back as what they
// were: a dead end's refusal (SystemError, ECONNREFUSED), a deadline (TimeoutError), anything
// else IoError with its message.
class HollowNetworkServer {
 public:
  explicit HollowNetworkServer(HollowNetwork& net);  // listens on 127.0.0.1, a free port
  ~HollowNetworkServer();                            // stops, waits for the calls in progress
  HollowNetworkServer(const HollowNetworkServer&) = delete;
  HollowNetworkServer& operator=(const HollowNetworkServer&) = delete;
  uint16_t port() const { return listener_.port(); }

 private:
  void serve(Socket s);
  void serveCall(Socket& s);

  HollowNetwork& net_;
  Listener listener_;
  std::mutex mu_;
  std::condition_variable idle_;
  size_t calls_ = 0;  // connections open
  bool stopping_ = false;
  std::thread acceptor_;
};

class HollowNetworkClient {
 public:
  explicit HollowNetworkClient(uint16_t port) : port_(port) {}
  // Opens `n` connections for later calls: a trial's flows then start without a connection
  // each (a thousand connects at once can wait out a SYN retry, and their flows miss the trial).
  void connect(size_t n);
  LatencyStats latency(int from, const Host& peer, const probe::LatencyOptions& opts, Deadline d);
  probe::BulkResult bulk(int from, const Host& peer, const probe::BandwidthOptions& opts, bool send,
                         const std::vector<Host>& pings,
                         std::vector<std::optional<double>>& pingsUs, Deadline d);

 private:
  Json call(const Json& req, Deadline d);
  uint16_t port_;
  std::mutex mu_;
  std::vector<Socket> idle_;  // connections between calls
};

}  // namespace rankmap::sim
