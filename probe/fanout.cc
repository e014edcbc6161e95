#include "probe/fanout.h"

#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::probe {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMinReserveFds = 64;
constexpr int kMaxEvents = 512;
constexpr size_t kReadChunk = 64 << 10;

// Descriptors open in this process now; a guess where /proc is not mounted.
size_t openDescriptors() {
  std::error_code ec;
  size_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec))
    ++n;
  return ec ? kMinReserveFds : n;
}

// Sockets a batch of `wanted` requests may hold open at once (RetryPolicy::maxOpenSockets).
size_t socketBudget(size_t wanted, size_t configured) {
  if (configured > 0) return configured;
  // One batch at a time looks at and raises the process's limit.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return std::min<size_t>(wanted, 256);
  size_t open = openDescriptors();
  auto budget = [&](rlim_t soft) -> size_t {
    size_t free = soft > open ? static_cast<size_t>(soft - open) : 0;
    size_t reserve = std::max(kMinReserveFds, free / 4);
    return free > reserve ? free - reserve : 0;
  };
  if (budget(rl.rlim_cur) < wanted && rl.rlim_cur < rl.rlim_max) {
    rlim_t before = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) {
      RANKMAP_INFO(Probe, "requests: open file limit raised from {} to {} for {} requests", before,
                   rl.rlim_max, wanted);
    } else {
      // An unlimited hard limit cannot be the soft one (fs.nr_open caps it): keep what we have.
      RANKMAP_WARN(Probe, "requests: cannot raise the open file limit from {} to {}: {}", before,
                   rl.rlim_max, std::strerror(errno));
      rl.rlim_cur = before;
    }
  }
  return std::clamp<size_t>(budget(rl.rlim_cur), 1, wanted);
}

RequestFailure classify(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return failureOf(x);
  } catch (...) {
    return RequestFailure::kPeer;
  }
}

