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
// On top, perFlowMs for each flow of the trial: the requests, handshakes and results that the
// agents' CPUs handle. A liveness check with a dead host waits for the fleet's retries
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
  // CPU per flow of a trial. 1 ms is the emulated cloud's, where every agent shares two cores;
  // agents on machines of their own need far less, so at scale this overstates a trial.
  double perFlowMs = 1;
  // What each round trip taken under a trial's load (its connection, handshake and samples, run
  // while the flows do) adds to the trial, on the same basis: the emulated cloud's agents, 16 to
  // 64 VMs, 0.08-0.44 ms each in six runs, median 0.12 (tests/emucloud/loaded_rtt_bench.py
  // --cost; docs/performance.md).
  double perLoadedPingMs = 0.12;
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
