// The agents as a probe::Fleet (beside the simulated one, tests/sim/sim_fleet.h). It asks every
// agent, over the authenticated probe protocol (control requests on their probe port), to
// measure latency and bandwidth against named peers; the round itself (which pairs, in which
// trials, and what they show) is probe/round.h, the same code the simulator runs. The
// coordinating rankmapd runs rounds over it, and so does `rankmap probe` when no agent API is at
// hand; either way it needs the job's probe key and nothing else.
//
// Every request has a deadline derived from what it asks for plus a slack; a failed request is
// an Outcome naming the agent at fault (the asked one when it did not answer, else its peer),
// and the round drops a host after kMaxStrikes failures. An agent that does not answer the
// liveness check is asked once more before it counts as down. The round as a whole has a
// deadline too; what is not measured by then is missing.
// Control traffic: each step (the liveness hellos, a latency batch, one trial's flows) is one
// batch of control requests that all run at once, multiplexed on the coordinating thread over
// non-blocking sockets (probe::requestAll, probe/fanout.h): no thread per agent, so the flows of
// a trial over thousands of hosts really start together. An agent that does not accept the
// connection is tried again (3 attempts, 100 and 300 ms apart, each connect bounded by
// connectTimeout) while the request's deadline allows; nothing is retried once the request was
// sent (a measurement is not idempotent in time).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"
#include "probe/fanout.h"
#include "probe/fleet.h"
#include "probe/wire.h"

namespace rankmap::probe {

struct AgentFleetOptions {
  std::chrono::milliseconds connectTimeout{2000};  // each connect, and a liveness hello
  std::chrono::milliseconds taskSlack{3000};       // on top of what a request asks for
};

// A "bandwidth" request's reply: the receiver's reading and, when `pings` loaded round trips were
// asked, one each (nullopt where it failed). InvalidInput naming the field otherwise.
struct BandwidthReply {
  BulkResult bulk;
  std::vector<std::optional<double>> pingsUs;
};
BandwidthReply parseBandwidthReply(const Json& reply, size_t pings);

class AgentFleet : public Fleet {
 public:
  // `key` must outlive the Coordinator. `self` names us in handshakes and logs.
  AgentFleet(std::vector<Host> hosts, const ProbeKey& key, std::string self,
             AgentFleetOptions opts = {});

  const std::vector<Host>& hosts() const { return hosts_; }
  // Sends `request` to every agent at once; each reply, or nullopt for an agent that failed
  // (logged at debug). Bounded by `d`.
  std::vector<std::optional<Json>> ask(const Json& request, Deadline d);

  // Fleet over the agents.
  size_t size() const override { return hosts_.size(); }
  const Host& host(int h) const override { return hosts_[static_cast<size_t>(h)]; }
  // Which hosts answer a "hello" before `d` (in parallel); silent ones are asked once more.
  std::vector<bool> alive(Deadline d) override;
  std::vector<Outcome<LatencyStats>> latency(const std::vector<HostPair>& pairs,
                                             const LatencyOptions& opts, Deadline d) override;
  std::vector<Outcome<double>> bandwidth(const std::vector<HostPair>& flows,
                                         const BandwidthOptions& opts, Deadline d,
                                         LoadedPings* pings) override;
  FleetCost cost() const override;

 private:
  struct Task {
    int host = 0;  // index of the agent asked
    Json request;
    Deadline deadline = Deadline::after(std::chrono::seconds(0));
    Json reply;                // set on success
    std::string error;         // set on failure
    std::string reason;        // "connect", "timeout", "auth", "peer", "refused"
    bool agentFailed = false;  // the asked agent failed (not its peer)
    // A bandwidth trial's common start (probe/fanout.h PendingRequest::startAt).
    std::optional<std::chrono::steady_clock::time_point> startAt;
  };
  void runTasks(std::vector<Task>& tasks);
  Json peerJson(int h) const;
  Deadline latencyDeadline(Deadline round, const LatencyOptions& lo, size_t peers) const;
  Deadline bandwidthDeadline(Deadline round, const BandwidthOptions& bo,
                             std::chrono::milliseconds barrier) const;

  std::vector<Host> hosts_;
  const ProbeKey& key_;
  std::string self_;
  AgentFleetOptions opts_;
  std::chrono::steady_clock::time_point made_ = std::chrono::steady_clock::now();
  FleetCost cost_;
  ConnectionPool pool_;  // the round's connections to the agents, reused across its requests
  int64_t lastTrial_;  // BandwidthOptions::trial of the last trial (from a random start)
};

}  // namespace rankmap::probe
