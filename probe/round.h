// A probe round whose cost grows near-linearly with the hosts: structure first, then sparse
// bandwidth. It talks only to a Fleet (probe/fleet.h): the agents, or a simulated datacenter.
//
// Phases (one function each, composed by runRound):
//   1. liveness      every host is asked once (the fleet retries before giving up on one);
//   2. structure     the hierarchy from the cheapest signal that shows it:
//        latency     leader clustering: in rounds of 4, 8, 16, ... new leaders drawn from the
//                    hosts not yet placed, every unplaced host pings the new leaders; a host
//                    within rack distance of a leader joins its rack. Levels of distance are
//                    the gaps in the sorted round trips (kLatencyLevelRatio). The leaders of
//                    the racks then ping each other, and the next gaps group racks into pods.
//                    Pings: O(N x leaders), rounds: O(log racks).
//        latency     (soft; 128 hosts or more, no gaps) the same on round trips without each
//                    host's own offset, tiers as clusters: +10-20% per tier under VM jitter
//                    (probe/structure.cc, kSoftLatencySamples).
//        bandwidth   when round trips show no levels (an emulated cloud, some clouds): trials
//                    in which every host sends one flow and receives one; a flow that reaches
//                    the top band of rates ("near") crossed no congested uplink, so its two
//                    hosts share the innermost group; a slow one ("far") separates their
//                    groups. Each trial tests pairs of groups not yet decided, every host
//                    loaded so that a shared uplink is congested if the guess of "far" is
//                    right. Ends when every pair of groups is decided: O(groups) trials. That
//                    shows the most congested boundary (pods, where pod uplinks bind first);
//                    the same search then runs inside each group found of at least 17 hosts,
//                    all at once (no flow crosses the boundary found, so the next one in
//                    shows: racks inside pods), and again inside those, up to three levels.
//                    Where the slow band is close to the host rate (an uplink oversubscribed
//                    1:2 leaves a crossing flow about half), near and far are cut around the
//                    midpoint of the two bands and joining takes two near readings; a split is
//                    kept only where a check bears it out: each group's members all sending
//                    out of it read a band below what they read inside it (noise and other
//                    tenants slow both alike).
//        contention  when those trials show one band (or two that split nothing) in a small fleet
//                    (a permutation sends only about 1 - k/N of a group's flows across its uplink,
//                    too few to congest a mildly oversubscribed one): more permutations and the
//                    contention fit (probe/contention.h): shared slow-downs by shared uplinks.
//   3. links         bandwidth chosen by the structure: host links from shift trials inside
//                    each innermost group (no uplink crossed); at each level, under each
//                    parent, one flow per child group to the next (one flow per uplink: the
//                    single-flow rate across it) and two trials in which every host of a group
//                    sends to the next group (the uplink's capacity: what all of them get
//                    together). No two probe flows share a suspected uplink unless the trial is
//                    there to load it. Flows: about 2N per level plus 2N for host links.
//   4. rings         the input order's ring and the structure's (a depth-first walk of the
//                    groups) measured as a ring collective loads the network, every host sending
//                    the same bytes to the next at once: what the planner checks its model and its
//                    order against (topology.json "rings"; reorder/planner.h). The
//                    structure's ring first: one trial when every hop reads what the link
//                    model predicts, else two (a hop keeps the better of two readings a band
//                    apart, else their mean); the input ring likewise, left out when the
//                    structure's ring agreed and the model puts the input ring a band below.
//   5. assemble      topology.json: the groups, the link model (`links`), the pairs measured
//                    alone (`measured`), oversubscribed groups as `shared_links`, and, up to
//                    kDenseMaxHosts, full matrices whose other
//                    entries come from the link model (the narrowest link on the path) and the
//                    per-tier latencies.
//   6. degraded      hosts whose host link carries under kDegradedHostRatio of the round's median
//                    host link (a brown-out: a VM's NIC throttled) are named in the outcome. The
//                    bandwidth structure may then also put such a host in a group of its own whose
//                    uplink is its host link's rate: the name is how the round says so.
// A host that does not answer (after the fleet's connection retries) or answers too late twice is
// dropped for the round and named in the result; the round never throws for a peer's failure.
// Deterministic for a deterministic fleet and seed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/topology.h"
#include "probe/fleet.h"

