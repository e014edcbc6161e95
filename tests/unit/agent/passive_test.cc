// Passive measurement at the agent (agent/passive.h): the drift detector on its own, the
// POST /v1/observations endpoint, the coordinator's passive hold (agent/daemon.h), and engine
// ranks (collectives/agent_link.h) reporting to in-process agents and adopting the plan the
// agents make, every call checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include <httplib.h>

#include "agent/daemon.h"
#include "agent/probe_service.h"
#include "collectives/communicator.h"
#include "common/http_client.h"
#include "common/net.h"
#include "tests/unit/agent/agent_test_util.h"
#include "tests/unit/collectives/engine_values.h"
#include "tests/unit/collectives/harness.h"
#include "tests/unit/common/plan_util.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap::agent {
namespace {

using namespace std::chrono_literals;
using rankmap::testing::TempDir;
using Clock = PassiveLedger::Clock;

using test::kToken;

// A report of `reporter` on `self` to `peer`: `mbit` Mbit/s over `bytes` sent, in a window of
// `window_s` 0 (one that never overlaps the bed's own rounds: PassiveLedger::probed) unless a
// test sets it.
Json report(const std::string& self, const std::string& peer, double mbit,
            uint64_t bytes = 8 << 20, const std::string& plan = "sha256:aa",
            const std::string& reporter = "r0") {
  const double busy = static_cast<double>(bytes) * 8 / (mbit * 1e6);
  return {{"reporter", reporter},
          {"host", self},
          {"rank", 0},
          {"plan", plan},
          {"epoch", 1},
          {"window_s", 0.0},
          {"peers",
           {{{"host", peer},
             {"sent_bytes", bytes},
             {"send_busy_s", busy},
             {"recv_bytes", 0},
             {"recv_busy_s", 0}}}}};
}

TEST(PassiveLedger, DriftNeedsABaselineAndWindowsInARowTheSameWay) {
  static_assert(PassiveLedger::kBaselineWindows == 5 && PassiveLedger::kConfirmWindows == 3);
  PassiveLedger l("x");
  auto t = Clock::now();
  auto sum = [&](bool rebase = false) { return l.summary(t, 0.25, 20s, rebase); };
  auto add = [&](std::initializer_list<double> rates) {
    for (double r : rates) l.add(report("x", "y", r), "test", t);
  };
  add({400, 410, 390, 400, 405});
  auto s = sum();
  EXPECT_TRUE(s.fresh);
  EXPECT_EQ(s.baselined, 1u);  // the send series; the receive one has no bytes
  EXPECT_TRUE(s.drifting.empty());
  add({200, 200, 395});  // two slow windows, then back
  EXPECT_TRUE(sum().drifting.empty());
  add({200, 210});
  EXPECT_TRUE(sum().drifting.empty());
  add({205});  // three in a row: a drift
  s = sum(true);
  ASSERT_EQ(s.drifting.size(), 1u);
  EXPECT_EQ(s.drifting[0].src, "x");
  EXPECT_EQ(s.drifting[0].dst, "y");
  EXPECT_NEAR(s.drifting[0].baselineMbps, 400, 1);
  EXPECT_NEAR(s.drifting[0].nowMbps, 205, 1);
  EXPECT_TRUE(sum().drifting.empty());  // rebased: reported once
  add({205, 600, 205});                 // up and down: not one way
  EXPECT_TRUE(sum().drifting.empty());
  add({600, 600, 600});
  EXPECT_EQ(sum().drifting.size(), 1u);  // faster counts too
}

// Two windows in a row that span kConfirmSpan confirm a drift (a job whose calls outlast its
// report interval has long windows); shorter ones need kConfirmWindows; one window never does.
TEST(PassiveLedger, TwoLongWindowsConfirmADrift) {
  static_assert(PassiveLedger::kConfirmSpan == 8s && PassiveLedger::kMinConfirmWindows == 2);
  for (double window : {5.0, 2.0}) {
    PassiveLedger l("x");
    auto t = Clock::now();
    auto add = [&](double mbit) {
      t += std::chrono::milliseconds(static_cast<int>(window * 1000));
      Json j = report("x", "y", mbit);
      j["window_s"] = window;
      l.add(j, "test", t);
      return l.summary(t, 0.25, 20s, false).drifting.size();
    };
    for (int i = 0; i < 5; ++i) add(400);
    EXPECT_EQ(add(200), 0u) << window;  // one window
    if (window == 5.0) {
      EXPECT_EQ(add(200), 1u);  // two that span 10 s
    } else {
      EXPECT_EQ(add(200), 0u);  // two that span 4 s
      EXPECT_EQ(add(200), 1u);  // three
    }
  }
  // A long window back at the baseline's rate ends the run.
  PassiveLedger l("x");
  auto t = Clock::now();
  for (double mbit : {400, 400, 400, 400, 400, 200, 400, 200}) {
    t += 5s;
    Json j = report("x", "y", mbit);
    j["window_s"] = 5.0;
    l.add(j, "test", t);
  }
  EXPECT_TRUE(l.summary(t, 0.25, 20s, false).drifting.empty());
}

// The rate is bytes per second inside collectives when the report says it.
TEST(PassiveLedger, RatesArePerSecondOfCollectives) {
  PassiveLedger l("x");
  auto t = Clock::now();
  for (double secs : {1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0}) {
    Json j = report("x", "y", 1e6);  // busy time says 1e6 Mbit/s: not used
    j["collective_s"] = secs;
    l.add(j, "test", t);
  }
  auto s = l.summary(t, 0.25, 20s, false);
  ASSERT_EQ(s.drifting.size(), 1u);
  EXPECT_NEAR(s.drifting[0].baselineMbps, 8.0 * (8 << 20) / 1e6, 0.01);
  EXPECT_NEAR(s.drifting[0].nowMbps, 4.0 * (8 << 20) / 1e6, 0.01);
}

TEST(PassiveLedger, ANewPlanSmallWindowsAndStaleSeries) {
  PassiveLedger l("x");
  auto t = Clock::now();
  for (double r : {400.0, 400.0, 400.0, 400.0, 400.0, 100.0}) l.add(report("x", "y", r), "test", t);
  l.add(report("x", "y", 100, 8 << 20, "sha256:bb"), "test", t);  // another plan: new baseline
  l.add(report("x", "y", 100, 1000), "test", t);                   // too few bytes: no rate
  auto s = l.summary(t, 0.25, 20s, false);
  EXPECT_EQ(s.baselined, 0u);
  EXPECT_TRUE(s.drifting.empty());
  EXPECT_FALSE(l.summary(t + 30s, 0.25, 20s, false).fresh);
  EXPECT_EQ(l.summary(t + 200s, 0.25, 20s, false).series, 0u);
  EXPECT_EQ(l.reports(), 8u);
}

// A job's first report, empty (collectives/agent_link.h: sent when its link starts), makes its
// host's view fresh, with no series, until freshFor has passed.
TEST(PassiveLedger, AnEmptyFirstReportMakesTheViewFresh) {
  PassiveLedger l("x");
  auto t = Clock::now();
  EXPECT_FALSE(l.summary(t, 0.25, 20s, false).fresh);
  Json hello = report("x", "y", 100);
  hello["window_s"] = 0.0;
  hello["collective_s"] = 0.0;
  hello["peers"] = Json::array();
  EXPECT_EQ(l.add(hello, "test", t), 0u);
  auto s = l.summary(t + 5s, 0.25, 20s, false);
  EXPECT_TRUE(s.fresh);
  EXPECT_EQ(s.series, 0u);
  EXPECT_FALSE(l.summary(t + 21s, 0.25, 20s, false).fresh);
}

// A report whose send to `peer` moved `mbit` Mbit/s over `collective` seconds inside
// collectives, with a send in flight `busy` of that time.
Json backlogReport(const std::string& self, const std::string& peer, double mbit, double busy,
                   const std::string& plan = "sha256:aa", double collective = 1.0) {
  Json j = report(self, peer, mbit, 8 << 20, plan);
  j["collective_s"] = collective;
  j["peers"][0]["send_busy_s"] = busy * collective;
  j["peers"][0]["sent_bytes"] = static_cast<uint64_t>(mbit * 1e6 / 8 * collective);
  return j;
}

// Windows that overlap the agents' own probing measured the job beside the probe's flows: they
// count for neither baseline, drift nor backlog; a change that outlasts the probing still drifts.
TEST(PassiveLedger, WindowsThatOverlapTheAgentsProbesDoNotCount) {
  PassiveLedger l("x");
  const auto t0 = Clock::now();
  auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  // A 1 s window reported as it ends at `end` s.
  auto add = [&](double end, double mbit, double busy = 0.02) {
    Json j = backlogReport("x", "y", mbit, busy);
    j["window_s"] = 1.0;
    l.add(j, "test", at(end));
  };
  for (int i = 1; i <= 5; ++i) add(i, 400);  // the baseline
  // A round from 5.5 s to 8.2 s: the job's windows slow, its sends backlogged beside it.
  for (int i = 6; i <= 8; ++i) add(i, 150, 0.9);
  auto s = l.summary(at(8), 0.25, 20s, false);
  EXPECT_EQ(s.drifting.size(), 1u);  // before the ledger is told
  EXPECT_EQ(s.backlogged.size(), 1u);
  EXPECT_EQ(l.probed(at(5.5), at(8.2)), 3u);
  s = l.summary(at(8.2), 0.25, 20s, false);
  EXPECT_TRUE(s.drifting.empty());
  EXPECT_TRUE(s.backlogged.empty());
  EXPECT_EQ(s.baselined, 1u);  // the windows before the round stay
  // The window reported at 9 s began at 8 s, inside the round: not counted either.
  add(9, 150, 0.9);
  EXPECT_EQ(l.probedWindows(), 4u);
  // The coordinator names its last round at every tick: the same span again drops nothing.
  EXPECT_EQ(l.probed(at(5.5), at(8.2)), 0u);
  EXPECT_TRUE(l.summary(at(9), 0.25, 20s, false).drifting.empty());
  // The job stays slow after the round: a drift and a backlog, from the windows after it.
  for (int i = 10; i <= 12; ++i) add(i, 150, 0.9);
  s = l.summary(at(12), 0.25, 20s, false);
  ASSERT_EQ(s.drifting.size(), 1u);
  EXPECT_NEAR(s.drifting[0].baselineMbps, 400, 1);
  EXPECT_NEAR(s.drifting[0].nowMbps, 150, 1);
  EXPECT_EQ(s.backlogged.size(), 1u);
  EXPECT_EQ(l.probedWindows(), 4u);
}

// Backlog: the sends of a path slower than the job's data stay in flight; the rate per second of
// collectives is what the job got through it. Figures as the emulated cloud gave them (86% busy
// at 98 Mbit/s beside a tenant, 1-2% otherwise).
TEST(PassiveLedger, BackloggedSendsGiveTheirPathsRate) {
  static_assert(PassiveLedger::kConfirmWindows == 3);
  PassiveLedger l("x");
  auto t = Clock::now();
  auto sum = [&] { return l.summary(t, 0.25, 20s, false); };
  l.add(backlogReport("x", "y", 190, 0.01), "test", t);  // sends into a roomy socket buffer
  EXPECT_NEAR(sum().sendBusy, 0.01, 1e-9);
  l.add(backlogReport("x", "y", 98, 0.86), "test", t);
  l.add(backlogReport("x", "y", 97, 0.86), "test", t);
  EXPECT_TRUE(sum().backlogged.empty());  // two of the last three windows
  l.add(backlogReport("x", "y", 99, 0.85), "test", t);
  auto s = sum();
  ASSERT_EQ(s.backlogged.size(), 1u);
  EXPECT_EQ(s.backlogged[0].src, "x");
  EXPECT_EQ(s.backlogged[0].dst, "y");
  EXPECT_NEAR(s.backlogged[0].mbps, 98, 0.5);
  EXPECT_NEAR(s.backlogged[0].busy, 0.86, 0.001);
  EXPECT_NEAR(s.sendBusy, 0.85, 0.001);
  // It travels between agents.
  auto back = PassiveLedger::Summary::fromJson(s.toJson(), "test");
  ASSERT_EQ(back.backlogged.size(), 1u);
  EXPECT_NEAR(back.backlogged[0].mbps, 98, 0.5);
  EXPECT_NEAR(back.sendBusy, 0.85, 0.001);
  EXPECT_NEAR(s.sendBusyPeak, 0.86, 0.001);
  EXPECT_NEAR(back.sendBusyPeak, 0.86, 0.001);
  // A window below kBacklogFraction ends it; a new plan starts the series again. The peak is of
  // the last three windows.
  l.add(backlogReport("x", "y", 190, 0.4), "test", t);
  EXPECT_TRUE(sum().backlogged.empty());
  EXPECT_NEAR(sum().sendBusy, 0.4, 0.001);
  EXPECT_NEAR(sum().sendBusyPeak, 0.86, 0.001);
  l.add(backlogReport("x", "y", 190, 0.1), "test", t);
  l.add(backlogReport("x", "y", 190, 0.2), "test", t);
  EXPECT_NEAR(sum().sendBusyPeak, 0.4, 0.001);
  for (int i = 0; i < 3; ++i) l.add(backlogReport("x", "y", 98, 0.9), "test", t);
  EXPECT_EQ(sum().backlogged.size(), 1u);
  l.add(backlogReport("x", "y", 98, 0.9, "sha256:bb"), "test", t);
  EXPECT_TRUE(sum().backlogged.empty());
  // Stale series say nothing; reports without collective time give no fraction.
  EXPECT_TRUE(l.summary(t + 30s, 0.25, 20s, false).backlogged.empty());
  PassiveLedger old("x");
  for (int i = 0; i < 3; ++i) old.add(report("x", "y", 114), "test", t);
  EXPECT_TRUE(old.summary(t, 0.25, 20s, false).backlogged.empty());
  EXPECT_EQ(old.summary(t, 0.25, 20s, false).sendBusy, 0);
}

TEST(PassiveLedger, BadReportsNameTheField) {
  PassiveLedger l("x");
  auto t = Clock::now();
  auto fails = [&](Json j, const std::string& field) {
    try {
      l.add(j, "POST /v1/observations body", t);
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("POST /v1/observations body"), std::string::npos);
    }
  };
  fails(report("z", "y", 100), "host");  // another host's rank
  Json j = report("x", "y", 100);
  j["peers"][0]["sent_bytes"] = -1;
  fails(j, "sent_bytes");
  j = report("x", "y", 100);
  j["peers"][0]["send_busy_s"] = "soon";
  fails(j, "send_busy_s");
  j = report("x", "y", 100);
  j.erase("reporter");
  fails(j, "reporter");
  j = report("x", "y", 100);
  j["window_s"] = 1e9;  // more than a day
  fails(j, "window_s");
  fails(Json::array(), "object");
  EXPECT_EQ(l.reports(), 0u);
}