std::string messageOf(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

// One call of requestAll(): the requests' state machines (see fanout.h) and the event loop.
// Only the calling thread touches it.
class Fanout {
 public:
  Fanout(const std::vector<PendingRequest>& requests, const ProbeKey& key, std::string_view self,
         const RetryPolicy& retry, ConnectionPool* pool)
      : reqs_(requests),
        key_(key),
        self_(self),
        retry_(retry),
        pool_(pool),
        conns_(requests.size()),
        out_(requests.size()),
        buf_(kReadChunk) {}

  std::vector<RequestOutcome> run();

 private:
  enum class Stage { kQueued, kBackoff, kConnecting, kHandshake, kRequest, kDone };
  struct Conn {
    Stage stage = Stage::kQueued;
    SockAddr addr;
    int attempts = 0;       // connection attempts started
    std::string lastError;  // why the last one failed
    Socket sock;
    uint32_t events = 0;  // what epoll watches for on sock (0: not registered)
    std::optional<ChannelState> wire;
    std::string out;  // sealed bytes not yet sent, from `sent`
    size_t sent = 0;
    std::string in;  // received bytes of the frame being read
    std::optional<FrameHeader> header;
    std::optional<Clock::time_point> wake;  // its entry in timers_
    bool pooled = false;                    // the connection came from the pool
    bool fresh = false;  // take no connection from the pool (a pooled one was found closed)
  };

  void startQueued();
  bool startPooled(size_t i);
  bool retryFresh(size_t i, const std::exception_ptr& e);
  void onEvent(size_t i, uint32_t events);
  void onTimer(size_t i);
  void connectFailed(size_t i, const std::string& why);
  void flush(size_t i);
  void receive(size_t i);
  void sendRequest(size_t i);
  void watch(size_t i, uint32_t events);
  void unwatch(Conn& c);
  void setTimer(size_t i, Clock::time_point t);
  void closeSocket(Conn& c);
  void finish(size_t i, Json reply);
  void fail(size_t i, RequestFailure f, std::exception_ptr e);
  template <typename E>
  void fail(size_t i, RequestFailure f, const std::string& msg) {
    fail(i, f, std::make_exception_ptr(E(msg)));
  }
  std::string agentText(size_t i) const { return reqs_[i].agent.text(); }

  const std::vector<PendingRequest>& reqs_;
  const ProbeKey& key_;
  std::string_view self_;
  RetryPolicy retry_;
  ConnectionPool* pool_;
  std::vector<Conn> conns_;
  std::vector<RequestOutcome> out_;
  std::vector<char> buf_;  // one read at a time
  Fd epoll_;
  std::deque<size_t> ready_;  // queued requests, in order, waiting for a socket slot
  std::set<std::pair<Clock::time_point, size_t>> timers_;  // one per pending request
  size_t cap_ = 1;                                         // sockets open at once
  size_t open_ = 0;                                        // sockets open now
  size_t peakOpen_ = 0;
  size_t done_ = 0;
};

std::vector<RequestOutcome> Fanout::run() {
  const size_t n = reqs_.size();
  if (n == 0) return {};
  retry_.connectAttempts = std::max(1, retry_.connectAttempts);
  retry_.backoffFactor = std::max(1, retry_.backoffFactor);
  retry_.connectTimeout = std::max(retry_.connectTimeout, std::chrono::milliseconds(1));
  cap_ = socketBudget(n, retry_.maxOpenSockets);
  epoll_ = Fd(RANKMAP_CHECK_SYS(::epoll_create1(EPOLL_CLOEXEC)));
  for (size_t i = 0; i < n; ++i) {
    try {
      conns_[i].addr = resolve(reqs_[i].agent.host, reqs_[i].agent.port, Lookup::kNumericOnly);
    } catch (const std::exception& e) {
      fail<InvalidInput>(i, RequestFailure::kConnect,
                         fmt::format("connect to {}: {}", agentText(i), e.what()));
      continue;
    }
    ready_.push_back(i);
    setTimer(i, reqs_[i].deadline.when());
  }
  auto t0 = Clock::now();
  std::vector<epoll_event> events(kMaxEvents);
  while (done_ < n) {
    startQueued();
    if (done_ == n) break;
    // Every pending request has a timer (its deadline at the latest): the wait is bounded.
    RANKMAP_ASSERT(!timers_.empty());
    int timeoutMs = Deadline::at(timers_.begin()->first).pollTimeoutMs();
    int k = ::epoll_wait(epoll_.fd(), events.data(), kMaxEvents, timeoutMs);
    if (k < 0) {
      if (errno != EINTR) RANKMAP_CHECK_SYS(k);
      k = 0;
    }
    for (int e = 0; e < k; ++e) onEvent(events[e].data.u64, events[e].events);
    auto now = Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) onTimer(timers_.begin()->second);
  }
  size_t ok = 0;
  std::map<std::string_view, size_t> failed;
  for (const auto& o : out_) {
    if (o.reply)
      ++ok;
    else
      ++failed[requestFailureName(o.failure)];
  }
  std::string failures;
  for (const auto& [why, count] : failed)
    failures += fmt::format("{}{} {}", failures.empty() ? "" : ", ", count, why);
  RANKMAP_DEBUG(Probe, "requests: {} in {:.3f} s: {} replies, failed: {}; at most {} sockets open",
                n, std::chrono::duration<double>(Clock::now() - t0).count(), ok,
                failures.empty() ? std::string("none") : failures, peakOpen_);
  return std::move(out_);
}

void Fanout::startQueued() {
  while (open_ < cap_ && !ready_.empty()) {
    size_t i = ready_.front();
    ready_.pop_front();
    Conn& c = conns_[i];
    if (c.stage != Stage::kQueued) continue;  // its deadline passed while it waited
    if (reqs_[i].deadline.expired()) {
      onTimer(i);
      continue;
    }
    if (startPooled(i)) continue;
    int err = 0;
    Socket s;
    try {
      s = Socket::startConnect(c.addr, err);
    } catch (const SystemError& e) {
      if (open_ > 0 && (e.err() == EMFILE || e.err() == ENFILE)) {
        // Out of descriptors after all (the process opened others): wait for ours to close.
        RANKMAP_WARN(Probe, "requests: out of descriptors with {} sockets open; queueing the rest",
                     open_);
        cap_ = open_;
        ready_.push_front(i);
        return;
      }
      fail(i, RequestFailure::kConnect, std::current_exception());
      continue;
    }
    ++c.attempts;
    if (err != 0) {
      connectFailed(i, std::strerror(err));
      continue;
    }
    c.sock = std::move(s);
    peakOpen_ = std::max(peakOpen_, ++open_);
    c.stage = Stage::kConnecting;
    watch(i, EPOLLOUT);
    setTimer(i, std::min(reqs_[i].deadline.when(), Clock::now() + retry_.connectTimeout));
  }
}

