// Cost model: the time of each collective algorithm on the network model, per message size, and
// the choice of algorithm per size range.
//
// Every algorithm is a sequence of phases; a phase is a set of concurrent flows (sharing links
// max-min fairly, network_model.h) plus the latency of its critical path. All of them scale
// linearly with the message size S, so each algorithm's time is affine: alpha + beta * S, and
// the best algorithm per size is the lower envelope of a few lines, found exactly. The engine's
// algorithms (collectives/) follow the same structure; docs/planner.md gives each formula.
//
//   ring   2(w-1) steps of S/w around the ring (ring.h). With ring weights (allreduce only) the
//          blocks differ, so the segments stream around the ring as one phase: rank r sends
//          2 - w_r - w_(r+1) of S to r + 1, all flows at once, plus the uniform ring's latency.
//   tree   NCCL's double binary tree over hosts (two trees, S/2 each, pipelined reduce then
//          broadcast; the second tree mirrors the first, or shifts it by one for odd counts),
//          a chain inside each host.
//   hier   reduce-scatter inside each innermost group (a ring; groups of any sizes), each
//          piece of the vector allreduced by a ring over its holders (one per group, in group
//          order), allgather inside groups (PLink, collectives/algorithms/hier.cc). Segments
//          stream between phases, so the last in-group reduce-scatter step and the first
//          allgather step share the links with the cross-group phase instead of adding to it.
//          Chunk weights, when set, size each rank's block inside its group and each group's
//          share of the cross-group rings (the sum of its members' weights).
//   rhd    recursive halving (distance 1, 2, 4, ...: the largest transfers to the nearest
//          ranks) then recursive doubling; a non-power-of-two count folds the extra ranks in
//          first and out last.
//   trees  packed spanning trees (packed_trees.h), heterogeneous host rates only.
// Collectives: allreduce (all five), allgather and reducescatter (ring, rhd; S is the total
// buffer, as in nccl-tests), broadcast (ring as a pipelined chain, tree).
//
// The same model prices Open MPI 4.1's coll_tuned algorithms (common/openmpi.h) as Open MPI's
// ompi/mca/coll/base runs them over the communicator in the context's order (rank r at position
// r / ranksPerHost), rooted at rank 0; docs/planner.md gives each one. Phases of point-to-point
// messages as above; pipelined trees (bcast and reduce chains, binary, binomial and k-nomial
// trees) as S / seg segments flowing down every tree edge at once, plus the depth of the tree
// for the last segment; basic linear reduce receives one rank after the other.
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
  std::vector<double> chunkWeights;  // per position, for hier (as the engine uses them); empty =
                                     // uniform
  std::vector<double> ringWeights;   // per position, the ring allreduce's blocks (Plan::
                                     // ringWeights); empty = equal
  std::vector<PackedTree> trees;     // for "trees"; empty = unavailable
  // Per host: the group hier runs over (any labels; the engine's are the plan's innermost
  // groups). Empty = the network's innermost level, as when planning.
  std::vector<int> groupOf;
};

// Models of every algorithm of `collective` (available or not, with the reason).
std::vector<AlgoCost> algorithmCosts(const CostContext& ctx, std::string_view collective);

// Lower bound per byte of the message for any algorithm on this network (no in-network
// reduction): the larger of every host link's busFactor(hosts) bytes and every uplink's cut (S
// across it for allreduce and broadcast, the larger side's share for allgather and
// reducescatter), each over that link's rate. Not a ring bound: hier beats a ring's 2(n-1)/n S
// across a slow uplink, never this.
double lowerBoundUsPerByte(const CostContext& ctx, std::string_view collective);

// The message size a range's predictions are given at (AlgoRange and OmpiRange predictedUs):
// its geometric middle, or twice its start when it is open.
double representativeBytes(uint64_t minBytes, uint64_t maxBytes);

// nccl-tests bus bandwidth factor of `collective` over `world` ranks.
double busFactor(std::string_view collective, size_t world);

// The fastest available algorithm per size range: contiguous from 0, the last one open, each
// filled with the prediction at its geometric middle (or twice its start when open).
std::vector<AlgoRange> chooseRanges(const std::vector<AlgoCost>& costs, std::string_view collective,
                                    size_t world, double lowerBoundPerByte);

// The time of one `collective` of `bytes` with `algorithm` in the context's order on the
// context's network; +inf when the algorithm is not available there; 0 for a single rank.
double predictedUs(const CostContext& ctx, std::string_view collective, Algorithm algorithm,
                   uint64_t bytes);

// A plan scored on a network, for a simulator: the time of an allreduce of `bytes` run as the
// engine runs `plan` (its order, its algorithm for that size, its chunk weights and packed
// trees, hier over its innermost groups, or over hosts when it has none, its ranks per host) on
// `net`, whose host i is named hosts[i]. With `net` the true network, this is the plan's real
// cost; the optimum to compare it with is the same for the plan made from the truth
// (planTopology on the true link model: a Topology whose `links` are the true capacities).
// `params` gives the intra-host rate and latency and the per-hop overhead (its ranksPerHost and
// bytes are taken from the plan and `bytes`). A size the plan has no entry for (the identity
// fallback has no table) and an algorithm that is not available on `net` are scored as a ring
// in the plan's order: the engine's fallback for large messages (it takes rhd below 64 KiB;
// collectives/selection.h). Throws InvalidInput when the plan's hosts are not exactly `hosts`.
double predictedAllreduceUs(const NetworkModel& net, const std::vector<std::string>& hosts,
                            const Plan& plan, uint64_t bytes, RingParams params = {});

