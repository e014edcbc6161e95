#include "launch/xgboost_tracker.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/json.h"
#include "common/log.h"

namespace rankmap::launch {
namespace {

constexpr int32_t kMaxString = 1 << 20;  // a task id, command or print message

// Tree neighbours of `rank` in xgboost's heap numbering (tracker.py _get_neighbor).
std::vector<int> heapNeighbours(int rank, int n) {
  int r = rank + 1;
  std::vector<int> out;
  if (r > 1) out.push_back(r / 2 - 1);
  if (r * 2 - 1 < n) out.push_back(r * 2 - 1);
  if (r * 2 < n) out.push_back(r * 2);
  return out;
}

// Depth-first walk from `rank` over its children; the last child's walk is reversed so that the
// ring comes back up the tree (tracker.py find_share_ring).
std::vector<int> shareRing(const std::vector<std::vector<int>>& tree,
                           const std::vector<int>& parent, int rank) {
  std::vector<int> children;
  for (int v : tree[rank])
    if (v != parent[rank]) children.push_back(v);
  std::sort(children.begin(), children.end());
  std::vector<int> out{rank};
  for (size_t i = 0; i < children.size(); ++i) {
    auto sub = shareRing(tree, parent, children[i]);
    if (i + 1 == children.size()) std::reverse(sub.begin(), sub.end());
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

// One accepted connection; every read and write is bounded by the deadline given and names
// the exchange and the worker ("XGBoost tracker: the rank from worker at 10.0.0.3").
class Conn {
 public:
  explicit Conn(Socket sock) : sock_(std::move(sock)), peer_(sock_.peerAddr().host()) {}
  const std::string& peer() const { return peer_; }
  void closeNow() { sock_.close(); }

  int32_t recvInt(Deadline d, std::string_view what) {
    int32_t v = 0;
    sock_.recvAll(&v, sizeof v, d, name(what));
    return v;
  }
  void sendInt(int32_t v, Deadline d, std::string_view what) {
    sock_.sendAll(&v, sizeof v, d, name(what));
  }
  std::string recvStr(Deadline d, std::string_view what) {
    int32_t n = recvInt(d, what);
    if (n < 0 || n > kMaxString)
      RANKMAP_THROW(PeerError, "XGBoost tracker: worker at {} sent a {} of {} bytes", peer_, what,
                    n);
    std::string s(static_cast<size_t>(n), '\0');
    sock_.recvAll(s.data(), s.size(), d, name(what));
    return s;
  }
  void sendStr(const std::string& s, Deadline d, std::string_view what) {
    sendInt(static_cast<int32_t>(s.size()), d, what);
    sock_.sendAll(s.data(), s.size(), d, name(what));
  }
  void recvBytes(void* p, size_t n, Deadline d, std::string_view what) {
    sock_.recvAll(p, n, d, name(what));
  }

 private:
  std::string name(std::string_view what) const {
    return fmt::format("XGBoost tracker: {} from worker at {}", what, peer_);
  }
  Socket sock_;
  std::string peer_;
};

// A worker's connection for one command (tracker.py WorkerEntry): the header it sent and, once it
// has a rank, what its link setup left open.
struct Entry {
  std::unique_ptr<Conn> conn;
  TrackerProtocol protocol = TrackerProtocol::kRabit;
  int32_t rank = -1;
  int32_t worldSize = -1;
  std::string taskId;
  std::string cmd;      // start, recover, print, shutdown; error (kCollective only)
  std::string message;  // print and error: the text
  int64_t code = 0;     // error: the worker's error code
  int waitAccept = 0;   // peers still to connect to it (kRabit)
  int32_t port = -1;    // where it listens for its peers
};

}  // namespace

std::string_view protocolName(TrackerProtocol p) {
  return p == TrackerProtocol::kRabit ? "the Rabit protocol (xgboost 1.x, 2.0)"
                                      : "the collective protocol (xgboost 2.1+, JSON)";
}

RabitLinkMap makeRabitLinkMap(int n) {
  RANKMAP_ASSERT(n >= 1);
  std::vector<std::vector<int>> tree(n);
  std::vector<int> parent(n);
  for (int r = 0; r < n; ++r) {
    tree[r] = heapNeighbours(r, n);
    parent[r] = (r + 1) / 2 - 1;
  }
  auto walk = shareRing(tree, parent, 0);
  RANKMAP_ASSERT(static_cast<int>(walk.size()) == n);
  // Relabel: the k-th node of the walk becomes rank k, so the ring is 0, 1, ..., n-1.
  std::vector<int> relabel(n);
  for (int k = 0; k < n; ++k) relabel[walk[k]] = k;
  RabitLinkMap m;
  m.tree.resize(n);
  m.parent.assign(n, -1);
  m.ring.resize(n);
  for (int old = 0; old < n; ++old) {
    int r = relabel[old];
    for (int v : tree[old]) m.tree[r].push_back(relabel[v]);
    m.parent[r] = parent[old] < 0 ? -1 : relabel[parent[old]];
  }
  for (int r = 0; r < n; ++r) m.ring[r] = {(r + n - 1) % n, (r + 1) % n};
  return m;
}

// serve()'s phases. serve() is the driver: accept a connection, read its header, then print,
// record a shutdown, or admit a starting worker. Each phase below takes what it needs and
// returns what the next needs; ServeState is what persists from one connection to the next.
namespace {

// What serve() knows between connections (the locals of tracker.py's accept_workers).
struct ServeState {
  ServeState(int n, Deadline startDeadline, std::chrono::milliseconds ioTimeout)
      : n(n), startDeadline(startDeadline), ioTimeout(ioTimeout) {}

  const int n;
  const Deadline startDeadline;
  const std::chrono::milliseconds ioTimeout;
  RabitLinkMap links;  // made at the first "start"
  bool haveLinks = false;
  std::deque<int> todo;                            // ranks not given out yet
  std::set<int> shutdown;                          // ranks that said "shutdown"
  std::map<int, std::shared_ptr<Entry>> waitConn;  // ranks that peers must still connect to
  std::map<std::string, int> jobMap;               // task id -> rank, for a worker that returns
  std::vector<std::shared_ptr<Entry>> pending;     // "start"s waiting for the batch
  std::set<std::string> seen;                      // task ids that said start or recover

  // Until every rank is given out, every wait is also bounded by the start deadline.
  bool startPhase() const { return !haveLinks || !todo.empty(); }
  // The bound for one connection's exchange, computed when it begins.
  Deadline ioDeadline() const {
    Deadline d = Deadline::after(ioTimeout);
    return startPhase() ? d.min(startDeadline) : d;
  }
  bool allShutDown() const { return static_cast<int>(shutdown.size()) == n; }
};

// Phase 1: the next connection, waking every 100 ms for `tick` (which may throw to abort) and,
// while workers are starting, for the start deadline: TimeoutError naming the task ids seen.
std::unique_ptr<Conn> acceptWorker(Listener& listener, const ServeState& st,
                                   const std::function<void()>& tick) {
  for (;;) {
    if (tick) tick();
    if (st.startPhase() && st.startDeadline.expired()) {
      std::vector<std::string> ids(st.seen.begin(), st.seen.end());
      RANKMAP_THROW(TimeoutError,
                    "XGBoost tracker: timed out waiting for workers to start: "
                    "{} of {} connected (task ids: {})",
                    st.seen.size(), st.n,
                    ids.empty() ? std::string("none") : fmt::format("{}", fmt::join(ids, ",")));
    }
    Deadline wake = Deadline::after(std::chrono::milliseconds(100));
    if (st.startPhase()) wake = wake.min(st.startDeadline);
    if (std::optional<Socket> sock = listener.accept(wake))
      return std::make_unique<Conn>(std::move(*sock));
  }
}

// A JSON message of a kCollective worker. PeerError naming the worker, the message and the field
// for anything that is not the object expected (JsonReader's errors name the JSON path).
template <typename Read>
void readWorkerJson(const Conn& c, const std::string& text, std::string_view what, Read read) {
  std::string source = fmt::format("XGBoost tracker: {} from worker at {}", what, c.peer());
  try {
    Json j = parseJson(text, source);
    JsonReader r(j, source);
    r.expectObject();
    read(r);
  } catch (const InvalidInput& e) {
    RANKMAP_THROW(PeerError, "{}", e.what());
  }
}

// The rest of a kCollective header: the JSON text (whose first 4 bytes, `head`, were read with
// its length `len`) and the command message that follows it.
void readCollectiveHeader(Entry& e, int32_t len, const char* head, int n, Deadline d) {
  Conn& c = *e.conn;
  std::string text(head, 4);
  text.resize(static_cast<size_t>(len));
  c.recvBytes(text.data() + 4, text.size() - 4, d, "the connect message");
  readWorkerJson(c, text, "the connect message", [&](const JsonReader& r) {
    e.rank = static_cast<int32_t>(r.at("rank", "the worker's rank").integerIn(-1, n - 1));
    e.worldSize = static_cast<int32_t>(
        r.at("world_size", "the world size (-1 or the worker count)").integerIn(-1, INT32_MAX));
    e.taskId = r.at("task_id", "the worker's task id").str();
  });
  std::string cmdText = c.recvStr(d, "the command message");
  readWorkerJson(c, cmdText, "the command message", [&](const JsonReader& r) {
    int64_t cmd = r.at("cmd", "1 (start), 2 (shutdown), 3 (error) or 4 (print)").integer();
    switch (cmd) {
      case 1:
        e.cmd = "start";
        e.port = static_cast<int32_t>(r.at("port", "the worker's port").integerIn(1, 65535));
        r.at("error_port", "the worker's error port").integerIn(0, 65535);
        break;
      case 2:
        e.cmd = "shutdown";
        break;
      case 3:
        e.cmd = "error";
        e.message = r.at("msg", "the error message").str();
        e.code = r.at("code", "the error code").integer();
        break;
      case 4:
        e.cmd = "print";
        e.message = r.at("msg", "the message to print").str();
        break;
      default:
        r.at("cmd").fail("1 (start), 2 (shutdown), 3 (error) or 4 (print)");
    }
  });
}

// Phase 2: the magic exchange and the header every command starts with (rank, world size, task
// id, command), in whichever protocol the worker speaks (the header's comment on detection).
// nullptr, with a warning, for a connection that does not send the magic.
std::shared_ptr<Entry> readHeader(std::unique_ptr<Conn> conn, int n, Deadline d) {
  auto e = std::make_shared<Entry>();
  e->conn = std::move(conn);
  int32_t magic = e->conn->recvInt(d, "the magic number");
  if (magic != kRabitMagic) {
    RANKMAP_WARN(Agent, "XGBoost tracker: connection from {} sent magic {:#x}, not {:#x}; dropped",
                 e->conn->peer(), magic, kRabitMagic);
    return nullptr;
  }
  e->conn->sendInt(kRabitMagic, d, "the magic number");
  int32_t first[2] = {0, 0};
  e->conn->recvBytes(first, sizeof first, d, "the header");
  char head[4];
  std::memcpy(head, &first[1], sizeof head);
  if (head[0] == '{' && head[1] == '"' && first[1] != n && first[0] >= 4 &&
      first[0] <= kMaxString) {
    e->protocol = TrackerProtocol::kCollective;
    readCollectiveHeader(*e, first[0], head, n, d);
    return e;
  }
  e->rank = first[0];
  e->worldSize = first[1];
  e->taskId = e->conn->recvStr(d, "the task id");
  e->cmd = e->conn->recvStr(d, "the command");
  return e;
}

// Phase 3, "print": the message (a kCollective worker sent it with its command, a kRabit worker
// sends it now), without its trailing newlines and spaces.
std::string readPrintMessage(Entry& e, Deadline d) {
  std::string msg = e.protocol == TrackerProtocol::kCollective
                        ? e.message
                        : e.conn->recvStr(d, "a print message");
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

// Phase 3, "shutdown": the rank is done. PeerError for a rank that is not a started one.
void recordShutdown(ServeState& st, const Entry& e) {
  if (e.rank < 0 || e.rank >= st.n || st.shutdown.count(e.rank) || st.waitConn.count(e.rank))
    RANKMAP_THROW(PeerError, "XGBoost tracker: unexpected shutdown from rank {} (task {})", e.rank,
                  e.taskId);
  st.shutdown.insert(e.rank);
  RANKMAP_DEBUG(Agent, "XGBoost tracker: rank {} shut down ({} of {})", e.rank, st.shutdown.size(),
                st.n);
}

// Sends `rank` its links and runs the connection negotiation until the worker reports no failed
// connection (tracker.py assign_rank and _get_remote); the exchange is bounded by
// st.ioDeadline() as it stands when it begins. Leaves e.waitAccept and e.port set.
void negotiateLinks(ServeState& st, Entry& e, int rank) {
  Deadline d = st.ioDeadline();
  Conn& c = *e.conn;
  const int n = st.n;
  e.rank = rank;
  std::set<int> treeSet(st.links.tree[rank].begin(), st.links.tree[rank].end());
  std::set<int> nnset = treeSet;
  auto [prev, next] = st.links.ring[rank];
  c.sendInt(rank, d, "rank");
  c.sendInt(st.links.parent[rank], d, "parent");
  c.sendInt(n, d, "world size");
  c.sendInt(static_cast<int32_t>(treeSet.size()), d, "tree size");
  for (int r : treeSet) c.sendInt(r, d, "tree links");
  if (prev != -1 && prev != rank) {
    nnset.insert(prev);
    c.sendInt(prev, d, "ring prev");
  } else {
    c.sendInt(-1, d, "ring prev");
  }
  if (next != -1 && next != rank) {
    nnset.insert(next);
    c.sendInt(next, d, "ring next");
  } else {
    c.sendInt(-1, d, "ring next");
  }
  for (;;) {
    int32_t ngood = c.recvInt(d, "the count of good links");
    if (ngood < 0 || ngood > n)
      RANKMAP_THROW(PeerError, "XGBoost tracker: rank {} reported {} good links", rank, ngood);
    std::set<int> good;
    for (int32_t i = 0; i < ngood; ++i) {
      int32_t g = c.recvInt(d, "good links");
      if (!nnset.count(g))
        RANKMAP_THROW(PeerError,
                      "XGBoost tracker: rank {} reported a link to {}, not a "
                      "neighbour",
                      rank, g);
      good.insert(g);
    }
    std::vector<int> bad, conset;
    for (int r : nnset)
      if (!good.count(r)) bad.push_back(r);
    for (int r : bad)
      if (st.waitConn.count(r)) conset.push_back(r);
    c.sendInt(static_cast<int32_t>(conset.size()), d, "the connect count");
    c.sendInt(static_cast<int32_t>(bad.size() - conset.size()), d, "the accept count");
    for (int r : conset) {
      c.sendStr(st.waitConn[r]->conn->peer(), d, "a peer host");
      c.sendInt(st.waitConn[r]->port, d, "a peer port");
      c.sendInt(r, d, "a peer rank");
    }
    int32_t nerr = c.recvInt(d, "the connection error count");
    if (nerr != 0) continue;
    e.port = c.recvInt(d, "the worker's listening port");
    for (int r : conset) {
      auto it = st.waitConn.find(r);
      if (--it->second->waitAccept == 0) st.waitConn.erase(it);
    }
    e.waitAccept = static_cast<int>(bad.size() - conset.size());
    break;
  }
  RANKMAP_DEBUG(Agent, "XGBoost tracker: task {} at {} is rank {}", e.taskId, c.peer(), rank);
}

// Gives `e` its rank and links, closes its connection, and keeps it while peers must still
// connect to it (their negotiation needs its address and port).
void giveRank(ServeState& st, const std::shared_ptr<Entry>& e, int rank) {
  negotiateLinks(st, *e, rank);
  e->conn->closeNow();
  if (e->waitAccept > 0) st.waitConn[rank] = e;
}

// The batch of "start"s, once every rank still to give out has one: ranks in task id order, as
// RabitTracker(sortby="task") gives them. Records task id -> rank in `ranks` (and jobMap).
void assignBatch(ServeState& st, std::map<std::string, int>& ranks) {
  std::stable_sort(st.pending.begin(), st.pending.end(),
                   [](const auto& a, const auto& b) { return a->taskId < b->taskId; });
  for (auto& e : st.pending) {
    int r = st.todo.front();
    st.todo.pop_front();
    if (e->taskId != "NULL") st.jobMap[e->taskId] = r;
    ranks[e->taskId] = r;
    giveRank(st, e, r);
  }
  st.pending.clear();
  RANKMAP_INFO(Agent, "XGBoost tracker: all {} workers started", st.n);
}

// The kCollective batch, once all N have started: ranks in task id order (xgboost's
// sortby="task"); the worker of rank r learns rank r+1's address and port and takes rank r from
// it. The connections close after the batch, as xgboost's tracker closes them.
void assignCollectiveBatch(ServeState& st, std::map<std::string, int>& ranks) {
  std::stable_sort(st.pending.begin(), st.pending.end(),
                   [](const auto& a, const auto& b) { return a->taskId < b->taskId; });
  const int n = st.n;
  Deadline d = st.ioDeadline();
  for (int r = 0; r < n; ++r) {
    const Entry& next = *st.pending[(r + 1) % n];
    Json info = {{"host", next.conn->peer()}, {"port", next.port}, {"rank", (r + 1) % n}};
    st.pending[r]->conn->sendStr(info.dump(), d, "the ring neighbour");
    st.pending[r]->rank = r;
    ranks[st.pending[r]->taskId] = r;
    RANKMAP_DEBUG(Agent, "XGBoost tracker: task {} at {} is rank {}", st.pending[r]->taskId,
                  st.pending[r]->conn->peer(), r);
  }
  for (auto& e : st.pending) e->conn->closeNow();
  st.pending.clear();
  st.todo.clear();
  RANKMAP_INFO(Agent, "XGBoost tracker: all {} workers started", n);
}

// Phase 3 for kCollective: "start" answers the world size and queues the worker for the batch;
// "error" ends serve() naming the worker. PeerError for a start that is not a first start.
void admitCollectiveWorker(ServeState& st, std::shared_ptr<Entry> e,
                           std::map<std::string, int>& ranks) {
  const std::string& host = e->conn->peer();
  if (e->cmd == "error")
    RANKMAP_THROW(PeerError, "XGBoost worker {} (task {}) at {} reported an error (code {}): {}",
                  e->rank, e->taskId, host, e->code, e->message);
  RANKMAP_ASSERT(e->cmd == "start");
  if (!st.haveLinks) {
    st.haveLinks = true;
    for (int r = 0; r < st.n; ++r) st.todo.push_back(r);
  }
  if (e->worldSize != -1)
    RANKMAP_THROW(PeerError,
                  "XGBoost tracker: task {} at {} started with world_size {} (expected -1: a "
                  "first start)",
                  e->taskId, host, e->worldSize);
  if (st.todo.empty())
    RANKMAP_THROW(PeerError,
                  "XGBoost tracker: task {} at {} started after all {} workers had (a restarted "
                  "worker: rankmap's tracker has no recovery)",
                  e->taskId, host, st.n);
  st.seen.insert(e->taskId);
  e->conn->sendStr(Json{{"world_size", st.n}}.dump(), st.ioDeadline(), "the world size");
  st.pending.push_back(std::move(e));
  if (st.pending.size() == st.todo.size()) assignCollectiveBatch(st, ranks);
}

// Phase 3, "start" or "recover": checks the request, then gives a known rank at once (a worker
// that says its rank, or a task id seen before) or queues the worker for the batch.
// PeerError for a request that breaks the protocol.
void admitWorker(ServeState& st, std::shared_ptr<Entry> e, std::map<std::string, int>& ranks) {
  const std::string& host = e->conn->peer();
  if (e->protocol == TrackerProtocol::kCollective) {
    admitCollectiveWorker(st, std::move(e), ranks);
    return;
  }
  if (e->cmd != "start" && e->cmd != "recover")
    RANKMAP_THROW(PeerError, "XGBoost tracker: unknown command {:?} from {}", e->cmd, host);
  if (!st.haveLinks) {
    if (e->cmd != "start")
      RANKMAP_THROW(PeerError, "XGBoost tracker: {} from {} before any start", e->cmd, host);
    st.links = makeRabitLinkMap(st.n);
    st.haveLinks = true;
    for (int r = 0; r < st.n; ++r) st.todo.push_back(r);
  }
  if (e->worldSize != -1 && e->worldSize != st.n)
    RANKMAP_THROW(PeerError,
                  "XGBoost tracker: task {} at {} expects {} workers, the tracker "
                  "runs {}",
                  e->taskId, host, e->worldSize, st.n);
  if (e->cmd == "recover" && e->rank < 0)
    RANKMAP_THROW(PeerError, "XGBoost tracker: recover without a rank from {}", host);
  st.seen.insert(e->taskId);

  int rank = e->rank;
  if (rank < 0 && e->taskId != "NULL") {
    auto it = st.jobMap.find(e->taskId);
    if (it != st.jobMap.end()) rank = it->second;
  }
  if (rank < -1 || rank >= st.n)
    RANKMAP_THROW(PeerError, "XGBoost tracker: rank {} from {} (expected -1 or 0..{})", rank, host,
                  st.n - 1);
  if (rank != -1) {
    giveRank(st, e, rank);
    return;
  }
  if (st.todo.empty())
    RANKMAP_THROW(PeerError, "XGBoost tracker: more than {} workers started (task {} at {})", st.n,
                  e->taskId, host);
  st.pending.push_back(std::move(e));
  if (st.pending.size() == st.todo.size()) assignBatch(st, ranks);
}

}  // namespace

RabitTracker::RabitTracker(const std::string& bindAddress, uint16_t port, int workers)
    : workers_(workers) {
  if (workers < 1)
    RANKMAP_THROW(InvalidInput, "XGBoost tracker: {} workers (expected >= 1)", workers);
  SockAddr addr;
  try {
    addr = resolve(bindAddress, port, Lookup::kNumericOnly);
  } catch (const InvalidInput&) {
    RANKMAP_THROW(InvalidInput, "XGBoost tracker address {:?}: expected an IPv4 or IPv6 address",
                  bindAddress);
  }
  listener_ = Listener::bind(addr);
}

RabitTracker::~RabitTracker() = default;

void RabitTracker::serve(Deadline startDeadline, std::chrono::milliseconds ioTimeout,
                         const std::function<void()>& tick,
                         const std::function<void(const std::string&)>& print) {
  ServeState st(workers_, startDeadline, ioTimeout);
  while (!st.allShutDown()) {
    std::unique_ptr<Conn> conn = acceptWorker(listener_, st, tick);
    Deadline d = st.ioDeadline();
    std::shared_ptr<Entry> e = readHeader(std::move(conn), workers_, d);
    if (!e) continue;
    if (!protocol_) {
      protocol_ = e->protocol;
      RANKMAP_INFO(Agent, "XGBoost tracker: the workers speak {}", protocolName(e->protocol));
    } else if (*protocol_ != e->protocol) {
      RANKMAP_THROW(
          PeerError, "XGBoost tracker: worker at {} (task {}) speaks {}, the workers before it {}",
          e->conn->peer(), e->taskId, protocolName(e->protocol), protocolName(*protocol_));
    }
    if (e->cmd == "print") {
      std::string msg = readPrintMessage(*e, d);
      if (print) print(msg);
    } else if (e->cmd == "shutdown") {
      recordShutdown(st, *e);
    } else {
      admitWorker(st, std::move(e), ranks_);
    }
  }
  RANKMAP_INFO(Agent, "XGBoost tracker: all {} workers shut down", workers_);
}

}  // namespace rankmap::launch
