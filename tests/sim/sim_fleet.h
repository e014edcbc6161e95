// A probe::Fleet over a simulated Datacenter: the production probe round (probe/round.h) runs
// against it unchanged, and the fleet keeps a simulated clock of what the same calls would take
// on real agents.
//
// Time model (SimTiming), set from the per-trial times of the emulated cloud's agents
// (coordinator debug log "trial of N flows took S s" at 16, 32 and 64 VMs; docs/performance.md)
// and checked against whole rounds there: every fleet call costs the coordinator's control
// round trip (callOverheadMs); a latency pair costs a connection handshake (handshakeRtts round
// trips) and its warm-up and samples, pairs running concurrently. A bandwidth trial runs as the
// agents run it (probe/measure.h): the flows start together after probe::trialBarrier(), each
// runs its window (maxMs, or the byte bound at its rate), and its result comes back behind the
// bytes still queued at its bottleneck: a full queue (queueBytes) draining at the flow's rate.
// On top, the CPU that the trial's requests, handshakes, round trips and results take, in one of
// two ways (sharedCores). A liveness check with a dead host waits for the fleet's retries
// (deadHostMs). Bytes are what the flows moved in their windows.
#pragma once

#include <string>
#include <vector>

#include "probe/fleet.h"
#include "tests/sim/datacenter.h"

namespace rankmap::sim {

struct SimTiming {
  double callOverheadMs = 5;
  double handshakeRtts = 3;
  // The queue a flow's result waits behind at its bottleneck: the emulated cloud's bfifo leaves
  // hold 128 KiB (tests/emucloud/emucloud, queue_bytes). At 3 Mbit/s (a 25 Mbit/s uplink shared
  // by 8 flows) that is 0.35 s; at 1 Gbit/s, 1 ms.
  double queueBytes = 128 * 1024;
  // Where the agents' CPU is. Not 0: every agent shares this many cores, as on the emulated
  // cloud (2), so the CPU of every flow and round trip of a trial adds up: perFlowMs and
  // perLoadedPingMs each, trial times measured there on kMeasuredOnCores, scaled to these.
  // 0: each agent on a machine of its own, as a cloud's VMs are: the trial waits for the busiest
  // agent's CPU (agentFlowEndMs per flow it sends or receives, agentPingEndMs per loaded round
  // trip it takes or answers) or the coordinator's (coordinatorRequestMs per flow's request,
  // coordinatorPingMs per round trip in them), whichever is longer, and for a pinger's loaded
  // round trips to wait in the queues its flow fills (three rounds from 0.4 of its window, each
  // as long as its slowest Pong). Both bases charge the CPU after the flows' windows, though much
  // of it overlaps the barrier and the windows: an upper bound.
  double sharedCores = 2;
  static constexpr double kMeasuredOnCores = 2;
  // Trial time per flow on shared cores. 1 ms is the emulated cloud's (every agent on two cores).
  double perFlowMs = 1;
  // What each round trip taken under a trial's load (its connection, handshake and samples, run
  // while the flows do) adds to the trial, on the same basis: the emulated cloud's agents, 16 to
  // 64 VMs, 0.08-0.44 ms each in six runs, median 0.12 (tests/emucloud/loaded_rtt_bench.py
  // --cost; docs/performance.md).
  double perLoadedPingMs = 0.12;
  // Own machines: CPU per flow end, per round trip end, per flow's request and per round trip
  // the coordinator asks for: the CPU time of the emulated cloud's agents (every rankmapd
  // process) and coordinator in trials with and without round trips, the larger of 32 and 64
  // VMs (tests/emucloud/loaded_rtt_bench.py --cost; docs/performance.md, "What a loaded round
  // trip costs a trial"). Measured on shared cores, so contention is in them, and the agents'
  // includes each flow's bytes: at 8 round trips per sender the ends cost 0.38-0.68 ms each, at
  // 31-63 per sender 0.05-0.23 (a fixed cost per pinging sender); the busiest agent's own CPU
  // there was 20-30 ms a trial with 63 round trips out and in, where this model states 93 ms.
  double agentFlowEndMs = 3.44;
  double agentPingEndMs = 0.68;
  double coordinatorRequestMs = 0.24;
  double coordinatorPingMs = 0.004;
  double deadHostMs = 2000;  // a liveness check that ends waiting for a silent host
};

class SimFleet : public probe::Fleet {
 public:
  // `dc` must outlive the fleet. Hosts are named h0000, h0001, ... with addresses in 10/8.
  explicit SimFleet(Datacenter& dc, SimTiming timing = {});

  size_t size() const override { return hosts_.size(); }
  const Host& host(int h) const override { return hosts_[static_cast<size_t>(h)]; }
  std::vector<bool> alive(Deadline d) override;
  std::vector<probe::Outcome<LatencyStats>> latency(const std::vector<probe::HostPair>& pairs,
                                                    const probe::LatencyOptions& opts,
                                                    Deadline d) override;
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts, Deadline d,
                                                probe::LoadedPings* pings) override;
  probe::FleetCost cost() const override { return cost_; }

 private:
  // The CPU a bandwidth trial of `flows` with loaded round trips `pings` waits for (SimTiming).
  double trialCpuMs(const std::vector<probe::HostPair>& flows,
                    const std::vector<probe::HostPair>& pings) const;

  Datacenter& dc_;
  SimTiming timing_;
  std::vector<Host> hosts_;
  probe::FleetCost cost_;
};

// The true network of `dc` as a topology.json with a link model (racks and pods as groups, every
// capacity and per-tier latency from the spec), hosts named as `fleet` names them: what a
// perfect probe would state, for planning from the truth and scoring plans on it.
Topology truthTopology(const Datacenter& dc, const SimFleet& fleet);

}  // namespace rankmap::sim