// `n` distinct loopback ports free now, for a hosts file written before the agents bind them.
// Each is held until all are picked (picked one by one and closed, two were the same: CI
// 2026-11-29), from below the ephemeral range (ip_local_port_range), which bind(0) and outgoing
// connections draw from, so that no other socket takes one before its agent binds it (as
// tests/unit/cli/bench_launch_test.py picks its ports).
std::vector<uint16_t> freePorts(size_t n) {
  int low = 0;
  if (!(std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low) || low < 2048) low = 32768;
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(std::max(1025, low - 12000), std::max(1025, low - 1));
  std::vector<Listener> held;
  std::vector<uint16_t> ports;
  for (int tries = 0; ports.size() < n && tries < 1000; ++tries) {
    const auto port = static_cast<uint16_t>(pick(rng));
    if (std::find(ports.begin(), ports.end(), port) != ports.end()) continue;
    try {
      held.push_back(Listener::bind(resolve("127.0.0.1", port, Lookup::kNumericOnly)));
      ports.push_back(port);
    } catch (const SystemError&) {  // in use: another
    }
  }
  if (ports.size() < n)
    throw std::runtime_error("no free loopback ports below the ephemeral range");
  return ports;
}

struct Bed {
  TempDir dir;
  std::string key = dir.write("key", std::string(64, 'k') + "\n");
  std::string token = dir.write("token", std::string(kToken) + "\n");
  std::vector<std::unique_ptr<Daemon>> d;

