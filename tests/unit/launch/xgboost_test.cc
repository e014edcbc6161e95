// XGBoost: the Rabit link map, worker placement in plan order, the C++ tracker against
// protocol-speaking workers (threads here; real xgboost workers when python3-xgboost is
// installed), and its deadlines.
#include "launch/xgboost.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "launch/xgboost_tracker.h"

namespace rankmap::launch {
namespace {

using namespace std::chrono_literals;

class LinkMapTest : public ::testing::TestWithParam<int> {};

TEST_P(LinkMapTest, RingIsRankOrderAndTreeIsASpanningTree) {
  int n = GetParam();
  auto m = makeRabitLinkMap(n);
  ASSERT_EQ(m.tree.size(), static_cast<size_t>(n));
  ASSERT_EQ(m.ring.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(m.ring[r].first, (r + n - 1) % n);
    EXPECT_EQ(m.ring[r].second, (r + 1) % n);
  }
  // Symmetric adjacency, n-1 edges, parent is a neighbour, exactly one root, connected.
  size_t degree = 0;
  int roots = 0;
  for (int r = 0; r < n; ++r) {
    degree += m.tree[r].size();
    for (int v : m.tree[r]) {
      ASSERT_GE(v, 0);
      ASSERT_LT(v, n);
      auto& back = m.tree[v];
      EXPECT_NE(std::find(back.begin(), back.end(), r), back.end()) << r << "-" << v;
    }
    if (m.parent[r] == -1)
      ++roots;
    else
      EXPECT_NE(std::find(m.tree[r].begin(), m.tree[r].end(), m.parent[r]), m.tree[r].end());
  }
  EXPECT_EQ(degree, 2u * (n - 1));
  EXPECT_EQ(roots, 1);
  EXPECT_EQ(m.parent[0], -1);
  std::set<int> seen{0};
  std::vector<int> stack{0};
  while (!stack.empty()) {
    int r = stack.back();
    stack.pop_back();
    for (int v : m.tree[r])
      if (seen.insert(v).second) stack.push_back(v);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
}

INSTANTIATE_TEST_SUITE_P(Sizes, LinkMapTest, ::testing::Values(1, 2, 3, 5, 7, 8, 13, 16));

TEST(XgboostTest, TaskIdsSortInRankOrder) {
  EXPECT_EQ(xgboostTaskId(3, 8), "rankmap-3");
  EXPECT_EQ(xgboostTaskId(3, 16), "rankmap-03");
  std::vector<std::string> ids;
  for (int r = 0; r < 120; ++r) ids.push_back(xgboostTaskId(r, 120));
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
}

Plan threeHostPlan() {
  Plan p = Plan::identity({"a", "b", "c"});
  p.order = {"c", "a", "b"};
  p.derivePermutation();
  p.seal();
  return p;
}

TEST(XgboostTest, PlacesWorkersInPlanOrder) {
  std::string note;
  auto w = placeXgboostWorkers(6, {"a", "b", "c"}, threeHostPlan(), "", {"plan.json"}, {}, note);
  ASSERT_EQ(w.size(), 6u);
  std::vector<int> ranks;
  for (const auto& x : w) ranks.push_back(x.rank);
  // a -> position 1, b -> 2, c -> 0; two workers each, contiguous.
  EXPECT_EQ(ranks, (std::vector<int>{2, 3, 4, 5, 0, 1}));
  EXPECT_EQ(w[4].host, "c");
  for (const auto& x : w) EXPECT_EQ(x.taskId, xgboostTaskId(x.rank, 6));
  EXPECT_NE(note.find("plan order"), std::string::npos) << note;

  // Hosts given by address are matched through the topology's addresses.
  std::vector<Host> known = {{"a", "10.0.0.1"}, {"b", "10.0.0.2"}, {"c", "10.0.0.3"}};
  w = placeXgboostWorkers(3, {"10.0.0.1", "10.0.0.2", "10.0.0.3"}, threeHostPlan(), "",
                          {"plan.json"}, known, note);
  EXPECT_EQ(w[2].rank, 0);
}

TEST(XgboostTest, PlanThatDoesNotCoverTheHostsGivesIdentityWithAWarning) {
  std::string note;
  auto w = placeXgboostWorkers(3, {"a", "b", "zz"}, threeHostPlan(), "", {"plan.json"}, {}, note);
  for (const auto& x : w) EXPECT_EQ(x.rank, x.index);
  EXPECT_NE(note.find("warning"), std::string::npos) << note;
  EXPECT_NE(note.find("zz"), std::string::npos) << note;

  w = placeXgboostWorkers(2, {}, std::nullopt, "no file", {"plan.json"}, {}, note);
  EXPECT_EQ(w[1].rank, 1);
  EXPECT_TRUE(w[1].host.empty());
  EXPECT_THROW(placeXgboostWorkers(4, {"a", "b", "c"}, threeHostPlan(), "", {"p"}, {}, note),
               InvalidInput);
}

TEST(XgboostTest, WorkerCommandCarriesTheTrackerEnvironment) {
  XgboostOptions o;
  o.rsh = {"/run/x/rsh-agent"};
  XgboostWorker w{1, "vm1", 4, "rankmap-4"};
  auto argv =
      xgboostWorkerCommand(w, 8, o, "10.0.0.1", 9091, {"python3", "train.py", "a b"}, "/w d");
  ASSERT_EQ(argv.size(), 3u);
  EXPECT_EQ(argv[0], "/run/x/rsh-agent");
  EXPECT_EQ(argv[1], "vm1");
  EXPECT_EQ(argv[2],
            "cd '/w d' 2>/dev/null; exec env DMLC_TASK_ID=rankmap-4 "
            "DMLC_TRACKER_URI=10.0.0.1 DMLC_TRACKER_PORT=9091 DMLC_NUM_WORKER=8 "
            "python3 train.py 'a b'");
  w.host.clear();
  argv = xgboostWorkerCommand(w, 8, o, "127.0.0.1", 1, {"prog"}, "/");
  EXPECT_EQ(argv.front(), "env");
  EXPECT_EQ(argv.back(), "prog");
}

// ---- A worker that speaks the Rabit protocol (the worker side of tracker.py), on threads.

int connectTo(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}
void sendAllOrThrow(int fd, const void* p, size_t n) {
  if (send(fd, p, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n))
    throw std::runtime_error("send failed");
}
void sendInt(int fd, int32_t v) { sendAllOrThrow(fd, &v, 4); }
int32_t recvInt(int fd) {
  int32_t v = 0;
  size_t got = 0;
  while (got < 4) {
    ssize_t r = recv(fd, reinterpret_cast<char*>(&v) + got, 4 - got, 0);
    if (r <= 0) throw std::runtime_error("recv failed");
    got += static_cast<size_t>(r);
  }
  return v;
}
void sendStr(int fd, const std::string& s) {
  sendInt(fd, static_cast<int32_t>(s.size()));
  if (!s.empty()) sendAllOrThrow(fd, s.data(), s.size());
}
std::string recvStr(int fd) {
  int32_t n = recvInt(fd);
  std::string s(static_cast<size_t>(n), '\0');
  size_t got = 0;
  while (got < s.size()) {
    ssize_t r = recv(fd, s.data() + got, s.size() - got, 0);
    if (r <= 0) throw std::runtime_error("recv failed");
    got += static_cast<size_t>(r);
  }
  return s;
}
int openTracker(uint16_t port, int32_t rank, const std::string& task, const std::string& cmd) {
  int fd = connectTo(port);
  if (fd < 0) throw std::runtime_error("connect to tracker failed");
  sendInt(fd, kRabitMagic);
  if (recvInt(fd) != kRabitMagic) throw std::runtime_error("bad magic echo");
  sendInt(fd, rank);
  sendInt(fd, -1);
  sendStr(fd, task);
  sendStr(fd, cmd);
  return fd;
}

struct WorkerResult {
  int rank = -1;
  int world = 0;
  std::set<int> expectedLinks;  // tree neighbours + ring prev/next, as the tracker sent them
  std::set<int> links;          // peers actually connected (rank exchanged on each link)
};

// One worker: start, link negotiation (connect to the peers the tracker names, accept the
// rest, exchanging ranks on every link), a print, shutdown.
WorkerResult runFakeWorker(uint16_t trackerPort, const std::string& task) {
  WorkerResult res;
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(lfd, 16);
  socklen_t len = sizeof a;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  int myPort = ntohs(a.sin_port);

  int t = openTracker(trackerPort, -1, task, "start");
  res.rank = recvInt(t);
  recvInt(t);  // parent
  res.world = recvInt(t);
  int nTree = recvInt(t);
  for (int i = 0; i < nTree; ++i) res.expectedLinks.insert(recvInt(t));
  int prev = recvInt(t), next = recvInt(t);
  if (prev != -1) res.expectedLinks.insert(prev);
  if (next != -1) res.expectedLinks.insert(next);
  sendInt(t, 0);  // no good links yet
  int nConnect = recvInt(t);
  int nAccept = recvInt(t);
  for (int i = 0; i < nConnect; ++i) {
    std::string host = recvStr(t);
    int port = recvInt(t);
    int peerRank = recvInt(t);
    int c = connectTo(static_cast<uint16_t>(port));
    if (c < 0) throw std::runtime_error("peer connect failed");
    sendInt(c, res.rank);
    if (recvInt(c) != peerRank) throw std::runtime_error("peer rank mismatch");
    res.links.insert(peerRank);
    close(c);
  }
  sendInt(t, 0);  // no errors
  sendInt(t, myPort);
  close(t);
  for (int i = 0; i < nAccept; ++i) {
    int c = accept(lfd, nullptr, nullptr);
    int peer = recvInt(c);
    sendInt(c, res.rank);
    res.links.insert(peer);
    close(c);
  }
  close(lfd);
  int p = openTracker(trackerPort, res.rank, task, "print");
  sendStr(p, "hello from " + task);
  close(p);
  close(openTracker(trackerPort, res.rank, task, "shutdown"));
  return res;
}

TEST(RabitTrackerTest, RanksByTaskIdAndLinksEveryNeighbour) {
  for (int n : {1, 2, 3, 5, 8}) {
    RabitTracker tracker("127.0.0.1", 0, n);
    std::vector<WorkerResult> results(n);
    std::vector<std::string> tasks;
    for (int i = 0; i < n; ++i) tasks.push_back(xgboostTaskId(n - 1 - i, n));  // reverse order
    std::vector<std::thread> threads;
    std::mutex mu;
    std::string error;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        try {
          results[i] = runFakeWorker(tracker.port(), tasks[i]);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          error = e.what();
        }
      });
    std::vector<std::string> printed;
    tracker.serve(Deadline::after(20s), 20s, {},
                  [&](const std::string& m) { printed.push_back(m); });
    for (auto& t : threads) t.join();
    ASSERT_EQ(error, "") << "n=" << n;
    EXPECT_EQ(printed.size(), static_cast<size_t>(n));
    auto links = makeRabitLinkMap(n);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(results[i].rank, n - 1 - i) << "task ids decide the rank";
      EXPECT_EQ(results[i].world, n);
      EXPECT_EQ(results[i].links, results[i].expectedLinks) << "n=" << n << " worker " << i;
      if (n > 2) {
        int r = results[i].rank;
        EXPECT_TRUE(results[i].links.count((r + 1) % n)) << "ring next";
        EXPECT_TRUE(results[i].links.count((r + n - 1) % n)) << "ring prev";
      }
      EXPECT_EQ(tracker.ranks().at(tasks[i]), results[i].rank);
    }
  }
}

