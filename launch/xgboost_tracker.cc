#include "launch/xgboost_tracker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
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

// One accepted connection; every read and write is bounded by the deadline given.
class Conn {
 public:
  Conn(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  ~Conn() {
    if (fd_ >= 0) close(fd_);
  }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  const std::string& peer() const { return peer_; }
  void closeNow() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  void recvAll(void* buf, size_t n, Deadline d, std::string_view what) {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      wait(POLLIN, d, what);
      ssize_t r = recv(fd_, p, n, 0);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r < 0) RANKMAP_CHECK_SYS(r);
      if (r == 0)
        RANKMAP_THROW(PeerError,
                      "XGBoost tracker: worker at {} closed the connection while the "
                      "tracker waited for {}",
                      peer_, what);
      p += r;
      n -= static_cast<size_t>(r);
    }
  }
  void sendAll(const void* buf, size_t n, Deadline d, std::string_view what) {
    const auto* p = static_cast<const char*>(buf);
    while (n > 0) {
      wait(POLLOUT, d, what);
      ssize_t r = send(fd_, p, n, MSG_NOSIGNAL);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r < 0)
        RANKMAP_THROW(PeerError, "XGBoost tracker: sending {} to worker at {}: {}", what, peer_,
                      std::strerror(errno));
      p += r;
      n -= static_cast<size_t>(r);
    }
  }
  int32_t recvInt(Deadline d, std::string_view what) {
    int32_t v = 0;
    recvAll(&v, sizeof v, d, what);
    return v;
  }
  void sendInt(int32_t v, Deadline d, std::string_view what) { sendAll(&v, sizeof v, d, what); }
  std::string recvStr(Deadline d, std::string_view what) {
    int32_t n = recvInt(d, what);
    if (n < 0 || n > kMaxString)
      RANKMAP_THROW(PeerError, "XGBoost tracker: worker at {} sent a {} of {} bytes", peer_, what,
                    n);
    std::string s(static_cast<size_t>(n), '\0');
    recvAll(s.data(), s.size(), d, what);
    return s;
  }
  void sendStr(const std::string& s, Deadline d, std::string_view what) {
    sendInt(static_cast<int32_t>(s.size()), d, what);
    sendAll(s.data(), s.size(), d, what);
  }

 private:
  void wait(short events, Deadline d, std::string_view what) {
    for (;;) {
      pollfd p{fd_, events, 0};
      int n = poll(&p, 1, d.pollTimeoutMs());
      if (n > 0) return;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) RANKMAP_CHECK_SYS(n);
      RANKMAP_THROW(TimeoutError, "XGBoost tracker: timed out waiting for {} from worker at {}",
                    what, peer_);
    }
  }
  int fd_;
  std::string peer_;
};

// A worker's connection for one command (tracker.py WorkerEntry).
struct Entry {
  std::unique_ptr<Conn> conn;
  int32_t rank = -1;
  int32_t worldSize = -1;
  std::string taskId;
  std::string cmd;
  int waitAccept = 0;
  int32_t port = -1;
};

}  // namespace

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

RabitTracker::RabitTracker(const std::string& bindAddress, uint16_t port, int workers)
    : workers_(workers) {
  if (workers < 1)
    RANKMAP_THROW(InvalidInput, "XGBoost tracker: {} workers (expected >= 1)", workers);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, bindAddress.c_str(), &a.sin_addr) != 1)
    RANKMAP_THROW(InvalidInput, "XGBoost tracker address {:?}: expected an IPv4 address",
                  bindAddress);
  fd_ = RANKMAP_CHECK_SYS(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  try {
    RANKMAP_CHECK_SYS(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a));
    RANKMAP_CHECK_SYS(listen(fd_, 256));
    socklen_t len = sizeof a;
    RANKMAP_CHECK_SYS(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len));
  } catch (...) {
    close(fd_);
    throw;
  }
  port_ = ntohs(a.sin_port);
}

RabitTracker::~RabitTracker() {
  if (fd_ >= 0) close(fd_);
}

