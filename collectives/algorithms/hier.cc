// Hierarchical allreduce over the plan's groups (racks): the vector is reduce-scattered inside
// each group (ring over the group's k ranks; the rank at group position j ends with block
// (j + 1) mod k), each block is allreduced across groups by the ranks holding it (a ring of one
// rank per group), and the blocks are allgathered inside each group. Inter-group links then carry
// 2 (m-1)/m of a k-th of the vector per rank instead of the flat ring's crossings of every step.
// Groups must be equal-sized (the algorithm declines otherwise and selection falls back).
#include "collectives/algorithms/common.h"
#include "common/error.h"

namespace rankmap::coll::algo {

Schedule hierAllreduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const auto& groups = p.groups;
  const int m = static_cast<int>(groups.size());
  const int k = static_cast<int>(groups.front().size());
  int g = -1, j = -1;
  for (int gi = 0; gi < m && g < 0; ++gi)
    for (int ji = 0; ji < k; ++ji)
      if (groups[static_cast<size_t>(gi)][static_cast<size_t>(ji)] == p.rank) {
        g = gi;
        j = ji;
        break;
      }
  RANKMAP_ASSERT(g >= 0);
  const auto& mine = groups[static_cast<size_t>(g)];
  const Range all{0, p.count};
  // 1. Reduce-scatter inside the group (no finalize: partial sums).
  if (k > 1) ringReduceScatterSpan(b, mine, j, all, /*dataInInput=*/true, /*finalize=*/false);
  // 2. Allreduce of our block across groups.
  Partition part{p.count, static_cast<uint64_t>(k)};
  Range block = part.block(static_cast<uint64_t>((j + 1) % k));
  std::vector<int> across;
  for (const auto& grp : groups) across.push_back(grp[static_cast<size_t>(j)]);
  ringReduceScatterSpan(b, across, g, block, /*dataInInput=*/k == 1, /*finalize=*/true);
  ringAllgatherSpan(b, across, g, block);
  // 3. Allgather inside the group.
  if (k > 1) ringAllgatherSpan(b, mine, j, all);
  return b.finish();
}

}  // namespace rankmap::coll::algo