// Open MPI's TCP transport sends a message above this size (btl_tcp_eager_limit, 64 KiB by
// default) by rendezvous: the receiver must match it and answer before the bulk moves, one more
// round trip of the hop (and of its step overhead: on a busy host, the receiver's scheduling).
inline constexpr double kOmpiEagerLimit = 65536;

// The time of an (algorithm, parameters) of an Open MPI collective: a line alpha + beta * S, plus
// a jump at each size from which a step's messages go by rendezvous, plus a slope change at each
// size from which a phase outlasts the fabric's burst (NetworkModel::fabricBurstBytes).
struct MpiAlgoCost {
  int algorithm = 0;     // id of common/openmpi.h
  uint32_t segsize = 0;  // bytes per segment; 0 = unsegmented
  int faninout = 0;      // chain fan-out; 0 = Open MPI's default
  bool available = true;
  std::string note;  // why it is unavailable
  double alphaUs = 0;
  double betaUsPerByte = 0;
  std::vector<std::pair<double, double>> jumps;   // (from bytes, extra us), any order
  std::vector<std::pair<double, double>> slopes;  // (from bytes, extra us per byte beyond it)
  double timeUs(double bytes) const {
    double t = alphaUs + betaUsPerByte * bytes;
    for (const auto& [from, extra] : jumps)
      if (bytes >= from) t += extra;
    for (const auto& [from, extra] : slopes)
      if (bytes > from) t += extra * (bytes - from);
    return t;
  }
};

// Segment sizes offered to Open MPI's segmented algorithms (the rules file sets them).
inline constexpr uint32_t kMpiSegments[] = {32u << 10, 128u << 10, 512u << 10};
// The engine is named in the advice of `rankmap run` where it is predicted at least this much
// faster than Open MPI's best algorithm.
inline constexpr double kEngineAdviceRatio = 1.1;

// Every modelled algorithm of Open MPI collective `collective` ("allreduce", "bcast", "reduce",
// "allgather", "reduce_scatter"; S as coll_tuned measures it: common/plan.h OmpiRange) in the
// context's order, with the reason where one does not apply (recursive doubling allgather on a
// rank count that is not a power of two, ...). Throws InvalidInput for another collective.
std::vector<MpiAlgoCost> mpiAlgorithmCosts(const CostContext& ctx, std::string_view collective);
// All five at once (each model built once; allreduce and reduce_scatter reuse reduce's and
// bcast's): what the planner calls. Empty for a single rank.
std::vector<std::pair<std::string, std::vector<MpiAlgoCost>>> allMpiAlgorithmCosts(
    const CostContext& ctx);

// Open MPI's fastest algorithm per size range, contiguous from 0 (the last open), each filled
// with its prediction at its representative size (as chooseRanges). With `engine` (the engine's
// models of the same collective, algorithmCosts()), ranges are also split where the engine's
// best becomes kEngineAdviceRatio faster than Open MPI's best, and engineUs holds the engine's
// best at the representative size.
std::vector<OmpiRange> chooseMpiRanges(const std::vector<MpiAlgoCost>& costs,
                                       const std::vector<AlgoCost>* engine = nullptr);

// The engine's collective (algorithmCosts) that serves Open MPI collective `collective`:
// allreduce, allgather, reducescatter for reduce_scatter, broadcast for bcast; empty for reduce.
std::string_view engineCollective(std::string_view collective);

// Open MPI's trees (ompi/mca/coll/base/coll_base_topo.c) over ranks 0..ranks-1, as parent arrays
// (-1 for the root): kFanout (build_tree: rank r on level l has children r + fanout^l * i),
// kBinomial (build_bmtree: the parent clears the highest set bit), kInOrderBinomial (the lowest
// set bit), kKnomial (radix `fanout`), kChain (`fanout` chains of consecutive ranks off the root),
// kInOrderBinary (rooted at ranks - 1, the lower half of the rest on the left). Rooted at 0 but
// for kInOrderBinary.
enum class MpiTree { kFanout, kBinomial, kInOrderBinomial, kKnomial, kChain, kInOrderBinary };
std::vector<int> mpiTree(MpiTree kind, int ranks, int fanout = 2);

// The lower envelope of lines alpha + beta * S over S >= 0: the index of the lowest line per
// range [lo, hi) (hi = +inf for the last), ties to the smaller beta, then the earlier line.
// Crossovers beyond 1 TiB are ignored (the line best below keeps the open range).
struct EnvelopePiece {
  double lo = 0, hi = 0;
  size_t line = 0;
};
std::vector<EnvelopePiece> lowerEnvelope(const std::vector<std::pair<double, double>>& lines);

// The double binary tree over m positions: two parent arrays (-1 for a root).
std::pair<std::vector<int>, std::vector<int>> doubleBinaryTree(int m);

}  // namespace rankmap::reorder