  // Agents named `names` with a hosts file of them all, the first the coordinator.
  explicit Bed(const std::vector<std::string>& names) {
    std::string hosts;
    const std::vector<uint16_t> ports = freePorts(names.size());
    for (size_t i = 0; i < names.size(); ++i)
      hosts += fmt::format("{} 127.0.0.1:{}\n", names[i], ports[i]);
    std::string hostsFile = dir.write("hosts", hosts);
    for (size_t i = 0; i < names.size(); ++i) {
      AgentConfig c;
      c.name = names[i];
      c.listen = {"127.0.0.1", 0};
      c.probeListen = {"127.0.0.1", ports[i]};
      c.stateDir = dir.file("state-" + names[i]);
      c.keyFile = key;
      c.tokenFile = token;
      c.hostsFile = hostsFile;
      c.coordinator = names[0];
      c.probe.round.latency = {2, 20};
      c.probe.round.bandwidth.maxMs = 40;
      c.probe.fleet.connectTimeout = 500ms;
      c.probe.fleet.taskSlack = 1500ms;
      c.probe.roundTimeout = 30s;
      c.reprobe.passiveHold = 1h;
      d.push_back(std::make_unique<Daemon>(c));
      d.back()->start();
    }
  }
  std::string url(size_t i) const { return fmt::format("http://127.0.0.1:{}", d[i]->httpPort()); }
  HttpResponse observe(size_t i, const Json& body, const std::string& token = kToken) {
    return HttpClient(url(i), token).post("/v1/observations", body.dump(), Deadline::after(10s));
  }
  // `n` report windows of a two-agent bed: `y` to agent 1, `x` to agent 0.
  void windows(int n, const Json& y, const Json& x) {
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(observe(1, y).status, 200);
      ASSERT_EQ(observe(0, x).status, 200);
    }
  }
  // A full round over the hosts file, waited for.
  void probe() {
    auto r = HttpClient(url(0), kToken).post("/v1/probe", R"({"wait": true})",
                                             Deadline::after(60s));
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // Topology version 1 on every agent, as if pushed: the hosts `names` behind equal links
  // (1000 Mbit/s between any two), no groups, so that every ring order predicts the same time.
  void putFlat(const std::vector<std::string>& names) {
    std::vector<Host> hosts;
    for (size_t i = 0; i < names.size(); ++i)
      hosts.push_back({names[i], fmt::format("127.0.0.1:{}", d[i]->probePort())});
    Topology t = Topology::empty(hosts);
    t.version = 1;
    for (size_t a = 0; a < names.size(); ++a)
      for (size_t c = 0; c < names.size(); ++c)
        if (a != c) t.bandwidthMbps.at(a, c) = 1000.0;
    for (auto& agent : d) ASSERT_TRUE(agent->store().putTopology(t));
  }
  // Waits until the coordinator's round slot is free, the slot reprobeOnce() needs (a light
  // check stores its record before it goes on as a repair or a full round, and a round's record
  // is final before its slot is freed: the rounds' list would answer early).
  void settle() {
    const auto end = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < end) {
      if (d[0]->health()["round"].is_null()) return;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "a round still runs after 60 s";
  }
  // After a round: lets the time pass within which a job window could be taken as under the
  // round by another agent. The coordinator names the round's span in seconds ago and the
  // agent reads them on arrival, later by the ask's transit (at most the ask's deadline, the
  // probe connect timeout): a window reported in that time is dropped there, on purpose.
  void pastRound() {
    settle();
    std::this_thread::sleep_for(d[0]->config().probe.fleet.connectTimeout + 100ms);
  }
  size_t rounds() {
    auto r = HttpClient(url(0)).get("/v1/rounds?limit=100", Deadline::after(10s));
    return parseJson(r.body, "rounds")["rounds"].size();
  }
  double metric(size_t i, const std::string& line) {
    std::string text = d[i]->renderMetrics();
    auto at = text.find("\n" + line + " ");
    if (at == std::string::npos) return 0;
    return std::stod(text.substr(at + line.size() + 2));
  }
};

