// A simulated datacenter for running the probe and the planner at scale (256-4096 hosts) in one
// process: the world the real code measures, not a copy of the code. Three tiers: hosts in racks
// (sizes may differ), racks in pods, pods under a core. Every host has one link to its rack
// switch, every rack one uplink to its pod switch, every pod one uplink to the core, each a
// capacity per direction. Uplinks are oversubscribed: a rack's uplink carries its hosts' total
// rate divided by rackOversubscription (or rackUplinkMbps when set), a pod's uplink its racks'
// uplinks divided by podOversubscription. Hosts fill racks in order unless rackOfHost places
// them (the emulated cloud deals VMs to racks by a seeded permutation).
//
// Measurements: flows that run at the same time share every link max-min fairly, with the
// background tenants' flows, through the one model the planner and the probe use
// (common/maxmin.h); each reading is then scaled by an independent factor in
// [1 - noise, 1 + noise]. Round trips add the latency of each tier crossed, with the same noise.
// Dead hosts answer nothing; slow hosts have a slower host link. A round trip may also carry
// VM jitter: a fixed extra delay per host (its virtualisation stack) and a random extra delay per
// sample (scheduling), so that small latency tiers do not show as clean steps.
//
// Deterministic: the same spec and the same sequence of calls give the same readings. One thread
// uses a Datacenter at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "common/maxmin.h"

namespace rankmap::sim {

struct DatacenterSpec {
  int pods = 4;
  int racksPerPod = 8;
  // Hosts of each rack, cycled over the racks (pod-major order): {32} is 32 everywhere,
  // {4, 3, 3} gives unequal racks.
  std::vector<int> hostsPerRack = {32};
  // When not empty: the rack of each host (0 .. pods x racksPerPod - 1, every rack used), in
  // place of hostsPerRack.
  std::vector<int> rackOfHost;
  // When not empty (with rackOfHost): the pod of each rack (0 .. pods - 1, every pod used), in
  // place of pods x racksPerPod: pods of unequal sizes.
  std::vector<int> rackPod;
  double hostMbps = 1000;
  double rackOversubscription = 4;  // 1 = full bisection
  double rackUplinkMbps = 0;        // > 0: every rack's uplink, in place of the oversubscription
  double podOversubscription = 2;
  double hostLatencyUs = 5;   // one way, host to its rack switch
  double rackLatencyUs = 10;  // one way, rack switch to pod switch
  double podLatencyUs = 20;   // one way, pod switch to core
  double noise = 0.1;         // readings scaled by a factor in [1 - noise, 1 + noise]
  // Round trips: every host adds a fixed delay drawn once from [0, hostJitterUs] to each round
  // trip it takes part in, and every sample an extra delay drawn from [0, sampleJitterUs].
  double hostJitterUs = 0;
  double sampleJitterUs = 0;
  // Share of hosts stalled during one latency step (an agent not scheduled for a while on a
  // busy machine): every round trip of such a host in that step is 2x to 40x slower. The
  // emulated cloud's flat round trips show such stalls, which can open a gap in the sorted
  // round trips where no tier is.
  double stalledHostFraction = 0;
  // Bytes a full link's queue holds (drop-tail, filled by TCP): a round trip through a link that
  // flows fill waits this long at its rate (the emulated cloud's queues hold 128 KiB: 1 ms at
  // 1 Gbit/s, 65 us on a 16 Gbit/s uplink).
  double queueBytes = 128 * 1024;
  std::vector<int> deadHosts;
  std::vector<std::pair<int, double>> slowHosts;  // host, factor on its host link (0.5 = half)
  int backgroundFlows = 0;  // other tenants' long flows between random live hosts
  std::vector<std::pair<int, double>> thinRacks;  // rack, factor on its uplink (both directions)
  double uplinkDownFactor = 1;  // the downward direction of every rack and pod uplink carries
                                // this factor of the upward one (asymmetric links)
  uint64_t seed = 1;
};

class Datacenter {
 public:
  // InvalidInput naming the field for a spec that describes no datacenter.
  explicit Datacenter(DatacenterSpec spec);

