// Hierarchical allreduce over the plan's groups (racks), of any sizes (PLink's scheme, with
// uneven groups and uneven shares).
//
// 1. Inside each group, a ring reduce-scatter: the vector is cut into one block per member,
//    laid out in member order and sized by the members' chunk weights (equal without weights;
//    a group whose members all weigh 0 gives its first member the whole vector); afterwards
//    each member holds its block summed over its group. A member of weight 0 holds nothing, so
//    a group whose weight sits on one member (its leader: what the planner writes) chain-reduces
//    the vector to it. A group of one skips this (its member holds the whole vector in its
//    input).
// 2. Across groups. Cut the vector on the union of all groups' block boundaries: each piece is
//    then held by exactly one member of every group (its holders). Each piece is cut again into
//    one sub-block per group, sized by the group's share (its members' total weight; by group
//    size without weights), and reduced among its holders so that group g's holder reduces
//    sub-block g, then every sub-block goes back to every holder:
//    - without weights, by a ring over the holders, groups in order (ring reduce-scatter and
//      allgather). Group p carries 2 - x_p - x_(p+1) of the vector out over its uplink and
//      2 - x_(p-1) - x_p in (x: shares); 2 (m-1)/m each way with equal shares, m groups. With
//      equal groups the pieces are the members' blocks and this is the classic one ring per
//      block position.
//    - with weights, by direct exchange: each holder sends every other group's holder that
//      group's sub-block, which it reduces and sends back to each. Group g carries 1 + (m-2) x_g
//      each way whatever the other groups' shares, so shares can relieve any slow uplink: a
//      group of share 0 moves the vector only once each way (reorder/planner.cc picks the
//      weights with the same loads in its cost model, reorder/cost_model.cc).
// 3. Inside each group, a ring allgather of the blocks.
//
// Why two exchanges: a ring sends each holder's data to one next holder, while direct exchange
// feeds m - 1 owners per piece at once, several times as many concurrent flows per uplink. With
// equal shares the loads are the same and rings ran faster on the emulated cloud (10 VMs in
// 4+3+3 racks behind 250 Mbit/s uplinks, 16 MiB: median 1.00 s against 1.20 s, model 0.87 s);
// with uneven shares only direct exchange can unload a slow uplink without loading its
// neighbours (500/125/250 Mbit/s uplinks: median 1.78 s with the 125 Mbit/s rack owning nothing,
// against 1.96 s for rings with that rack reducing everything, their best; docs/planner.md).
// Flows matter as much as bytes there: with every group's share on one member (a leader per
// group), the direct exchange is one flow per pair of groups each way, and the same bytes took
// 1.24-1.40 s (model 1.25 s) where spreading the shares over the members took 1.5-2.4 s: the
// slow uplink's queue drops the tails of a dozen concurrent flows (docs/performance.md,
// "Unequal racks").
//
// Weights are cut into integer units (weightUnits) so that every rank computes the same element
// boundaries; every element is in exactly one block, sub-block and piece (zero-sized ones
// allowed). Segments stream between the phases: each step waits only for the regions it reads
// (the schedule builder's dependencies).
#include <algorithm>

#include "collectives/algorithms/common.h"
#include "common/error.h"

namespace rankmap::coll::algo {

Schedule hierAllreduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const auto& groups = p.groups;
  const int m = static_cast<int>(groups.size());
  const Range all{0, p.count};
  int g = -1, j = -1;
  for (int gi = 0; gi < m && g < 0; ++gi)
    for (size_t ji = 0; ji < groups[static_cast<size_t>(gi)].size(); ++ji)
      if (groups[static_cast<size_t>(gi)][ji] == p.rank) {
        g = gi;
        j = static_cast<int>(ji);
        break;
      }
  RANKMAP_ASSERT(g >= 0);

  // Weights in units per rank, the groups' shares and the members' blocks.
  std::vector<double> w = p.weights;
  if (w.empty()) w.assign(static_cast<size_t>(p.worldSize), 1.0);
  const std::vector<uint64_t> units = weightUnits(w);
  std::vector<uint64_t> groupUnits(static_cast<size_t>(m), 0);
  std::vector<std::vector<Range>> memberBlocks(static_cast<size_t>(m));
  for (int gi = 0; gi < m; ++gi) {
    const auto& grp = groups[static_cast<size_t>(gi)];
    std::vector<uint64_t> mu;
    for (int r : grp) mu.push_back(units[static_cast<size_t>(r)]);
    for (uint64_t u : mu) groupUnits[static_cast<size_t>(gi)] += u;
    // A group of share 0 sends its partial sums from its first member (one holder).
    if (groupUnits[static_cast<size_t>(gi)] == 0) mu.front() = 1;
    memberBlocks[static_cast<size_t>(gi)] = weightedBlocks(all, mu);
  }
  const auto& mine = groups[static_cast<size_t>(g)];
  const int k = static_cast<int>(mine.size());
  // The ring's block i is the one position i - 1 ends with: member i - 1's block.
  std::vector<Range> ringBlocks(static_cast<size_t>(k));
  for (int q = 0; q < k; ++q)
    ringBlocks[static_cast<size_t>((q + 1) % k)] =
        memberBlocks[static_cast<size_t>(g)][static_cast<size_t>(q)];

