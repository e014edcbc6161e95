#include "collectives/passive.h"

#include <chrono>

#include "common/error.h"

namespace rankmap::coll {

PassiveMeter::PassiveMeter(int worldSize)
    : totals_(static_cast<size_t>(worldSize)),
      send_(static_cast<size_t>(worldSize)),
      recv_(static_cast<size_t>(worldSize)) {}

int64_t PassiveMeter::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void PassiveMeter::started(int peer, bool send, int64_t now) {
  RANKMAP_ASSERT(peer >= 0 && static_cast<size_t>(peer) < totals_.size());
  Open& o = (send ? send_ : recv_)[static_cast<size_t>(peer)];
  if (o.inFlight++ == 0) o.since = now;
}

void PassiveMeter::close(int peer, bool send, int64_t now) {
  Open& o = (send ? send_ : recv_)[static_cast<size_t>(peer)];
  if (o.inFlight == 0) return;
  if (--o.inFlight > 0) return;
  const uint64_t busy = now > o.since ? static_cast<uint64_t>(now - o.since) : 0;
  PeerTraffic& t = totals_[static_cast<size_t>(peer)];
  (send ? t.sendBusyNs : t.recvBusyNs) += busy;
}

void PassiveMeter::finished(int peer, bool send, uint64_t bytes, int64_t now) {
  RANKMAP_ASSERT(peer >= 0 && static_cast<size_t>(peer) < totals_.size());
  PeerTraffic& t = totals_[static_cast<size_t>(peer)];
  (send ? t.sentBytes : t.recvBytes) += bytes;
  close(peer, send, now);
}

void PassiveMeter::abandon(int64_t now) {
  for (size_t p = 0; p < totals_.size(); ++p) {
    for (bool send : {true, false}) {
      Open& o = (send ? send_ : recv_)[p];
      if (o.inFlight == 0) continue;
      o.inFlight = 1;
      close(static_cast<int>(p), send, now);
    }
  }
}

}  // namespace rankmap::coll