TEST(RabitTrackerTest, MissingWorkerIsATimeoutNotAHang) {
  RabitTracker tracker("127.0.0.1", 0, 2);
  std::thread lone([&] {
    try {
      int t = openTracker(tracker.port(), -1, "rankmap-0", "start");
      // Blocks until the tracker gives up (it then closes the connection).
      recvInt(t);
      close(t);
    } catch (const std::exception&) {
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  try {
    tracker.serve(Deadline::after(400ms), 5s, {}, {});
    FAIL() << "expected a TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("1 of 2 connected"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  lone.join();  // serve() closed the lone worker's connection when it gave up
}

TEST(RabitTrackerTest, StalledWorkerIsATimeout) {
  RabitTracker tracker("127.0.0.1", 0, 1);
  int fd = connectTo(tracker.port());
  ASSERT_GE(fd, 0);
  sendInt(fd, kRabitMagic);  // then silence
  EXPECT_THROW(tracker.serve(Deadline::after(10s), 300ms, {}, {}), TimeoutError);
  close(fd);
}

TEST(RabitTrackerTest, OutOfRangeRankFromTheWireIsAPeerError) {
  // A rank is an index into the link map: anything but -1 (unknown) or 0..n-1 is refused.
  for (int bad : {-2, -100, 3, 1 << 30}) {
    RabitTracker tracker("127.0.0.1", 0, 3);
    std::thread worker([&] {
      try {
        int t = openTracker(tracker.port(), bad, "rankmap-0", "start");
        close(t);
      } catch (const std::exception&) {
      }
    });
    try {
      tracker.serve(Deadline::after(10s), 5s, {}, {});
      ADD_FAILURE() << "expected a PeerError for rank " << bad;
    } catch (const PeerError& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("rank {} from", bad)), std::string::npos)
          << e.what();
    }
    worker.join();
  }
}

TEST(RabitTrackerTest, BindAddressMustBeNumeric) {
  try {
    RabitTracker tracker("tracker.example", 0, 2);
    FAIL() << "expected InvalidInput";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("tracker.example"), std::string::npos) << e.what();
  }
}

TEST(RabitTrackerTest, TickCanAbort) {
  RabitTracker tracker("127.0.0.1", 0, 3);
  int calls = 0;
  EXPECT_THROW(tracker.serve(Deadline::after(10s), 1s,
                             [&] {
                               if (++calls == 3) throw PeerError("worker died");
                             },
                             {}),
               PeerError);
}

// ---- A worker that speaks xgboost 2.1+'s protocol (src/collective/protocol.h and comm.cc of
// xgboost 3.2: the messages as its JsonWriter writes them, compact with sorted keys), on threads.

// Connects, exchanges the magic (the worker sends first, as proto::Magic::Verify does) and sends
// the connect message and a command.
int openCollective(uint16_t port, int32_t rank, int32_t world, const std::string& task,
                   const std::string& cmd) {
  int fd = connectTo(port);
  if (fd < 0) throw std::runtime_error("connect to tracker failed");
  sendInt(fd, kRabitMagic);
  if (recvInt(fd) != kRabitMagic) throw std::runtime_error("bad magic echo");
  sendStr(fd, fmt::format(R"({{"rank":{},"task_id":"{}","world_size":{}}})", rank, task, world));
  sendStr(fd, cmd);
  return fd;
}

int listenLoopback(int& port) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(lfd, 16);
  socklen_t len = sizeof a;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return lfd;
}

