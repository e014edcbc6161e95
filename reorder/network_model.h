// The planner's picture of the network, and flow-level sharing on it.
//
// The model is a tree. Hosts attach to the switch of their innermost group by a host link; each
// group's switch attaches to its parent group's switch (the root for the top level) by an
// uplink. Every link has one capacity per direction, the same both ways. A flow from a to b uses
// a's host link up, the uplinks of a's groups below the lowest common group up, those of b's
// groups down, and b's host link down. A pair measured well below what the tree allows it
// (kAnomalyRatio) is an anomaly of a network less tree-shaped than the model: its measured rate
// also caps flows between the two.
//
// Inference (inferNetwork): a host link's rate is the top band of the host's single-flow rates
// to its innermost group (flows that cross no uplink); an uplink's capacity is the top band of
// the single-flow rates between its group and the sibling groups under the same parent (a single
// flow shows the narrowest link on its path), or the capacity of a shared link (contention
// probe) with exactly the group's hosts, which wins. When no flow can show an uplink (all flows
// host-limited) its capacity is taken to be the single-flow rate: conservative, so plans still
// avoid crossing it, which never hurts.
//
// From a link model (networkFromLinks, topology.json "links"): the tree is the topology's
// groups and every capacity is given; nothing is inferred from pairs.
//
// Sharing: flows get max-min fair rates (progressive filling, with per-flow caps). A set of
// flows of equal size completes when the slowest does, at size x max over links of
// flows/capacity; unequal sizes are simulated flow by flow (completion events). At a completion
// only the flows it can affect are filled again: those at least as fast as the finished flow and
// connected to it through links (progressive filling below its rate is unchanged), so an event
// costs its neighbourhood, not the whole set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "reorder/hierarchy.h"
#include "reorder/measurements.h"

namespace rankmap::reorder {

inline constexpr double kDefaultHostMbps = 10000;  // when no bandwidth was measured at all
inline constexpr double kDefaultLatencyUs = 20;    // when no latency was measured at all
inline constexpr double kHeterogeneousRatio = 1.5;
inline constexpr double kAnomalyRatio = 0.7;  // a pair this much below the tree caps its flows

struct NetworkModel {
  size_t n = 0;                    // hosts
  size_t levels = 0;               // switch levels below the root (the hierarchy's levels)
  std::vector<int> switchOf;       // n x levels: switch of host h's group at level l
  std::vector<int> switchLevel;    // per switch
  std::vector<int> switchParent;   // per switch; -1 when attached to the root
  std::vector<int> switchSize;     // hosts below each switch
  std::vector<double> hostMbps;    // per host link, each direction
  std::vector<double> uplinkMbps;  // per switch uplink, each direction
  // One-way latency: the matrix when set (measured, missing pairs imputed), else the sum of
  // linkLatencyUs over the path.
  std::shared_ptr<const PairMatrix> latency;
  std::vector<double> linkLatencyUs;  // per link (host links, then uplinks)
  // Measured single-flow rates capping flows between a pair; null or NaN = no cap.
  std::shared_ptr<const PairMatrix> caps;
  // The rate all inter-host flows together can reach, Mbit/s: +inf for a real network, whose
  // links are the limits; a few Gbit/s for an emulated cloud whose VMs share one machine's CPUs
  // (tests/emucloud). completionUs() never finishes flows faster than their bytes at this rate.
  double fabricMbps = std::numeric_limits<double>::infinity();
  // Bytes all flows of one phase together move before fabricMbps binds (0 = none). On an
  // emulated cloud, short phases (an in-rack exchange of a few hundred KiB) run faster than its
  // CPUs' sustained rate; only Open MPI's models (reorder/cost_model.h MpiAlgoCost) use it, as a
  // slope change per phase: each phase starts with the whole burst.
  double fabricBurstBytes = 0;