namespace rankmap::probe {

// Two round trips this many times apart are at different levels of the hierarchy (within a
// level the floor of a ping-pong varies by noise, ~10-20%; tiers add whole switch hops).
inline constexpr double kLatencyLevelRatio = 1.5;
// Round trips define racks only if at most this fraction of the pings disagree with them.
inline constexpr double kMaxLatencyDisagreement = 0.01;
// ... and at most this fraction of fresh confirmation pings inside the racks found, and of those
// between racks (pairs not pinged before). A gap that noise opened (an agent stalled
// during one step on a busy machine) makes racks that the next pings contradict often: a third
// to most of them; real tiers agree again.
inline constexpr double kMaxConfirmDisagreement = 0.1;
// A flow is "near" (no congested uplink) when it reaches this fraction of the top band of rates,
// "far" below kFarFraction of it; in between it decides nothing.
inline constexpr double kNearFraction = 0.6;
inline constexpr double kFarFraction = 0.4;
// Two bandwidth readings this many times apart are different bands (near and far).
inline constexpr double kBandwidthLevelRatio = 1.5;
// Slow readings between two groups, each from a different trial, that decide them apart (near
// needs one: a congested uplink cannot make a flow fast, while a busy machine can make one slow;
// two readings of one trial share the moment's load, so they count once: on the emulated
// cloud a trial's flows share the machine's cores, and a loaded moment slowed two flows of one
// rack in the same trial below kFarFraction).
inline constexpr int kFarReadings = 2;
// One reading below this fraction of the host rate decides alone: no busy machine slows a flow
// inside a group that much, while a congested uplink does.
inline constexpr double kVeryFarFraction = 0.15;
// A host direction with this many readings inside its group (within kHostBand of its best) takes
// no flow of the host links' shifts (measureHostLinks).
inline constexpr size_t kHostLinkReadings = 2;
// A flow measured alone below this fraction of what both its hosts reached elsewhere is
// measured again (once).
inline constexpr double kConfirmFraction = 0.95;
// A flow still below this fraction after being measured again (beyond the probe's noise, the
// band the accuracy of a pair is judged by) is measured a third time, alone in the fleet; at
// most kMaxReconfirms of them per call, the furthest below first (about 0.2 s each on the
// emulated cloud).
inline constexpr double kReconfirmFraction = 1 - kProbeNoise;
inline constexpr size_t kMaxReconfirms = 16;
// From this many live hosts the third readings run together, as few trials as there are flows
// sharing a host: alone guards against agents that share a machine's cores (the emulated cloud,
// 16-64 VMs on two), while a fleet this large is VMs on machines of their own, where flows inside
// groups with no host in common share no link. One at a time, the 16 took 4 s of a 1024-host
// round in the simulator.
inline constexpr size_t kReconfirmTogetherHosts = 128;
// A host link's capacity is the median of its readings within this fraction of its best one: the
// noise's whole width below it. Readings held only by the host link spread ±kProbeNoise around
// its capacity, and the best of a few dozen sits near their top, so the band reaches their
// bottom. The mean of a band of kProbeNoise kept their upper half: flat racks' host links were
// stated 3-4% high (1024 hosts, flat 1:4 seed 1: median 1037 Mbit/s of 1000), and their rings'
// times 1-2.5% low.
inline constexpr double kHostBand = (1 - kProbeNoise) / (1 + kProbeNoise);
// A single flow alone on an uplink below this fraction of its hosts' rate was held by the
// uplink: its reading is the uplink's capacity (well below 1: readings carry noise).
inline constexpr double kUplinkBoundFraction = 0.8;
// The single-flow uplink trial runs this many times the usual window.
inline constexpr int64_t kUplinkWindowFactor = 3;
// An uplink-bound single flow runs again from other hosts unless its shift has this many bound
// readings and it reads within kSecondHostsBand of their median: a reading held back by its
// sender (8-15% low on the emulated cloud) or lifted by its sender's other traffic (1.3x) stands
// apart from the others of its kind, while several independent readings that agree are the rate.
inline constexpr size_t kSecondHostsQuorum = 3;
inline constexpr double kSecondHostsBand = kProbeNoise / 2;
// At most this many single-flow shifts across the uplinks of a level (group i to group i + s),
// the later ones only when the first shift's uplink-bound readings differ beyond the noise.
inline constexpr size_t kUplinkShifts = 3;
// The contention fit's partition is taken only when it explains at least this share of the
// slow-down (probe::Inference::confidence); less is noise on a flat network.
inline constexpr double kMinContentionConfidence = 0.5;
// A host that fails this many requests in a round is out of it (one that does not accept the
// connection at all, after the fleet's retries, is out at once).
inline constexpr int kMaxStrikes = 2;

struct RoundOptions {
  LatencyOptions latency{2, 10};  // per leader ping: a floor needs few samples
  BandwidthOptions bandwidth;
  bool bandwidthEnabled = true;
  // At most this many flows run at once (0 = no limit); trials that must load an uplink are
  // never split below one group's flows.
  size_t maxFlowsPerTrial = 0;
  int firstLeaders = 4;         // leaders of the first latency round; doubles every round
  int maxStructureTrials = 64;  // bandwidth structure: trials before giving up on a decision
  uint64_t seed = 1;
};

struct RoundProgress {
  std::string phase;   // "liveness", "structure", "links", "assemble", "done"
  size_t done = 0;     // of this phase ...
  size_t total = 0;    // ... out of (0 = unknown)
  std::string detail;  // "640 of 1024 hosts placed in 20 racks"
};
using RoundProgressFn = std::function<void(const RoundProgress&)>;

// One measurement as it was taken (for the agent's store and the simulator's report).
struct Reading {
  int src = 0;
  int dst = 0;
  std::string kind;  // "latency" (min round trip / 2, us) or "bandwidth" (Mbit/s)
  double value = 0;
  std::string phase;   // "structure", "hosts", "confirm", "uplinks", "load"
  bool alone = false;  // bandwidth measured with no other probe flow on its links
  // A single flow across uplinks that the readings of other hosts of the same groups outvoted
  // (measureUplinks): kept as measured, but not taken as its pair's rate.
  bool overruled = false;
};

struct Structure {
  std::string signal;  // "latency", "bandwidth", "contention", "none" (one group) or
                       // "topology" (taken from one, for a re-probe: probe/recheck.h)
  // Innermost first; each level's groupOf maps host -> group (0.. in order of the lowest host),
  // -1 for hosts out of the round. Levels with a single group are not listed.
  std::vector<std::vector<int>> levels;
  // Round trip (us) of each level's pairs as found: [0] inside the innermost group, then one
  // per level above; empty without latency.
  std::vector<double> levelRttUs;
};

struct RoundOutcome {
  Topology topology;
  Structure structure;
  std::vector<Reading> readings;
  std::vector<std::string> deadHosts;          // by name
  std::vector<std::string> degradedHosts;      // "name X Mbit/s" (degradedHosts())
  std::map<std::string, uint64_t> failures;    // reason -> count
  std::map<std::string, double> phaseSeconds;  // by the fleet's clock
  FleetCost cost;
  bool cancelled = false;
};

// What a round left missing, and its status: for the agent's store and the command's report.
struct RoundSummary {
  size_t hosts = 0;
  size_t pairsTotal = 0;    // unordered host pairs
  size_t pairsMissing = 0;  // pairs with no latency and no bandwidth in either direction
  size_t flowsMissing = 0;  // directed bandwidth values missing (rounds that measure bandwidth)
  std::string status;       // "ok", "partial" or "failed" (cancelled, or no pair measured)
  std::string text;         // one line for the log: structure, cost, missing, phases
};
// A round measured bandwidth when its topology says so (probe.bandwidth_max_ms > 0).
RoundSummary summarize(const RoundOutcome& out);

// What the phases share: the fleet, the hosts still in the round, every reading taken.
class RoundState {
 public:
  RoundState(Fleet& fleet, const RoundOptions& opts, Deadline d,
             const RoundProgressFn& progress = {}, const std::atomic<bool>* cancel = nullptr);