TEST(PassiveEndpoint, NeedsTheTokenAndAnswersBadReportsWith400) {
  Bed b({"x"});
  EXPECT_EQ(b.observe(0, report("x", "y", 100), "").status, 401);
  EXPECT_EQ(b.observe(0, report("x", "y", 100), "wrong-token-0123456789").status, 401);
  auto bad = b.observe(0, report("q", "y", 100));
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.errorText().find("host"), std::string::npos) << bad.body;
  auto ok = b.observe(0, report("x", "y", 100));
  ASSERT_EQ(ok.status, 200) << ok.body;
  auto view = HttpClient(b.url(0)).get("/v1/observations", Deadline::after(10s));
  ASSERT_EQ(view.status, 200);
  EXPECT_EQ(parseJson(view.body, "view")["fresh"], true);
  EXPECT_EQ(b.metric(0, "rankmap_passive_reports_total"), 1);
  EXPECT_EQ(b.metric(0, "rankmap_passive_bytes_total"), 8 << 20);
}

// A host link that the job's backlogged sends show slow is published from the job's traffic,
// with no light check, and said once.
TEST(PassiveHold, BackloggedSendsPublishAPatchedTopologyWithoutAProbe) {
  Bed b({"x", "y"});
  b.probe();
  b.pastRound();
  auto before = b.d[0]->store().latestTopology();
  ASSERT_TRUE(before);
  const size_t rounds = b.rounds();
  // y's sends to x backlogged at 10 Mbit/s (loopback measured far faster) for three windows;
  // x's sends to y hardly busy.
  b.windows(3, backlogReport("y", "x", 10, 0.9), backlogReport("x", "y", 10, 0.02));
  b.d[0]->reprobeOnce();
  b.settle();
  EXPECT_EQ(b.metric(0, R"(rankmap_passive_patches_total{result="published"})"), 1);
  EXPECT_EQ(b.metric(0, R"(rankmap_probe_rounds_total{kind="passive",result="ok"})"), 1);
  EXPECT_EQ(b.rounds(), rounds + 1);  // the passive round only: no light check
  auto after = b.d[0]->store().latestTopology();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->version, before->version + 1);
  const int y = after->indexOf("y"), x = after->indexOf("x");
  EXPECT_NEAR(*after->bandwidthMbps.at(static_cast<size_t>(y), static_cast<size_t>(x)), 10, 0.01);
  EXPECT_EQ(after->bandwidthMbps.at(static_cast<size_t>(x), static_cast<size_t>(y)),
            before->bandwidthMbps.at(static_cast<size_t>(x), static_cast<size_t>(y)));
  // The same backlog again matches the patched topology: nothing new, the check is held.
  ASSERT_EQ(b.observe(1, backlogReport("y", "x", 10, 0.9)).status, 200);
  b.d[0]->reprobeOnce();
  b.settle();
  EXPECT_EQ(b.d[0]->store().latestTopology()->version, after->version);
  EXPECT_EQ(b.metric(0, R"(rankmap_light_checks_total{result="held"})"), 1);
}

