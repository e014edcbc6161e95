// The hosts a probe round measures, as the round sees them: the real agents over the probe
// protocol (probe/agent_fleet.h) or a simulated datacenter (tests/sim/sim_fleet.h). The round's
// phases (probe/round.h) talk to nothing else, so the simulator runs the production scheduler,
// inference and planner against a model network.
//
// Contract: one thread calls a Fleet at a time; every call returns by its deadline; a failure
// is data (an Outcome without a value, naming the host at fault and why), never an exception.
// A host the fleet reports at fault once stays usable: the round decides whom to drop (hosts that
// fail to answer, not peers that a busy trial could not reach).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/topology.h"
#include "probe/measure.h"
#include "probe/schedule.h"

namespace rankmap::probe {

template <typename T>
struct Outcome {
  std::optional<T> value;
  int culprit = -1;     // the host at fault when value is empty (-1: unknown)
  // The culprit is the host asked to measure, and it did not answer. Otherwise the asked host
  // answered that its peer failed, which in a trial that loads an uplink can be a connection
  // held up behind the load (a lost SYN waits a second), not a dead peer.
  bool asked = false;
  std::string reason;   // "connect", "timeout", "auth", "peer", "refused"
  std::string message;  // for the log
};

// What the fleet spent: for the benchmark's report and the simulator's validation.
struct FleetCost {
  double seconds = 0;           // wall clock for agents, simulated time for the simulator
  uint64_t latencyPairs = 0;    // latency measurements made
  uint64_t bandwidthFlows = 0;  // bandwidth measurements made (one per flow)
  uint64_t trials = 0;          // bandwidth calls (sets of concurrent flows)
  double bulkBytes = 0;         // bytes moved by bandwidth probes
  uint64_t requests = 0;        // control requests the coordinator sent (each answered or not)
};

// Round trips taken while a trial's flows run (Fleet::bandwidth): `pairs`, the first pinging
// the second, the pinger a sender of one of the trial's flows; `us` gets the least of each
// pair's samples (microseconds), nullopt where it failed. A round trip through a link the
// trial's flows fill waits in that link's queue, one that stays inside the pinger's group does
// not: where idle round trips are flat, that shows which hosts are behind the pinger's
// congested uplink (docs/probing.md, "Loaded round trips").
struct LoadedPings {
  std::vector<HostPair> pairs;
  std::vector<std::optional<double>> us;
};

class Fleet {
 public:
  virtual ~Fleet() = default;
  virtual size_t size() const = 0;
  virtual const Host& host(int h) const = 0;
  // Which hosts answer before `d`; one that does not answer at first is asked again (with
  // backoff) before it counts as down.
  virtual std::vector<bool> alive(Deadline d) = 0;
  // Round trips of every pair (first pings second), all at once: small messages do not disturb
  // each other, so a host may be in several pairs.
  virtual std::vector<Outcome<LatencyStats>> latency(const std::vector<HostPair>& pairs,
                                                     const LatencyOptions& opts, Deadline d) = 0;
  // Bulk flows (sender, receiver) all at once; each value is the rate its receiver measured,
  // in Mbit/s. Flows that share a link share it: that is what a trial is for. With `pings`
  // (may be null), their round trips while the flows run.
  virtual std::vector<Outcome<double>> bandwidth(const std::vector<HostPair>& flows,
                                                 const BandwidthOptions& opts, Deadline d,
                                                 LoadedPings* pings) = 0;
  // What was spent since the fleet was made.
  virtual FleetCost cost() const = 0;
};

}  // namespace rankmap::probe