  Fleet& fleet() { return fleet_; }
  Deadline deadline() const { return deadline_; }
  const RoundOptions& opts() const { return opts_; }
  bool stopped() const;  // cancelled or past the deadline
  bool cancelled() const { return cancel_ && cancel_->load(); }
  bool live(int h) const { return live_[static_cast<size_t>(h)] != 0; }
  std::vector<int> liveHosts() const;
  void drop(int h, const std::string& why);  // out of the round
  // Round trips (us) of pairs measured at once; nullopt for a failed one.
  // `latency` replaces opts().latency.
  std::vector<std::optional<LatencyStats>> ping(const std::vector<HostPair>& pairs,
                                                const std::string& phase,
                                                const LatencyOptions* latency = nullptr);
  // Rates (Mbit/s) of flows run at once, each recorded as a Reading; with `splittable` and
  // opts().maxFlowsPerTrial, in consecutive parts of whole `units` (flows of one unit, e.g. one
  // group, stay together; empty = each flow its own unit); `window` replaces opts().bandwidth.
  // `pings`: round trips while the flows run (Fleet::bandwidth), with the first part; those of
  // a pinger that is no sender of it are not taken (nullopt).
  std::vector<std::optional<double>> run(const std::vector<HostPair>& flows,
                                         const std::string& phase, bool alone,
                                         const std::vector<int>& units = {},
                                         bool splittable = false,
                                         const BandwidthOptions* window = nullptr,
                                         LoadedPings* pings = nullptr);
  void report(const RoundProgress& p) const;