// A patch does not stand in for the light check a drift calls for: the job's sends cannot tell a
// slow host link from a loaded uplink or a moved host.
TEST(PassiveHold, ADriftIsCheckedEvenWhenABacklogPatchedTheTopology) {
  Bed b({"x", "y"});
  b.probe();
  b.pastRound();
  const size_t rounds = b.rounds();
  // y's sends to x: a baseline at 400 Mbit/s, then three backlogged windows at 10 (a drift and a
  // backlog at once); x's sends hardly busy.
  b.windows(5, backlogReport("y", "x", 400, 0.02), backlogReport("x", "y", 400, 0.02));
  b.windows(3, backlogReport("y", "x", 10, 0.9), backlogReport("x", "y", 400, 0.02));
  b.d[0]->reprobeOnce();
  b.settle();
  EXPECT_EQ(b.metric(0, R"(rankmap_passive_patches_total{result="published"})"), 1);
  EXPECT_EQ(b.metric(0, "rankmap_passive_drifts_total"), 1);
  EXPECT_GE(b.rounds(), rounds + 2);  // the passive round and the light check
  EXPECT_EQ(b.metric(0, R"(rankmap_light_checks_total{result="held"})"), 0);
}

TEST(PassiveHold, SteadyJobTrafficHoldsTheLightCheckAndADriftStartsIt) {
  Bed b({"x", "y"});
  b.probe();
  const size_t before = b.rounds();
  // Nothing reported: the light check runs as before.
  b.d[0]->reprobeOnce();
  b.pastRound();
  const size_t checked = b.rounds();
  EXPECT_GT(checked, before);
  // Steady traffic reported on y: held, no round.
  for (int i = 0; i < 7; ++i) ASSERT_EQ(b.observe(1, report("y", "x", 400)).status, 200);
  b.d[0]->reprobeOnce();
  b.settle();
  EXPECT_EQ(b.rounds(), checked);
  EXPECT_EQ(b.metric(0, R"(rankmap_light_checks_total{result="held"})"), 1);
  // Every steady window counted (none taken as under the light check): the baseline is 400.
  EXPECT_EQ(b.metric(1, "rankmap_passive_windows_probed_total"), 0);
  // y's traffic to x halves for three windows: the light check runs at once.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(b.observe(1, report("y", "x", 190)).status, 200);
  b.d[0]->reprobeOnce();
  b.pastRound();
  EXPECT_EQ(b.metric(0, "rankmap_passive_drifts_total"), 1);
  const size_t after = b.rounds();
  EXPECT_GT(after, checked);
  // The drift was acted on: the next tick holds again.
  ASSERT_EQ(b.observe(1, report("y", "x", 190)).status, 200);
  b.d[0]->reprobeOnce();
  b.settle();
  EXPECT_EQ(b.rounds(), after);
  EXPECT_EQ(b.metric(0, R"(rankmap_light_checks_total{result="held"})"), 2);
}

