// probe/fanout.h on loopback: thousands of control requests from one thread against in-process
// probe servers, and every way a request can fail, each mapped back to its request.
#include "probe/fanout.h"

#include <sys/resource.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "probe/server.h"
#include "tests/unit/probe/probe_test_util.h"

namespace rankmap::probe {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test::keyA;
using test::keyB;
using test::loopback;

// A probe server on an ephemeral loopback port with a test handler.
struct Server {
  explicit Server(ProbeServer::RequestHandler handler, ProbeKey key = keyA(),
                  size_t maxConnections = 256) {
    ProbeServer::Options o;
    o.listen = loopback(0);
    o.name = "server";
    o.maxConnections = maxConnections;
    server = std::make_unique<ProbeServer>(o, std::move(key), std::move(handler));
    server->start();
  }
  Endpoint ep() const { return loopback(server->port()); }
  std::unique_ptr<ProbeServer> server;
};

// Echoes the request; {"op": "fail"} is refused (an Error frame), {"op": "big"} answers with
// `bytes` bytes, {"op": "peer-failed"} reports a failure of the agent's peer.
Json echo(const Json& req, const std::string& peer, Deadline) {
  std::string op = req.value("op", "");
  if (op == "fail") throw InvalidInput("asked to fail");
  if (op == "big") return Json{{"blob", std::string(req.value("bytes", 0), 'x')}};
  if (op == "peer-failed")
    return Json{{"error", "latency a -> b: timed out"}, {"reason", "timeout"}};
  return Json{{"echo", req}, {"peer", peer}};
}

PendingRequest to(const Endpoint& ep, Json body, std::chrono::milliseconds within = 5s) {
  PendingRequest r;
  r.agent = ep;
  r.body = std::move(body);
  r.deadline = Deadline::after(within);
  return r;
}

// A port that nothing listens on (bound once, then closed): connections are refused.
uint16_t deadPort() { return listenOn(loopback(0)).port(); }

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Handlers that count how many requests are inside them at once and wait (bounded) until all
// `total` are: the batch passes only if every request runs at the same time.
struct Barrier {
  explicit Barrier(size_t total) : total(total) {}
  Json enter(Deadline d) {
    std::unique_lock<std::mutex> lock(mu);
    peak = std::max(peak, ++inside);
    cv.notify_all();
    bool all =
        cv.wait_until(lock, d.min(Deadline::after(30s)).when(), [&] { return peak >= total; });
    --inside;
    return Json{{"all_in", all}};
  }
  size_t total;
  std::mutex mu;
  std::condition_variable cv;
  size_t inside = 0;
  size_t peak = 0;
};

TEST(RequestAll, TwoThousandRequestsRunAtOnceFromOneThread) {
  constexpr size_t kRequests = 2000;
  constexpr size_t kServers = 5;
  Barrier barrier(kRequests);
  std::vector<std::unique_ptr<Server>> servers;
  for (size_t s = 0; s < kServers; ++s)
    servers.push_back(std::make_unique<Server>(
        [&](const Json&, const std::string&, Deadline d) { return barrier.enter(d); }, keyA(),
        kRequests));
  std::vector<PendingRequest> reqs;
  for (size_t i = 0; i < kRequests; ++i)
    reqs.push_back(to(servers[i % kServers]->ep(), Json{{"op", "hello"}}, 60s));
  auto t0 = Clock::now();
  auto out = requestAll(reqs, keyA(), "coordinator");
  double took = secondsSince(t0);
  ASSERT_EQ(out.size(), kRequests);
  for (size_t i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(out[i].reply) << i << ": " << out[i].error;
    EXPECT_EQ((*out[i].reply)["all_in"], true) << i;
  }
  EXPECT_EQ(barrier.peak, kRequests);
  // Threads batches of 256 would never fill the barrier; here all wait together, briefly.
  EXPECT_LT(took, 30.0);
}

TEST(RequestAll, QueuesBeyondTheSocketCapAndStillAnswersAll) {
  std::atomic<int> inside{0}, peak{0};
  Server s([&](const Json& req, const std::string&, Deadline) {
    int now = ++inside;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(10ms);
    --inside;
    return Json{{"i", req.at("i")}};
  });
  std::vector<PendingRequest> reqs;
  for (int i = 0; i < 40; ++i) reqs.push_back(to(s.ep(), Json{{"i", i}}));
  RetryPolicy retry;
  retry.maxOpenSockets = 4;
  auto out = requestAll(reqs, keyA(), "c", retry);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(out[static_cast<size_t>(i)].reply) << out[static_cast<size_t>(i)].error;
    EXPECT_EQ((*out[static_cast<size_t>(i)].reply)["i"], i);
  }
  EXPECT_LE(peak.load(), 4);
}

