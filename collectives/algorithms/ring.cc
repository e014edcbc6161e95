// Ring algorithms.
//
// Allreduce: the vector is cut into m blocks (m = ranks in the ring). Reduce-scatter: in step
// k = 0..m-2, position p sends block (p - k) to its right neighbour and receives block
// (p - k - 1) from its left, reducing it into its own contribution; after m-1 steps position p
// holds block (p + 1) fully reduced. Allgather: in step k, p sends block (p + 1 - k) and receives
// block (p - k). Every step moves one block, not the whole vector, which makes the ring
// bandwidth-optimal (2 (m-1)/m of the vector sent per rank). With ring weights (AlgoParams::
// ringWeights) block j + 1 is the weight's share of position j's rank, so position p sends
// 2 - w[p] - w[p+1] of the vector to p + 1: a slow host whose weights (its own and its
// successor's) sum to 1 sends the vector once, not 2 (m-1)/m times. Each block is cut into
// segments: segment s of step k is sent as soon as segment s of step k-1 has been reduced, so
// segments pipeline around the ring instead of each step waiting for the whole previous one.
//
// Allgather and reduce-scatter collectives are the two halves; the block of ring position j
// belongs to rank order[j - 1] so that every rank ends with its own block. Broadcast and reduce
// run a pipelined chain that starts (ends) at the root.
#include "collectives/algorithms/common.h"

namespace rankmap::coll::algo {

void ringReduceScatterBlocks(ScheduleBuilder& b, const std::vector<int>& ring, int pos,
                             const std::vector<Range>& blocks, bool dataInInput, bool finalize) {
  const int m = static_cast<int>(ring.size());
  const uint64_t se = b.segmentElements();
  if (m == 1) {
    const Range span = blocks.front();
    if (dataInInput) b.copy(b.output(span.begin, span.len), b.input(span.begin, span.len));
    if (finalize) forEachSegment(span, se, [&](Range g) { b.finalize(b.output(g.begin, g.len)); });
    return;
  }
  const int left = rankAt(ring, pos - 1), right = rankAt(ring, pos + 1);
  auto block = [&](int i) { return blocks[static_cast<size_t>(mod(i, m))]; };
  // The local contribution of a block is read from the input until the block is first written.
  auto local = [&](Range g) {
    return dataInInput ? b.input(g.begin, g.len) : b.output(g.begin, g.len);
  };
  for (int k = 0; k + 1 < m; ++k) {
    Range sb = block(pos - k), rb = block(pos - k - 1);
    uint64_t ns = numSegments(sb.len, se), nr = numSegments(rb.len, se);
    for (uint64_t s = 0; s < std::max(ns, nr); ++s) {
      if (s < ns) {
        Range g = segment(sb, s, se);
        b.send(right, k == 0 ? local(g) : b.output(g.begin, g.len));
      }
      if (s < nr) {
        Range g = segment(rb, s, se);
        b.recvReduce(left, b.output(g.begin, g.len), local(g));
        if (finalize && k + 2 == m) b.finalize(b.output(g.begin, g.len));
      }
    }
  }
}

void ringAllgatherBlocks(ScheduleBuilder& b, const std::vector<int>& ring, int pos,
                         const std::vector<Range>& blocks) {
  const int m = static_cast<int>(ring.size());
  if (m == 1) return;
  const uint64_t se = b.segmentElements();
  const int left = rankAt(ring, pos - 1), right = rankAt(ring, pos + 1);
  auto block = [&](int i) { return blocks[static_cast<size_t>(mod(i, m))]; };
  for (int k = 0; k + 1 < m; ++k) {
    Range sb = block(pos + 1 - k), rb = block(pos - k);
    uint64_t ns = numSegments(sb.len, se), nr = numSegments(rb.len, se);
    for (uint64_t s = 0; s < std::max(ns, nr); ++s) {
      if (s < ns) {
        Range g = segment(sb, s, se);
        b.send(right, b.output(g.begin, g.len));
      }
      if (s < nr) {
        Range g = segment(rb, s, se);
        b.recv(left, b.output(g.begin, g.len));
      }
    }
  }
}

Schedule ringAllreduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  // Position j holds block j + 1 after the reduce-scatter: block j is sized by the weight of the
  // rank at position j - 1 (units, so that every rank cuts the same boundaries).
  std::vector<Range> blocks;
  if (p.ringWeights.empty()) {
    blocks = uniformBlocks(Range{0, p.count}, static_cast<uint64_t>(ring.n));
  } else {
    std::vector<double> w;
    for (int j = 0; j < ring.n; ++j)
      w.push_back(p.ringWeights[static_cast<size_t>(ring.rankAt(j - 1))]);
    blocks = weightedBlocks(Range{0, p.count}, weightUnits(w));
  }
  ringReduceScatterBlocks(b, ring.order, ring.pos, blocks, /*dataInInput=*/true,
                          /*finalize=*/true);
  ringAllgatherBlocks(b, ring.order, ring.pos, blocks);
  return b.finish();
}

