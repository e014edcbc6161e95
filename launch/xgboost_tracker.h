// An XGBoost (Rabit) tracker in C++: the rendezvous that gives each worker its rank and its
// neighbours, wire-compatible with both protocols XGBoost's workers speak: Rabit, of xgboost 1.x
// and 2.0 (the Python RabitTracker of xgboost/tracker.py; tested against 1.7.4), and the
// collective protocol of xgboost 2.1 and later (the C++ tracker of src/collective/tracker.cc and
// protocol.h, the same file in 2.1.0, 3.0.0 and 3.2.0; tested against 3.2.0 built from source).
// The first bytes after the magic tell which one a worker speaks (below); every worker of a job
// must speak the same.
//
// Why C++ rather than running the Python tracker with sortby="task": every wait here is bounded
// by a Deadline (a worker that never connects, or stalls half-way, becomes a TimeoutError naming
// it instead of a hang), worker process exits are noticed while waiting, there is no interpreter
// or python3-xgboost needed on the launching host, and the rank rule is ours: workers are ranked
// by their task ids in string order, exactly as RabitTracker(sortby="task") ranks them, so the
// launcher gives task ids that sort in plan order.
//
// Rabit, xgboost 1.x and 2.0 (kRabit; all integers native 32-bit, strings as length + bytes), one
// TCP connection per command: the worker sends the magic 0xff99, the tracker echoes it, the worker
// sends rank (-1 when unknown), world size (-1 when unknown), task id and a command:
//   - "start"/"recover": the tracker answers rank, parent rank, world size, the tree neighbours,
//     ring prev and next; then, until the worker reports no failed connection, it receives the
//     links it already has, and the tracker answers which peers (host, port, rank) wait for it
//     to connect and how many will connect to it; finally the worker sends its listening port.
//   - "print": one string follows; the tracker prints it (stdout).
//   - "shutdown": the worker is done; the tracker ends once every rank has sent it.
// Ranks are assigned in one batch once all workers have said "start" (as the Python tracker
// does), so that the sort sees every task id.
//
// xgboost 2.1+ (kCollective): the same magic exchange and the same strings (int32 length +
// bytes), but every message is a JSON object. The worker sends {"rank", "task_id",
// "world_size"} and then a command {"cmd": 1 start | 2 shutdown | 3 error | 4 print, ...}:
//   - start {"port", "error_port"}: the tracker answers {"world_size": N} at once and keeps the
//     connection; once all N have started it sorts them by task id (xgboost's sortby="task") and
//     sends the worker of rank r {"host", "port", "rank"} of rank r+1 (mod N), from which the
//     worker takes rank r; the workers then connect to each other without the tracker. Their
//     ring is rank r -> r+1 and carries every allreduce.
//   - shutdown: as in Rabit; print {"msg"}: printed; error {"msg", "code"}: a worker failed, and
//     serve() ends with a PeerError naming it (xgboost's tracker instead tells the others
//     through their error ports; rankmap run kills them).
// A start after all N started (xgboost's recovery) is refused: there is no recovery here.
// Detection: after the magic, a Rabit worker sends its rank and its world size (-1 or N) as two
// int32; a 2.1+ worker sends the length of its JSON text and the text, which begins with `{"`.
// A header whose second int32 begins with the bytes `{"` and is not N is the JSON protocol.
//
// Threading: one thread calls serve(); it handles one connection at a time, as the Python tracker
// does (the protocol is sequential per worker and needs no concurrency).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/net.h"

namespace rankmap::launch {

// xgboost's link map for n workers: a binary tree (heap numbering), a ring that walks the tree
// depth-first so that it shares links with it, and then a relabelling so that the ring is
// 0, 1, ..., n-1: rank r's ring neighbours are r-1 and r+1 (mod n).
struct RabitLinkMap {
  std::vector<std::vector<int>> tree;     // tree neighbours of each rank
  std::vector<int> parent;                // -1 for rank 0
  std::vector<std::pair<int, int>> ring;  // (prev, next) of each rank
};
RabitLinkMap makeRabitLinkMap(int n);

constexpr int32_t kRabitMagic = 0xff99;

// Which wire protocol a worker speaks: Rabit (binary; xgboost 1.x and 2.0) or the collective
// protocol (JSON messages; xgboost 2.1 and later).
enum class TrackerProtocol { kRabit, kCollective };
std::string_view protocolName(TrackerProtocol p);

class RabitTracker {
 public:
  // Listens on bindAddress:port (port 0 = any free port); bindAddress is a numeric IPv4 or IPv6
  // address. InvalidInput for another address, SystemError naming the address if the bind fails.
  RabitTracker(const std::string& bindAddress, uint16_t port, int workers);
  ~RabitTracker();
  RabitTracker(const RabitTracker&) = delete;
  RabitTracker& operator=(const RabitTracker&) = delete;

  uint16_t port() const { return listener_.port(); }
  int workers() const { return workers_; }

  // Serves until every rank has sent "shutdown". Every worker must have connected and finished
  // its link setup by `startDeadline` (else TimeoutError naming the task ids still missing);
  // each later connection must complete its message within `ioTimeout`. `tick` runs at least
  // every 100 ms and may throw to abort (a worker process died, a signal). `print` receives the
  // workers' print messages. PeerError for a worker that breaks the protocol.
  void serve(Deadline startDeadline, std::chrono::milliseconds ioTimeout,
             const std::function<void()>& tick,
             const std::function<void(const std::string&)>& print);

  // Task id -> rank, once assigned.
  const std::map<std::string, int>& ranks() const { return ranks_; }
  // The protocol the workers spoke; nullopt until the first worker's header.
  std::optional<TrackerProtocol> protocol() const { return protocol_; }

 private:
  Listener listener_;
  int workers_ = 0;
  std::map<std::string, int> ranks_;
  std::optional<TrackerProtocol> protocol_;
};

}  // namespace rankmap::launch
