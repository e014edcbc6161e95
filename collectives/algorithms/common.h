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
Schedule disseminationBarrier(const AlgoParams& p);

// Ring pieces reused by hier. `ring` lists ranks in ring order; `pos` is this rank's position.
// Reduce-scatter of `span` cut into ring.size() blocks: afterwards position p holds block
// (p + 1) % m fully reduced in the output (finalized when `finalize`). The contribution of this
// rank is in the input when `dataInInput`, else already in the output.
void ringReduceScatterSpan(ScheduleBuilder& b, const std::vector<int>& ring, int pos, Range span,
                           bool dataInInput, bool finalize);
// Allgather of `span` cut into ring.size() blocks, position p holding block (p + 1) % m.
void ringAllgatherSpan(ScheduleBuilder& b, const std::vector<int>& ring, int pos, Range span);

}  // namespace rankmap::coll::algo