  size_t hosts() const { return rackOf_.size(); }
  int racks() const { return static_cast<int>(rackPod_.size()); }
  int pods() const { return pods_; }
  int rackOf(int host) const { return rackOf_[static_cast<size_t>(host)]; }
  int podOf(int host) const { return rackPod_[static_cast<size_t>(rackOf(host))]; }
  bool alive(int host) const { return alive_[static_cast<size_t>(host)] != 0; }
  const DatacenterSpec& spec() const { return spec_; }

  // What each of `flows` (sender, receiver) reads when they all run at once, in Mbit/s, with
  // noise; nullopt for a flow with a dead end.
  std::vector<std::optional<double>> measure(const std::vector<std::pair<int, int>>& flows);
  // A round trip between two hosts in microseconds, with noise; nullopt if either is dead.
  std::optional<double> rttUs(int a, int b);
  // Round trips of `pings` (first pings second) while `flows` run, as rttUs, plus for every link
  // of the path either way that the flows and the tenants' fill (max-min: every bit of its
  // capacity used) its queue's wait, queueBytes at the link's rate, times a draw in [0.5, 1] (a
  // drop-tail queue under TCP's sawtooth). nullopt with a dead end. The flows' own readings are
  // measure()'s.
  std::vector<std::optional<double>> loadedRttUs(const std::vector<std::pair<int, int>>& flows,
                                                 const std::vector<std::pair<int, int>>& pings);
  // For one latency step: each host's factor on its round trips, 1 or (stalledHostFraction of
  // the hosts) 2 to 40.
  std::vector<double> pingStalls();

  // Noise-free truth, for scoring what the probe and the planner found: the rate a flow gets
  // alone (background included), the rates of flows running at once (max-min, as measure()
  // without noise; every host must be alive), and the capacity of each uplink.
  double aloneMbps(int src, int dst) const;
  std::vector<double> fairMbps(const std::vector<std::pair<int, int>>& flows) const {
    return fill(flows);
  }
  double rackUplinkMbps(int rack) const { return linkMbps_[rackUp(rack)]; }
  double podUplinkMbps(int pod) const { return linkMbps_[podUp(pod)]; }
  // Each direction of each link: out = away from the host or group (up), in = towards it.
  double hostOutMbps(int host) const { return linkMbps_[hostUp(host)]; }
  double hostInMbps(int host) const { return linkMbps_[hostUp(host) + 1]; }
  double rackInMbps(int rack) const { return linkMbps_[rackUp(rack) + 1]; }
  double podInMbps(int pod) const { return linkMbps_[podUp(pod) + 1]; }
  // The one-way latency a -> b without jitter or noise (half the ideal round trip).
  double oneWayUs(int a, int b) const;

  // Changes to the world between calls, for re-probe tests: a rack uplink's capacity (both
  // directions), a host that dies or comes back, a host moved to another rack (its links stay;
  // uplink capacities do not follow it). InvalidInput for an index out of range.
  void setRackUplinkMbps(int rack, double mbps);
  void setAlive(int host, bool alive);
  void moveHost(int host, int rack);

 private:
  // Directed links: host h up 2h, down 2h+1; then rack r up/down; then pod p up/down.
  size_t hostUp(int h) const { return 2 * static_cast<size_t>(h); }
  size_t rackUp(int r) const { return 2 * (hosts() + static_cast<size_t>(r)); }
  size_t podUp(int p) const { return 2 * (hosts() + rackPod_.size() + static_cast<size_t>(p)); }
  void addPath(FlowLinks& paths, int src, int dst) const;
  // Max-min rates of `flows` (with the tenants'); `load`, when given, gets every link's total.
  std::vector<double> fill(const std::vector<std::pair<int, int>>& flows,
                           std::vector<double>* load = nullptr) const;
  double noisy(double v);

  DatacenterSpec spec_;
  std::vector<int> rackOf_;   // host -> rack
  std::vector<int> rackPod_;  // rack -> pod
  std::vector<char> alive_;
  std::vector<double> linkMbps_;  // per directed link
  std::vector<std::pair<int, int>> background_;
  std::vector<double> hostDelayUs_;  // each host's fixed round-trip delay (hostJitterUs)
  std::mt19937_64 jitterRng_;        // sampleJitterUs
  int pods_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace rankmap::sim
