// Ring order: which host follows which in the rank order.
//
// Cost of a ring (hosts in ring order, each host's ranks contiguous): a ring allreduce of S bytes
// over w ranks takes 2(w-1)/w * (L + S / B), where L is the sum of the one-way latencies of all
// w hops (every chunk goes twice around the ring, and each lap pays every hop) and B is the rate
// of the slowest ring flow under max-min fair sharing: the minimum over links of capacity /
// ring flows on it, over measured pair rates, and over the intra-host rate. So large messages
// want the bottleneck minimised, small ones the latency sum; we minimise the time at one design
// size (PlanOptions::ringBytes), which weighs both.
//
// Construction: walk the hierarchy depth first (groups, then their subgroups, then hosts), which
// crosses every uplink once in each direction: on a tree-shaped network no ring does better on
// any link. Then local search (2-opt and Or-opt moves over each host's nearest candidates, first
// improvement, deterministic order) fixes what the hierarchy does not show: latency differences
// inside groups, and measured pairs that are slower than the tree suggests. For up to
// kExactMaxHosts hosts, a branch-and-bound search returns the exact optimum.
//
// Link loads of a closed ring are balanced: every link is crossed as often up as down, so the
// flows per direction are half the crossings, and reversing a segment (2-opt) changes nothing
// but the edges at its ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "reorder/network_model.h"

namespace rankmap::reorder {

inline constexpr size_t kExactMaxHosts = 12;

struct RingParams {
  uint64_t bytes = 16ull << 20;  // design message size
  int ranksPerHost = 1;
  double stepOverheadUs = 0;      // software cost per hop, on top of the measured latency
  double intraHostMbps = 100000;  // rank to rank on one host (shared memory)
  double intraHostLatencyUs = 1;
};

struct RingCost {
  double latencyUs = 0;       // L: the sum over every hop of the ring (network and intra-host)
  double bottleneckMbps = 0;  // B: the slowest flow's rate (+inf when nothing moves)
  double objectiveUs = 0;     // allreduce time at RingParams::bytes
};

// Ring allreduce time of a ring with `cost` for `bytes` over `world` ranks.
double ringAllreduceUs(const RingCost& cost, size_t world, double bytes);

RingCost evaluateRing(const NetworkModel& net, const std::vector<int>& ring,
                      const RingParams& params);

// Depth-first walk of the model's groups; hosts and groups in order of their lowest host index.
std::vector<int> hierarchicalRing(const NetworkModel& net);

// Local search from `ring`; returns a ring whose objective is never worse.
std::vector<int> improveRing(const NetworkModel& net, std::vector<int> ring,
                             const RingParams& params);

// Exact minimum of the objective (N <= kExactMaxHosts; throws InvalidInput beyond), starting
// from `incumbent`, which is returned unless something strictly better exists.
std::vector<int> exactRing(const NetworkModel& net, const std::vector<int>& incumbent,
                           const RingParams& params);

// Rotates a ring to start after the edge that crosses the most levels (a group boundary), so
// that groups are contiguous ranges of positions; ties go to the lowest host index.
std::vector<int> rotateToBoundary(const NetworkModel& net, const std::vector<int>& ring);

}  // namespace rankmap::reorder