// Reads `"key":<integer>` or `"key":"<string>"` from a compact JSON object (the tracker's replies).
std::string jsonField(const std::string& text, const std::string& key) {
  auto at = text.find("\"" + key + "\":");
  if (at == std::string::npos) throw std::runtime_error("no " + key + " in " + text);
  at += key.size() + 3;
  if (text[at] == '"') return text.substr(at + 1, text.find('"', at + 1) - at - 1);
  return text.substr(at, text.find_first_of(",}", at) - at);
}

struct CollectiveResult {
  int rank = -1;
  int world = 0;
  int nextRank = -1;  // the rank of the peer the tracker named, as that peer told us
  int prevRank = -1;  // the rank of the peer that connected to us
  std::string nextHost;
};

// One worker: start (port and error port), the world size, the ring neighbour; then, as
// comm.cc's ConnectWorkers, connect to the next and accept the previous, exchanging ranks; a
// print; shutdown.
CollectiveResult runCollectiveWorker(uint16_t trackerPort, const std::string& task) {
  CollectiveResult res;
  int myPort = 0, errPort = 0;
  int lfd = listenLoopback(myPort);
  int efd = listenLoopback(errPort);
  int t = openCollective(trackerPort, 0, -1, task,
                         fmt::format(R"({{"cmd":1,"error_port":{},"port":{}}})", errPort, myPort));
  res.world = std::stoi(jsonField(recvStr(t), "world_size"));
  std::string next = recvStr(t);
  close(t);
  int nextTold = std::stoi(jsonField(next, "rank"));
  res.rank = (nextTold + res.world - 1) % res.world;  // comm.cc: BootstrapPrev(next.rank)
  res.nextHost = jsonField(next, "host");
  int c = connectTo(static_cast<uint16_t>(std::stoi(jsonField(next, "port"))));
  if (c < 0) throw std::runtime_error("ring next connect failed");
  sendInt(c, res.rank);
  int a = accept(lfd, nullptr, nullptr);
  sendInt(a, res.rank);
  res.nextRank = recvInt(c);
  res.prevRank = recvInt(a);
  close(c);
  close(a);
  close(lfd);
  close(efd);
  close(openCollective(trackerPort, res.rank, res.world, task,
                       R"({"cmd":4,"msg":"hello from )" + task + R"(\n"})"));
  close(openCollective(trackerPort, res.rank, res.world, task, R"({"cmd":2})"));
  return res;
}