bool Fanout::startPooled(size_t i) {
  Conn& c = conns_[i];
  if (!pool_ || c.fresh) return false;
  auto idle = pool_->take(agentText(i));
  if (!idle) return false;
  c.sock = std::move(idle->sock);
  c.wire.emplace(std::move(idle->wire));
  c.pooled = true;
  peakOpen_ = std::max(peakOpen_, ++open_);
  setTimer(i, reqs_[i].deadline.when());
  try {
    sendRequest(i);
  } catch (...) {
    auto e = std::current_exception();
    if (!retryFresh(i, e)) fail(i, classify(e), e);
  }
  return true;
}

// A pooled connection that ended or was reset before any byte of the Reply: the agent closed it
// while idle, before it read the Request (it never closes one with a request in progress). The
// request starts again on a new connection, at the front of the queue.
bool Fanout::retryFresh(size_t i, const std::exception_ptr& e) {
  Conn& c = conns_[i];
  if (!c.pooled || !c.in.empty() || c.header || classify(e) != RequestFailure::kPeer) return false;
  RANKMAP_DEBUG(Probe, "request to {}: its pooled connection was closed ({}); a new one",
                agentText(i), messageOf(e));
  closeSocket(c);
  c.wire.reset();
  c.pooled = false;
  c.fresh = true;
  c.stage = Stage::kQueued;
  ready_.push_front(i);
  return true;
}

void Fanout::connectFailed(size_t i, const std::string& why) {
  Conn& c = conns_[i];
  closeSocket(c);
  c.lastError = why;
  if (c.attempts < retry_.connectAttempts) {
    auto wait = retry_.firstBackoff;
    for (int a = 1; a < c.attempts; ++a) wait *= retry_.backoffFactor;
    auto at = Clock::now() + wait;
    if (at < reqs_[i].deadline.when()) {
      RANKMAP_DEBUG(Probe, "request to {}: connect attempt {} failed ({}); next in {} ms",
                    agentText(i), c.attempts, why, wait.count());
      c.stage = Stage::kBackoff;
      setTimer(i, at);
      return;
    }
  }
  fail<PeerError>(i, RequestFailure::kConnect,
                  fmt::format("connect to {}: {} ({} attempt{})", agentText(i), why, c.attempts,
                              c.attempts == 1 ? "" : "s"));
}

void Fanout::onTimer(size_t i) {
  Conn& c = conns_[i];
  switch (c.stage) {
    case Stage::kQueued:
      if (c.attempts > 0) {  // its backoff ended too close to the deadline to try again
        fail<PeerError>(
            i, RequestFailure::kConnect,
            fmt::format("connect to {}: {} ({} attempts)", agentText(i), c.lastError, c.attempts));
        return;
      }
      fail<TimeoutError>(i, RequestFailure::kTimeout,
                         fmt::format("{}: the deadline passed before a connection was started "
                                     "({} of at most {} sockets open)",
                                     agentText(i), open_, cap_));
      return;
    case Stage::kBackoff:
      c.stage = Stage::kQueued;
      ready_.push_back(i);
      setTimer(i, reqs_[i].deadline.when());
      return;
    case Stage::kConnecting:
      connectFailed(i, "no answer");
      return;
    case Stage::kHandshake:
    case Stage::kRequest:
      fail<TimeoutError>(i, RequestFailure::kTimeout,
                         fmt::format("{}: no {} within the deadline", c.wire->describe(),
                                     c.stage == Stage::kHandshake ? "HelloAck" : "Reply"));
      return;
    case Stage::kDone:
      break;
  }
  RANKMAP_THROW(InternalError, "requests: timer of a finished request to {}", agentText(i));
}

void Fanout::onEvent(size_t i, uint32_t events) {
  Conn& c = conns_[i];
  try {
    switch (c.stage) {
      case Stage::kConnecting: {
        if (int err = c.sock.finishConnect(); err != 0) {
          connectFailed(i, std::strerror(err));
          return;
        }
        c.wire.emplace(ChannelState::client(key_, agentText(i)));
        c.out = c.wire->hello(self_);
        c.sent = 0;
        c.stage = Stage::kHandshake;
        setTimer(i, reqs_[i].deadline.when());
        flush(i);
        return;
      }
      case Stage::kHandshake:
      case Stage::kRequest:
        if ((events & EPOLLOUT) && c.sent < c.out.size()) flush(i);
        if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) receive(i);
        return;
      default:
        return;  // finished earlier in this batch of events
    }
  } catch (...) {
    auto e = std::current_exception();
    if (!retryFresh(i, e)) fail(i, classify(e), e);
  }
}

