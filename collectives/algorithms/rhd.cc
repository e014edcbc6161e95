// Recursive halving and doubling.
//
// Allreduce (Rabenseifner): among P = 2^floor(log2 n) "virtual" ranks, log2 P reduce-scatter
// steps halve the range each rank is responsible for (exchange half with a partner, reduce the
// kept half), each rank finalizes the block it ends with, and log2 P allgather steps, in reverse,
// double it back. Latency grows with log2 n and each rank still sends only about 2 (P-1)/P of
// the vector. Non-powers of two: of the first 2r ranks (r = n - P) along the order, each even one
// sends its vector to the odd one after it, which reduces it and takes part as a virtual rank; at
// the end it sends the result back.
//
// Partners are taken nearest first: the halving step that moves half the vector pairs virtual
// ranks at distance 1, the next at distance 2, and so on; the step across the largest distance
// moves only 1/P of the vector. With the planner's order (ranks of a host, then of a rack,
// contiguous), the big exchanges stay inside hosts and racks and only small ones cross uplinks:
// for 8 ranks in 2 racks of 4, 1/4 of the vector per rank crosses racks instead of the whole
// vector with the textbook distance-P/2-first order.
//
// Allgather (recursive doubling) and reduce-scatter (recursive halving) take power-of-two world
// sizes only (they decline otherwise). Blocks are per rank; the block of virtual rank v is rank
// order[v]'s, and a rank holds (or is responsible for) a set of blocks that need not be
// contiguous: reduce-scatter halves it nearest partner first (big sets move locally), allgather
// doubles it farthest partner first (one block crosses the largest distance, half the blocks the
// smallest).
#include <algorithm>
#include <numeric>

#include "collectives/algorithms/common.h"

namespace rankmap::coll::algo {
namespace {

int largestPowerOfTwoAtMost(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

}  // namespace

Schedule rhdAllreduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const int pos = ring.pos;
  const uint64_t se = b.segmentElements();
  const int P = largestPowerOfTwoAtMost(ring.n);
  const int extra = ring.n - P;
  const Range all{0, p.count};
  // Virtual rank v lives at position v < extra ? 2v + 1 : v + extra.
  auto rankOfVirtual = [&](int v) { return ring.rankAt(v < extra ? 2 * v + 1 : v + extra); };
  bool dataInInput = true;
  int v;
  if (pos < 2 * extra) {
    if (pos % 2 == 0) {
      // Hands its vector to the odd neighbour and gets the result back.
      const int partner = ring.rankAt(pos + 1);
      forEachSegment(all, se, [&](Range g) { b.send(partner, b.input(g.begin, g.len)); });
      forEachSegment(all, se, [&](Range g) { b.recv(partner, b.output(g.begin, g.len)); });
      return b.finish();
    }
    const int partner = ring.rankAt(pos - 1);
    forEachSegment(all, se, [&](Range g) {
      b.recvReduce(partner, b.output(g.begin, g.len), b.input(g.begin, g.len));
    });
    dataInInput = false;
    v = pos / 2;
  } else {
    v = pos - extra;
  }
  Partition part{p.count, static_cast<uint64_t>(P)};
  auto blocks = [&](int lo, int hi) {
    return Range{part.start(static_cast<uint64_t>(lo)),
                 part.start(static_cast<uint64_t>(hi)) - part.start(static_cast<uint64_t>(lo))};
  };
  // Exchanges two ranges with a partner, segment by segment; both sides list them alike.
  auto exchange = [&](int partner, Range send, Range recv, const auto& sendRegion,
                      const auto& onRecv) {
    uint64_t ns = numSegments(send.len, se), nr = numSegments(recv.len, se);
    for (uint64_t s = 0; s < std::max(ns, nr); ++s) {
      if (s < ns) b.send(partner, sendRegion(segment(send, s, se)));
      if (s < nr) onRecv(segment(recv, s, se));
    }
  };
  // Reduce-scatter by recursive halving, nearest partner first. Both partners hold the same
  // range at each step (they agree on every bit handled so far), so the halves match.
  struct Exchange {
    int partner;
    Range keep, give;
  };
  std::vector<Exchange> steps;
  int lo = 0, hi = P;
  for (int mask = 1; mask < P; mask *= 2) {
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (v & mask) != 0;
    Exchange e{rankOfVirtual(v ^ mask), upper ? blocks(mid, hi) : blocks(lo, mid),
               upper ? blocks(lo, mid) : blocks(mid, hi)};
    const bool fromInput = steps.empty() && dataInInput;
    auto local = [&](Range g) { return fromInput ? b.input(g.begin, g.len) : b.output(g.begin, g.len); };
    exchange(e.partner, e.give, e.keep, local, [&](Range g) {
      b.recvReduce(e.partner, b.output(g.begin, g.len), local(g));
    });
    steps.push_back(e);
    if (upper) lo = mid; else hi = mid;
  }
  Range mine = blocks(lo, hi);
  if (P == 1 && dataInInput) {
    forEachSegment(mine, se,
                   [&](Range g) { b.copy(b.output(g.begin, g.len), b.input(g.begin, g.len)); });
  }
  forEachSegment(mine, se, [&](Range g) { b.finalize(b.output(g.begin, g.len)); });
  // Allgather by recursive doubling: the same exchanges in reverse, each giving back the half
  // the partner reduced.
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    exchange(it->partner, it->keep, it->give,
             [&](Range g) { return b.output(g.begin, g.len); },
             [&](Range g) { b.recv(it->partner, b.output(g.begin, g.len)); });
  }
  if (pos < 2 * extra) {
    const int partner = ring.rankAt(pos - 1);
    forEachSegment(all, se, [&](Range g) { b.send(partner, b.output(g.begin, g.len)); });
  }
  return b.finish();
}