TEST(RabitTrackerTest, CollectiveWorkersRankedByTaskIdRingInRankOrder) {
  for (int n : {1, 2, 3, 5, 8}) {
    RabitTracker tracker("127.0.0.1", 0, n);
    std::vector<CollectiveResult> results(n);
    std::vector<std::string> tasks;
    for (int i = 0; i < n; ++i) tasks.push_back(xgboostTaskId(n - 1 - i, n));  // reverse order
    std::vector<std::thread> threads;
    std::mutex mu;
    std::string error;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        try {
          results[i] = runCollectiveWorker(tracker.port(), tasks[i]);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          error = e.what();
        }
      });
    std::vector<std::string> printed;
    tracker.serve(Deadline::after(20s), 20s, {},
                  [&](const std::string& m) { printed.push_back(m); });
    for (auto& t : threads) t.join();
    ASSERT_EQ(error, "") << "n=" << n;
    ASSERT_TRUE(tracker.protocol());
    EXPECT_EQ(*tracker.protocol(), TrackerProtocol::kCollective);
    ASSERT_EQ(printed.size(), static_cast<size_t>(n));
    EXPECT_EQ(printed[0].rfind("hello from rankmap-", 0), 0u) << printed[0];
    for (int i = 0; i < n; ++i) {
      int r = results[i].rank;
      EXPECT_EQ(r, n - 1 - i) << "task ids decide the rank";
      EXPECT_EQ(results[i].world, n);
      EXPECT_EQ(results[i].nextRank, (r + 1) % n) << "the peer named is rank r+1";
      EXPECT_EQ(results[i].prevRank, (r + n - 1) % n);
      EXPECT_EQ(results[i].nextHost, "127.0.0.1");
      EXPECT_EQ(tracker.ranks().at(tasks[i]), r);
    }
  }
}