TEST(RequestAll, ARequestStillQueuedAtItsDeadlineTimesOut) {
  Listener silent = listenOn(loopback(0));
  RetryPolicy retry;
  retry.maxOpenSockets = 1;  // the silent agent holds the only socket
  auto t0 = Clock::now();
  auto out = requestAll({to(loopback(silent.port()), Json{{"op", "x"}}, 400ms),
                         to(loopback(silent.port()), Json{{"op", "x"}}, 100ms)},
                        keyA(), "c", retry);
  EXPECT_EQ(out[0].failure, RequestFailure::kTimeout) << out[0].error;
  EXPECT_EQ(out[1].failure, RequestFailure::kTimeout) << out[1].error;
  EXPECT_NE(out[1].error.find("before a connection was started"), std::string::npos)
      << out[1].error;
  EXPECT_LT(secondsSince(t0), 0.4 + 0.25);
}

TEST(RequestAll, RaisesTheSoftDescriptorLimitWhenABatchNeedsIt) {
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  if (before.rlim_max < 2048) GTEST_SKIP() << "hard RLIMIT_NOFILE " << before.rlim_max;
  Server s(echo, keyA(), 1000);
  rlimit low = before;
  low.rlim_cur = 256;  // less than the 300 requests need, with the server's descriptors
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<PendingRequest> reqs;
  for (int i = 0; i < 300; ++i) reqs.push_back(to(s.ep(), Json{{"i", i}}, 10s));
  auto out = requestAll(reqs, keyA(), "c");
  rlimit after{};
  ::getrlimit(RLIMIT_NOFILE, &after);
  ::setrlimit(RLIMIT_NOFILE, &before);
  EXPECT_EQ(after.rlim_cur, before.rlim_max);
  for (const auto& o : out) EXPECT_TRUE(o.reply) << o.error;
}

TEST(RequestAll, WrongKeyIsAnAuthFailureOfTheAskedAgent) {
  Server s(echo, keyB());
  auto out = requestAll({to(s.ep(), Json{{"op", "hello"}})}, keyA(), "intruder");
  ASSERT_FALSE(out[0].reply);
  EXPECT_EQ(out[0].failure, RequestFailure::kAuth) << out[0].error;
  EXPECT_TRUE(out[0].agentFailed());
  EXPECT_THROW(std::rethrow_exception(out[0].exception), AuthError);
}

TEST(RequestAll, ASilentListenerTimesOutAtTheDeadline) {
  // The kernel completes the TCP handshake (backlog); nobody ever answers Hello.
  Listener silent = listenOn(loopback(0));
  auto t0 = Clock::now();
  auto out = requestAll({to(loopback(silent.port()), Json{{"op", "hello"}}, 300ms)}, keyA(), "c");
  double took = secondsSince(t0);
  ASSERT_FALSE(out[0].reply);
  EXPECT_EQ(out[0].failure, RequestFailure::kTimeout) << out[0].error;
  EXPECT_NE(out[0].error.find("HelloAck"), std::string::npos) << out[0].error;
  EXPECT_GE(took, 0.3);
  EXPECT_LT(took, 0.3 + 0.25);
}

