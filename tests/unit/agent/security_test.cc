// rankmapd's security findings of issue 15, each with its regression test, on loopback:
// idle and trickling HTTP clients do not starve the API, connections beyond the cap are
// refused at once, request heads are bounded, planning needs the token, secret files readable
// by others stop the agent, and the probe port refuses (and counts) unauthenticated, replayed,
// tampered and oversized frames while the agent keeps answering.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <thread>

#include <sqlite3.h>

#include "agent/daemon.h"
#include "common/build_config.h"
#include "common/files.h"
#include "common/http_client.h"
#include "probe/wire.h"
#include "tests/unit/agent/agent_test_util.h"
#include "tests/unit/common/config_util.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap::agent {
namespace {

using namespace std::chrono_literals;
using rankmap::testing::TempDir;
using Clock = std::chrono::steady_clock;

using test::kToken;

struct Agent {
  TempDir dir;
  std::string key = dir.write("key", std::string(64, 'k') + "\n");
  std::string token = dir.write("token", std::string(kToken) + "\n");
  std::unique_ptr<Daemon> d;

  explicit Agent(std::chrono::milliseconds httpTimeout = 10s, size_t maxConnections = 256) {
    d = std::make_unique<Daemon>(config(httpTimeout, maxConnections));
    d->start();
  }
  AgentConfig config(std::chrono::milliseconds httpTimeout, size_t maxConnections) const {
    AgentConfig c;
    c.name = "x";
    c.listen = {"127.0.0.1", 0};
    c.probeListen = {"127.0.0.1", 0};
    c.stateDir = dir.file("state");
    c.keyFile = key;
    c.tokenFile = token;
    c.httpTimeout = httpTimeout;
    c.maxConnections = maxConnections;
    c.probe.round.latency = {2, 20};
    c.probe.round.bandwidth.maxMs = 40;
    c.probe.fleet.connectTimeout = 500ms;
    c.probe.fleet.taskSlack = 1500ms;
    c.probe.roundTimeout = 30s;
    return c;
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", d->httpPort()); }
  HttpResponse get(const std::string& path, const std::string& token = "",
                   Deadline dl = Deadline::after(10s)) const {
    return HttpClient(url(), token).get(path, dl);
  }
  // The value of one series of GET /metrics (-1 if absent).
  double metric(const std::string& series) const {
    std::string text = get("/metrics").body;
    size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }
};

// A raw TCP connection to 127.0.0.1:port (blocking connect, then non-blocking I/O).
int rawConnect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  return fd;
}
void sendText(int fd, std::string_view s) {
  (void)::send(fd, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}
// True once the server has ended the connection (its answer, if any, is read and dropped).
bool closedByServer(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}
// Reads what the server answers until it closes (or `d`).
std::string answerOf(int fd, Deadline d) {
  std::string out;
  char buf[4096];
  while (!d.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, d.pollTimeoutMs()) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Sends one request on a fresh connection and returns the whole answer (until the server
// closes, or `d`).
std::string exchange(uint16_t port, std::string_view request, Deadline d) {
  int fd = rawConnect(port);
  sendText(fd, request);
  std::string out = answerOf(fd, d);
  ::close(fd);
  return out;
}
std::string statusLine(const std::string& answer) { return answer.substr(0, answer.find("\r\n")); }
// The value of header `name` in an answer ("" when absent).
std::string headerOf(const std::string& answer, const std::string& name) {
  size_t at = answer.find("\r\n" + name + ": ");
  if (at == std::string::npos || at > answer.find("\r\n\r\n")) return "";
  at += name.size() + 4;
  return answer.substr(at, answer.find("\r\n", at) - at);
}

// The finding: eight connections that sent a request line and one header and then nothing made
// GET /v1/health time out for as long as they stayed open (cpp-httplib's pool of 8 threads).
// Now 64 such idle connections and 64 that trickle a byte every 100 ms (so that no single read
// ever times out) are open at once, and /v1/health answers within 500 ms every time. Each of
// the 128 is closed by the agent within its request deadline (1.5 s here) plus slack, the
// trickling ones included: a deadline per request that their bytes cannot extend.
TEST(HttpSecurity, HealthAnswersWhileManyClientsAreIdleOrTrickling) {
  Agent a(1500ms);
  const uint16_t port = a.d->httpPort();
  std::vector<int> idle, trickle;
  auto opened = Clock::now();
  for (int i = 0; i < 64; ++i) {
    idle.push_back(rawConnect(port));
    sendText(idle.back(), "GET /v1/health HTTP/1.1\r\nHost: x\r\n");
    trickle.push_back(rawConnect(port));
    sendText(trickle.back(), "GET /v1/health HTTP/1.1\r\nX-Slow: ");
  }
  std::atomic<bool> stop{false};
  std::vector<Clock::duration> closedAfter(trickle.size(), Clock::duration::max());
  std::thread trickler([&] {
    while (!stop) {
      for (size_t i = 0; i < trickle.size(); ++i) {
        if (closedAfter[i] != Clock::duration::max()) continue;
        if (closedByServer(trickle[i]))
          closedAfter[i] = Clock::now() - opened;
        else
          sendText(trickle[i], "a");
      }
      std::this_thread::sleep_for(100ms);
    }
  });

  // While all 128 are open (the first deadline is 1.5 s after they opened).
  std::vector<double> ms;
  for (int i = 0; i < 8; ++i) {
    auto t0 = Clock::now();
    try {  // a timeout must fail the test, not unwind past the trickler thread
      auto h = a.get("/v1/health", "", Deadline::after(2s));
      EXPECT_EQ(h.status, 200) << h.body;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "GET /v1/health: " << e.what();
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_GE(a.metric("rankmap_http_open_connections"), 128) << "the attackers were not open";
  for (double m : ms) EXPECT_LT(m, 500) << "GET /v1/health took " << m << " ms";
  std::printf("GET /v1/health with 64 idle + 64 trickling clients open: slowest of %zu %.1f ms\n",
              ms.size(), *std::max_element(ms.begin(), ms.end()));

  // The agent closes all of them by their deadline (+1 s slack for a loaded machine).
  auto until = opened + 2500ms;
  while (Clock::now() < until) std::this_thread::sleep_for(100ms);
  stop = true;
  trickler.join();
  size_t trickleOpen = 0, idleOpen = 0;
  for (auto c : closedAfter) trickleOpen += c == Clock::duration::max();
  for (int fd : idle) idleOpen += !closedByServer(fd);
  EXPECT_EQ(trickleOpen, 0u) << "trickling clients still connected after 2.5 s";
  EXPECT_EQ(idleOpen, 0u) << "idle clients still connected after 2.5 s";
  EXPECT_GE(a.metric("rankmap_http_rejected_connections_total{reason=\"timeout\"}"), 128);
  for (int fd : idle) ::close(fd);
  for (int fd : trickle) ::close(fd);
  EXPECT_EQ(a.get("/v1/health").status, 200);
}

// Beyond http.max_connections a connection is answered 503 at once and closed (it never waits
// for a thread behind idle ones); the cap frees as connections end.
TEST(HttpSecurity, ConnectionsBeyondTheCapAreRefusedAtOnce) {
  Agent a(1000ms, 16);
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(rawConnect(a.d->httpPort()));
  // Accepted and admitted within moments (each has its own thread); then the 17th:
  std::this_thread::sleep_for(300ms);
  int extra = rawConnect(a.d->httpPort());
  auto t0 = Clock::now();
  std::string answer = answerOf(extra, Deadline::after(2s));
  auto took = Clock::now() - t0;
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  EXPECT_LT(took, 500ms);
  ::close(extra);
  for (int fd : idle) ::close(fd);
  // Closed by us: the cap frees at once, /v1/health answers.
  auto deadline = Clock::now() + 3s;
  HttpResponse h;
  while (Clock::now() < deadline && (h = a.get("/v1/health")).status != 200)
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(h.status, 200);
  EXPECT_GE(a.metric("rankmap_http_rejected_connections_total{reason=\"busy\"}"), 1);
}

// Heads are bounded before httplib parses them: header lines (431), head bytes (431), request
// target (414); bodies by http.max_body_bytes (413).
TEST(HttpSecurity, RequestHeadsAndBodiesAreBounded) {
  Agent a;
  auto ask = [&](const std::string& request) {
    return statusLine(exchange(a.d->httpPort(), request, Deadline::after(5s)));
  };
  std::string many = "GET /v1/health HTTP/1.1\r\n";
  for (int i = 0; i < 65; ++i) many += fmt::format("X-H{}: v\r\n", i);
  EXPECT_EQ(ask(many + "\r\n"), "HTTP/1.1 431 Request Header Fields Too Large");
  std::string sixtyFour = "GET /v1/health HTTP/1.1\r\n";
  for (int i = 0; i < 63; ++i) sixtyFour += fmt::format("X-H{}: v\r\n", i);
  EXPECT_EQ(ask(sixtyFour + "Connection: close\r\n\r\n"), "HTTP/1.1 200 OK");
  EXPECT_EQ(ask("GET /v1/health HTTP/1.1\r\nX-Big: " + std::string(17 << 10, 'a') + "\r\n\r\n"),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(ask("GET /v1/plan?hosts=" + std::string(8200, 'h') + " HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 414 URI Too Long");
  {
    // An oversized body that is sent is answered 413 too (the client's bytes are drained, so
    // the answer is not lost to a reset).
    int fd = rawConnect(a.d->httpPort());
    std::string req = "POST /v1/probe HTTP/1.1\r\nAuthorization: Bearer " + std::string(kToken) +
                      "\r\nContent-Length: 2000000\r\nConnection: close\r\n\r\n" +
                      std::string(2000000, ' ');
    std::thread sender([&] {
      for (size_t off = 0; off < req.size();) {
        ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
    });
    std::string out = answerOf(fd, Deadline::after(5s));
    sender.join();
    ::close(fd);
    EXPECT_EQ(out.substr(0, out.find("\r\n")), "HTTP/1.1 413 Payload Too Large");
  }
  EXPECT_GE(a.metric("rankmap_http_rejected_connections_total{reason=\"too_many_headers\"}"), 1);
  EXPECT_GE(a.metric("rankmap_http_rejected_connections_total{reason=\"head_too_large\"}"), 1);
  EXPECT_GE(a.metric("rankmap_http_rejected_connections_total{reason=\"target_too_long\"}"), 1);
}

// What clients of an HTTP API expect (issue 45): a path served with other methods answers 405
// with Allow, not 404; a POST without a body and without Content-Length (`curl -X POST`) has an
// empty body (RFC 9112), not "HTTP 400"; a declared body over http.max_body_bytes is refused at
// once, not after the request deadline (10 s here) while the agent waits for bytes.
TEST(HttpConventions, MethodsBodiesAndLengthsAsRfc9110Says) {
  Agent a;
  const uint16_t port = a.d->httpPort();
  auto ask = [&](const std::string& request) {
    return exchange(port, request + "Connection: close\r\n\r\n", Deadline::after(5s));
  };
  std::string post = ask("POST /v1/health HTTP/1.1\r\n");
  EXPECT_EQ(statusLine(post), "HTTP/1.1 405 Method Not Allowed") << post;
  EXPECT_EQ(headerOf(post, "Allow"), "GET, HEAD") << post;
  EXPECT_NE(post.find("not allowed on /v1/health"), std::string::npos) << post;
  std::string get = ask("GET /v1/probe HTTP/1.1\r\n");
  EXPECT_EQ(statusLine(get), "HTTP/1.1 405 Method Not Allowed") << get;
  EXPECT_EQ(headerOf(get, "Allow"), "POST") << get;
  std::string del = ask("DELETE /v1/observations HTTP/1.1\r\n");
  EXPECT_EQ(headerOf(del, "Allow"), "POST, GET, HEAD") << del;
  EXPECT_EQ(statusLine(ask("GET /v1/rounds/12 HTTP/1.1\r\n")), "HTTP/1.1 404 Not Found");
  std::string rounds = ask("PUT /v1/rounds/12 HTTP/1.1\r\nContent-Length: 0\r\n");
  EXPECT_EQ(headerOf(rounds, "Allow"), "GET, HEAD") << rounds;
  EXPECT_EQ(statusLine(ask("POST /v1/nothing-here HTTP/1.1\r\n")), "HTTP/1.1 404 Not Found");
  // A misspelt query parameter is an error naming it, not a default taken quietly.
  std::string typo = ask("GET /v1/plan?hosts=a,b&ranks_per_hosts=4 HTTP/1.1\r\n");
  EXPECT_EQ(statusLine(typo), "HTTP/1.1 400 Bad Request") << typo;
  EXPECT_NE(typo.find("query parameter ranks_per_hosts: unknown (expected hosts, ranks_per_host, mesh, traffic)"),
            std::string::npos)
      << typo;
  EXPECT_EQ(statusLine(ask("GET /v1/rounds?limt=3 HTTP/1.1\r\n")), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(statusLine(ask("GET /v1/rounds?limit=3 HTTP/1.1\r\n")), "HTTP/1.1 200 OK");

  // No body, no length: answered as an empty body is (the agent has no hosts to probe here).
  const std::string auth = fmt::format("Authorization: Bearer {}\r\n", kToken);
  std::string bare = ask("POST /v1/probe HTTP/1.1\r\n" + auth);
  std::string empty = ask("POST /v1/probe HTTP/1.1\r\n" + auth + "Content-Length: 0\r\n");
  EXPECT_EQ(statusLine(bare), statusLine(empty)) << bare << "\n" << empty;
  EXPECT_EQ(bare.find("HTTP 400"), std::string::npos) << bare;
  EXPECT_NE(bare.find("no hosts to probe"), std::string::npos) << bare;

  // A declared body over the limit: 413 at once, with nothing of the body sent.
  const auto t0 = Clock::now();
  std::string big = exchange(
      port, "POST /v1/probe HTTP/1.1\r\n" + auth + "Content-Length: 99999999999\r\n\r\n",
      Deadline::after(5s));
  EXPECT_EQ(statusLine(big), "HTTP/1.1 413 Payload Too Large") << big;
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_GE(a.metric("rankmap_http_rejected_connections_total{reason=\"body_too_large\"}"), 1);
}

// Liveness and readiness apart: /v1/health answers 200 whatever the state; /v1/ready answers 503
// naming each reason while there is no topology, the store cannot be written (here: another
// connection holds its write lock, as a second rankmapd would), or the last round failed.
TEST(HttpConventions, ReadinessSaysWhyNotAndHealthStaysCheap) {
  Agent a;
  auto ready = [&] { return a.get("/v1/ready"); };
  EXPECT_EQ(a.get("/v1/health").status, 200);
  HttpResponse r = ready();
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("no topology yet"), std::string::npos) << r.body;

  Topology t = Topology::load(std::string(RANKMAP_TEST_DATA_DIR) +
                              "/topologies/testbed_8vm_2rack.json");
  t.version = 7;
  ASSERT_TRUE(a.d->store().putTopology(t));
  r = ready();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"topology_version\": 7"), std::string::npos) << r.body;

  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(a.d->store().path().c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  const auto t0 = Clock::now();
  r = ready();
  EXPECT_LT(Clock::now() - t0, 2s) << "readiness waited for the lock";
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("the store cannot be written"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("locked"), std::string::npos) << r.body;
  EXPECT_EQ(a.get("/v1/health").status, 200);
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  EXPECT_EQ(ready().status, 200);

  // A round over hosts that do not answer fails: not ready, naming it, until a later one works.
  HttpResponse failed =
      HttpClient(a.url(), kToken)
          .post("/v1/probe",
                R"({"hosts": ["p 127.0.0.1:1", "q 127.0.0.1:2"], "wait": true})",
                Deadline::after(60s));
  EXPECT_EQ(failed.status, 200) << failed.body;
  EXPECT_NE(failed.body.find("\"failed\""), std::string::npos) << failed.body;
  r = ready();
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("failed: "), std::string::npos) << r.body;
  EXPECT_EQ(a.get("/v1/health").status, 200);
}

// Two agents on one state dir: the second would mark the first's running rounds failed and
// interleave its writes. It is refused, naming the holder; once the first is gone it starts.
TEST(HttpConventions, ASecondAgentOnTheSameStateDirIsRefused) {
  auto a = std::make_unique<Agent>();
  AgentConfig c = a->config(10s, 256);
  try {
    Daemon second(c);
    FAIL() << "a second agent started on " << c.stateDir;
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("in use by another rankmapd (pid {})",
                                                     ::getpid())),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(a->get("/v1/health").status, 200);
  a->d.reset();
  Daemon next(c);  // the lock went with the first
  EXPECT_NO_THROW(next.start());
}

// What an operator's dashboards expect of /metrics (issue 45): the build, the process's own
// series, and when the last probe round that did not fail ended (absent before one has).
TEST(HttpConventions, MetricsCarryBuildProcessAndLastRound) {
  Agent a;
  std::string text = a.get("/metrics").body;
  EXPECT_NE(text.find(fmt::format("rankmap_build_info{{version=\"{}\"}} 1", RANKMAP_VERSION)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter"), std::string::npos) << text;
  EXPECT_GT(a.metric("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(a.metric("process_open_fds"), 3);
  EXPECT_GT(a.metric("process_max_fds"), 0);
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(a.metric("process_start_time_seconds"), now, 120);
  EXPECT_EQ(a.metric("rankmap_last_successful_round_timestamp_seconds"), -1);
}

// Range headers are ignored: every answer is a whole JSON document (tests/fuzz: httplib cut a
// 404's JSON to `Range: bytes=0-10`, with Content-Range and the JSON content type).
TEST(HttpSecurity, RangeHeadersAreIgnored) {
  Agent a;
  for (const char* target : {"/v1/health", "/v1/no-such-endpoint"})
    for (const char* range : {"bytes=0-10", "bytes=0-10,20-", "bytes=-3", "bytes=0-10,x"}) {
      int fd = rawConnect(a.d->httpPort());
      sendText(fd, fmt::format("GET {} HTTP/1.1\r\nRange: {}\r\nConnection: close\r\n\r\n", target,
                               range));
      std::string out = answerOf(fd, Deadline::after(5s));
      ::close(fd);
      size_t head = out.find("\r\n\r\n");
      ASSERT_NE(head, std::string::npos) << out;
      EXPECT_EQ(out.find("Content-Range"), std::string::npos) << out;
      EXPECT_EQ(out.find(" 206 "), std::string::npos) << out;
      EXPECT_TRUE(Json::accept(out.substr(head + 4))) << target << " " << range << "\n" << out;
    }
}

// GET /v1/plan ran the planner for anyone who could reach the port. Now making a plan needs the
// bearer token; a plan already made for the same hosts, options and topology version is served
// to anyone (a store read, no planning).
TEST(HttpSecurity, PlanningNeedsTheTokenAndMadePlansDoNot) {
  Agent a;
  AgentConfig yc = a.config(10s, 256);
  yc.name = "y";
  yc.stateDir = a.dir.file("state-y");
  Daemon y(yc);
  y.start();
  Json body = {{"hosts",
                {{{"name", "x"}, {"address", fmt::format("127.0.0.1:{}", a.d->probePort())}},
                 {{"name", "y"}, {"address", fmt::format("127.0.0.1:{}", y.probePort())}}}},
               {"wait", true}};
  ASSERT_EQ(HttpClient(a.url(), kToken).post("/v1/probe", body.dump(), Deadline::after(60s)).status,
            200);
  auto none = a.get("/v1/plan?hosts=y,x");
  EXPECT_EQ(none.status, 401) << none.body;
  EXPECT_NE(none.errorText().find("planning"), std::string::npos) << none.body;
  EXPECT_EQ(a.get("/v1/plan?hosts=y,x", "wrong-token-0123456789").status, 401);
  auto made = a.get("/v1/plan?hosts=y,x", kToken);
  ASSERT_EQ(made.status, 200) << made.body;
  auto again = a.get("/v1/plan?hosts=y,x");
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.body, made.body);
  // Other options are another plan: the token again.
  EXPECT_EQ(a.get("/v1/plan?hosts=y,x&ranks_per_host=2").status, 401);
  // More hosts than the topology has: refused before any lookup.
  EXPECT_EQ(a.get("/v1/plan?hosts=x,y,x").status, 400);
  y.stop();
}

// Refused requests are answered {error, code, reason} and logged with the client's address, a
// line per kind every 10 s: a wrong token (401) and a declared body over the limit (413), each
// sent three times.
TEST(HttpSecurity, RefusedRequestsAreLoggedRateLimited) {
  TempDir logDir;
  const std::string logFile = logDir.file("log");
  log::configure(rankmap::testing::configFrom({{"RANKMAP_LOG_FILE", logFile}}));
  {
    Agent a;
    for (int i = 0; i < 3; ++i) {
      // Each error answer names its code and reason beside the message, from a handler and
      // from the connection layer alike.
      auto wrong = HttpClient(a.url(), "wrong-token-0123456789")
                       .post("/v1/probe", "{}", Deadline::after(5s));
      EXPECT_EQ(wrong.status, 401);
      EXPECT_EQ(parseJson(wrong.body, "401 body"),
                (Json{{"error", "writes refused: wrong bearer token"},
                      {"code", 401},
                      {"reason", "Unauthorized"}}))
          << wrong.body;
      std::string out = exchange(a.d->httpPort(),
                                 "POST /v1/probe HTTP/1.1\r\nContent-Length: 99999999999\r\n"
                                 "Connection: close\r\n\r\n",
                                 Deadline::after(5s));
      EXPECT_EQ(out.rfind("HTTP/1.1 413 Payload Too Large", 0), 0u) << out;
      const Json big = parseJson(out.substr(out.find("\r\n\r\n") + 4), "413 body");
      EXPECT_EQ(big.value("code", 0), 413) << out;
      EXPECT_EQ(big.value("reason", ""), "Payload Too Large") << out;
    }
  }
  log::configure(Config());
  size_t wrongToken = 0, tooLarge = 0;
  std::string all, line;
  for (std::istringstream in(readFile(logFile, 1 << 20)); std::getline(in, line);) {
    all += line + "\n";
    wrongToken += line.find("HTTP 401 to 127.0.0.1 for POST /v1/probe: ") != std::string::npos &&
                  line.find("wrong bearer token") != std::string::npos;
    tooLarge += line.find("HTTP 413 to 127.0.0.1: request body too large") != std::string::npos;
  }
  EXPECT_EQ(wrongToken, 1u) << all;
  EXPECT_EQ(tooLarge, 1u) << all;
}

// rankmapd started with a token file and a probe key that every local user could read (0644).
// Now it refuses to start, naming the file, its mode, what is expected and the fix.
TEST(HttpSecurity, SecretFilesOthersCanReadStopTheAgent) {
  TempDir dir;
  AgentConfig c;
  c.name = "x";
  c.listen = {"127.0.0.1", 0};
  c.probeListen = {"127.0.0.1", 0};
  c.stateDir = dir.file("state");
  c.keyFile = dir.write("key", std::string(64, 'k'));
  c.tokenFile = dir.write("token", kToken);
  for (const std::string* f : {&c.keyFile, &c.tokenFile}) {
    ASSERT_EQ(::chmod(f->c_str(), 0644), 0);
    try {
      Daemon d(c);
      ADD_FAILURE() << "rankmapd started with " << *f << " at mode 0644";
    } catch (const InvalidInput& e) {
      std::string m = e.what();
      EXPECT_NE(m.find(*f + ": mode 0644"), std::string::npos) << m;
      EXPECT_NE(m.find("chmod 600 " + *f), std::string::npos) << m;
    }
    ASSERT_EQ(::chmod(f->c_str(), 0600), 0);
  }
  EXPECT_NO_THROW(Daemon{c});
}

// The probe port (0.0.0.0 in production) accepts nothing without the shared key. Each kind of
// bad frame is refused, counted by reason in /metrics, and the agent keeps answering.
TEST(ProbeSecurity, BadFramesAreRefusedCountedAndTheAgentStaysUp) {
  Agent a;
  const probe::Endpoint ep{"127.0.0.1", a.d->probePort()};
  probe::ProbeKey key = probe::ProbeKey::fromBytes(std::string(64, 'k'));
  probe::ProbeKey wrong = probe::ProbeKey::fromBytes(std::string(64, 'w'));
  auto refusedSilently = [&](const std::string& bytes) {
    int fd = rawConnect(ep.port);
    sendText(fd, bytes);
    std::string answer = answerOf(fd, Deadline::after(5s));
    ::close(fd);
    return answer.empty();  // a rejected Hello is closed without a word
  };
  auto count = [&](const char* reason) {
    return a.metric(fmt::format("rankmap_probe_auth_rejections_total{{reason=\"{}\"}}", reason));
  };
  // Unauthenticated: a Hello under another key; bytes that are no frame at all.
  auto c1 = probe::ChannelState::client(wrong, ep.text());
  EXPECT_TRUE(refusedSilently(c1.hello("intruder")));
  EXPECT_TRUE(refusedSilently(std::string(64, 'G')));
  // Tampered: a Hello under the right key with one payload byte flipped.
  auto c2 = probe::ChannelState::client(key, ep.text());
  std::string tampered = c2.hello("tamperer");
  tampered[probe::kHeaderBytes + 5] ^= 0x01;
  EXPECT_TRUE(refusedSilently(tampered));
  // Replayed: a valid Hello is answered once; the same bytes again are refused.
  auto c3 = probe::ChannelState::client(key, ep.text());
  std::string hello = c3.hello("recorded");
  {
    int fd = rawConnect(ep.port);
    sendText(fd, hello);
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 5000), 1) << "the genuine Hello was not answered";
    ::close(fd);
  }
  EXPECT_TRUE(refusedSilently(hello));
  // Oversized: a header announcing a 4 GiB payload, refused before anything is allocated.
  std::string huge = hello.substr(0, probe::kHeaderBytes);
  for (size_t i = 16; i < 20; ++i) huge[i] = '\xff';
  EXPECT_TRUE(refusedSilently(huge));

  auto deadline = Clock::now() + 5s;
  while (Clock::now() < deadline &&
         (count("bad_mac") < 2 || count("malformed") < 2 || count("replay") < 1))
    std::this_thread::sleep_for(20ms);
  EXPECT_GE(count("bad_mac"), 2);    // wrong key, tampered
  EXPECT_GE(count("malformed"), 2);  // no frame, oversized
  EXPECT_GE(count("replay"), 1);
  // Still serving: HTTP and an authenticated probe.
  EXPECT_EQ(a.get("/v1/health").status, 200);
  auto ch = probe::Channel::connect(ep, key, "friend", Deadline::after(5s));
  ch.send(probe::MsgType::kPing, std::string(8, '\1'), Deadline::after(5s));
  EXPECT_EQ(ch.expect(probe::MsgType::kPong, Deadline::after(5s)), std::string(8, '\1'));
}

}  // namespace
}  // namespace rankmap::agent