// The coordinator names its last round to every agent at each tick: the job's windows that
// overlapped it (slowed by the round's own flows, which on the testbed started a light check
// under the job's traffic and a switch to a slower plan) start no light check; a change that
// outlasts the round still does.
TEST(PassiveHold, WindowsUnderTheAgentsOwnRoundStartNoLightCheck) {
  Bed b({"x", "y"});
  b.windows(5, report("y", "x", 400), report("x", "y", 400));  // the baseline
  const auto before = std::chrono::steady_clock::now();
  b.probe();
  b.settle();
  // Three slow windows, each reported after the round and reaching back over it.
  const double back =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  Json slow = report("y", "x", 190);
  slow["window_s"] = back + 1;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(b.observe(1, slow).status, 200);
  const size_t rounds = b.rounds();
  // The tick (again while the round's thread still frees its slot: then it does nothing).
  auto tick = [&](const std::string& until) {
    for (int i = 0; i < 250 && b.metric(0, until) == 0; ++i) {
      b.d[0]->reprobeOnce();
      b.settle();
      if (b.metric(0, until) == 0) std::this_thread::sleep_for(20ms);
    }
  };
  tick(R"(rankmap_light_checks_total{result="held"})");
  EXPECT_EQ(b.metric(0, R"(rankmap_light_checks_total{result="held"})"), 1);
  EXPECT_EQ(b.metric(0, "rankmap_passive_drifts_total"), 0);
  EXPECT_EQ(b.metric(1, "rankmap_passive_windows_probed_total"), 3);
  EXPECT_EQ(b.rounds(), rounds);
  // y's traffic stays slow after the round: three windows of its own, a drift, a light check.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(b.observe(1, report("y", "x", 190)).status, 200);
  tick("rankmap_passive_drifts_total");
  EXPECT_EQ(b.metric(0, "rankmap_passive_drifts_total"), 1);
  EXPECT_GT(b.rounds(), rounds);
}

// The probe protocol's passive op hands the named span to the hook, and refuses a bad one naming
// the field.
TEST(PassiveHold, ThePassiveOpTakesTheProbedSpanAndRefusesBadOnes) {
  const auto key = probe::ProbeKey::fromBytes(std::string(64, 'k'));
  std::optional<ProbeService::Hooks::ProbedAgo> seen;
  ProbeService::Hooks hooks;
  hooks.passiveSummary = [&](bool, std::optional<ProbeService::Hooks::ProbedAgo> p) {
    seen = p;
    return Json::object();
  };
  ProbeService service(key, "x", hooks, nullptr);
  auto ask = [&](const Json& probed) {
    Json r = {{"op", "passive"}, {"rebase", true}};
    if (!probed.is_null()) r["probed_s"] = probed;
    service.handle(r, "test", Deadline::after(1s));
  };
  ask(nullptr);
  EXPECT_FALSE(seen);
  ask(Json::array({3.5, 1.25}));
  ASSERT_TRUE(seen);
  EXPECT_DOUBLE_EQ(seen->from, 3.5);
  EXPECT_DOUBLE_EQ(seen->to, 1.25);
  for (const Json& bad : {Json::array({1.0, 2.0}), Json::array({1.0}), Json::array({-1.0, -2.0}),
                          Json::array({1e9, 0.0}), Json("soon")}) {
    try {
      ask(bad);
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find("probed_s"), std::string::npos) << e.what();
    }
  }
}

// What each engine rank of an EngineJob ended with.
struct RankEnd {
  coll::Communicator::Stats stats;
  uint64_t reportsSent = 0;
  uint64_t plansFetched = 0;
  std::string planHash;  // of the plan in use at the end ("" = identity)
  int64_t epoch = -1;
};

// One engine rank per agent of `b` (loopback transport), starting with `start`, reporting every
// 50 ms and taking plans from its agent; each runs int32 allreduces of `count` elements, every
// result checked (`wrong` counts the bad ones), until `done(stats, call)` holds on some rank (a
// vote after every call, so that all ranks run the same calls) or 20 s pass.
using JobDone = std::function<bool(const coll::Communicator::Stats&, int call)>;
std::vector<RankEnd> runEngineJob(Bed& b, int ranks, const Plan& start, uint64_t count,
                                  const JobDone& done, std::atomic<int>& wrong) {
  std::mutex mu;
  std::vector<RankEnd> ends(static_cast<size_t>(ranks));
  coll::testing::spawn(ranks, coll::testing::Backend::Loopback, [&](coll::transport::Context& ctx) {
    const int r = ctx.rank();
    coll::CommOptions o;
    o.timeout = 20s;
    o.live.voteEvery = 4;
    o.agent.agentUrl = b.url(static_cast<size_t>(r));
    o.agent.tokenFile = b.token;
    o.agent.reportEvery = 50ms;
    o.agent.plans = true;
    coll::Communicator comm(ctx, o, start);
    ASSERT_NE(comm.agentLink(), nullptr);
    auto in = coll::testing::inputBuffer(coll::DataType::kInt32, coll::ReduceOp::kSum, r, count);
    const auto expected =
        coll::testing::expectedBuffer(coll::DataType::kInt32, coll::ReduceOp::kSum, ranks, count);
    std::vector<std::byte> out(in.size());
    const auto end = std::chrono::steady_clock::now() + 20s;
    for (int call = 0;; ++call) {
      comm.allreduce(in.data(), out.data(), count, coll::DataType::kInt32, coll::ReduceOp::kSum);
      if (out != expected) ++wrong;
      int stop = done(comm.stats(), call) || std::chrono::steady_clock::now() > end ? 1 : 0;
      comm.allreduce(&stop, &stop, 1, coll::DataType::kInt32, coll::ReduceOp::kMax);
      if (stop) break;
      std::this_thread::sleep_for(5ms);
    }
    std::lock_guard<std::mutex> lock(mu);
    RankEnd& e = ends[static_cast<size_t>(r)];
    e.stats = comm.stats();
    e.reportsSent = comm.agentLink()->counters().reportsSent;
    e.plansFetched = comm.agentLink()->counters().plansFetched;
    e.planHash = comm.plan() ? comm.plan()->hash : "";
    e.epoch = comm.plan() ? comm.plan()->epoch : -1;
  });
  return ends;
}

