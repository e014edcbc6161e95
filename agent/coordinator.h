// The coordinator of a probe round: the agents as a probe::Fleet. It asks every agent, over the
// authenticated probe protocol (control requests on their probe port), to measure latency and
// bandwidth against named peers; the round itself (which pairs, in which trials, and what they
// show) is probe/round.h, the same code the simulator runs. Runs inside the coordinating
// rankmapd, or inside `rankmap probe` when no agent API is at hand; either way it needs the
// job's probe key and nothing else.
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

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/store.h"
#include "common/topology.h"
#include "probe/fleet.h"
#include "probe/recheck.h"
#include "probe/round.h"
#include "probe/wire.h"

namespace rankmap::agent {

struct RoundProgress {
  std::string phase;   // "liveness", "structure", "links", "done" (probe/round.h)
  size_t done = 0;     // steps of this phase done ...
  size_t total = 0;    // ... out of (0 = not known yet)
  std::string detail;  // one line for people: "640 of 1024 hosts placed after 3 leader rounds"
};
using ProgressFn = std::function<void(const RoundProgress&)>;

struct RoundResult {
  Topology topology;  // version 0 until stored
  std::vector<MeasurementRow> measurements;
  size_t pairsTotal = 0;    // unordered host pairs
  size_t pairsMissing = 0;  // pairs with no latency and no bandwidth in either direction
  size_t flowsMissing = 0;  // directed bandwidth values missing
  std::vector<std::string> deadHosts;
  std::vector<std::string> degradedHosts;    // probe::degradedHosts: flagged, not failed
  std::map<std::string, uint64_t> failures;  // reason -> count
  double seconds = 0;
  std::map<std::string, double> phaseSeconds;
  probe::Structure structure;  // what found the hierarchy, and the levels
  probe::FleetCost cost;
  bool cancelled = false;
  std::string status() const;  // "ok", "partial" or "failed"
};

// A light check (probe/recheck.h): representatives of every link of a topology measured and
// compared with its link model.
struct CheckResult {
  size_t flows = 0;    // measured
  size_t changed = 0;  // units (a flow, or the flows across one uplink) confirmed changed
  double maxChange = 0;
  std::vector<std::string> changedFlows;  // "rack 5 -> rack 6 (12 flows) 8000 -> 4000 Mbit/s"
  std::vector<MeasurementRow> measurements;
  std::map<std::string, uint64_t> failures;
  double seconds = 0;
  probe::RecheckVerdict verdict = probe::RecheckVerdict::Unchanged;
  std::string reason;                      // why a full round is needed
  std::vector<probe::GroupChange> groups;  // what a group re-probe re-measures
  std::vector<std::string> changedGroups;  // "rack 5 uplink"
  bool hostsInPlace = false;               // probe::RecheckResult::hostsInPlace
};

class Coordinator : public probe::Fleet {
 public:
  // `key` must outlive the Coordinator. `self` names us in handshakes and logs.
  Coordinator(std::vector<Host> hosts, const probe::ProbeKey& key, std::string self,
              ProbeOptions opts);

  // A full round over all hosts; never throws for a peer's failure (it becomes missing data).
  RoundResult runFull(Deadline d, const ProgressFn& progress = {},
                      const std::atomic<bool>* cancel = nullptr);
  // The light check of `current` (probe::runRecheck): a unit whose rate moved by more than
  // `threshold` (relative) from the link model's prediction is measured again, and counts only
  // if it moved again. The verdict says whether the change is confined to a few groups
  // (runRepair) or needs a full round.
  CheckResult runCheck(const Topology& current, double threshold, Deadline d,
                       const std::atomic<bool>* cancel = nullptr);
  // Re-measures the links of `groups` of `current` (probe::runRepair): the result's topology is
  // `current` patched, stamped with the time; a host that failed is in deadHosts (the caller
  // then runs a full round).
  RoundResult runRepair(const Topology& current, const std::vector<probe::GroupChange>& groups,
                        Deadline d, const ProgressFn& progress = {},
                        const std::atomic<bool>* cancel = nullptr);
  const std::vector<Host>& hosts() const { return hosts_; }
  // Sends `request` to every agent at once; each reply, or nullopt for an agent that failed
  // (logged at debug). Bounded by `d`.
  std::vector<std::optional<Json>> ask(const Json& request, Deadline d);

  // probe::Fleet over the agents.
  size_t size() const override { return hosts_.size(); }
  const Host& host(int h) const override { return hosts_[static_cast<size_t>(h)]; }
  // Which hosts answer a "hello" before `d` (in parallel); silent ones are asked once more.
  std::vector<bool> alive(Deadline d) override;
  std::vector<probe::Outcome<LatencyStats>> latency(const std::vector<probe::HostPair>& pairs,
                                                    const probe::LatencyOptions& opts,
                                                    Deadline d) override;
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts,
                                                Deadline d) override;
  probe::FleetCost cost() const override;

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
  probe::RoundOptions roundOptions() const;
  // A round's outcome as the agent records it (names, missing pairs, status).
  RoundResult resultOf(probe::RoundOutcome&& out, std::chrono::steady_clock::time_point t0) const;
  Json peerJson(int h) const;
  Deadline latencyDeadline(Deadline round, const probe::LatencyOptions& lo, size_t peers) const;
  Deadline bandwidthDeadline(Deadline round, const probe::BandwidthOptions& bo,
                             std::chrono::milliseconds barrier) const;

  std::vector<Host> hosts_;
  const probe::ProbeKey& key_;
  std::string self_;
  ProbeOptions opts_;
  std::chrono::steady_clock::time_point made_ = std::chrono::steady_clock::now();
  probe::FleetCost cost_;
};

}  // namespace rankmap::agent