TEST(RequestAll, NothingListeningIsAConnectFailureAfterTheRetries) {
  Endpoint dead = loopback(deadPort());
  auto t0 = Clock::now();
  auto out = requestAll({to(dead, Json{{"op", "hello"}}, 2s)}, keyA(), "c");
  double took = secondsSince(t0);
  ASSERT_FALSE(out[0].reply);
  EXPECT_EQ(out[0].failure, RequestFailure::kConnect) << out[0].error;
  EXPECT_NE(out[0].error.find("connect to " + dead.text()), std::string::npos) << out[0].error;
  EXPECT_NE(out[0].error.find("3 attempts"), std::string::npos) << out[0].error;
  EXPECT_GE(took, 0.1 + 0.3);  // both backoffs
  EXPECT_LT(took, 2.0);

  // A deadline that leaves no room for the third attempt ends the retries early.
  t0 = Clock::now();
  out = requestAll({to(dead, Json{{"op", "hello"}}, 250ms)}, keyA(), "c");
  took = secondsSince(t0);
  EXPECT_EQ(out[0].failure, RequestFailure::kConnect) << out[0].error;
  EXPECT_NE(out[0].error.find("2 attempts"), std::string::npos) << out[0].error;
  EXPECT_LT(took, 0.25);
}

TEST(RequestAll, AnAgentThatStartsLateIsReachedByARetry) {
  uint16_t port = deadPort();
  std::unique_ptr<ProbeServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(50ms);
    ProbeServer::Options o;
    o.listen = loopback(port);
    late = std::make_unique<ProbeServer>(o, keyA(), echo);
    late->start();
  });
  auto out = requestAll({to(loopback(port), Json{{"op", "hello"}}, 3s)}, keyA(), "c");
  starter.join();
  ASSERT_TRUE(out[0].reply) << out[0].error;
  EXPECT_EQ((*out[0].reply)["echo"]["op"], "hello");
}

TEST(RequestAll, AnOversizeReplyIsAPeerFailure) {
  Server s(echo);
  PendingRequest r = to(s.ep(), Json{{"op", "big"}, {"bytes", 5000}});
  r.maxReply = 1000;
  auto out = requestAll({r}, keyA(), "c");
  ASSERT_FALSE(out[0].reply);
  EXPECT_EQ(out[0].failure, RequestFailure::kPeer) << out[0].error;
  EXPECT_NE(out[0].error.find("exceeds"), std::string::npos) << out[0].error;
}

TEST(RequestAll, AnErrorFrameIsARefusal) {
  Server s(echo);
  auto out = requestAll({to(s.ep(), Json{{"op", "fail"}})}, keyA(), "c");
  ASSERT_FALSE(out[0].reply);
  EXPECT_EQ(out[0].failure, RequestFailure::kRefused) << out[0].error;
  EXPECT_NE(out[0].error.find("refused: asked to fail"), std::string::npos) << out[0].error;
}

// The coordinator and the probe service name a measurement's failure with the same words as a
// request's (probe/agent_fleet.cc, agent/probe_service.cc).
TEST(RequestFailureOf, TypesFirstThenAConnectMessage) {
  auto name = [](const std::exception& e) { return std::string(requestFailureName(failureOf(e))); };
  EXPECT_EQ(name(OversizeFrame("reply of 9 GiB")), "peer");
  EXPECT_EQ(name(AuthError(AuthFailure::kBadMac, "bad MAC")), "auth");
  EXPECT_EQ(name(RefusedError("agent b refused: busy")), "refused");
  EXPECT_EQ(name(TimeoutError("connect to b: not connected before the deadline")), "timeout");
  EXPECT_EQ(name(PeerError("connect to 10.0.0.2:7411: Connection refused")), "connect");
  EXPECT_EQ(name(SystemError("connect to b", ECONNRESET)), "connect");
  EXPECT_EQ(name(PeerError("connection to b reset")), "peer");
  EXPECT_EQ(name(std::runtime_error("anything else")), "peer");
}

