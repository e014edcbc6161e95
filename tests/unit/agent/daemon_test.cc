// rankmapd on loopback: several agents in this process with their own ports and state dirs,
// driven through the HTTP API (common/http_client.h) and the probe protocol.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "agent/daemon.h"
#include "agent/store.h"
#include "agent/topology_push.h"
#include "common/files.h"
#include "common/http_client.h"
#include "probe/agent_fleet.h"
#include "probe/hosts.h"
#include "probe/measure.h"
#include "probe/round.h"
#include "probe/server.h"
#include "tests/unit/agent/agent_test_util.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap::agent {
namespace {

using namespace std::chrono_literals;
using rankmap::testing::TempDir;

using test::kToken;

ProbeOptions fastProbe() {
  ProbeOptions p;
  p.round.latency = {2, 20};
  p.round.bandwidth.maxMs = 40;
  p.fleet.connectTimeout = 500ms;
  p.fleet.taskSlack = 1500ms;
  p.roundTimeout = 30s;
  return p;
}

struct Agents {
  TempDir dir;
  std::string key = dir.write("key", std::string(64, 'k') + "\n");
  std::string token = dir.write("token", std::string(kToken) + "\n");
  std::vector<std::unique_ptr<Daemon>> d;

  Daemon& add(const std::string& name, size_t maxBody = 1 << 20, std::string keyFile = "",
              std::string priorFile = "", std::optional<probe::Endpoint> metricsListen = {}) {
    AgentConfig c;
    c.metricsListen = metricsListen;
    c.name = name;
    c.listen = {"127.0.0.1", 0};
    c.probeListen = {"127.0.0.1", 0};
    c.stateDir = dir.file("state-" + name);
    c.keyFile = keyFile.empty() ? key : keyFile;
    c.tokenFile = token;
    c.probe = fastProbe();
    c.maxBodyBytes = maxBody;
    c.priorFile = priorFile;
    d.push_back(std::make_unique<Daemon>(c));
    d.back()->start();
    return *d.back();
  }
  static std::string url(const Daemon& x) {
    return fmt::format("http://127.0.0.1:{}", x.httpPort());
  }
  static Json hostJson(const Daemon& x) {
    return {{"name", x.name()}, {"address", fmt::format("127.0.0.1:{}", x.probePort())}};
  }
  static Host host(const Daemon& x) {
    return {x.name(), fmt::format("127.0.0.1:{}", x.probePort())};
  }
};

HttpResponse post(const Daemon& d, const std::string& body, const std::string& token = kToken) {
  return HttpClient(Agents::url(d), token).post("/v1/probe", body, Deadline::after(60s));
}
HttpResponse get(const Daemon& d, const std::string& path, const std::string& token = "") {
  return HttpClient(Agents::url(d), token).get(path, Deadline::after(10s));
}

TEST(Daemon, HealthAndNoTopologyYet) {
  Agents a;
  Daemon& x = a.add("x");
  auto h = get(x, "/v1/health");
  ASSERT_EQ(h.status, 200);
  Json j = parseJson(h.body, "health");
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["name"], "x");
  EXPECT_TRUE(j["topology_version"].is_null());
  auto t = get(x, "/v1/topology");
  EXPECT_EQ(t.status, 404);
  EXPECT_NE(t.errorText().find("no topology"), std::string::npos);
  EXPECT_EQ(get(x, "/v1/nothing").status, 404);
  EXPECT_EQ(get(x, "/v1/topology?version=abc").status, 400);
  EXPECT_EQ(get(x, "/v1/rounds/999").status, 404);
}

// metrics_listen: a second address that serves GET /metrics alone, without the token, for a
// Prometheus that cannot reach the API's loopback address; every other path is 404 there, a
// write included (with the token), and /metrics stays on the API too.
TEST(Daemon, MetricsListenServesMetricsAlone) {
  Agents a;
  Daemon& x = a.add("x", 1 << 20, "", "", probe::Endpoint{"127.0.0.1", 0});
  ASSERT_GT(x.metricsPort(), 0);
  ASSERT_NE(x.metricsPort(), x.httpPort());
  HttpClient metrics(fmt::format("http://127.0.0.1:{}", x.metricsPort()), kToken);
  auto m = metrics.get("/metrics", Deadline::after(10s));
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("rankmap_build_info{"), std::string::npos) << m.body;
  EXPECT_EQ(metrics.get("/v1/health", Deadline::after(10s)).status, 404);
  EXPECT_EQ(metrics.get("/v1/topology", Deadline::after(10s)).status, 404);
  EXPECT_EQ(metrics.post("/v1/probe", "{}", Deadline::after(10s)).status, 404);
  EXPECT_EQ(metrics.post("/metrics", "{}", Deadline::after(10s)).status, 405);
  EXPECT_EQ(get(x, "/metrics").status, 200);
  // Without it, no second listener.
  EXPECT_EQ(a.add("y").metricsPort(), 0);
}

