// Passive measurement: what the job's own collectives tell about the network, with no traffic
// of their own. The executor (executor.h, execute) tells a PassiveMeter when each message step
// with a peer is posted and when it is seen finished; the meter keeps, per peer rank and
// direction, the bytes of finished messages and the busy time: the union of the intervals in
// which at least one message with that peer was in flight, as the executor saw them (from the
// post to the poll or wait that found it done). bytes / busy is therefore a lower bound of what
// the path delivered while the job used it — loosely: a send that lands in a socket buffer
// with room finishes at once, so small and non-backlogged sends read far too fast. The meter
// also keeps the time the rank spent inside collectives (addCollective); bytes to a peer per
// second of collective time is the job's own rate with that peer, stable while the job and the
// network are, and what the agent's drift detector compares over time (agent/passive.h).
//
// Cost: two clock reads and a few additions per message step (a step is one segment), no
// allocation after construction. Threading: the communicator's thread only; others get copies
// of totals().
#pragma once

#include <cstdint>
#include <vector>

namespace rankmap::coll {

struct PeerTraffic {
  uint64_t sentBytes = 0;   // finished sends to the peer
  uint64_t sendBusyNs = 0;  // time with a send to the peer in flight
  uint64_t recvBytes = 0;   // finished receives from the peer
  uint64_t recvBusyNs = 0;  // time with a receive from the peer in flight
  bool operator==(const PeerTraffic&) const = default;
};

class PassiveMeter {
 public:
  explicit PassiveMeter(int worldSize);
  // The monotonic clock in ns, as started()/finished() take it.
  static int64_t nowNs();
  // A message step with `peer` was posted (send) or its receive was posted (!send).
  void started(int peer, bool send, int64_t nowNs);
  // ... and was found finished having moved `bytes`.
  void finished(int peer, bool send, uint64_t bytes, int64_t nowNs);
  // A collective failed with messages in flight: their intervals end now, their bytes are not
  // counted (they may never have moved).
  void abandon(int64_t nowNs);
  // A collective call of this rank took `ns` (the communicator, around the executor).
  void addCollective(uint64_t ns) { collectiveNs_ += ns; }
  // Cumulative per peer rank (index = rank; this rank's own entry stays zero).
  const std::vector<PeerTraffic>& totals() const { return totals_; }
  // Cumulative time inside collective calls.
  uint64_t collectiveNs() const { return collectiveNs_; }

 private:
  struct Open {
    uint32_t inFlight = 0;
    int64_t since = 0;
  };
  void close(int peer, bool send, int64_t nowNs);
  std::vector<PeerTraffic> totals_;
  uint64_t collectiveNs_ = 0;
  std::vector<Open> send_;
  std::vector<Open> recv_;
};

}  // namespace rankmap::coll