// Runs a one-worker tracker against `send` (the worker's side) and returns serve()'s PeerError.
std::string collectivePeerError(int workers, const std::function<void(uint16_t)>& send) {
  RabitTracker tracker("127.0.0.1", 0, workers);
  std::thread worker([&] {
    try {
      send(tracker.port());
    } catch (const std::exception&) {
    }
  });
  std::string what;
  try {
    tracker.serve(Deadline::after(10s), 5s, {}, {});
    ADD_FAILURE() << "expected a PeerError";
  } catch (const PeerError& e) {
    what = e.what();
  }
  worker.join();
  return what;
}

TEST(RabitTrackerTest, CollectiveMessagesThatBreakTheProtocolNameTheField) {
  auto sendCmd = [](const std::string& cmd) {
    return [cmd](uint16_t port) { close(openCollective(port, 0, -1, "rankmap-0", cmd)); };
  };
  std::string e = collectivePeerError(2, sendCmd(R"({"cmd":9})"));
  EXPECT_NE(e.find("command message"), std::string::npos) << e;
  EXPECT_NE(e.find("cmd"), std::string::npos) << e;
  EXPECT_NE(e.find("1 (start)"), std::string::npos) << e;

  e = collectivePeerError(2, sendCmd(R"({"cmd":1,"error_port":5,"port":0})"));
  EXPECT_NE(e.find("port"), std::string::npos) << e;

  e = collectivePeerError(2, sendCmd(R"({"cmd":1,"port":5})"));
  EXPECT_NE(e.find("error_port"), std::string::npos) << e;

  e = collectivePeerError(2, sendCmd(R"({"cmd":1,"error_port":5,"port":)"));
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;

  // The connect message: a rank outside -1..n-1, a task id that is not a string.
  e = collectivePeerError(2, [](uint16_t port) { close(openCollective(port, 7, -1, "t", "{}")); });
  EXPECT_NE(e.find("rank"), std::string::npos) << e;
  e = collectivePeerError(2, [](uint16_t port) {
    int fd = connectTo(port);
    sendInt(fd, kRabitMagic);
    recvInt(fd);
    sendStr(fd, R"({"rank":0,"task_id":3,"world_size":-1})");
    sendStr(fd, R"({"cmd":1,"error_port":5,"port":6})");
    close(fd);
  });
  EXPECT_NE(e.find("task_id"), std::string::npos) << e;

  // A start that is not a first start (world size already known).
  e = collectivePeerError(2, [](uint16_t port) {
    close(openCollective(port, 0, 2, "rankmap-0", R"({"cmd":1,"error_port":5,"port":6})"));
  });
  EXPECT_NE(e.find("world_size 2"), std::string::npos) << e;
}

