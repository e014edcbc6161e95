// Control requests to many agents at once: one thread multiplexes every request of a batch over
// non-blocking sockets (epoll), so that thousands of agents measure at the same time while the
// caller waits on one thread.
//
// A request is what probe::request does for one agent: connect, the client handshake, one Request
// frame, one Reply frame, all through ChannelState (probe/wire.h), the one implementation of the
// protocol. Each request runs as a small state machine:
//
//   queued -> connecting -> handshake (Hello sent, HelloAck awaited) -> request (Reply awaited)
//      ^          |
//      +- backoff +  (refused, unreachable, or no TCP answer within the attempt's timeout)
//
// Only the connection is retried: an agent that does not accept it is tried again after a backoff
// (RetryPolicy) while its deadline leaves room for it. Once the Request frame is on its way
// nothing is retried: a measurement is not idempotent in time.
//
// With a ConnectionPool, a request to an agent that has an idle established connection in it
// skips connect and handshake (queued -> request), and a connection whose Reply came whole goes
// back into the pool. An agent's server takes any number of requests on a connection and closes
// one idle for its idleTimeout; a pooled connection that turns out closed (no byte of a Reply,
// then the end or a reset) was closed before it read the Request, so that request alone starts
// again on a new connection.
//
// Contract:
// - requestAll() blocks its calling thread until every request has an outcome, at the latest at
//   the latest deadline of the batch (plus the time of one event loop iteration); it starts no
//   thread. Every wait is bounded by the earliest pending deadline or backoff: no busy loop.
// - Open sockets are capped below RLIMIT_NOFILE (see RetryPolicy::maxOpenSockets); the requests
//   beyond the cap wait in a queue for a free slot. When a batch needs more descriptors than the
//   soft limit leaves, requestAll() raises the process's soft limit to its hard limit (once,
//   logged): rankmap uses poll/epoll only, never select(2), so large descriptors are safe.
// - Agent addresses must be numeric (probe/socket.h): nothing here waits on DNS.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "probe/wire.h"

namespace rankmap::probe {

// Why a request got no reply. The names are the coordinator's failure vocabulary (metrics and
// logs count them) and keep its meanings:
enum class RequestFailure {
  kConnect,  // "connect": no connection to the agent (refused, unreachable, no answer) in any
             // attempt, or a bad address
  kTimeout,  // "timeout": connected, but the handshake or the reply did not finish in time (or
             // the request never got a socket slot before its deadline)
  kAuth,     // "auth": the handshake failed (a different probe key: the agent closed on our
             // Hello, or its HelloAck did not verify), or a later frame failed its MAC
  kPeer,     // "peer": the agent broke the protocol: reset, closed, sent an unexpected frame, an
             // oversize reply, or a reply that is not JSON
  kRefused,  // "refused": the agent answered with an Error frame (it refused the request)
};
std::string_view requestFailureName(RequestFailure f);
// The failure an exception from an exchange with an agent, or from a measurement against a peer,
// counts as: by its type (OversizeFrame is kPeer, then AuthError, RefusedError, TimeoutError), then
// a message containing a connect error as common/net.h words it ("connect to ...") is kConnect;
// anything else is kPeer.
RequestFailure failureOf(const std::exception& e);

struct PendingRequest {
  Endpoint agent;
  Json body;
  // Members sent with `body` (then an object) as they are: a name and its value as JSON text,
  // added to the object when the frame is built. For one large value that many requests carry
  // (a topology pushed to many agents): serialized once and shared, not copied into each body.
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> shared;
  Deadline deadline = Deadline::after(std::chrono::seconds(0));
  size_t maxReply = kMaxControlPayload;
  // When set, the body gets the agent's time budget: "timeout_ms" = what is left of the deadline
  // when the Request frame is built, less this margin (at least 1). The agent bounds its work by
  // it, so that its answer (even "my peer timed out") arrives before we give up; computing it at
  // send time keeps it true for requests that waited for a slot or a connect retry.
  std::optional<std::chrono::milliseconds> answerMargin;
  // When set, the body gets "start_in_ms" = how long from when the Request frame is built until
  // this instant (at least 0): requests of one trial, sent over a few milliseconds or after
  // connect retries, then name the same instant.
  std::optional<std::chrono::steady_clock::time_point> startAt;
};

struct RequestOutcome {
  // What the agent answered, as it sent it. A reply reporting that the agent's *peer* failed
  // ({"error", "reason"}) is a reply like any other: the caller interprets it.
  std::optional<Json> reply;
  // Without a reply: why, the message (naming the agent), and the exception for callers that
  // rethrow it (TimeoutError, AuthError, RefusedError, PeerError; SystemError for a local
  // failure).
  RequestFailure failure = RequestFailure::kPeer;
  std::string error;
  std::exception_ptr exception;