Schedule ringAllgather(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const uint64_t c = p.count, se = b.segmentElements();
  const int left = ring.rankAt(ring.pos - 1), right = ring.rankAt(ring.pos + 1);
  // Ring block j is rank order[j - 1]'s block, so position p starts holding block p + 1.
  auto block = [&](int j) { return rankBlock(ring.rankAt(j - 1), c); };
  const uint64_t nseg = numSegments(c, se);
  copyInputToOwnBlock(b, p);
  for (int k = 0; k + 1 < ring.n; ++k) {
    Range sb = block(ring.pos + 1 - k), rb = block(ring.pos - k);
    for (uint64_t s = 0; s < nseg; ++s) {
      Range gs = segment(sb, s, se), gr = segment(rb, s, se);
      // Step 0 sends straight from the input: no need to wait for the local copy.
      b.send(right, k == 0 ? b.input(gs.begin - sb.begin, gs.len) : b.output(gs.begin, gs.len));
      b.recv(left, b.output(gr.begin, gr.len));
    }
  }
  return b.finish();
}

Schedule ringReduceScatter(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const uint64_t c = p.count, se = b.segmentElements();
  const uint64_t nseg = numSegments(c, se);
  if (ring.n == 1) {
    copyAndFinalize(b, c);
    return b.finish();
  }
  const int n = ring.n, pos = ring.pos;
  const int left = ring.rankAt(pos - 1), right = ring.rankAt(pos + 1);
  auto block = [&](int j) { return rankBlock(ring.rankAt(j - 1), c); };
  // Partial sums travel in two arena banks (step k writes bank k % 2, step k + 1 sends it): they
  // stay live for a whole step, longer than the slot ring guarantees.
  const Region banks[2] = {b.arena(c * p.elementSize), b.arena(c * p.elementSize)};
  auto bank = [&](int k, Range g) {
    Region r = banks[k % 2];
    return Region{r.buffer, r.offset + g.begin * p.elementSize, g.len * p.elementSize};
  };
  for (int k = 0; k + 1 < n; ++k) {
    Range sb = block(pos - k), rb = block(pos - k - 1);
    const bool last = k + 2 == n;
    for (uint64_t s = 0; s < nseg; ++s) {
      Range g = segment(Range{0, c}, s, se);
      b.send(right, k == 0 ? b.input(sb.begin + g.begin, g.len) : bank(k - 1, g));
      Region mine = b.input(rb.begin + g.begin, g.len);
      if (last) {
        b.recvReduce(left, b.output(g.begin, g.len), mine);
        b.finalize(b.output(g.begin, g.len));
      } else {
        b.recvReduce(left, bank(k, g), mine);
      }
    }
  }
  return b.finish();
}

Schedule ringBroadcast(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const int n = ring.n;
  // q = distance from the root along the ring: the chain root -> q=1 -> ... -> q=n-1.
  const int q = ring.distanceFrom(p.root);
  const int prev = ring.rankAt(ring.pos - 1), next = ring.rankAt(ring.pos + 1);
  forEachSegment(Range{0, p.count}, b.segmentElements(), [&](Range g) {
    if (q == 0) {
      if (n > 1) b.send(next, b.input(g.begin, g.len));
      b.copy(b.output(g.begin, g.len), b.input(g.begin, g.len));
    } else {
      b.recv(prev, b.output(g.begin, g.len));
      if (q + 1 < n) b.send(next, b.output(g.begin, g.len));
    }
  });
  return b.finish();
}

Schedule ringReduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const int n = ring.n;
  // The chain runs q = n-1 -> n-2 -> ... -> 0 (the root); partial sums ride in slots.
  const int q = ring.distanceFrom(p.root);
  const int from = ring.rankAt(ring.pos + 1), to = ring.rankAt(ring.pos - 1);
  forEachSegment(Range{0, p.count}, b.segmentElements(), [&](Range g) {
    Region mine = b.input(g.begin, g.len);
    if (q == 0) {
      if (n > 1)
        b.recvReduce(from, b.output(g.begin, g.len), mine);
      else
        b.copy(b.output(g.begin, g.len), mine);
      b.finalize(b.output(g.begin, g.len));
    } else if (q == n - 1) {
      b.send(to, mine);
    } else {
      b.send(to, b.recvReduceIntoSlot(from, mine));
    }
  });
  return b.finish();
}

}  // namespace rankmap::coll::algo