// hosts_watch: a hosts file that changes (replaced by rename, as kubelet swaps a ConfigMap, or
// rewritten in place) is read again without a signal; a bad one keeps the list, once.
TEST(Daemon, HostsWatchReloadsAChangedHostsFileAndKeepsTheListOnABadOne) {
  Agents a;
  std::string hosts = a.dir.write("hosts", "a 127.0.0.1:7411\n");
  AgentConfig c;
  c.name = "a";
  c.listen = {"127.0.0.1", 0};
  c.probeListen = {"127.0.0.1", 0};
  c.stateDir = a.dir.file("state");
  c.keyFile = a.key;
  c.hostsFile = hosts;
  c.hostsWatch = 20ms;
  Daemon d(c);
  d.start();
  ASSERT_EQ(d.hosts().size(), 1u);
  auto waitFor = [&](auto done) {
    for (auto until = std::chrono::steady_clock::now() + 10s;
         !done() && std::chrono::steady_clock::now() < until;)
      std::this_thread::sleep_for(10ms);
    return done();
  };
  writeFileAtomic(hosts, "a 127.0.0.1:7411\nb 127.0.0.2:7411\n");
  EXPECT_TRUE(waitFor([&] { return d.hosts().size() == 2; }));
  std::ofstream(hosts) << "a 127.0.0.1:7411\nb 127.0.0.2:7411\nc 127.0.0.3:7411\n";
  EXPECT_TRUE(waitFor([&] { return d.hosts().size() == 3; }));
  // The count of a reload result (an in-place rewrite may have been seen half-written once).
  auto reloads = [&](const std::string& result) {
    std::smatch m;
    std::string text = d.renderMetrics();
    return std::regex_search(
               text, m,
               std::regex("rankmap_hosts_reloads_total\\{result=\"" + result + "\"\\} (\\d+)"))
               ? std::stoi(m[1])
               : 0;
  };
  int keptBefore = reloads("kept");
  writeFileAtomic(hosts, "a 127.0.0.1:7411\nb not-an-address\n");
  EXPECT_TRUE(waitFor([&] { return reloads("kept") == keptBefore + 1; })) << d.renderMetrics();
  std::this_thread::sleep_for(100ms);  // five more looks at the unchanged bad file: no reload
  EXPECT_EQ(reloads("kept"), keptBefore + 1);
  EXPECT_EQ(d.hosts().size(), 3u);
  EXPECT_GE(reloads("replaced"), 2);
  d.stop();
}

TEST(Daemon, WritesNeedTheBearerToken) {
  Agents a;
  Daemon& x = a.add("x");
  auto none = post(x, "{}", "");
  EXPECT_EQ(none.status, 401);
  EXPECT_NE(none.errorText().find("missing"), std::string::npos);
  auto wrong = post(x, "{}", "test-token-0123456780");
  EXPECT_EQ(wrong.status, 401);
  auto shorter = post(x, "{}", "test");
  EXPECT_EQ(shorter.status, 401);
}

TEST(Daemon, BadBodiesAre4xxAndBounded) {
  Agents a;
  Daemon& x = a.add("x", 4096);
  EXPECT_EQ(post(x, "{not json").status, 400);
  EXPECT_EQ(post(x, "[1,2]").status, 400);
  EXPECT_EQ(post(x, R"({"hostz": []})").status, 400);
  EXPECT_EQ(post(x, R"({"hosts": []})").status, 400);
  EXPECT_EQ(post(x, R"({"hosts": [{"name": "a", "address": "example.com"}]})").status, 400);
  EXPECT_EQ(post(x, R"({"hosts": ["a 10.0.0.1", "a 10.0.0.2"]})").status, 400);
  EXPECT_EQ(post(x, R"({"probe": {"latency_samples": -1}})").status, 400);
  EXPECT_EQ(post(x, R"({"wait": "yes"})").status, 400);
  // No hosts configured and none given.
  auto nohosts = post(x, "{}");
  EXPECT_EQ(nohosts.status, 400);
  EXPECT_NE(nohosts.errorText().find("no hosts"), std::string::npos);
  std::string huge = R"({"hosts": [")" + std::string(8192, 'x') + R"("]})";
  EXPECT_EQ(post(x, huge).status, 413);
  std::string deep(200, '[');
  EXPECT_EQ(post(x, deep).status, 400);
}