  if (m == 1) {  // one group: a ring allreduce with weighted blocks
    ringReduceScatterBlocks(b, mine, j, ringBlocks, /*dataInInput=*/true, /*finalize=*/true);
    ringAllgatherBlocks(b, mine, j, ringBlocks);
    return b.finish();
  }
  // 1. Reduce-scatter inside the group (no finalize: partial sums, in the output; a group of
  // one keeps its input).
  if (k > 1)
    ringReduceScatterBlocks(b, mine, j, ringBlocks, /*dataInInput=*/true, /*finalize=*/false);

  // 2. Pieces on the union of the groups' block boundaries, with their holders.
  std::vector<uint64_t> cuts{p.count};
  for (const auto& blocks : memberBlocks)
    for (const auto& r : blocks) cuts.push_back(r.begin);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  struct Piece {
    std::vector<int> holders;  // per group
    std::vector<Range> subs;   // per group: the sub-block that group's holder reduces
  };
  std::vector<Piece> pieces;
  std::vector<size_t> at(static_cast<size_t>(m), 0);  // each group's member holding the piece
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const Range piece{cuts[c], cuts[c + 1] - cuts[c]};
    Piece pc;
    for (int gi = 0; gi < m; ++gi) {
      const auto& blocks = memberBlocks[static_cast<size_t>(gi)];
      size_t& x = at[static_cast<size_t>(gi)];
      while (blocks[x].end() <= piece.begin) ++x;
      pc.holders.push_back(groups[static_cast<size_t>(gi)][x]);
    }
    if (pc.holders[static_cast<size_t>(g)] != p.rank) continue;  // not ours
    pc.subs = weightedBlocks(piece, groupUnits);
    pieces.push_back(std::move(pc));
  }
  if (p.weights.empty()) {
    // Rings over each piece's holders: ring block (gi + 1) % m is group gi's sub-block, the one
    // ring position gi ends with. Every piece's reduce-scatter, then every piece's allgather
    // (each starts as soon as its sub-blocks are reduced: dependencies).
    auto ringBlocksOf = [&](const Piece& pc) {
      std::vector<Range> blocks(static_cast<size_t>(m));
      for (int gi = 0; gi < m; ++gi)
        blocks[static_cast<size_t>((gi + 1) % m)] = pc.subs[static_cast<size_t>(gi)];
      return blocks;
    };
    for (const auto& pc : pieces)
      ringReduceScatterBlocks(b, pc.holders, g, ringBlocksOf(pc), /*dataInInput=*/k == 1,
                              /*finalize=*/true);
    for (const auto& pc : pieces) ringAllgatherBlocks(b, pc.holders, g, ringBlocksOf(pc));
  } else {
    // Direct exchange. This rank's partial sums: its block of the output, or the input for a
    // group of one.
    const uint64_t se = b.segmentElements();
    auto partial = [&](Range r) {
      return k > 1 ? b.output(r.begin, r.len) : b.input(r.begin, r.len);
    };
    auto out = [&](Range r) { return b.output(r.begin, r.len); };
    // Reduce-scatter: holders send sub-block o to its owner, which reduces and finalizes it.
    for (const auto& pc : pieces)
      for (int o = 0; o < m; ++o)
        forEachSegment(pc.subs[static_cast<size_t>(o)], se, [&](Range s) {
          if (o != g) {
            b.send(pc.holders[static_cast<size_t>(o)], partial(s));
            return;
          }
          bool first = true;
          for (int gi = 0; gi < m; ++gi) {
            if (gi == g) continue;
            b.recvReduce(pc.holders[static_cast<size_t>(gi)], out(s), first ? partial(s) : out(s));
            first = false;
          }
          b.finalize(out(s));
        });
    // Allgather: each owner sends its reduced sub-block to the other holders.
    for (const auto& pc : pieces)
      for (int o = 0; o < m; ++o)
        forEachSegment(pc.subs[static_cast<size_t>(o)], se, [&](Range s) {
          if (o != g) {
            b.recv(pc.holders[static_cast<size_t>(o)], out(s));
            return;
          }
          for (int gi = 0; gi < m; ++gi)
            if (gi != g) b.send(pc.holders[static_cast<size_t>(gi)], out(s));
        });
  }
  // 3. Allgather inside the group.
  if (k > 1) ringAllgatherBlocks(b, mine, j, ringBlocks);
  return b.finish();
}

}  // namespace rankmap::coll::algo
