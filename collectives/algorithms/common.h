// Helpers shared by the generators in collectives/algorithms/ (internal).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/schedule/schedule.h"

namespace rankmap::coll::algo {

// [begin, begin + len) in elements.
struct Range {
  uint64_t begin = 0;
  uint64_t len = 0;
  uint64_t end() const { return begin + len; }
};

// `count` elements in `parts` balanced blocks (sizes differ by at most one element).
struct Partition {
  uint64_t count = 0;
  uint64_t parts = 1;
  uint64_t start(uint64_t i) const {
    uint64_t base = count / parts, rem = count % parts;
    return i * base + std::min(i, rem);
  }
  uint64_t size(uint64_t i) const { return start(i + 1) - start(i); }
  Range block(uint64_t i, uint64_t offset = 0) const { return {offset + start(i), size(i)}; }
};

// `span` cut into `parts` balanced blocks, in order.
std::vector<Range> uniformBlocks(Range span, uint64_t parts);

// Weights as integer units, so that every rank cuts a vector at exactly the same elements: each
// weight's share of the total in units of 2^-32 (rounded), or 1 each when the weights are empty,
// or all 0. Weights are finite and >= 0 (checked by buildSchedule).
std::vector<uint64_t> weightUnits(const std::vector<double>& weights);
// `span` cut into blocks in proportion to `units`, in order: block i starts at
// floor(len * (units before i) / total); every element is in exactly one block and a weight of
// 0 gives an empty block. Units all 0 count as equal.
std::vector<Range> weightedBlocks(Range span, const std::vector<uint64_t>& units);

inline uint64_t numSegments(uint64_t elems, uint64_t segElems) {
  return (elems + segElems - 1) / segElems;
}
// Segment s of r (elements).
inline Range segment(Range r, uint64_t s, uint64_t segElems) {
  uint64_t b = r.begin + s * segElems;
  return {b, std::min(segElems, r.end() - b)};
}

// Calls fn(segment) for the segments of r, in order.
template <typename Fn>
void forEachSegment(Range r, uint64_t segElems, Fn&& fn) {
  for (uint64_t s = 0, n = numSegments(r.len, segElems); s < n; ++s) fn(segment(r, s, segElems));
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// order[pos] = rank; identity when empty.
std::vector<int> effectiveOrder(const AlgoParams& p);
int positionOf(const std::vector<int>& order, int rank);
// The rank at `position` modulo ring.size(): the neighbours of position p are p - 1 and p + 1.
inline int rankAt(const std::vector<int>& ring, int position) {
  return ring[static_cast<size_t>(mod(position, static_cast<int>(ring.size())))];
}

// Where every generator starts: the ring order (effectiveOrder(p)) and this rank's position in it.
// Trees and rhd number their nodes by the same positions.
struct Ring {
  explicit Ring(const AlgoParams& p)
      : order(effectiveOrder(p)), n(p.worldSize), pos(positionOf(order, p.rank)) {}
  int rankAt(int position) const { return algo::rankAt(order, position); }
  // How far this rank is from `rank` along the ring (0 when it is `rank`).
  int distanceFrom(int rank) const { return mod(pos - positionOf(order, rank), n); }

  std::vector<int> order;
  int n;
  int pos;
};

// Rank r's block of the allgather output / reducescatter input, `count` elements per rank.
inline Range rankBlock(int r, uint64_t count) { return {static_cast<uint64_t>(r) * count, count}; }

// Allgather: this rank's input into its own block of the output, segment by segment (no step
// when in place).
void copyInputToOwnBlock(ScheduleBuilder& b, const AlgoParams& p);
// A world of one for reducing collectives: the output is the input, copied and finalized
// segment by segment.
void copyAndFinalize(ScheduleBuilder& b, uint64_t count);

// Generators (one per collective and algorithm), each starting from Ring(p).
Schedule ringAllreduce(const AlgoParams& p);
Schedule ringAllgather(const AlgoParams& p);
Schedule ringReduceScatter(const AlgoParams& p);
Schedule ringBroadcast(const AlgoParams& p);
Schedule ringReduce(const AlgoParams& p);
Schedule treeAllreduce(const AlgoParams& p);
Schedule treeBroadcast(const AlgoParams& p);
Schedule treeReduce(const AlgoParams& p);
Schedule rhdAllreduce(const AlgoParams& p);
Schedule rhdAllgather(const AlgoParams& p);
Schedule rhdReduceScatter(const AlgoParams& p);
Schedule hierAllreduce(const AlgoParams& p);
Schedule packedTreesAllreduce(const AlgoParams& p);
Schedule disseminationBarrier(const AlgoParams& p);

// Ring pieces reused by hier. `ring` lists ranks in ring order; `pos` is this rank's position;
// `blocks` has one disjoint range per position (any sizes, empty ones included; hier sizes them
// by weight), block i being the one position i - 1 ends with.
// Reduce-scatter: afterwards position p holds block (p + 1) % m fully reduced in the output
// (finalized when `finalize`). The contribution of this rank is in the input when
// `dataInInput`, else already in the output.
void ringReduceScatterBlocks(ScheduleBuilder& b, const std::vector<int>& ring, int pos,
                             const std::vector<Range>& blocks, bool dataInInput, bool finalize);
// Allgather: position p starts with block (p + 1) % m; afterwards every position has them all.
void ringAllgatherBlocks(ScheduleBuilder& b, const std::vector<int>& ring, int pos,
                         const std::vector<Range>& blocks);

// A rooted tree over nodes 0..n-1 with what the pipelined generators need.
struct TreeShape {
  std::vector<TreeNode> nodes;  // children in increasing node order
  std::vector<int> height;      // leaves 0
  std::vector<int> depth;       // root 0
  int root = 0;
  int maxDepth = 0;
};
// From parent[x] (-1 for the root); the caller guarantees one root and no cycle.
TreeShape treeFromParents(const std::vector<int>& parent);
// Allreduce of ranges[t] over trees[t], all trees at once: segments flow up (each node reduces
// its children's partial sums into its own, then sends them to its parent; the root finalizes)
// and back down, pipelined. Tree nodes are ranks through rankOf(node); `me` is this rank's node
// (the same node numbering in every tree).
void pipelinedTreeAllreduce(ScheduleBuilder& b, int me, const std::vector<TreeShape>& trees,
                            const std::vector<Range>& ranges, const std::vector<int>& rankOf);

}  // namespace rankmap::coll::algo