TEST(Daemon, RoundOverLoopbackPublishesAndPushesTheTopology) {
  Agents a;
  Daemon& x = a.add("x");
  Daemon& y = a.add("y");
  Daemon& z = a.add("z");
  Json body = {{"hosts", {Agents::hostJson(x), Agents::hostJson(y), Agents::hostJson(z)}},
               {"wait", true}};
  auto r = post(x, body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  Json round = parseJson(r.body, "answer")["round"];
  EXPECT_EQ(round["status"], "ok") << round.dump();
  EXPECT_EQ(round["pairs_total"], 3);
  EXPECT_EQ(round["pairs_missing"], 0);
  EXPECT_EQ(round["topology_version"], 1);

  auto t = get(x, "/v1/topology");
  ASSERT_EQ(t.status, 200);
  Topology topo = Topology::parse(t.body, "topology");
  EXPECT_EQ(topo.version, 1);
  ASSERT_EQ(topo.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < 3; ++j) {
      if (i == j) continue;
      EXPECT_TRUE(topo.bandwidthMbps.at(i, j)) << i << "->" << j;
      EXPECT_TRUE(topo.latencyUs.at(i, j)) << i << "->" << j;
    }
  // Pushed to the other agents.
  for (Daemon* other : {&y, &z}) {
    auto o = get(*other, "/v1/topology");
    ASSERT_EQ(o.status, 200);
    EXPECT_EQ(Topology::parse(o.body, "pushed").contentHash(), topo.contentHash());
  }
  auto hist = parseJson(get(x, "/v1/topologies").body, "history");
  EXPECT_EQ(hist["versions"].size(), 1u);
  auto st = parseJson(get(x, "/v1/rounds/" + std::to_string(round["id"].get<int64_t>())).body, "r");
  EXPECT_EQ(st["status"], "ok");
}

TEST(Daemon, SecondRoundWhileOneRunsIs409) {
  Agents a;
  Daemon& x = a.add("x");
  Daemon& y = a.add("y");
  Json body = {{"hosts", {Agents::hostJson(x), Agents::hostJson(y)}},
               {"probe", {{"bandwidth_max_ms", 400}}}};
  auto first = post(x, body.dump());
  ASSERT_EQ(first.status, 202) << first.body;
  int64_t id = parseJson(first.body, "a")["round_id"];
  auto second = post(x, body.dump());
  EXPECT_EQ(second.status, 409);
  EXPECT_EQ(parseJson(second.body, "b")["round_id"], id);
  EXPECT_TRUE(x.waitRound(id, Deadline::after(30s)));
}

TEST(Daemon, MetricsAreValidPrometheusTextWithoutPairSeries) {
  Agents a;
  Daemon& x = a.add("x");
  Daemon& y = a.add("y");
  Json body = {{"hosts", {Agents::hostJson(x), Agents::hostJson(y)}}, {"wait", true}};
  ASSERT_EQ(post(x, body.dump()).status, 200);
  // A connection with the wrong probe key is rejected and counted.
  probe::ProbeKey wrong = probe::ProbeKey::fromBytes(std::string(64, 'w'));
  EXPECT_THROW(probe::request({"127.0.0.1", x.probePort()}, wrong, "intruder",
                              Json{{"op", "hello"}}, Deadline::after(2s)),
               PeerError);
  std::string text;
  for (int i = 0; i < 100; ++i) {  // the server counts the rejection on its own thread
    auto m = get(x, "/metrics");
    ASSERT_EQ(m.status, 200);
    text = m.body;
    if (text.find(R"(rankmap_probe_auth_rejections_total{reason="bad_mac"} 1)") !=
        std::string::npos)
      break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(text.find(R"(rankmap_probe_auth_rejections_total{reason="bad_mac"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(rankmap_probe_rounds_total{kind="full",result="ok"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rankmap_probe_round_duration_seconds_bucket{kind=\"full\",le=\"+Inf\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("rankmap_topology_bandwidth_bytes_per_second{tier="), std::string::npos);
  EXPECT_NE(text.find("rankmap_topology_latency_seconds{tier="), std::string::npos);
  // The round above ended a moment ago.
  {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    size_t at = text.find("\nrankmap_last_successful_round_timestamp_seconds ");
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_NEAR(std::stod(text.substr(at + 49)), now, 60) << text.substr(at, 80);
  }
  std::regex sample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? [-+0-9.eEInfa]+$)");
  std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  std::set<std::string> typed;
  size_t samples = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) typed.insert(line.substr(7, line.find(' ', 7) - 7));
    if (line[0] == '#') {
      EXPECT_TRUE(std::regex_match(line, comment)) << line;
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    ++samples;
    // Prometheus' conventions: base units in the name, `quantile` only on a summary (none here).
    const std::string name = line.substr(0, line.find_first_of("{ "));
    EXPECT_FALSE(std::regex_search(name, std::regex("_(mbps|gbps|us|ms|mib|kib|mb|kb)(_|$)")))
        << line;
    EXPECT_FALSE(std::regex_search(line, std::regex(R"([{,]quantile=)"))) << line;
    // No series names a host: the label sets are bounded.
    EXPECT_EQ(line.find("\"x\""), std::string::npos) << line;
    EXPECT_EQ(line.find("\"y\""), std::string::npos) << line;
  }
  EXPECT_GT(samples, 20u);
  EXPECT_TRUE(typed.count("rankmap_probe_rounds_total"));
}

TEST(Daemon, TopologySurvivesARestart) {
  Agents a;
  std::string before;
  {
    Daemon& x = a.add("x");
    Daemon& y = a.add("y");
    Json body = {{"hosts", {Agents::hostJson(x), Agents::hostJson(y)}}, {"wait", true}};
    ASSERT_EQ(post(x, body.dump()).status, 200);
    before = get(x, "/v1/topology").body;
    a.d.clear();  // both stop
  }
  Daemon& x2 = a.add("x");  // same state dir
  auto after = get(x2, "/v1/topology");
  ASSERT_EQ(after.status, 200);
  EXPECT_EQ(after.body, before);
}

// A stored topology this build cannot load (a partial round wrote one before probe/round listed
// only live hosts' pairs as measured) must not keep the agent down: it starts, names the version,
// and still serves its health and older versions.
TEST(Daemon, StartsWhenItsNewestStoredTopologyDoesNotLoad) {
  Agents a;
  {
    Store s(a.dir.file("state-x"));
    Topology ok = Topology::empty({{"a", "10.0.0.1"}, {"b", "10.0.0.2"}});
    ok.bandwidthMbps.at(0, 1) = ok.bandwidthMbps.at(1, 0) = 100;
    ok.latencyUs.at(0, 1) = ok.latencyUs.at(1, 0) = LatencyStats{10, 10, 10, 10};
    s.addTopology(ok, std::nullopt);
    Topology bad = ok;  // a measured pair whose matrix entry is null: the parser refuses it
    bad.groups = {{"rack", 1, {{"a"}, {"b"}}}};
    bad.links = TopologyLinks{{{100, 100}, {100, 100}}, {{{100, 100}, {100, 100}}}, 5, {10}};
    bad.bandwidthMbps.at(0, 1) = std::nullopt;
    bad.measured = {{0, 1}};
    s.addTopology(bad, std::nullopt);
    ASSERT_THROW(s.latestTopology(), InvalidInput);
  }
  Daemon& x = a.add("x");
  auto h = get(x, "/v1/health");
  ASSERT_EQ(h.status, 200);
  EXPECT_EQ(parseJson(h.body, "health").at("topology_version"), 2);
  EXPECT_EQ(get(x, "/v1/topology?version=1").status, 200);
  auto newest = get(x, "/v1/topology");  // an error naming the version, not a crash
  EXPECT_GE(newest.status, 500) << newest.body;
  EXPECT_NE(newest.body.find("topology version 2"), std::string::npos) << newest.body;
}

TEST(Daemon, PlansForTheJobsHostsFromTheLatestTopology) {
  Agents a;
  Daemon& x = a.add("x");
  Daemon& y = a.add("y");
  auto none = get(x, "/v1/plan?hosts=x,y");
  EXPECT_EQ(none.status, 404);
  EXPECT_NE(none.errorText().find("no topology"), std::string::npos);
  Json body = {{"hosts", {Agents::hostJson(x), Agents::hostJson(y)}}, {"wait", true}};
  ASSERT_EQ(post(x, body.dump()).status, 200);
  auto p = get(x, "/v1/plan?hosts=y,x&ranks_per_host=2", kToken);
  ASSERT_EQ(p.status, 200) << p.body;
  Plan plan = Plan::parse(p.body, "plan");
  EXPECT_EQ(plan.hosts, (std::vector<std::string>{"y", "x"}));
  EXPECT_EQ(plan.ranksPerHost, 2);
  EXPECT_EQ(plan.epoch, 1);
  // By address, as a launcher may spell hosts.
  auto byAddr = get(x, fmt::format("/v1/plan?hosts=x,127.0.0.1:{}", y.probePort()), kToken);
  EXPECT_EQ(byAddr.status, 200) << byAddr.body;
  EXPECT_EQ(get(x, "/v1/plan?hosts=x,nobody").status, 400);
  EXPECT_EQ(get(x, "/v1/plan").status, 400);
  EXPECT_EQ(get(x, "/v1/plan?hosts=x,y&ranks_per_host=0").status, 400);

  // For a job's mesh: the plan carries it; bad meshes are refused naming the parameter.
  auto m = get(x, "/v1/plan?hosts=y,x&ranks_per_host=2&mesh=dp%3D2,tp%3D2", kToken);
  ASSERT_EQ(m.status, 200) << m.body;
  Plan meshPlan = Plan::parse(m.body, "plan");
  ASSERT_TRUE(meshPlan.mesh);
  EXPECT_EQ(meshPlan.mesh->dims.size(), 2u);
  EXPECT_EQ(meshPlan.mesh->dims[1].collective, "allreduce");
  auto wrong = get(x, "/v1/plan?hosts=y,x&ranks_per_host=2&mesh=dp%3D3", kToken);
  EXPECT_EQ(wrong.status, 400);
  EXPECT_NE(wrong.errorText().find("query parameter mesh 'dp=3': the mesh has 3 ranks"),
            std::string::npos)
      << wrong.body;
  auto unknown = get(x, "/v1/plan?hosts=y,x&mesh=dp%3D2&traffic=tp%3Dallreduce:1M", kToken);
  EXPECT_EQ(unknown.status, 400);
  EXPECT_NE(unknown.errorText().find("query parameter traffic"), std::string::npos);
  EXPECT_EQ(get(x, "/v1/plan?hosts=y,x&traffic=dp%3Dallreduce:1M", kToken).status, 400);
}

// With "prior" in its configuration, the agent's plans record the declared placement and how
// it compares; a prior that does not parse stops the agent at start, naming the file.
TEST(Daemon, PlansRecordTheConfiguredPrior) {
  Agents a;
  std::string prior = a.dir.write("prior.json", R"({"levels": ["spine", "leaf"],
      "hosts": {"x": ["s1", "l1"], "y": ["s1", "l1"], "z": ["s1", "l2"]}})");
  Daemon& x = a.add("x", 1 << 20, "", prior);
  Daemon& y = a.add("y");
  Json body = {{"hosts", {Agents::hostJson(x), Agents::hostJson(y)}}, {"wait", true}};
  ASSERT_EQ(post(x, body.dump()).status, 200);
  auto p = get(x, "/v1/plan?hosts=x,y", kToken);
  ASSERT_EQ(p.status, 200) << p.body;
  Plan plan = Plan::parse(p.body, "plan");
  ASSERT_TRUE(plan.prior);
  EXPECT_EQ(plan.prior->format, "native");
  EXPECT_EQ(plan.prior->declared, 3u);
  EXPECT_EQ(plan.prior->hosts.size(), 2u);
  EXPECT_EQ(plan.prior->hosts.at("y"), (std::vector<std::string>{"s1", "l1"}));
  // Declared on one switch, and two hosts on loopback are measured as one group.
  EXPECT_TRUE(plan.prior->disagreements.empty());
  // An agent without a prior makes plans without one.
  auto q = get(y, "/v1/plan?hosts=x,y", kToken);
  ASSERT_EQ(q.status, 200) << q.body;
  EXPECT_FALSE(Plan::parse(q.body, "plan").prior);

  std::string bad = a.dir.write("bad_prior.json", R"({"hosts": {"x": []}})");
  try {
    a.add("w", 1 << 20, "", bad);
    FAIL() << "an agent started with a prior that does not parse";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("bad_prior.json: at /hosts/x: host 'x': expected at "
                                         "least one group ID"),
              std::string::npos)
        << e.what();
  }
}

TEST(AgentFleet, DeadAndSilentAgentsBecomeMissingPairsWithinTheDeadline) {
  Agents a;
  Daemon& x = a.add("x");
  Daemon& y = a.add("y");
  // "dead": nothing listens; "silent": accepts connections and never answers.
  Listener deadPort = probe::listenOn({"127.0.0.1", 0});
  uint16_t dead = deadPort.port();
  deadPort = Listener();  // closed: connections are refused
  Listener silent = probe::listenOn({"127.0.0.1", 0});
  std::vector<Host> hosts = {{"x", fmt::format("127.0.0.1:{}", x.probePort())},
                             {"dead", fmt::format("127.0.0.1:{}", dead)},
                             {"y", fmt::format("127.0.0.1:{}", y.probePort())},
                             {"silent", fmt::format("127.0.0.1:{}", silent.port())}};
  probe::ProbeKey key = probe::ProbeKey::load(a.key);
  ProbeOptions o = fastProbe();
  probe::AgentFleet c(hosts, key, "test", o.fleet);
  auto t0 = std::chrono::steady_clock::now();
  probe::RoundOutcome r = probe::runRound(c, o.round, Deadline::after(20s));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, 10s);
  const probe::RoundSummary sum = probe::summarize(r);
  EXPECT_EQ(sum.status, "partial");
  EXPECT_EQ(sum.pairsTotal, 6u);
  EXPECT_EQ(sum.pairsMissing, 5u);  // only x-y measured
  EXPECT_EQ(r.deadHosts, (std::vector<std::string>{"dead", "silent"}));
  EXPECT_TRUE(r.topology.bandwidthMbps.at(0, 2));
  EXPECT_TRUE(r.topology.bandwidthMbps.at(2, 0));
  EXPECT_TRUE(r.topology.latencyUs.at(0, 2));
  EXPECT_FALSE(r.topology.bandwidthMbps.at(0, 1));
  EXPECT_GT(r.failures["connect"] + r.failures["timeout"] + r.failures["peer"], 0u);
}