TEST(RequestAll, TheAgentsTimeBudgetIsStampedAtSendTime) {
  Server s(echo);
  PendingRequest r = to(s.ep(), Json{{"op", "x"}}, 3s);
  r.answerMargin = 500ms;
  auto out = requestAll({r}, keyA(), "c");
  ASSERT_TRUE(out[0].reply) << out[0].error;
  int64_t budget = (*out[0].reply)["echo"]["timeout_ms"];
  EXPECT_GT(budget, 2000);
  EXPECT_LE(budget, 2500);
}

TEST(RequestAll, TheCommonStartIsStampedAtSendTime) {
  Server s(echo);
  PendingRequest r = to(s.ep(), Json{{"op", "x"}}, 3s);
  r.startAt = std::chrono::steady_clock::now() + 800ms;
  PendingRequest past = to(s.ep(), Json{{"op", "x"}}, 3s);
  past.startAt = std::chrono::steady_clock::now() - 1s;
  PendingRequest none = to(s.ep(), Json{{"op", "x"}}, 3s);
  auto out = requestAll({r, past, none}, keyA(), "c");
  for (const auto& o : out) ASSERT_TRUE(o.reply) << o.error;
  int64_t in = (*out[0].reply)["echo"]["start_in_ms"];
  EXPECT_GT(in, 500);
  EXPECT_LE(in, 800);
  EXPECT_EQ((*out[1].reply)["echo"]["start_in_ms"], 0);
  EXPECT_FALSE((*out[2].reply)["echo"].contains("start_in_ms"));
  EXPECT_FALSE((*out[0].reply)["echo"].contains("timeout_ms"));
}

TEST(RequestAll, MixedOutcomesMapBackToTheirRequests) {
  Server good(echo);
  Server other(echo, keyB());
  Listener silent = listenOn(loopback(0));
  Endpoint dead = loopback(deadPort());
  std::vector<PendingRequest> reqs = {
      to(good.ep(), Json{{"op", "x"}, {"i", 0}}),
      to(dead, Json{{"op", "x"}}, 1s),
      to(good.ep(), Json{{"op", "fail"}}),
      to(other.ep(), Json{{"op", "x"}}),
      to(loopback(silent.port()), Json{{"op", "x"}}, 400ms),
      to(good.ep(), Json{{"op", "peer-failed"}}),
      to(Endpoint{"not-an-address", 7411}, Json{{"op", "x"}}),
      to(good.ep(), Json{{"op", "x"}, {"i", 7}}),
  };
  auto out = requestAll(reqs, keyA(), "c");
  ASSERT_EQ(out.size(), reqs.size());
  ASSERT_TRUE(out[0].reply) << out[0].error;
  EXPECT_EQ((*out[0].reply)["echo"]["i"], 0);
  EXPECT_EQ(out[1].failure, RequestFailure::kConnect);
  EXPECT_EQ(out[2].failure, RequestFailure::kRefused);
  EXPECT_EQ(out[3].failure, RequestFailure::kAuth);
  EXPECT_EQ(out[4].failure, RequestFailure::kTimeout);
  // An agent's report that its peer failed is a reply, returned as it is.
  ASSERT_TRUE(out[5].reply) << out[5].error;
  EXPECT_FALSE(out[5].agentFailed());
  EXPECT_EQ((*out[5].reply)["reason"], "timeout");
  EXPECT_EQ(out[6].failure, RequestFailure::kConnect);
  ASSERT_TRUE(out[7].reply) << out[7].error;
  EXPECT_EQ((*out[7].reply)["echo"]["i"], 7);
  for (size_t i : {1, 2, 3, 4, 6}) {
    EXPECT_FALSE(out[i].reply) << i;
    EXPECT_TRUE(out[i].agentFailed()) << i;
    EXPECT_FALSE(out[i].error.empty()) << i;
  }
}

