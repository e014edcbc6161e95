// Algorithm generators: pure functions from (rank, world size, count, element size, segment
// size, order, groups) to a Schedule. No I/O, no clocks, no randomness: every rank computes its
// own schedule and the schedules of all ranks fit together (tests/unit/collectives checks them
// exhaustively by simulation).
//
// What each (collective, algorithm) does:
// - allreduce ring: reduce-scatter then allgather around the ring order, each of the n-1 steps
//   moving one n-th of the vector (with ring weights, each rank's block its weight's share),
//   cut into segments that pipeline through the ring.
// - allreduce tree: NCCL's double binary tree; each tree reduces and then broadcasts one half of
//   the vector, segment by segment, so both trees' links work at once.
// - allreduce hier: reduce-scatter inside each group (rack), blocks sized by the chunk weights;
//   each piece of the vector is then reduced across groups by direct exchange among the one
//   rank per group holding it, each group reducing a share of it set by the group's weight;
//   allgather inside each group. Groups of any sizes (hier.cc).
// - allreduce trees: packed spanning trees (plan.json `trees`): the vector is cut by the trees'
//   weights, each piece reduced to its tree's root and broadcast back, pipelined (tree.cc).
// - allreduce rhd: Rabenseifner's recursive halving (reduce-scatter) and doubling (allgather);
//   with n not a power of two, the first 2r ranks pair up and one of each pair hands its vector
//   to the other before and gets the result after.
// - allgather / reducescatter ring: one half of the ring allreduce; rhd: recursive doubling /
//   halving, power-of-two world sizes only.
// - broadcast / reduce ring: a pipelined chain from / to the root; tree: a pipelined binary tree.
// - barrier: dissemination (log2 n rounds of zero-byte messages).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "collectives/schedule/schedule.h"
#include "collectives/types.h"

namespace rankmap::coll {

// Recursive halving/doubling needs a power-of-two world (selection and the plan check agree).
inline bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

// A spanning tree over ranks: parent[rank] is the rank's parent, -1 for the root.
struct RankTree {
  double weight = 0;  // share of the vector (relative to the other trees' weights)
  std::vector<int> parent;
};

struct AlgoParams {
  Collective collective = Collective::kAllreduce;
  int rank = 0;
  int worldSize = 1;
  // Elements: of the vector for allreduce, broadcast and reduce; per rank for allgather (input)
  // and reducescatter (output).
  uint64_t count = 0;
  size_t elementSize = 1;
  int root = 0;  // broadcast, reduce
  // In place: allreduce/broadcast/reduce input == output; allgather input == output + rank's
  // block; reducescatter output == input + rank's block.
  bool inPlace = false;
  uint64_t segmentBytes = kDefaultSegmentBytes;
  int numSlots = 8;
  // Ring / tree order: order[position] = rank. Empty = identity.
  std::vector<int> order;
  // hier: groups of ranks (each listed in ring order), in the order groups are visited; any
  // sizes, a group of one included.
  std::vector<std::vector<int>> groups;
  // hier: the plan's chunk weights per rank (finite, >= 0); empty = uniform. A group's share of
  // the cross-group phase is its members' total, a member's block inside its group its own.
  std::vector<double> weights;
  // ring allreduce: the plan's ring weights per rank (finite, >= 0); empty = equal blocks. The
  // rank reduces (and holds between its reduce-scatter and allgather) its weight's share of the
  // vector; only the ring allreduce reads them.
  std::vector<double> ringWeights;
  // trees: packed spanning trees over the ranks, each carrying its weight's share of the vector.
  std::vector<RankTree> trees;
};

// Buffer sizes (bytes) the collective reads and writes, and how they alias when in place.
BuilderOptions builderOptionsFor(const AlgoParams& p);

// nullopt when `algo` can run `p`; else why it declines ("rhd allgather needs a power-of-two
// world size, not 6"). Depends only on the collective, world size, groups and trees.
std::optional<std::string> declineReason(Algorithm algo, const AlgoParams& p);

// The schedule of p.rank. Throws NotSupported (with declineReason) when the algorithm declines,
// InvalidInput on inconsistent parameters (order not a permutation, root out of range, weights
// of the wrong count, negative or not finite).
Schedule buildSchedule(Algorithm algo, const AlgoParams& p);

// Binary trees over positions 0..n-1 (for tests and the tree generators).
struct TreeNode {
  int parent = -1;
  std::vector<int> children;  // 0, 1 or 2 positions
};
// NCCL's balanced binary tree rooted at position 0 (whose single child is the top of the tree).
TreeNode binaryTree(int n, int pos);
// The double binary tree's two trees: tree 0 is binaryTree(); tree 1 is it mirrored (n even) or
// shifted by one (n odd), so that most interior nodes of one tree are leaves of the other.
TreeNode doubleTree(int n, int pos, int tree);

}  // namespace rankmap::coll
