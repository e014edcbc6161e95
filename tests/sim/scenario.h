// Scenarios: a simulated datacenter described by KEY=VALUE settings, the production probe round
// and planner run on it, and the outcome scored on the true network. The interface of
// `probe_scale_bench --scenario` and of the scenario matrix test; its keys are stable, so that
// scripts (and anyone checking our figures) can rely on them.
//
// Keys in (defaults in brackets):
//   hosts [1024]          hosts in all
//   rack_sizes [32]       hosts per rack, a list cycled over the racks until `hosts` are placed
//                         (the last rack takes what is left)
//   racks_per_pod []      racks per pod, a list cycled over the pods; empty: `pods` pods of
//                         (nearly) equal numbers of racks
//   pods [4]              pods, when racks_per_pod is empty (at most the racks)
//   rack_over [4]         rack oversubscription: a rack's uplink carries its hosts' total over it
//   pod_over [2]          pod oversubscription: a pod's uplink carries its racks' uplinks over it
//   host_mbps [1000]      every host link, each direction
//   host_us [20]          round trip between two hosts of one rack
//   rack_us [0]           round trip added between racks (0: flat round trips)
//   pod_us [0]            round trip added between pods
//   jitter_us [0]         VM jitter: each host adds a fixed delay from [0, J] to its round trips,
//                         each sample one from [0, J] (datacenter.h)
//   noise [0.1]           every reading scaled by a factor in [1 - noise, 1 + noise]
//   dead [3]              hosts that answer nothing
//   slow [0]              fraction of hosts whose host link runs at slow_factor [0.4]
//   thin [0]              rack uplinks at thin_factor [0.2] of their capacity
//   background [0]        other tenants' long flows between random hosts
//   asym [1]              the downward direction of every uplink carries this factor of the upward
//   shuffle [1]           1: the provider's order deals hosts across racks at random; 0: in rack
//                         order
//   seed [1]
//   ring_checks [1]       0: the planner gets the probe's topology without its measured rings
//                         (the comparison run for what the ring checks change)
//   agent_cores [0]       where sim_s puts the agents' CPU (SimTiming::sharedCores): 0, each
//                         agent on a machine of its own, as a cloud's VMs are; N, all agents on
//                         N shared cores (2: the emulated cloud's basis, as before 2026-12-06)
//
// Keys out (one JSON object):
//   hosts, racks, pods    what was built
//   signal, levels        what found the structure (probe::Structure), and how many levels
//   rack_ari, pod_ari     adjusted Rand index of the found levels against the true racks and pods
//                         (live hosts; a level not found scores as one group)
//   level_ari             [rack ARI, pod ARI] of every found level, innermost first
//   flows_per_host, trials, requests, pings, sim_s, agent_cores
//                         what the round spent (probe::FleetCost; sim_s by the fleet's clock,
//                         on the basis that agent_cores names)
//   flows_by_phase        bandwidth readings per host by the round's phase that took them
//                         (structure, hosts, confirm, uplinks, load, rings)
//   sim_s_by_phase        simulated seconds by the round's phase (liveness, structure, links,
//                         rings: probe::RoundOutcome::phaseSeconds)
//   plan_true_ms          16 MiB ring allreduce in the order planned from the probe's topology,
//                         timed on the true network (max-min sharing of the ring's flows with the
//                         tenants' on the datacenter's links, no noise): the 2(w-1) steps
//                         played out rank by rank, a rank sending step k once it has sent step
//                         k-1 and received step k-1 from its predecessor (each send its chunk
//                         time at the hop's fair rate, each arrival one-way latency later); the
//                         time of the last arrival
//   optimum_ms            the same for the best of the order planned from the true topology, the
//                         provider order and the plan's order
//   provider_ms           the same for the provider's order (the input order)
//   plan_predicted_ms     what the plan states for that ring (Plan::predicted: the planner's model
//                         of the probe's topology, checked against the rings the probe measured)
//   pairs_within_10pct    share of live directed pairs whose stated single-flow rate is within 10%
//                         of what a flow gets alone on the true network (all pairs up to 1024
//                         hosts, else a fixed sample of 200 000)
//   uplink_err_max        the largest relative error of a stated rack or pod uplink (each
//                         direction) against the true capacity, over found groups that are exactly
//                         a true rack or pod; uplink_err lists it per level
//   dead_found            dead hosts the round named
//   confidence            the topology's confidence in each level it states
// Scoring uses the datacenter's own truth, never the planner's model of it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "tests/sim/datacenter.h"
#include "tests/sim/sim_fleet.h"

namespace rankmap::sim {

struct Scenario {
  int hosts = 1024;
  std::vector<int> rackSizes = {32};
  std::vector<int> racksPerPod;
  int pods = 4;
  double rackOver = 4, podOver = 2;
  double hostMbps = 1000;
  double hostUs = 20, rackUs = 0, podUs = 0, jitterUs = 0;
  double noise = 0.1;
  int dead = 3;
  double slow = 0, slowFactor = 0.4;
  int thin = 0;
  double thinFactor = 0.2;
  int background = 0;
  double asym = 1;
  bool shuffle = true;
  uint64_t seed = 1;
  bool ringChecks = true;
  SimTiming timing{.sharedCores = 0};

  // KEY=VALUE settings over the defaults; InvalidInput naming the key and what was expected.
  static Scenario parse(const std::vector<std::string>& settings);
  // The datacenter it describes (hosts in the provider's order).
  DatacenterSpec spec() const;
};

struct ScenarioResult {
  Json json;          // the keys out (the file comment)
  Topology topology;  // what the probe wrote
  Topology truth;     // the datacenter's true groups and links, over the live hosts
  std::string line() const { return json.dump(); }
};

// Builds the datacenter, runs the probe round and the planner, and scores them.
ScenarioResult runScenario(const Scenario& sc);

// The 16 MiB (bytes) ring allreduce in `order` (host indices, live hosts) on the true network of
// `dc`, in microseconds: see plan_true_ms above.
double trueRingUs(const Datacenter& dc, const std::vector<int>& order, uint64_t bytes);

}  // namespace rankmap::sim