Schedule rhdAllgather(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const int v = ring.pos;
  const uint64_t c = p.count, se = b.segmentElements();
  const uint64_t nseg = numSegments(c, se);
  auto block = [&](int x) { return rankBlock(ring.rankAt(x), c); };
  copyInputToOwnBlock(b, p);
  // held: the virtual blocks this rank has, ascending; the partner at distance `mask` holds the
  // same set with bit `mask` flipped, in the same order.
  std::vector<int> held = {v};
  for (int mask = ring.n / 2; mask >= 1; mask /= 2) {
    const int partner = ring.rankAt(v ^ mask);
    std::vector<int> next;
    for (int x : held) {
      Range mineB = block(x), theirs = block(x ^ mask);
      for (uint64_t s = 0; s < nseg; ++s) {
        Range gs = segment(mineB, s, se), gr = segment(theirs, s, se);
        b.send(partner, b.output(gs.begin, gs.len));
        b.recv(partner, b.output(gr.begin, gr.len));
      }
      next.push_back(x);
      next.push_back(x ^ mask);
    }
    std::sort(next.begin(), next.end());
    held = std::move(next);
  }
  return b.finish();
}

Schedule rhdReduceScatter(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const int n = ring.n, v = ring.pos;
  const uint64_t c = p.count, se = b.segmentElements();
  const uint64_t nseg = numSegments(c, se);
  const size_t es = p.elementSize;
  auto inBlock = [&](int x) { return rankBlock(ring.rankAt(x), c).begin; };
  if (n == 1) {
    copyAndFinalize(b, c);
    return b.finish();
  }
  // held: the virtual blocks this rank is still responsible for; halved nearest partner first.
  // The partner at distance `mask` holds the same set (they agree on every bit handled so far),
  // keeps what this rank gives and gives what it keeps, both listed in ascending order.
  // Partial sums live in an arena of n/2 blocks, one per block kept after the first step.
  const Region arena = b.arena(static_cast<uint64_t>(n / 2) * c * es);
  std::vector<int> held(static_cast<size_t>(n));
  std::iota(held.begin(), held.end(), 0);
  std::vector<int> slotOf(static_cast<size_t>(n), -1);
  bool first = true;
  for (int mask = 1; mask < n; mask *= 2) {
    const int partner = ring.rankAt(v ^ mask);
    std::vector<int> keep, give;
    for (int x : held) ((x & mask) == (v & mask) ? keep : give).push_back(x);
    if (first)
      for (size_t i = 0; i < keep.size(); ++i) slotOf[static_cast<size_t>(keep[i])] = static_cast<int>(i);
    const bool last = mask * 2 >= n;
    auto partial = [&](int x, Range g) {
      return Region{arena.buffer,
                    arena.offset + (static_cast<uint64_t>(slotOf[static_cast<size_t>(x)]) * c + g.begin) * es,
                    g.len * es};
    };
    for (size_t i = 0; i < keep.size(); ++i) {
      const int gx = give[i], kx = keep[i];
      for (uint64_t s = 0; s < nseg; ++s) {
        Range g = segment(Range{0, c}, s, se);
        b.send(partner, first ? b.input(inBlock(gx) + g.begin, g.len) : partial(gx, g));
        Region local = first ? b.input(inBlock(kx) + g.begin, g.len) : partial(kx, g);
        if (last) {
          b.recvReduce(partner, b.output(g.begin, g.len), local);
          b.finalize(b.output(g.begin, g.len));
        } else {
          b.recvReduce(partner, partial(kx, g), local);
        }
      }
    }
    held = std::move(keep);
    first = false;
  }
  return b.finish();
}

}  // namespace rankmap::coll::algo