void Fanout::flush(size_t i) {
  Conn& c = conns_[i];
  while (c.sent < c.out.size()) {
    size_t k = c.sock.sendNow(c.out.data() + c.sent, c.out.size() - c.sent,
                              c.stage == Stage::kHandshake ? "send Hello" : "send Request");
    if (k == 0) break;
    c.sent += k;
  }
  if (c.sent < c.out.size()) {
    watch(i, EPOLLIN | EPOLLOUT);
    return;
  }
  std::string().swap(c.out);  // its memory too (closeSocket)
  c.sent = 0;
  watch(i, EPOLLIN);
}

void Fanout::receive(size_t i) {
  Conn& c = conns_[i];
  auto k = c.sock.recvNow(buf_.data(), buf_.size(),
                          c.stage == Stage::kHandshake ? "receive HelloAck" : "receive Reply");
  if (!k) return;
  if (*k == 0) {
    if (!c.in.empty())
      throw PeerError(
          fmt::format("{}: closed the connection in the middle of a frame", c.wire->describe()));
    c.wire->throwClosed();
  }
  c.in.append(buf_.data(), *k);
  for (;;) {
    if (!c.header) {
      if (c.in.size() < kHeaderBytes) return;
      c.header =
          c.wire->parseHeader(std::string_view(c.in).substr(0, kHeaderBytes), reqs_[i].maxReply);
    }
    size_t total = kHeaderBytes + c.header->length + kMacBytes;
    if (c.in.size() < total) return;
    std::string_view all(c.in);
    Frame f = c.wire->open(*c.header, all.substr(0, kHeaderBytes),
                           all.substr(kHeaderBytes, total - kHeaderBytes));
    c.in.erase(0, total);
    c.header.reset();
    if (c.stage == Stage::kHandshake) {
      sendRequest(i);  // opening the HelloAck established the session
      continue;
    }
    std::string payload = c.wire->take(std::move(f), MsgType::kReply);
    finish(i, parseJson(payload, fmt::format("reply from {}", c.wire->describe())));
    return;  // anything after the Reply is not ours to read
  }
}

void Fanout::sendRequest(size_t i) {
  Conn& c = conns_[i];
  const PendingRequest& r = reqs_[i];
  std::string text;
  if ((r.answerMargin || r.startAt) && (r.body.is_object() || r.body.is_null())) {
    Json body = r.body;
    if (r.answerMargin) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(r.deadline.remaining());
      body["timeout_ms"] = std::max<int64_t>(1, (left - *r.answerMargin).count());
    }
    if (r.startAt)
      body["start_in_ms"] = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(
                 *r.startAt - std::chrono::steady_clock::now())
                 .count());
    text = body.dump();
  } else {
    text = r.body.dump();
  }
  if (!r.shared.empty()) {  // body is an object: its text ends with '}'
    size_t size = text.size() + 1;
    for (const auto& [name, value] : r.shared) size += name.size() + value->size() + 4;
    text.reserve(size);  // exactly, for the reason ChannelState::seal gives
    text.pop_back();
    for (const auto& [name, value] : r.shared) {
      if (text.size() > 1) text += ',';
      text += Json(name).dump();
      text += ':';
      text += *value;
    }
    text += '}';
  }
  c.out = c.wire->seal(MsgType::kRequest, text);
  c.sent = 0;
  c.stage = Stage::kRequest;
  flush(i);
}

