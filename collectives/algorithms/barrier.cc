// Dissemination barrier: in round i (distance 2^i) every rank sends a zero-byte message to the
// rank 2^i ahead in the order and receives one from the rank 2^i behind, and starts round i + 1
// only when round i is done; after ceil(log2 n) rounds every rank has heard, directly or not,
// from every other one.
#include "collectives/algorithms/common.h"

namespace rankmap::coll::algo {

Schedule disseminationBarrier(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const auto order = effectiveOrder(p);
  const int n = p.worldSize;
  const int pos = positionOf(order, p.rank);
  const Region none{BufferId::kOutput, 0, 0};
  for (int dist = 1; dist < n; dist *= 2) {
    b.send(order[static_cast<size_t>(mod(pos + dist, n))], none);
    b.recv(order[static_cast<size_t>(mod(pos - dist, n))], none);
    b.fence();
  }
  return b.finish();
}

}  // namespace rankmap::coll::algo