// A job's ranks report to their agents as their links start, before any traffic: the
// coordinator's next tick then holds its light check instead of meeting the job's first
// collectives (which, measured as the network's rates, made plans the job switched to).
TEST(PassiveEngine, ALinkReportsAtOnceAndTheLightCheckIsHeld) {
  const std::vector<std::string> names = {"h0", "h1"};
  Bed b(names);
  b.putFlat(names);
  Plan start = Plan::identity(names);
  start.seal();
  std::atomic<int> sent{0};
  coll::testing::spawn(2, coll::testing::Backend::Loopback, [&](coll::transport::Context& ctx) {
    coll::CommOptions o;
    o.timeout = 20s;
    o.agent.agentUrl = b.url(static_cast<size_t>(ctx.rank()));
    o.agent.tokenFile = b.token;
    o.agent.reportEvery = 1h;  // no report is due: only the first
    o.agent.plans = false;
    coll::Communicator comm(ctx, o, start);
    ASSERT_NE(comm.agentLink(), nullptr);
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (comm.agentLink()->counters().reportsSent == 0 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(5ms);
    sent += static_cast<int>(comm.agentLink()->counters().reportsSent);
  });
  EXPECT_EQ(sent.load(), 2);
  for (size_t i = 0; i < names.size(); ++i)
    EXPECT_EQ(b.metric(i, "rankmap_passive_reports_total"), 1) << names[i];
  const size_t before = b.rounds();
  b.d[0]->reprobeOnce();
  b.settle();
  EXPECT_EQ(b.rounds(), before);
  EXPECT_EQ(b.metric(0, R"(rankmap_light_checks_total{result="held"})"), 1);
}

// Engine ranks, one per agent, report their traffic and take the plan the agents make: they
// start in identity order with a plan that only names the hosts and switch to the agents' plan
// (a newer epoch, the same order on equal links) at one vote, every result checked.
TEST(PassiveEngine, RanksReportToTheirAgentsAndAdoptTheAgentsPlan) {
  const std::vector<std::string> names = {"h0", "h1", "h2"};
  Bed b(names);
  b.putFlat(names);
  Plan start = Plan::identity(names);
  start.seal();
  std::atomic<int> wrong{0};
  auto ends = runEngineJob(
      b, 3, start, 300007,  // > 1 MiB of int32 per rank
      [](const coll::Communicator::Stats& s, int call) { return s.planSwitches > 0 && call > 40; },
      wrong);
  EXPECT_EQ(wrong.load(), 0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ends[r].stats.planSwitches, 1u) << "rank " << r;
    EXPECT_EQ(ends[r].epoch, 1) << "rank " << r;
    EXPECT_EQ(ends[r].stats.lastSwitchCall, ends[0].stats.lastSwitchCall);
    EXPECT_GT(ends[r].reportsSent, 0u) << "rank " << r;
    EXPECT_GT(ends[r].plansFetched, 0u) << "rank " << r;
    EXPECT_GT(b.metric(static_cast<size_t>(r), "rankmap_passive_reports_total"), 0) << r;
    EXPECT_GT(b.metric(static_cast<size_t>(r), "rankmap_passive_bytes_total"), 1 << 20) << r;
  }
}

// The agent route prices another order against the order in use: ranks that run a plan in an
// order of their own (not the launch order) are offered the agents' newer plan for the launch
// order, ask their agents once more with the order in use, learn that no ring is faster than it
// by the margin on the agents' topology (equal links: every order predicts the same time), and
// keep it, every rank alike.
TEST(PassiveEngine, ANewerPlanNoFasterThanTheOrderInUseIsKept) {
  const std::vector<std::string> names = {"h0", "h1", "h2", "h3"};
  Bed b(names);
  b.putFlat(names);
  Plan start = rankmap::testing::orderedPlan(names, {"h2", "h0", "h3", "h1"});
  start.seal();
  std::atomic<int> wrong{0};
  // Until the agents' plan was judged (declined or adopted) a few times.
  auto ends = runEngineJob(
      b, 4, start, 100003,
      [](const coll::Communicator::Stats& s, int) {
        return s.planSwitchesDeclined + s.planSwitches >= 3;
      },
      wrong);
  EXPECT_EQ(wrong.load(), 0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ends[r].stats.planSwitches, 0u) << "rank " << r;
    EXPECT_GE(ends[r].stats.planSwitchesDeclined, 3u) << "rank " << r;
    EXPECT_EQ(ends[r].planHash, start.hash) << "rank " << r;
  }
}