  size_t switches() const { return switchLevel.size(); }
  // Link ids: host links 0..n-1, then uplink of switch s = n + s.
  size_t links() const { return n + switches(); }
  double linkMbps(size_t link) const { return link < n ? hostMbps[link] : uplinkMbps[link - n]; }
  int switchAt(int host, size_t level) const { return switchOf[host * levels + level]; }
  // The level of the lowest common group of a and b; `levels` when only the root is common.
  size_t lcaLevel(int a, int b) const {
    size_t l = 0;
    while (l < levels && switchAt(a, l) != switchAt(b, l)) ++l;
    return l;
  }
  // Calls f(link, down) for each link on the path a -> b (down = against the uplink direction).
  template <typename F>
  void forEachLink(int a, int b, F&& f) const {
    size_t top = lcaLevel(a, b);
    f(static_cast<size_t>(a), false);
    for (size_t l = 0; l < top; ++l) f(n + switchAt(a, l), false);
    for (size_t l = 0; l < top; ++l) f(n + switchAt(b, l), true);
    f(static_cast<size_t>(b), true);
  }
  // The switch tree in host order: the hosts right below each level-0 switch, the child
  // switches of each switch and the switches attached to the root, each in the order of their
  // lowest host.
  struct SwitchTree {
    std::vector<std::vector<int>> hostsOf;
    std::vector<std::vector<int>> children;
    std::vector<int> tops;
  };
  SwitchTree switchTree() const;
  double latencyUs(int a, int b) const;
  // The measured single-flow rate of the pair, or +inf.
  double capMbps(int a, int b) const;
  // Host link rates differing by more than `ratio` (beyond measurement noise): what makes
  // uneven chunks and packed trees worth considering.
  bool heterogeneousHosts(double ratio = kHeterogeneousRatio) const;
  // Host links and the uplinks of groups smaller than everything: the links any ring must
  // cross once in each direction. Its minimum capacity bounds every ring's bottleneck.
  double ringBoundMbps() const;
};

// Builds the model from the measurements and the hierarchy. `sharedSets` and `sharedMbps` are
// the shared links (host index sets and capacities). Appends notes to `warnings`.
NetworkModel inferNetwork(const Measurements& m, const Hierarchy& h,
                          const std::vector<std::vector<int>>& sharedSets,
                          const std::vector<double>& sharedMbps,
                          std::vector<std::string>& warnings);
// The same, taking the measured matrices over instead of copying them (N^2 floats each).
NetworkModel inferNetwork(Measurements&& m, const Hierarchy& h,
                          const std::vector<std::vector<int>>& sharedSets,
                          const std::vector<double>& sharedMbps,
                          std::vector<std::string>& warnings);

// The model of a topology's link model (Topology::links) on `h`, the hierarchy of its groups
// (hierarchyFromLevels(topology.groups)). Each link gets min(out, in): NetworkModel links carry
// one capacity for both directions, and every collective modelled here loads a link equally both
// ways (a closed ring crosses each link as often up as down; tree, hier and rhd exchange
// symmetric byte counts), so the slower direction is the one that limits; for the rare one-way
// phase (a tree's broadcast) this is conservative. A zero capacity means unknown: such a host
// link gets the median known host rate, such an uplink the median of its level's known uplinks
// (or the slowest host link below it), with a warning. Latency: the topology's latency matrix
// when it has one (one value per pair: the mean of the two directions' `min`; missing pairs get
// the link model's path latency, or the median of the matrix when the link latencies are
// unknown), else the link latencies (host link, each level's uplink), else kDefaultLatencyUs per
// pair. No pair caps flows: the model is the probe's statement of the network.
NetworkModel networkFromLinks(const Topology& t, const Hierarchy& h,
                              std::vector<std::string>& warnings);

// A model from a hierarchy and explicit rates (tests, synthetic truth). `uplinkMbpsByLevel` and
// `uplinkLatencyByLevel` have one entry per level, innermost first.
NetworkModel modelFromHierarchy(const Hierarchy& h, std::vector<double> hostMbps,
                                const std::vector<double>& uplinkMbpsByLevel, double hostLatencyUs,
                                const std::vector<double>& uplinkLatencyByLevel);

struct Flow {
  int src = 0;  // host
  int dst = 0;  // host (src == dst: intra-host, ignored here)
  double bytes = 0;
};

// Max-min fair rates (Mbit/s) of `flows`, honouring per-pair caps (common/maxmin.h).
std::vector<double> maxMinRates(const NetworkModel& model, const std::vector<Flow>& flows);

// Time in microseconds until every flow has finished, flows sharing links max-min fairly and
// re-sharing when one finishes, and never before their bytes together at fabricMbps. Equal
// sizes use the closed form; above kMaxSimulatedFlows unequal flows use the per-link load bound
// (max over links of bytes / capacity).
inline constexpr size_t kMaxSimulatedFlows = 4096;
double completionUs(const NetworkModel& model, const std::vector<Flow>& flows);
// The same, links only: fabricMbps ignored.
double linksCompletionUs(const NetworkModel& model, const std::vector<Flow>& flows);

// Bytes per microsecond of a rate in Mbit/s.
inline double bytesPerUs(double mbps) { return mbps / 8.0; }

}  // namespace rankmap::reorder