// A round asks each agent a few dozen times: with a pool, one connection and one handshake.
TEST(RequestAll, APoolCarriesTheNextBatchesOnItsConnection) {
  Server s(echo);
  ConnectionPool pool(keyA(), "c");
  for (int batch = 0; batch < 3; ++batch) {
    auto out = requestAll({to(s.ep(), Json{{"op", "hello"}, {"batch", batch}})}, pool);
    ASSERT_TRUE(out[0].reply) << out[0].error;
    EXPECT_EQ((*out[0].reply)["echo"]["batch"], batch);
  }
  EXPECT_EQ(s.server->connectionsAccepted(), 1u);
  EXPECT_EQ(pool.idle(), 1u);
  // Two requests to one agent in one batch: the second gets a connection of its own, and both
  // stay (kPerAgent).
  auto out =
      requestAll({to(s.ep(), Json{{"op", "hello"}}), to(s.ep(), Json{{"op", "hello"}})}, pool);
  ASSERT_TRUE(out[0].reply && out[1].reply);
  EXPECT_EQ(s.server->connectionsAccepted(), 2u);
  EXPECT_EQ(pool.idle(), 2u);
  // Without one, a connection per request.
  Server plain(echo);
  for (int batch = 0; batch < 3; ++batch)
    ASSERT_TRUE(requestAll({to(plain.ep(), Json{{"op", "hello"}})}, keyA(), "c")[0].reply);
  EXPECT_EQ(plain.server->connectionsAccepted(), 3u);
}

// The agent closes a connection idle for its idleTimeout: the pool sees it closed and the request
// goes on a new one.
TEST(RequestAll, APooledConnectionTheAgentClosedIsNotUsed) {
  ProbeServer::Options o;
  o.listen = loopback(0);
  o.name = "server";
  o.idleTimeout = 100ms;
  ProbeServer server(o, keyA(), echo);
  server.start();
  ConnectionPool pool(keyA(), "c");
  ASSERT_TRUE(requestAll({to(loopback(server.port()), Json{{"op", "hello"}})}, pool)[0].reply);
  EXPECT_EQ(pool.idle(), 1u);
  std::this_thread::sleep_for(600ms);
  auto out = requestAll({to(loopback(server.port()), Json{{"op", "hello"}})}, pool);
  ASSERT_TRUE(out[0].reply) << out[0].error;
  EXPECT_EQ(server.connectionsAccepted(), 2u);
}

// A pooled connection that looked open but ends once the Request is on it (the agent closed it
// at that moment): that request alone runs again on a new connection.
TEST(RequestAll, APooledConnectionThatEndsUnansweredIsReplacedOnce) {
  Listener l = listenOn(loopback(0));
  const ProbeKey key = keyA();  // a Channel keeps a reference
  std::atomic<int> connections{0};
  std::thread agent([&] {
    ReplayGuard guard;
    try {
      for (int k = 1; k <= 2; ++k) {
        auto s = l.accept(Deadline::after(10s));
        if (!s) return;
        ++connections;
        Channel ch = Channel::accept(std::move(*s), key, guard, Deadline::after(10s));
        ch.recv(Deadline::after(10s));
        ch.send(MsgType::kReply, Json{{"connection", k}}.dump(), Deadline::after(10s));
        if (k == 1) ch.recv(Deadline::after(10s));  // the second request: read, then close
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  });
  ConnectionPool pool(keyA(), "c");
  auto first = requestAll({to(loopback(l.port()), Json{{"op", "hello"}})}, pool);
  auto second = requestAll({to(loopback(l.port()), Json{{"op", "hello"}})}, pool);
  agent.join();
  ASSERT_TRUE(first[0].reply) << first[0].error;
  ASSERT_TRUE(second[0].reply) << second[0].error;
  EXPECT_EQ((*second[0].reply)["connection"], 2);
  EXPECT_EQ(connections.load(), 2);
}

TEST(RequestAll, NoRequestsNoWork) { EXPECT_TRUE(requestAll({}, keyA(), "c").empty()); }

}  // namespace
}  // namespace rankmap::probe