// An agent that refuses every report (here a stand-in server: HTTP 400 on POST /v1/observations)
// still gives the ranks its plans: the refused reports are counted and the plan is adopted.
TEST(PassiveEngine, RefusedReportsDoNotKeepThePlansAway) {
  const std::vector<std::string> names = {"h0", "h1"};
  Plan next = rankmap::testing::orderedPlan(names, {"h1", "h0"});
  next.epoch = 3;
  next.seal();
  httplib::Server server;
  server.Post("/v1/observations", [](const httplib::Request&, httplib::Response& res) {
    res.status = 400;
    res.set_content(R"({"error": "refused by this test's stand-in agent"})", "application/json");
  });
  server.Get("/v1/plan", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(next.dump(), "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!server.is_running() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  TempDir dir;
  const std::string token = dir.write("token", std::string(kToken) + "\n");
  Plan start = Plan::identity(names);
  start.seal();
  std::mutex mu;
  std::vector<coll::Communicator::Stats> stats(2);
  std::vector<uint64_t> refused(2);
  std::atomic<int> wrong{0};
  coll::testing::spawn(2, coll::testing::Backend::Loopback, [&](coll::transport::Context& ctx) {
    coll::CommOptions o;
    o.timeout = 20s;
    o.live.voteEvery = 2;
    o.agent.agentUrl = fmt::format("http://127.0.0.1:{}", port);
    o.agent.tokenFile = token;
    o.agent.reportEvery = 20ms;
    o.agent.plans = true;
    coll::Communicator comm(ctx, o, start);
    ASSERT_NE(comm.agentLink(), nullptr);
    std::vector<int32_t> in(1001, ctx.rank() + 1), out(in.size());
    const auto end = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      comm.allreduce(in.data(), out.data(), in.size(), coll::DataType::kInt32,
                     coll::ReduceOp::kSum);
      for (int32_t v : out) wrong += v != 3;
      int stop = comm.stats().planSwitches > 0 || std::chrono::steady_clock::now() > end;
      comm.allreduce(&stop, &stop, 1, coll::DataType::kInt32, coll::ReduceOp::kMax);
      if (stop) break;
      std::this_thread::sleep_for(5ms);
    }
    std::lock_guard<std::mutex> lock(mu);
    stats[static_cast<size_t>(ctx.rank())] = comm.stats();
    refused[static_cast<size_t>(ctx.rank())] = comm.agentLink()->counters().reportsFailed;
  });
  server.stop();
  serving.join();
  EXPECT_EQ(wrong.load(), 0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(stats[r].planSwitches, 1u) << "rank " << r;
    EXPECT_GT(refused[r], 0u) << "rank " << r;
  }
}

// Between reports (a job whose collectives outlast RANKMAP_PASSIVE_REPORT reports only at their
// boundaries) a link polls its agent's topology version and fetches the plan as soon as the
// version is newer than its plan, once per version. Here no report is due after the first
// (reportEvery 1 h); a stand-in agent publishes version 3 after the first plan was fetched.
TEST(PassiveEngine, ANewerTopologyVersionIsFetchedBetweenReports) {
  const std::vector<std::string> names = {"h0", "h1"};
  std::mutex mu;
  int64_t version = 1;
  std::vector<Plan> plans;
  for (int64_t epoch : {1, 3}) {
    Plan p = rankmap::testing::orderedPlan(
        names, epoch == 1 ? names : std::vector<std::string>{"h1", "h0"});
    p.epoch = epoch;
    p.seal();
    plans.push_back(p);
  }
  std::atomic<int> healthAsked{0}, planAsked{0};
  httplib::Server server;
  server.Post("/v1/observations", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  server.Get("/v1/health", [&](const httplib::Request&, httplib::Response& res) {
    ++healthAsked;
    std::lock_guard<std::mutex> lock(mu);
    res.set_content(Json{{"status", "ok"}, {"topology_version", version}}.dump(),
                    "application/json");
  });
  server.Get("/v1/plan", [&](const httplib::Request&, httplib::Response& res) {
    ++planAsked;
    std::lock_guard<std::mutex> lock(mu);
    res.set_content(plans[version == 1 ? 0 : 1].dump(), "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  TempDir dir;
  coll::AgentLinkOptions o;
  o.agentUrl = fmt::format("http://127.0.0.1:{}", port);
  o.tokenFile = dir.write("token", std::string(kToken) + "\n");
  o.reportEvery = 1h;
  o.plans = true;
  Plan start = Plan::identity(names);
  start.seal();
  auto link = coll::AgentLink::make(o, 0, 2, start);
  ASSERT_NE(link, nullptr);
  auto waitForEpoch = [&](int64_t epoch) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
      if (auto p = link->latestPlan(); p && p->epoch == epoch) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  EXPECT_TRUE(waitForEpoch(1));  // the first report's fetch
  std::this_thread::sleep_for(coll::AgentLink::kVersionPollEvery * 2.5);
  EXPECT_EQ(planAsked.load(), 1);  // the same version is not fetched again
  EXPECT_GE(healthAsked.load(), 2);
  {
    std::lock_guard<std::mutex> lock(mu);
    version = 3;
  }
  EXPECT_TRUE(waitForEpoch(3));
  EXPECT_EQ(link->counters().plansFetched, 2u);
  EXPECT_EQ(link->counters().reportsSent, 1u);
  link.reset();
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace rankmap::agent