  // Whether the asked agent failed: there is no reply. False for every reply, also one that
  // reports the failure of the agent's peer.
  bool agentFailed() const { return !reply.has_value(); }
};

struct RetryPolicy {
  // Connection attempts per request (at least 1), while the deadline leaves room for them.
  int connectAttempts = 3;
  // Wait before the second attempt; each later wait is backoffFactor times the previous one
  // (100 ms, 300 ms, 900 ms, ...).
  std::chrono::milliseconds firstBackoff{100};
  int backoffFactor = 3;
  // Bound on one attempt's TCP handshake (a SYN that nobody answers); the request's deadline
  // bounds it too.
  std::chrono::milliseconds connectTimeout{2000};
  // Sockets open at once. 0: what RLIMIT_NOFILE leaves, less a quarter of it (at least 64) for
  // the rest of the process (its own server, files); the soft limit is raised to the hard one
  // first when the batch needs more.
  size_t maxOpenSockets = 0;
};

// Established connections to agents, kept between batches of requests (requestAll): a round's
// few dozen requests per agent then pay for one TCP and one authentication handshake each, not
// a few dozen (63 requests per agent in a 4096-agent round; connecting and the handshake were
// most of the coordinator's CPU). Its connections hold its key and announce its `self`; it
// belongs to one caller (probe::AgentFleet, for one round). Not thread-safe; closes its
// connections when destroyed.
class ConnectionPool {
 public:
  // Idle connections kept at most: `maxIdle` in all, and a quarter of the open file limit (the
  // batches need the rest); kPerAgent per agent.
  static constexpr size_t kPerAgent = 2;
  ConnectionPool(ProbeKey key, std::string self, size_t maxIdle = 8192)
      : key_(std::move(key)), self_(std::move(self)), maxIdle_(maxIdle) {}
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;
  const ProbeKey& key() const { return key_; }
  const std::string& self() const { return self_; }
  size_t idle() const { return count_; }

  struct Idle {
    Socket sock;
    ChannelState wire;
    std::chrono::steady_clock::time_point since;
  };
  // An idle connection to `agent` ("host:port") that is still open and younger than kMaxAge
  // (agents close idle ones after 30 s by default), or nullopt.
  std::optional<Idle> take(const std::string& agent);
  // Keeps `c` for the next request to `agent`, or closes it when the pool is full.
  void put(const std::string& agent, Idle c);

 private:
  static constexpr std::chrono::seconds kMaxAge{15};
  const ProbeKey key_;  // a connection's protocol state keeps a reference to it
  const std::string self_;
  size_t maxIdle_;
  size_t count_ = 0;
  std::map<std::string, std::vector<Idle>> idle_;  // per agent, newest last
};

// Runs every request at once (as far as sockets allow) and returns their outcomes, in the order
// of `requests`. `self` names us in the handshakes. Never throws for an agent's failure; every
// outcome is known by its request's deadline.
std::vector<RequestOutcome> requestAll(const std::vector<PendingRequest>& requests,
                                       const ProbeKey& key, std::string_view self,
                                       const RetryPolicy& retry = {});
// The same with the pool's key and name, using and returning its connections (see above).
std::vector<RequestOutcome> requestAll(const std::vector<PendingRequest>& requests,
                                       ConnectionPool& pool, const RetryPolicy& retry = {});

}  // namespace rankmap::probe