// A trial's loaded round trips ride on their pinger's flow request: each comes back with the
// flow, a dead peer's as nullopt, and one whose pinger sends no flow is not taken.
TEST(AgentFleet, LoadedRoundTripsComeBackWithTheirFlow) {
  Agents a;
  Daemon& x = a.add("x");
  Daemon& y = a.add("y");
  Daemon& z = a.add("z");
  Listener deadPort = probe::listenOn({"127.0.0.1", 0});
  const uint16_t dead = deadPort.port();
  deadPort = Listener();  // closed: connections are refused
  std::vector<Host> hosts = {Agents::host(x),
                             Agents::host(y),
                             Agents::host(z),
                             {"dead", fmt::format("127.0.0.1:{}", dead)}};
  probe::ProbeKey key = probe::ProbeKey::load(a.key);
  probe::AgentFleet fleet(hosts, key, "test", fastProbe().fleet);
  probe::BandwidthOptions bo;
  bo.maxMs = 100;
  probe::LoadedPings pings;
  pings.pairs = {{0, 2}, {0, 3}, {0, 1}, {2, 0}};
  auto flows = fleet.bandwidth({{0, 1}}, bo, Deadline::after(10s), &pings);
  ASSERT_EQ(flows.size(), 1u);
  ASSERT_TRUE(flows[0].value) << flows[0].message;
  ASSERT_EQ(pings.us.size(), 4u);
  ASSERT_TRUE(pings.us[0]);
  EXPECT_GT(*pings.us[0], 0);
  EXPECT_LT(*pings.us[0], 1e6);
  EXPECT_FALSE(pings.us[1]);  // refused
  ASSERT_TRUE(pings.us[2]);   // the flow's own receiver
  EXPECT_FALSE(pings.us[3]);  // z sends no flow in this trial
  EXPECT_EQ(fleet.cost().latencyPairs, 3u);
}

