// Dissemination barrier: in round i (distance 2^i) every rank sends a zero-byte message to the
// rank 2^i ahead in the order and receives one from the rank 2^i behind, and starts round i + 1
// only when round i is done; after ceil(log2 n) rounds every rank has heard, directly or not,
// from every other one.
#include "collectives/algorithms/common.h"

namespace rankmap::coll::algo {

Schedule disseminationBarrier(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const Region none{BufferId::kOutput, 0, 0};
  for (int dist = 1; dist < ring.n; dist *= 2) {
    b.send(ring.rankAt(ring.pos + dist), none);
    b.recv(ring.rankAt(ring.pos - dist), none);
    b.fence();
  }
  return b.finish();
}

}  // namespace rankmap::coll::algo
