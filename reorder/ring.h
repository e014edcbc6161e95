// Ring order: which host follows which in the rank order.
//
// Cost of a ring (hosts in ring order, each host's ranks contiguous): a ring allreduce of S bytes
// over w ranks takes 2(w-1) steps of a chunk of S/w each. A rank sends step k once it has sent
// step k-1 and received step k-1 from its predecessor, so a step takes the larger of the slowest
// hop's transfer, S/(w B), and the mean hop around the ring, (L + S/w * sum_h 1/B_h) / w: the
// cycle of w dependent hops carries w steps. L is the sum of the one-way latencies of all w hops,
// B_h a hop's rate (the minimum over its links of capacity / ring flows on it, its measured pair
// rate, the intra-host rate) and B the least of them. The search optimises the simpler bound
// 2(w-1)/w * (L + S / B) (the slowest transfer plus the mean latency per step), which is
// incremental, ranks rings alike wherever the bottleneck decides and keeps the exact search
// exact; ringAllreduceUs, which states the plan's time, takes the period above. So large messages
// want the bottleneck minimised, small ones the latency sum; we minimise the time at one design
// size (PlanOptions::ringBytes), which weighs both.
//
// Construction: walk the hierarchy depth first (groups, then their subgroups, then hosts), which
// crosses every uplink once in each direction: on a tree-shaped network no ring does better on
// any link. Then local search (2-opt and Or-opt moves over each host's nearest candidates, first
// improvement, deterministic order) fixes what the hierarchy does not show: latency differences
// inside groups, and measured pairs that are slower than the tree suggests. For up to
// kExactMaxHosts hosts, a branch-and-bound search finds the exact optimum.
//
// Noise and tidiness: the measurements carry noise (RingParams::noise, relative, per measured
// value), so two rings whose predicted times differ by less than the noise of what differs
// between them (the latencies of the hops one has and the other has not; the capacities of
// their bottleneck links when those are different links) are equally fast as far as anyone
// knows. Among such rings the planner prefers the one that loads the links least, leximin: the
// most loaded link as little as possible, then the next, and so on (a link's load is its flows
// per direction over its capacity; a measured pair cap counts as a link of its hop). A move of
// the local search is taken when its gain exceeds its noise, or when it is within its noise and
// leximin-better while staying within the noise (relative) of the fastest ring seen: the search
// never drifts by more than that. On a tree-shaped network the hierarchy walk is leximin-optimal
// (every uplink crossed twice, the minimum), so what comes out is the walk, each group
// contiguous and the groups of a parent contiguous, unless a move is faster beyond the noise.
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
  // Relative noise of each measured latency and capacity: differences below it are not gains.
  // 0 makes the search strict (the exact oracle's setting in tests).
  double noise = kProbeNoise;
};

struct RingCost {
  double latencyUs = 0;       // L: the sum over every hop of the ring (network and intra-host)
  double bottleneckMbps = 0;  // B: the slowest flow's rate (+inf when nothing moves)
  // sum_h 1/B_h over the ring's w hops (1/(Mbit/s)), taken as at most w / B (no hop is slower
  // than the bottleneck, which a caller may replace by a measured one); 0 when unknown: w / B.
  double inverseRateSum = 0;
  // The search's objective at RingParams::bytes: 2(w-1)/w * (L + S / B), a bound on
  // ringAllreduceUs (equal where latency is all or nothing), which states the time.
  double objectiveUs = 0;
};

// Ring allreduce time of a ring with `cost` for `bytes` over `world` ranks: 2(w-1) steps of the
// larger of the slowest transfer and the mean hop (the file comment).
double ringAllreduceUs(const RingCost& cost, size_t world, double bytes);

RingCost evaluateRing(const NetworkModel& net, const std::vector<int>& ring,
                      const RingParams& params);

// The rate of each hop ring[i] -> ring[i + 1] (cyclic) as evaluateRing() loads the ring, in
// Mbit/s (+inf for a hop that loads nothing); empty for fewer than two hosts.
std::vector<double> ringHopMbps(const NetworkModel& net, const std::vector<int>& ring,
                                const RingParams& params);

// Depth-first walk of the model's groups; hosts and groups in order of their lowest host index.
std::vector<int> hierarchicalRing(const NetworkModel& net);

// Local search from `ring` (see the file comment); returns a ring whose objective is at most
// (1 + params.noise) times the best it saw, so never worse than `ring` with noise 0.
std::vector<int> improveRing(const NetworkModel& net, std::vector<int> ring,
                             const RingParams& params);

// Exact minimum of the objective (N <= kExactMaxHosts; throws InvalidInput beyond), starting
// from `incumbent`, which is returned unless the minimum is faster beyond the noise of what
// differs between the two (ringNoiseUs); with noise 0, unless it is strictly faster.
std::vector<int> exactRing(const NetworkModel& net, const std::vector<int>& incumbent,
                           const RingParams& params);

// The noise of the difference between the objectives of rings a and b: params.noise times the
// ring time that rests on values one ring uses and the other does not (the latencies of hops in
// one ring only; the bandwidth term, when the bottlenecks are different links). A difference
// below it is no evidence that one ring is faster.
double ringNoiseUs(const NetworkModel& net, const std::vector<int>& a, const std::vector<int>& b,
                   const RingParams& params);

// -1, 0 or 1 as ring a's link loads are leximin-lower than, equal to or higher than b's: the
// loads (flows per direction over capacity, per link and per capped hop) sorted from the
// largest, compared lexicographically.
int compareLinkLoads(const NetworkModel& net, const std::vector<int>& a, const std::vector<int>& b);

// Rotates a ring to start after the edge that crosses the most levels (a group boundary), so
// that groups are contiguous ranges of positions; ties go to the lowest host index.
std::vector<int> rotateToBoundary(const NetworkModel& net, const std::vector<int>& ring);

}  // namespace rankmap::reorder