// Bad loaded round trips in a request are refused naming the field.
TEST(AgentFleet, LoadedRoundTripsOnAReceivedFlowAreRefused) {
  Agents a;
  Daemon& x = a.add("x");
  Daemon& y = a.add("y");
  probe::ProbeKey key = probe::ProbeKey::load(a.key);
  Json req = {{"op", "bandwidth"},
              {"direction", "recv"},
              {"peer", Agents::hostJson(y)},
              {"bulk", probe::BandwidthOptions{}.toJson()},
              {"pings", Json::array({Agents::hostJson(y)})}};
  try {
    probe::request({"127.0.0.1", x.probePort()}, key, "test", req, Deadline::after(5s));
    FAIL() << "pings on a received flow were taken";
  } catch (const probe::RefusedError& e) {
    EXPECT_NE(std::string(e.what()).find("pings"), std::string::npos) << e.what();
  }
}

TEST(AgentFleet, AgentKilledMidRoundLeavesItsPairsMissing) {
  Agents a;
  for (const char* n : {"p", "q", "r", "s"}) a.add(n);
  std::vector<Host> hosts;
  for (auto& d : a.d) hosts.push_back({d->name(), fmt::format("127.0.0.1:{}", d->probePort())});
  probe::ProbeKey key = probe::ProbeKey::load(a.key);
  ProbeOptions o = fastProbe();
  probe::AgentFleet c(hosts, key, "test", o.fleet);
  std::atomic<bool> killed{false};
  probe::RoundOutcome r =
      probe::runRound(c, o.round, Deadline::after(20s), [&](const probe::RoundProgress& p) {
        if (p.phase == "structure" && !killed.exchange(true)) a.d[3]->stop();  // "s" dies
      });
  EXPECT_EQ(probe::summarize(r).status, "partial");
  EXPECT_EQ(r.deadHosts, (std::vector<std::string>{"s"}));
  // Latency ran before the kill: every pair has something; bandwidth to/from s is missing.
  for (size_t i = 0; i < 3; ++i)
    EXPECT_FALSE(r.topology.bandwidthMbps.at(i, 3) && r.topology.bandwidthMbps.at(3, i));
  EXPECT_TRUE(r.topology.bandwidthMbps.at(0, 1));
}