void RabitTracker::serve(Deadline startDeadline, std::chrono::milliseconds ioTimeout,
                         const std::function<void()>& tick,
                         const std::function<void(const std::string&)>& print) {
  const int n = workers_;
  RabitLinkMap links;
  bool haveLinks = false;
  std::deque<int> todo;
  std::set<int> shutdown;
  std::map<int, std::shared_ptr<Entry>> waitConn;
  std::map<std::string, int> jobMap;
  std::vector<std::shared_ptr<Entry>> pending;
  std::set<std::string> seen;

  auto startPhase = [&] { return !haveLinks || !todo.empty(); };
  auto ioDeadline = [&] {
    Deadline d = Deadline::after(ioTimeout);
    return startPhase() ? d.min(startDeadline) : d;
  };

  // Sends the rank's links and runs the connection negotiation (tracker.py assign_rank and
  // _get_remote).
  auto assign = [&](Entry& s, int rank) {
    Deadline d = ioDeadline();
    Conn& c = *s.conn;
    s.rank = rank;
    std::set<int> treeSet(links.tree[rank].begin(), links.tree[rank].end());
    std::set<int> nnset = treeSet;
    auto [prev, next] = links.ring[rank];
    c.sendInt(rank, d, "rank");
    c.sendInt(links.parent[rank], d, "parent");
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
        if (waitConn.count(r)) conset.push_back(r);
      c.sendInt(static_cast<int32_t>(conset.size()), d, "the connect count");
      c.sendInt(static_cast<int32_t>(bad.size() - conset.size()), d, "the accept count");
      for (int r : conset) {
        c.sendStr(waitConn[r]->conn->peer(), d, "a peer host");
        c.sendInt(waitConn[r]->port, d, "a peer port");
        c.sendInt(r, d, "a peer rank");
      }
      int32_t nerr = c.recvInt(d, "the connection error count");
      if (nerr != 0) continue;
      s.port = c.recvInt(d, "the worker's listening port");
      for (int r : conset) {
        auto it = waitConn.find(r);
        if (--it->second->waitAccept == 0) waitConn.erase(it);
      }
      s.waitAccept = static_cast<int>(bad.size() - conset.size());
      break;
    }
    RANKMAP_DEBUG(Agent, "XGBoost tracker: task {} at {} is rank {}", s.taskId, c.peer(), rank);
  };

  while (static_cast<int>(shutdown.size()) != n) {
    // Accept, waking every 100 ms for `tick` and the start deadline.
    int cfd = -1;
    sockaddr_in peer{};
    for (;;) {
      if (tick) tick();
      if (startPhase() && startDeadline.expired()) {
        std::vector<std::string> ids(seen.begin(), seen.end());
        RANKMAP_THROW(TimeoutError,
                      "XGBoost tracker: timed out waiting for workers to start: "
                      "{} of {} connected (task ids: {})",
                      seen.size(), n,
                      ids.empty() ? std::string("none") : fmt::format("{}", fmt::join(ids, ",")));
      }
      pollfd p{fd_, POLLIN, 0};
      int timeout = 100;
      if (startPhase()) timeout = std::min(timeout, startDeadline.pollTimeoutMs());
      int r = poll(&p, 1, timeout);
      if (r < 0 && errno != EINTR) RANKMAP_CHECK_SYS(r);
      if (r <= 0) continue;
      socklen_t len = sizeof peer;
      cfd = accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (cfd >= 0) break;
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) RANKMAP_CHECK_SYS(cfd);
    }
    char host[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &peer.sin_addr, host, sizeof host);
    int one = 1;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto s = std::make_shared<Entry>();
    s->conn = std::make_unique<Conn>(cfd, host);
    Deadline d = ioDeadline();
    int32_t magic = s->conn->recvInt(d, "the magic number");
    if (magic != kRabitMagic) {
      RANKMAP_WARN(Agent,
                   "XGBoost tracker: connection from {} sent magic {:#x}, not {:#x}; dropped", host,
                   magic, kRabitMagic);
      continue;
    }
    s->conn->sendInt(kRabitMagic, d, "the magic number");
    s->rank = s->conn->recvInt(d, "the rank");
    s->worldSize = s->conn->recvInt(d, "the world size");
    s->taskId = s->conn->recvStr(d, "the task id");
    s->cmd = s->conn->recvStr(d, "the command");

    if (s->cmd == "print") {
      std::string msg = s->conn->recvStr(d, "a print message");
      while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
      if (print) print(msg);
      continue;
    }
    if (s->cmd == "shutdown") {
      if (s->rank < 0 || s->rank >= n || shutdown.count(s->rank) || waitConn.count(s->rank))
        RANKMAP_THROW(PeerError, "XGBoost tracker: unexpected shutdown from rank {} (task {})",
                      s->rank, s->taskId);
      shutdown.insert(s->rank);
      RANKMAP_DEBUG(Agent, "XGBoost tracker: rank {} shut down ({} of {})", s->rank,
                    shutdown.size(), n);
      continue;
    }
    if (s->cmd != "start" && s->cmd != "recover")
      RANKMAP_THROW(PeerError, "XGBoost tracker: unknown command {:?} from {}", s->cmd, host);
    if (!haveLinks) {
      if (s->cmd != "start")
        RANKMAP_THROW(PeerError, "XGBoost tracker: {} from {} before any start", s->cmd, host);
      links = makeRabitLinkMap(n);
      haveLinks = true;
      for (int r = 0; r < n; ++r) todo.push_back(r);
    }
    if (s->worldSize != -1 && s->worldSize != n)
      RANKMAP_THROW(PeerError,
                    "XGBoost tracker: task {} at {} expects {} workers, the tracker "
                    "runs {}",
                    s->taskId, host, s->worldSize, n);
    if (s->cmd == "recover" && s->rank < 0)
      RANKMAP_THROW(PeerError, "XGBoost tracker: recover without a rank from {}", host);
    seen.insert(s->taskId);

    int rank = s->rank;
    if (rank < 0 && s->taskId != "NULL") {
      auto it = jobMap.find(s->taskId);
      if (it != jobMap.end()) rank = it->second;
    }
    if (rank >= n)
      RANKMAP_THROW(PeerError, "XGBoost tracker: rank {} from {} (world {})", rank, host, n);
    if (rank == -1) {
      if (todo.empty())
        RANKMAP_THROW(PeerError, "XGBoost tracker: more than {} workers started (task {} at {})", n,
                      s->taskId, host);
      pending.push_back(s);
      if (pending.size() == todo.size()) {
        // Batch assignment in task id order: RabitTracker(sortby="task").
        std::stable_sort(pending.begin(), pending.end(),
                         [](const auto& a, const auto& b) { return a->taskId < b->taskId; });
        for (auto& e : pending) {
          int r = todo.front();
          todo.pop_front();
          if (e->taskId != "NULL") jobMap[e->taskId] = r;
          ranks_[e->taskId] = r;
          assign(*e, r);
          e->conn->closeNow();
          if (e->waitAccept > 0) waitConn[r] = e;
        }
        pending.clear();
        RANKMAP_INFO(Agent, "XGBoost tracker: all {} workers started", n);
      }
    } else {
      assign(*s, rank);
      s->conn->closeNow();
      if (s->waitAccept > 0) waitConn[rank] = s;
    }
  }
  RANKMAP_INFO(Agent, "XGBoost tracker: all {} workers shut down", n);
}

}  // namespace rankmap::launch
