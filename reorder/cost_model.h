// Cost model: the time of each collective algorithm on the network model, per message size, and
// the choice of algorithm per size range.
//
// Every algorithm is a sequence of phases; a phase is a set of concurrent flows (sharing links
// max-min fairly, network_model.h) plus the latency of its critical path. All of them scale
// linearly with the message size S, so each algorithm's time is affine: alpha + beta * S, and
// the best algorithm per size is the lower envelope of a few lines, found exactly. The engine's
// algorithms (collectives/) follow the same structure; docs/planner.md gives each formula.
//
//   ring   2(w-1) steps of S/w around the ring (ring.h).
//   tree   NCCL's double binary tree over hosts (two trees, S/2 each, pipelined reduce then
//          broadcast; the second tree mirrors the first, or shifts it by one for odd counts),
//          a chain inside each host.
//   hier   reduce-scatter inside each innermost group (a ring), allreduce across groups of the
//          shards (one ring per shard over the groups), allgather inside groups (PLink).
//          Segments stream between phases, so the last in-group reduce-scatter step and the
//          first allgather step share the links with the cross-group phase instead of adding
//          to it. Chunk weights, when set, size each rank's shard.
//   rhd    recursive halving (distance 1, 2, 4, ...: the largest transfers to the nearest
//          ranks) then recursive doubling; a non-power-of-two count folds the extra ranks in
//          first and out last.
//   trees  packed spanning trees (packed_trees.h), heterogeneous host rates only.
// Collectives: allreduce (all five), allgather and reducescatter (ring, rhd; S is the total
// buffer, as in nccl-tests), broadcast (ring as a pipelined chain, tree).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/plan.h"
#include "reorder/network_model.h"
#include "reorder/ring.h"

namespace rankmap::reorder {

inline constexpr std::string_view kCollectives[] = {"allreduce", "allgather", "reducescatter",
                                                    "broadcast"};
bool isKnownCollective(std::string_view name);

struct AlgoCost {
  Algorithm algo = Algorithm::kRing;
  bool available = true;
  std::string note;          // why it is unavailable
  double alphaUs = 0;        // time at 0 bytes
  double betaUsPerByte = 0;  // time per byte
  double timeUs(double bytes) const { return alphaUs + betaUsPerByte * bytes; }
};

struct CostContext {
  const NetworkModel* net = nullptr;
  std::vector<int> order;            // host index by position
  RingParams ring;                   // ranks per host, intra-host rate and latency, overhead
  std::vector<double> chunkWeights;  // per position, for hier; empty = uniform
  std::vector<PackedTree> trees;     // for "trees"; empty = unavailable
};

// Models of every algorithm of `collective` (available or not, with the reason).
std::vector<AlgoCost> algorithmCosts(const CostContext& ctx, std::string_view collective);

// Lower bound per byte: 2(w-1)/w (allreduce), (w-1)/w (allgather, reducescatter) or 1
// (broadcast) over the bottleneck rate every ring must cross (NetworkModel::ringBoundMbps).
double lowerBoundUsPerByte(const CostContext& ctx, std::string_view collective);

// nccl-tests bus bandwidth factor of `collective` over `world` ranks.
double busFactor(std::string_view collective, size_t world);

// The fastest available algorithm per size range: contiguous from 0, the last one open, each
// filled with the prediction at its geometric middle (or twice its start when open).
std::vector<AlgoRange> chooseRanges(const std::vector<AlgoCost>& costs, std::string_view collective,
                                    size_t world, double lowerBoundPerByte);

// The double binary tree over m positions: two parent arrays (-1 for a root).
std::pair<std::vector<int>, std::vector<int>> doubleBinaryTree(int m);

}  // namespace rankmap::reorder