  std::vector<Reading> readings;
  std::map<std::string, uint64_t> failures;
  std::vector<std::string> dropped;

 private:
  template <typename T>
  void judge(const std::vector<HostPair>& pairs, const std::vector<Outcome<T>>& out);
  Fleet& fleet_;
  const RoundOptions& opts_;
  Deadline deadline_;
  RoundProgressFn progress_;
  const std::atomic<bool>* cancel_;
  std::vector<char> live_;
  std::vector<int> strikes_;
};

// The phases (runRound composes them; tests call them one at a time).
std::vector<bool> checkLiveness(RoundState& s);
Structure findStructure(RoundState& s);
TopologyLinks measureLinks(RoundState& s, const Structure& st);
Topology assembleTopology(RoundState& s, const Structure& st, const TopologyLinks& links);

// Pieces of measureLinks, also used to re-probe single groups (probe/recheck.h).
// Host links of the live hosts of `groups` (shift 1 and 2 inside each group, flows below
// kConfirmFraction measured again), estimated from every bandwidth reading in `s`: one entry per
// fleet host, zero for hosts with no reading. `progressTotal` is the links phase's step count.
std::vector<LinkCapacity> measureHostLinks(RoundState& s,
                                           const std::vector<std::vector<int>>& groups,
                                           size_t progressTotal);
// The uplinks of level `l` of `st` (one entry per group of the level): single flows to the next
// sibling, then load trials; `below` holds the host links and the uplinks of the levels below
// `l`, whose narrowest on a host's way out picks the senders and judges what held a single
// flow. With `only` (one flag per group), just the flows that leave or enter a flagged group
// run, and only flagged entries are measured.
std::vector<LinkCapacity> measureUplinks(RoundState& s, const Structure& st, size_t l,
                                         const TopologyLinks& below,
                                         const std::vector<char>& only = {});
// Rates of `flows` running together on the link model `lk` of the structure `levels` (max-min
// fair, common/maxmin.h): each flow on its hosts' links and on the uplinks of every level
// where its hosts' groups differ. A link the model has no reading for carries nothing (0).
std::vector<double> predictRates(const TopologyLinks& lk,
                                 const std::vector<std::vector<int>>& levels,
                                 const std::vector<HostPair>& flows);
// Phase 4: the rings (see the file comment), the input order's first when it ran. The
// structure's ring is left out without levels (it would be the input order). Every flow of a ring
// moves the same bytes, as a ring collective's step does (what the median host link carries in a
// quarter of the window): a flow that is done leaves the network, and the machines, to the slower
// ones, where equal windows would have it compete with them to the end (on the 2-core emulated
// cloud the flows inside racks then took the CPU the ring's crossing flows needed: 72 Mbit/s
// measured for a ring the same job runs at 247).
std::vector<RingCheck> measureRings(RoundState& s, const Structure& st, const TopologyLinks& links);
// The bytes each flow of a ring trial moves: kRingWindowShare of a window at `hostMbps`.
inline constexpr double kRingWindowShare = 0.25;
// The depth-first walk of `st`'s levels over the live hosts: outermost groups in order of their
// lowest host, in each its groups likewise, in each innermost group its hosts ascending.
std::vector<int> structureRing(const RoundState& s, const Structure& st);

// Groups whose uplink carries less than 90% of their hosts' total, as shared links (what the
// contention probe reported before links existed; older readers and the planner use them).
std::vector<SharedLink> oversubscribedGroups(const Topology& t);

// A host whose measured host link (the slower direction) is below this fraction of the median
// host link of the hosts measured is degraded (docs/reliability.md, "Fault matrix": a VM's link
// shaped to 1% of its rate is named, not published silently as a rack of its own).
inline constexpr double kDegradedHostRatio = 0.1;
// The rate a host link's slower direction is degraded below: kDegradedHostRatio of the median of
// the hosts measured (both directions above 0); 0 with fewer than 3 of them. The hosts' median
// is returned in `median` when not null.
double degradedBelowMbps(const std::vector<LinkCapacity>& hosts, double* median = nullptr);
// Degraded hosts of `t` (its link model; none without one or with fewer than 3 hosts measured),
// each as "name X Mbit/s (hosts' median Y)".
std::vector<std::string> degradedHosts(const Topology& t);

// The whole round.
RoundOutcome runRound(Fleet& fleet, const RoundOptions& opts, Deadline d,
                      const RoundProgressFn& progress = {},
                      const std::atomic<bool>* cancel = nullptr);

}  // namespace rankmap::probe