void Fanout::watch(size_t i, uint32_t events) {
  Conn& c = conns_[i];
  if (c.events == events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = i;
  RANKMAP_CHECK_SYS(
      ::epoll_ctl(epoll_.fd(), c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.sock.fd(), &ev));
  c.events = events;
}

void Fanout::setTimer(size_t i, Clock::time_point t) {
  Conn& c = conns_[i];
  if (c.wake) timers_.erase({*c.wake, i});
  c.wake = t;
  timers_.insert({t, i});
}

// Explicitly, before a socket is closed or pooled: a descriptor shared with a forked child would
// stay in the epoll set.
void Fanout::unwatch(Conn& c) {
  if (c.events != 0) ::epoll_ctl(epoll_.fd(), EPOLL_CTL_DEL, c.sock.fd(), nullptr);
  c.events = 0;
}

void Fanout::closeSocket(Conn& c) {
  if (!c.sock.valid()) return;
  unwatch(c);
  c.sock.close();
  --open_;
  // A request given up mid-send or mid-reply keeps no buffers: a push's frames are megabytes,
  // one per agent, and an attempt that is retried seals its frame again. (Swapped out: assigning
  // an empty string keeps the buffer.)
  std::string().swap(c.out);
  c.sent = 0;
  std::string().swap(c.in);
  c.header.reset();
}

void Fanout::finish(size_t i, Json reply) {
  Conn& c = conns_[i];
  // Whole and nothing after it: the connection can take the next request.
  if (pool_ && c.in.empty() && !c.header && c.sock.valid()) {
    unwatch(c);
    --open_;
    pool_->put(agentText(i), {std::move(c.sock), std::move(*c.wire), Clock::now()});
  }
  closeSocket(c);
  if (c.wake) timers_.erase({*c.wake, i});
  c = Conn{};
  c.stage = Stage::kDone;
  out_[i].reply = std::move(reply);
  ++done_;
}

void Fanout::fail(size_t i, RequestFailure f, std::exception_ptr e) {
  Conn& c = conns_[i];
  closeSocket(c);
  if (c.wake) timers_.erase({*c.wake, i});
  c = Conn{};
  c.stage = Stage::kDone;
  out_[i].failure = f;
  out_[i].error = messageOf(e);
  out_[i].exception = std::move(e);
  ++done_;
}

}  // namespace

RequestFailure failureOf(const std::exception& e) {
  if (dynamic_cast<const OversizeFrame*>(&e)) return RequestFailure::kPeer;  // sent too much
  if (dynamic_cast<const AuthError*>(&e)) return RequestFailure::kAuth;
  if (dynamic_cast<const RefusedError*>(&e)) return RequestFailure::kRefused;
  if (dynamic_cast<const TimeoutError*>(&e)) return RequestFailure::kTimeout;
  if (std::string_view(e.what()).find("connect to") != std::string_view::npos)
    return RequestFailure::kConnect;
  return RequestFailure::kPeer;
}

std::string_view requestFailureName(RequestFailure f) {
  switch (f) {
    case RequestFailure::kConnect:
      return "connect";
    case RequestFailure::kTimeout:
      return "timeout";
    case RequestFailure::kAuth:
      return "auth";
    case RequestFailure::kPeer:
      return "peer";
    case RequestFailure::kRefused:
      return "refused";
  }
  return "peer";
}

std::vector<RequestOutcome> requestAll(const std::vector<PendingRequest>& requests,
                                       const ProbeKey& key, std::string_view self,
                                       const RetryPolicy& retry) {
  return Fanout(requests, key, self, retry, nullptr).run();
}

std::vector<RequestOutcome> requestAll(const std::vector<PendingRequest>& requests,
                                       ConnectionPool& pool, const RetryPolicy& retry) {
  return Fanout(requests, pool.key(), pool.self(), retry, &pool).run();
}

ConnectionPool::~ConnectionPool() = default;

std::optional<ConnectionPool::Idle> ConnectionPool::take(const std::string& agent) {
  auto it = idle_.find(agent);
  if (it == idle_.end()) return std::nullopt;
  auto& list = it->second;
  const auto now = Clock::now();
  std::optional<Idle> out;
  while (!out && !list.empty()) {
    Idle c = std::move(list.back());
    list.pop_back();
    --count_;
    if (now - c.since > kMaxAge) continue;
    // Open, and nothing unread: an agent sends nothing between requests, so a byte or the end
    // of the stream here means it closed (or broke) the connection.
    char b;
    const ssize_t k = ::recv(c.sock.fd(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) out = std::move(c);
  }
  if (list.empty()) idle_.erase(it);
  return out;
}

void ConnectionPool::put(const std::string& agent, Idle c) {
  rlimit rl{};
  size_t cap = maxIdle_;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    cap = std::min<size_t>(cap, static_cast<size_t>(rl.rlim_cur / 4));
  if (count_ >= cap) return;  // `c` closes here
  auto& list = idle_[agent];
  if (list.size() >= kPerAgent) return;
  list.push_back(std::move(c));
  ++count_;
}

}  // namespace rankmap::probe