TEST(AgentConfig, ParsesCommentedJsonAndRejectsUnknownKeys) {
  TempDir dir;
  std::string path = dir.write("rankmapd.json", R"({
    // comments are allowed
    "listen": "127.0.0.1:9000",
    "prior": "/etc/rankmap/prior.json",
    "prior_labels": "topology.k8s.aws/network-node-layer-3",
    "probe": {"bandwidth_max_ms": 100, "bandwidth_max_bytes": "8M", "round_timeout": "2m"},
    "reprobe": {"interval": "30s", "change_threshold": 0.3, "sample_rounds": 2},
    "http": {"max_body_bytes": "64K"}
  })");
  AgentConfig c = AgentConfig::load(path);
  EXPECT_EQ(c.listen, (probe::Endpoint{"127.0.0.1", 9000}));
  EXPECT_EQ(c.priorFile, "/etc/rankmap/prior.json");
  EXPECT_EQ(c.priorLabels, "topology.k8s.aws/network-node-layer-3");
  EXPECT_EQ(c.toJson()["prior"], "/etc/rankmap/prior.json");
  EXPECT_EQ(c.probe.round.bandwidth.maxMs, 100);
  EXPECT_EQ(c.probe.round.bandwidth.maxBytes, 8u << 20);
  EXPECT_EQ(c.probe.roundTimeout, std::chrono::minutes(2));
  EXPECT_EQ(c.reprobe.interval, 30s);
  EXPECT_DOUBLE_EQ(c.reprobe.changeThreshold, 0.3);  // sample_rounds: retired, accepted
  EXPECT_FALSE(c.toJson()["reprobe"].contains("sample_rounds"));
  EXPECT_EQ(c.maxBodyBytes, 64u << 10);
  for (const char* bad : {R"({"listn": "x"})", R"({"probe": {"latency_samples": 0}})",
                          R"({"reprobe": {"interval": "soon"}})", R"({"listen": "host:1"})", "{"}) {
    std::string p = dir.write("bad.json", bad);
    EXPECT_THROW(AgentConfig::load(p), InvalidInput) << bad;
  }
  // The shipped example parses.
  EXPECT_NO_THROW(
      AgentConfig::load(std::string(RANKMAP_TEST_DATA_DIR) + "/../../configs/rankmapd.json"));
}