TEST(RabitTrackerTest, CollectiveErrorCommandEndsServeNamingTheWorker) {
  std::string e = collectivePeerError(3, [](uint16_t port) {
    close(openCollective(port, 1, 3, "rankmap-1",
                         R"({"cmd":3,"code":104,"msg":"Connection reset by peer"})"));
  });
  EXPECT_NE(e.find("task rankmap-1"), std::string::npos) << e;
  EXPECT_NE(e.find("code 104"), std::string::npos) << e;
  EXPECT_NE(e.find("Connection reset by peer"), std::string::npos) << e;
}

TEST(RabitTrackerTest, WorkersOfBothProtocolsInOneJobAreAPeerError) {
  RabitTracker tracker("127.0.0.1", 0, 2);
  std::thread workers([&] {
    try {
      int a = openTracker(tracker.port(), -1, "rankmap-0", "start");  // 1.x
      int b = openCollective(tracker.port(), 0, -1, "rankmap-1",
                             R"({"cmd":1,"error_port":5,"port":6})");
      recvInt(a);  // returns when the tracker gives up and closes
      close(a);
      close(b);
    } catch (const std::exception&) {
    }
  });
  try {
    tracker.serve(Deadline::after(10s), 5s, {}, {});
    FAIL() << "expected a PeerError";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("speaks the collective protocol (xgboost 2.1+, JSON), "
                                         "the workers before it the Rabit protocol"),
              std::string::npos)
        << e.what();
  }
  workers.join();
}

