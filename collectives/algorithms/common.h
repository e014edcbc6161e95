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

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// order[pos] = rank; identity when empty.
std::vector<int> effectiveOrder(const AlgoParams& p);
int positionOf(const std::vector<int>& order, int rank);

// Generators (one per collective and algorithm); `order` is effectiveOrder(p).
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