TEST(Daemon, RefusesToStartWithoutAKeyOrWithAShortToken) {
  TempDir dir;
  AgentConfig c;
  c.stateDir = dir.file("s");
  EXPECT_THROW(Daemon{c}, InvalidInput);
  c.keyFile = dir.write("key", std::string(64, 'k'));
  c.tokenFile = dir.write("token", "short");
  EXPECT_THROW(Daemon{c}, InvalidInput);
}

// ---- topology push (agent/topology_push.h) ----

std::vector<Host> names(std::initializer_list<const char*> n) {
  std::vector<Host> out;
  for (const char* x : n) out.push_back({x, "127.0.0.1:1"});
  return out;
}

// Every host but `self` once, as a target or in a relay list.
void expectEachOnce(const std::vector<PushRoute>& routes, size_t others) {
  std::multiset<std::string> seen;
  for (const auto& r : routes) {
    seen.insert(r.to.name);
    for (const auto& h : r.relay) seen.insert(h.name);
  }
  EXPECT_EQ(seen.size(), others);
  for (const auto& n : seen) EXPECT_EQ(seen.count(n), 1u) << n;
}

TEST(TopologyPush, RoutesFollowTheFirstLevelsGroups) {
  auto hosts = names({"a", "b", "c", "d", "e", "f", "g", "h"});
  Topology t = Topology::empty(hosts);
  t.groups = {{"rack", 1, {{"a", "b", "c"}, {"d", "e"}, {"f", "g"}}}};  // h in no group
  auto routes = pushRoutes(t, hosts, "b");
  expectEachOnce(routes, 7);
  // Own group and the unplaced host directly; one relay per other group (its first member).
  ASSERT_EQ(routes.size(), 5u);
  EXPECT_EQ(routes[0].to.name, "a");
  EXPECT_EQ(routes[1].to.name, "c");
  EXPECT_EQ(routes[2].to.name, "h");
  EXPECT_EQ(routes[3].to.name, "d");
  ASSERT_EQ(routes[3].relay.size(), 1u);
  EXPECT_EQ(routes[3].relay[0].name, "e");
  EXPECT_EQ(routes[4].to.name, "f");
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(routes[i].relay.empty());
}

TEST(TopologyPush, RoutesWithoutGroupsAreChunksOfSquareRoot) {
  std::vector<Host> hosts;
  for (int i = 0; i < 101; ++i) hosts.push_back({fmt::format("h{}", i), "127.0.0.1:1"});
  auto routes = pushRoutes(Topology::empty(hosts), hosts, "h0");
  expectEachOnce(routes, 100);
  EXPECT_EQ(routes.size(), 10u);  // 100 others in chunks of 10
  for (const auto& r : routes) EXPECT_EQ(r.relay.size(), 9u);
  EXPECT_TRUE(pushRoutes(Topology::empty(hosts), {hosts[0]}, "h0").empty());
}