TEST(RabitTrackerTest, CollectiveMissingWorkerIsATimeoutNotAHang) {
  RabitTracker tracker("127.0.0.1", 0, 2);
  std::thread lone([&] {
    try {
      int t = openCollective(tracker.port(), 0, -1, "rankmap-0",
                             R"({"cmd":1,"error_port":5,"port":6})");
      recvStr(t);  // the world size
      recvStr(t);  // blocks until the tracker gives up and closes
      close(t);
    } catch (const std::exception&) {
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  try {
    tracker.serve(Deadline::after(400ms), 5s, {}, {});
    FAIL() << "expected a TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("1 of 2 connected"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  lone.join();
}

TEST(XgboostRunTest, WorkersThatNeverConnectTimeOutAndAreKilled) {
  XgboostOptions o;
  o.workers = 2;
  o.startTimeout = 500ms;
  auto t0 = std::chrono::steady_clock::now();
  try {
    runXgboost(o, {"sleep", "30"}, std::nullopt, "none", {"test"}, {});
    FAIL() << "expected a TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("without a rank: 0 (task rankmap-0)"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(XgboostRunTest, WorkerFailureEndsTheJob) {
  XgboostOptions o;
  o.workers = 2;
  EXPECT_THROW(runXgboost(o, {"sh", "-c", "exit 3"}, std::nullopt, "", {"test"}, {}), PeerError);
}

// Real xgboost workers against the C++ tracker: ranks follow the task ids and an allreduce
// above 1.7's ring threshold (32768 elements; 2.1+ always runs a ring) gives the exact sum.
// `env` (e.g. PYTHONPATH of a built XGBoost) goes before the interpreter; every worker checks
// that it imported `version` (1.x and 2.0 speak the Rabit protocol, 2.1+ the collective one).
void runRealXgboostWorkers(const std::vector<std::string>& env, const std::string& version) {
  auto dir =
      std::filesystem::temp_directory_path() / ("rankmap-xgb-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string script = (dir / "worker.py").string();
  {
    std::ofstream f(script);
    f << R"PY(
import os, sys
import numpy as np
import xgboost as xgb
assert xgb.__version__ == sys.argv[2], (xgb.__version__, xgb.__file__)
args = {k: os.environ[k] for k in ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID")}
args["DMLC_TRACKER_PORT"] = int(args["DMLC_TRACKER_PORT"])  # 2.1+ wants an integer
with xgb.collective.CommunicatorContext(**args):
    rank, world = xgb.collective.get_rank(), xgb.collective.get_world_size()
    n = 40000  # above rabit_reduce_ring_mincount (32768): the ring carries it
    x = np.full(n, float(rank + 1))
    s = xgb.collective.allreduce(x, xgb.collective.Op.SUM)
    assert s.shape == (n,) and float(s.min()) == float(s.max()) == world * (world + 1) / 2, s[:3]
    with open(os.path.join(sys.argv[1], "rank-" + os.environ["DMLC_TASK_ID"]), "w") as f:
        f.write(str(rank))
    xgb.collective.communicator_print("worker %d of %d ok\n" % (rank, world))
)PY";
  }
  XgboostOptions o;
  o.workers = 3;
  o.startTimeout = 60s;
  std::vector<std::string> program = {"env"};
  program.insert(program.end(), env.begin(), env.end());
  program.insert(program.end(), {"/usr/bin/python3", script, dir.string(), version});
  int rc = runXgboost(o, program, std::nullopt, "none", {"test"}, {});
  EXPECT_EQ(rc, 0);
  for (int r = 0; r < 3; ++r) {
    std::ifstream f(dir / ("rank-" + xgboostTaskId(r, 3)));
    std::string got;
    f >> got;
    EXPECT_EQ(got, std::to_string(r)) << "task " << xgboostTaskId(r, 3);
  }
  std::filesystem::remove_all(dir);
}

// Debian's python3-xgboost (1.7.4): the Rabit protocol.
TEST(XgboostRunTest, RealXgboostWorkersGetRanksFromTaskIds) {
  FILE* p =
      ::popen("/usr/bin/python3 -c 'import xgboost; print(xgboost.__version__)' 2>/dev/null", "r");
  char buf[64] = {};
  bool ok = p && std::fgets(buf, sizeof buf, p);
  if (p) ::pclose(p);
  if (!ok) GTEST_SKIP() << "python3-xgboost is not installed for /usr/bin/python3";
  std::string version(buf);
  while (!version.empty() && version.back() == '\n') version.pop_back();
  runRealXgboostWorkers({}, version);
}

// XGBoost built from source by scripts/build-xgboost (3.x: the collective protocol), when CMake
// was given its directory (-DRANKMAP_XGBOOST_DIR=DIR).
TEST(XgboostRunTest, RealXgboostBuiltFromSourceGetsRanksFromTaskIds) {
  std::string dir = RANKMAP_XGBOOST_DIR;
  if (dir.empty())
    GTEST_SKIP() << "no XGBoost build: configure with -DRANKMAP_XGBOOST_DIR=DIR after "
                    "scripts/build-xgboost --out DIR";
  std::ifstream f(dir + "/VERSION");
  std::string version;
  if (!(f >> version))
    GTEST_SKIP() << "RANKMAP_XGBOOST_DIR " << dir
                 << " has no VERSION (scripts/build-xgboost did not finish there)";
  runRealXgboostWorkers({"PYTHONPATH=" + dir + "/python"}, version);
}

}  // namespace
}  // namespace rankmap::launch
