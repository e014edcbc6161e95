// Recursive halving and doubling.
//
// Allreduce (Rabenseifner): among P = 2^floor(log2 n) "virtual" ranks, log2 P reduce-scatter
// steps halve the range each rank is responsible for (exchange half with the partner at
// distance P/2, P/4, ..., 1, reduce the kept half), each rank finalizes the block it ends with,
// and log2 P allgather steps double it back. Latency grows with log2 n and each rank still sends
// only about 2 (P-1)/P of the vector, which makes it the choice for small and medium messages.
// Non-powers of two: of the first 2r ranks (r = n - P) along the order, each even one sends its
// vector to the odd one after it, which reduces it and takes part as a virtual rank; at the end
// it sends the result back.
//
// Allgather (recursive doubling) and reduce-scatter (recursive halving) take power-of-two world
// sizes only (they decline otherwise). Blocks are per rank; the block of virtual rank v is rank
// order[v]'s, so ranges of virtual blocks are sent block by block.
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
  const auto order = effectiveOrder(p);
  const int n = p.worldSize;
  const int pos = positionOf(order, p.rank);
  const uint64_t se = b.segmentElements();
  const int P = largestPowerOfTwoAtMost(n);
  const int extra = n - P;
  const Range all{0, p.count};
  auto segments = [&](Range r, const auto& fn) {
    for (uint64_t s = 0, ns = numSegments(r.len, se); s < ns; ++s) fn(segment(r, s, se));
  };
  // Virtual rank v lives at position v < extra ? 2v + 1 : v + extra.
  auto rankOfVirtual = [&](int v) {
    return order[static_cast<size_t>(v < extra ? 2 * v + 1 : v + extra)];
  };
  bool dataInInput = true;
  int v;
  if (pos < 2 * extra) {
    if (pos % 2 == 0) {
      // Hands its vector to the odd neighbour and gets the result back.
      const int partner = order[static_cast<size_t>(pos + 1)];
      segments(all, [&](Range g) { b.send(partner, b.input(g.begin, g.len)); });
      segments(all, [&](Range g) { b.recv(partner, b.output(g.begin, g.len)); });
      return b.finish();
    }
    const int partner = order[static_cast<size_t>(pos - 1)];
    segments(all, [&](Range g) {
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
  // Reduce-scatter by recursive halving.
  int lo = 0, hi = P;
  bool first = true;
  for (int mask = P / 2; mask >= 1; mask /= 2) {
    const int partner = rankOfVirtual(v ^ mask);
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (v & mask) != 0;
    Range keep = upper ? blocks(mid, hi) : blocks(lo, mid);
    Range give = upper ? blocks(lo, mid) : blocks(mid, hi);
    const bool fromInput = first && dataInInput;
    auto local = [&](Range g) { return fromInput ? b.input(g.begin, g.len) : b.output(g.begin, g.len); };
    uint64_t ng = numSegments(give.len, se), nk = numSegments(keep.len, se);
    for (uint64_t s = 0; s < std::max(ng, nk); ++s) {
      if (s < ng) b.send(partner, local(segment(give, s, se)));
      if (s < nk) {
        Range g = segment(keep, s, se);
        b.recvReduce(partner, b.output(g.begin, g.len), local(g));
      }
    }
    if (upper) lo = mid; else hi = mid;
    first = false;
  }
  Range mine = blocks(v, v + 1);
  if (P == 1 && dataInInput) segments(mine, [&](Range g) { b.copy(b.output(g.begin, g.len), b.input(g.begin, g.len)); });
  segments(mine, [&](Range g) { b.finalize(b.output(g.begin, g.len)); });
  // Allgather by recursive doubling.
  for (int mask = 1; mask < P; mask *= 2) {
    const int partner = rankOfVirtual(v ^ mask);
    const int myLo = (v / mask) * mask, theirLo = ((v ^ mask) / mask) * mask;
    Range send = blocks(myLo, myLo + mask), recv = blocks(theirLo, theirLo + mask);
    uint64_t ns = numSegments(send.len, se), nr = numSegments(recv.len, se);
    for (uint64_t s = 0; s < std::max(ns, nr); ++s) {
      if (s < ns) {
        Range g = segment(send, s, se);
        b.send(partner, b.output(g.begin, g.len));
      }
      if (s < nr) {
        Range g = segment(recv, s, se);
        b.recv(partner, b.output(g.begin, g.len));
      }
    }
  }
  if (pos < 2 * extra) {
    const int partner = order[static_cast<size_t>(pos - 1)];
    segments(all, [&](Range g) { b.send(partner, b.output(g.begin, g.len)); });
  }
  return b.finish();
}

Schedule rhdAllgather(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const auto order = effectiveOrder(p);
  const int n = p.worldSize;
  const int v = positionOf(order, p.rank);
  const uint64_t c = p.count, se = b.segmentElements();
  const uint64_t nseg = numSegments(c, se);
  auto block = [&](int x) { return Range{static_cast<uint64_t>(order[static_cast<size_t>(x)]) * c, c}; };
  for (uint64_t s = 0; s < nseg; ++s) {
    Range g = segment(Range{0, c}, s, se);
    b.copy(b.output(static_cast<uint64_t>(p.rank) * c + g.begin, g.len), b.input(g.begin, g.len));
  }
  for (int mask = 1; mask < n; mask *= 2) {
    const int partner = order[static_cast<size_t>(v ^ mask)];
    const int myLo = (v / mask) * mask, theirLo = ((v ^ mask) / mask) * mask;
    for (int i = 0; i < mask; ++i) {
      Range mine = block(myLo + i), theirs = block(theirLo + i);
      for (uint64_t s = 0; s < nseg; ++s) {
        Range gs = segment(mine, s, se), gr = segment(theirs, s, se);
        b.send(partner, b.output(gs.begin, gs.len));
        b.recv(partner, b.output(gr.begin, gr.len));
      }
    }
  }
  return b.finish();
}

Schedule rhdReduceScatter(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const auto order = effectiveOrder(p);
  const int n = p.worldSize;
  const int v = positionOf(order, p.rank);
  const uint64_t c = p.count, se = b.segmentElements();
  const uint64_t nseg = numSegments(c, se);
  const size_t es = p.elementSize;
  auto inBlock = [&](int x) { return static_cast<uint64_t>(order[static_cast<size_t>(x)]) * c; };
  if (n == 1) {
    for (uint64_t s = 0; s < nseg; ++s) {
      Range g = segment(Range{0, c}, s, se);
      b.copy(b.output(g.begin, g.len), b.input(g.begin, g.len));
      b.finalize(b.output(g.begin, g.len));
    }
    return b.finish();
  }
  // Partial sums of the kept range live in an arena of n/2 blocks indexed from the first kept
  // range's start (later kept ranges are inside it).
  const Region arena = b.arena(static_cast<uint64_t>(n / 2) * c * es);
  int lo = 0, hi = n, base = -1;
  bool first = true;
  for (int mask = n / 2; mask >= 1; mask /= 2) {
    const int partner = order[static_cast<size_t>(v ^ mask)];
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (v & mask) != 0;
    const int keepLo = upper ? mid : lo, giveLo = upper ? lo : mid;
    if (base < 0) base = keepLo;
    const bool last = mask == 1;
    auto partial = [&](int x, Range g) {
      return Region{arena.buffer, arena.offset + (static_cast<uint64_t>(x - base) * c + g.begin) * es,
                    g.len * es};
    };
    for (int i = 0; i < mid - lo; ++i) {
      const int gx = giveLo + i, kx = keepLo + i;
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
    if (upper) lo = mid; else hi = mid;
    first = false;
  }
  return b.finish();
}

}  // namespace rankmap::coll::algo