TEST(TopologyPush, GroupsLargerThanTheSquareRootAreRelayedInChunks) {
  // A weak structure: one group of 90 hosts (the coordinator's own), another of 10.
  std::vector<Host> hosts;
  std::vector<std::string> big, small;
  for (int i = 0; i < 101; ++i) {
    hosts.push_back({fmt::format("h{}", i), "127.0.0.1:1"});
    (i <= 90 ? big : small).push_back(hosts.back().name);
  }
  Topology t = Topology::empty(hosts);
  t.groups = {{"rack", 1, {big, small}}};
  auto routes = pushRoutes(t, hosts, "h0");
  expectEachOnce(routes, 100);
  // Own group's 90 others in 9 chunks of 10, the other group one chunk: 10 copies from the
  // coordinator instead of 91, and 9 from each relay.
  EXPECT_EQ(routes.size(), 10u);
  for (const auto& r : routes) EXPECT_EQ(r.relay.size(), 9u) << r.to.name;
}

struct PushBed {
  Agents a;
  std::vector<Host> hosts;
  Topology t;
  probe::ProbeKey key;
  PushBed() : key(probe::ProbeKey::load(a.key)) {}
  void add(const std::string& name) {
    Daemon& d = a.add(name);
    hosts.push_back({name, fmt::format("127.0.0.1:{}", d.probePort())});
  }
  PushReport push(const std::vector<std::vector<std::string>>& racks) {
    t = Topology::empty(hosts);
    t.version = 7;
    t.groups = {{"rack", 1, racks}};
    return pushTopology(std::make_shared<const std::string>(t.toJson().dump()),
                        pushRoutes(t, hosts, "x"), key, "x", Deadline::after(3s),
                        Deadline::after(15s));
  }
  bool has(size_t i) { return a.d[i]->store().topology(7).has_value(); }
};

TEST(TopologyPush, RelaysForwardInsideTheirGroup) {
  PushBed b;
  for (const char* n : {"x", "y", "z", "w", "v"}) b.add(n);
  auto rep = b.push({{"x", "y"}, {"z", "w", "v"}});
  EXPECT_EQ(rep.agents, 4u);
  EXPECT_EQ(rep.reached, 4u);
  EXPECT_EQ(rep.relays, 1u);
  EXPECT_EQ(rep.direct, 0u);
  EXPECT_TRUE(rep.failed.empty());
  EXPECT_FALSE(b.has(0));  // x is the coordinator: it published, nobody pushes to it
  for (size_t i = 1; i < 5; ++i) EXPECT_TRUE(b.has(i)) << b.hosts[i].name;
}

TEST(TopologyPush, ADeadRelaysGroupGetsItDirectlyAndTheDeadAreNamed) {
  PushBed b;
  for (const char* n : {"x", "y"}) b.add(n);
  b.hosts.push_back({"dead", "127.0.0.1:1"});  // first of its group: the relay
  for (const char* n : {"z", "w"}) b.add(n);
  b.hosts.push_back({"gone", "127.0.0.1:1"});  // in a live relay's list
  auto rep = b.push({{"x", "y"}, {"dead", "z"}, {"w", "gone"}});
  EXPECT_EQ(rep.agents, 5u);
  EXPECT_EQ(rep.reached, 3u);  // y; z directly; w
  EXPECT_EQ(rep.relays, 2u);
  // dead, z, gone; then dead and gone again in kPushRetryWaves more waves (a connection
  // refused may pass: an agent restarting), kPushRetryPause apart, within the deadline.
  EXPECT_EQ(rep.direct, 3u + 2 * kPushRetryWaves);
  EXPECT_EQ(rep.retried, 2u * kPushRetryWaves);
  ASSERT_EQ(rep.failed.size(), 2u);
  std::set<std::string> failed;
  for (const auto& [name, why] : rep.failed) {
    failed.insert(name);
    EXPECT_NE(why.find("127.0.0.1:1"), std::string::npos) << why;
  }
  EXPECT_EQ(failed, (std::set<std::string>{"dead", "gone"}));
  for (size_t i = 1; i < b.a.d.size(); ++i) EXPECT_TRUE(b.has(i)) << b.a.d[i]->name();
}

TEST(TopologyPush, BadRelayListsAreRefusedNamingTheField) {
  probe::ProbeKey key = probe::ProbeKey::load(Agents().key);
  Json doc = Topology::empty(names({"a"})).toJson();
  auto refuse = [&](const Json& list, const std::string& what) {
    try {
      relayTopology(doc, list, "push from a", key, "a", Deadline::after(1s));
      ADD_FAILURE() << "accepted " << list.dump();
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refuse(Json::object(), "/relay");
  refuse(Json::array({"a 10.0.0.1"}), "/relay/0");
  refuse(Json::array({{{"name", "b"}}}), "address");
  refuse(Json::array({{{"name", "b"}, {"address", "example.com"}}}), "push from a /relay");
  Json many = Json::array();
  for (size_t i = 0; i <= kMaxHosts; ++i)
    many.push_back({{"name", fmt::format("h{}", i)}, {"address", "10.0.0.1"}});
  refuse(many, "at most");
  EXPECT_EQ(relayTopology(doc, Json::array(), "push from a", key, "a", Deadline::after(1s))["sent"],
            0);
}

}  // namespace
}  // namespace rankmap::agent
