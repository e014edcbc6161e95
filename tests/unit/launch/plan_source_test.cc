// Where `rankmap run` gets plans (launch/plan_source.h): files, a topology planned on the
// spot, and a fake rankmapd on loopback that answers, fails, is slow or is down.
#include "launch/plan_source.h"

#include <httplib.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/files.h"
#include "common/http_client.h"
#include "reorder/mesh.h"
#include "tests/unit/common/plan_util.h"
#include "tests/unit/shim_mpi/subprocess.h"

namespace rankmap::launch {
namespace {

using Argv = std::vector<std::string>;
using testing::orderedPlan;

Job job(std::initializer_list<const char*> hosts, int k = 1) {
  Job j;
  for (auto h : hosts) j.hosts.push_back({h, k});
  return j;
}

// Two racks {a, c} and {b, d}: fast inside, slow across. Addresses 10.0.0.1.. in name order.
Topology twoRacks() {
  Topology t = Topology::empty({{"a", "10.0.0.1"}, {"b", "10.0.0.2"}, {"c", "10.0.0.3"}, {"d", "10.0.0.4"}});
  auto rack = [](size_t i) { return i % 2; };
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < 4; ++j) {
      if (i == j) continue;
      bool same = rack(i) == rack(j);
      t.bandwidthMbps.at(i, j) = same ? 1000.0 : 250.0;
      t.latencyUs.at(i, j) = LatencyStats{same ? 40.0 : 90.0, same ? 50.0 : 100.0,
                                          same ? 55.0 : 110.0, same ? 60.0 : 120.0};
    }
  return t;
}

// A fake rankmapd: GET /v1/plan and /v1/topology, with a configurable behaviour.
class FakeAgent {
 public:
  FakeAgent() {
    server_.Get("/v1/plan", [this](const httplib::Request& req, httplib::Response& res) {
      lastQuery_ = req.get_param_value("hosts") + "|" + req.get_param_value("ranks_per_host");
      if (req.has_param("mesh"))
        lastQuery_ += "|" + req.get_param_value("mesh") + "|" + req.get_param_value("traffic");
      if (delayMs_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delayMs_));
      res.status = status_;
      res.set_content(body_, "application/json");
    });
    server_.Get("/v1/topology", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(topology_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // The socket listens from bind_to_any_port() on; wait for the accept loop anyway.
    for (int i = 0; i < 2000 && !server_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeAgent() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> delayMs_{0};
  int status_ = 200;
  std::string body_;
  std::string topology_;
  std::string lastQuery_;
};

TEST(PlanFromFile, ReadsAndRefuses) {
  testing::TempDir dir;
  Plan p = orderedPlan({"a", "b"}, {"b", "a"});
  p.save(dir.file("plan.json"));
  PlanResult r = planFromFile(dir.file("plan.json"), "");
  ASSERT_TRUE(r.plan) << r.error;
  EXPECT_EQ(*r.plan, p);
  EXPECT_EQ(r.planPath.front(), '/');
  EXPECT_FALSE(r.source.madeForJob);

  r = planFromFile(dir.file("absent.json"), "");
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("absent.json"), std::string::npos) << r.error;

  writeFileAtomic(dir.file("bad.json"), "{\"schema_version\": 1}");
  r = planFromFile(dir.file("bad.json"), "");
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("hosts"), std::string::npos) << r.error;

  // The topology beside a plan only supplies addresses; a bad one is an error too.
  twoRacks().save(dir.file("t.json"));
  r = planFromFile(dir.file("plan.json"), dir.file("t.json"));
  ASSERT_TRUE(r.plan);
  EXPECT_EQ(r.known.size(), 4u);
  r = planFromFile(dir.file("plan.json"), dir.file("absent-topology.json"));
  EXPECT_FALSE(r.plan);
}

TEST(PlanFromTopology, PlansExactlyTheJobsHosts) {
  testing::TempDir dir;
  twoRacks().save(dir.file("t.json"));
  // Addresses and names mixed; input order a b c d alternates the racks.
  PlanResult r = planFromTopology(dir.file("t.json"), job({"10.0.0.1", "b", "c", "10.0.0.4"}, 2));
  ASSERT_TRUE(r.plan) << r.error;
  EXPECT_TRUE(r.source.madeForJob);
  EXPECT_EQ(r.plan->hosts, (Argv{"a", "b", "c", "d"}));
  EXPECT_EQ(r.plan->ranksPerHost, 2);
  // The ring keeps each rack together: a and c adjacent, b and d adjacent.
  auto pos = [&](const std::string& h) {
    return std::find(r.plan->order.begin(), r.plan->order.end(), h) - r.plan->order.begin();
  };
  auto adjacent = [&](const std::string& x, const std::string& y) {
    auto d = std::abs(pos(x) - pos(y));
    return d == 1 || d == 3;
  };
  EXPECT_TRUE(adjacent("a", "c")) << fmt::format("{}", fmt::join(r.plan->order, ","));
  EXPECT_TRUE(adjacent("b", "d")) << fmt::format("{}", fmt::join(r.plan->order, ","));
  // A subset of the topology's hosts.
  r = planFromTopology(dir.file("t.json"), job({"d", "a"}));
  ASSERT_TRUE(r.plan) << r.error;
  EXPECT_EQ(r.plan->hosts, (Argv{"d", "a"}));
  // A host the topology lacks.
  r = planFromTopology(dir.file("t.json"), job({"a", "zz"}));
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("zz"), std::string::npos) << r.error;
  r = planFromTopology(dir.file("absent.json"), job({"a"}));
  EXPECT_FALSE(r.plan);
}

// With a mesh pp=2 x dp=2 over a b c d (racks {a, c} and {b, d}), each data-parallel group
// (positions 0 and 1, 2 and 3: across the racks in the input order) lands in one rack; a mesh
// that does not fit the job is an error.
TEST(PlanFromTopology, PlacesAMeshsGroups) {
  testing::TempDir dir;
  twoRacks().save(dir.file("t.json"));
  std::vector<MeshDim> mesh = reorder::parseMesh("pp=2,dp=2", "--mesh");
  reorder::meshTraffic(mesh, "", "--traffic");
  PlanResult r = planFromTopology(dir.file("t.json"), job({"a", "b", "c", "d"}), mesh);
  ASSERT_TRUE(r.plan) << r.error;
  ASSERT_TRUE(r.plan->mesh);
  const auto& o = r.plan->order;
  auto rack = [](const std::string& h) { return h == "a" || h == "c" ? 0 : 1; };
  EXPECT_EQ(rack(o[0]), rack(o[1])) << fmt::format("{}", fmt::join(o, ","));
  EXPECT_EQ(rack(o[2]), rack(o[3])) << fmt::format("{}", fmt::join(o, ","));
  r = planFromTopology(dir.file("t.json"), job({"a", "b", "c", "d"}, 2), mesh);
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("the mesh has 4 ranks but the job has 8"), std::string::npos) << r.error;
}

TEST(PlanForFramework, StalePlansAreDroppedWithTheReason) {
  testing::TempDir dir;
  Plan p = orderedPlan({"a", "b"}, {"b", "a"});
  p.topologyTime = "2020-01-01T00:00:00Z";
  p.seal();
  p.save(dir.file("plan.json"));
  Topology t = twoRacks();
  t.time = "2020-01-01T00:00:00Z";
  t.save(dir.file("t.json"));
  auto makeJob = [] { return job({"a", "b", "c"}); };
  PlanChecks noLimit;  // maxAge 0: plans never go stale
  PlanResult r = planForFramework(dir.file("plan.json"), "", makeJob, "missing", noLimit);
  ASSERT_TRUE(r.plan) << r.error;

  PlanChecks hour;
  hour.maxAge = std::chrono::hours(1);
  r = planForFramework(dir.file("plan.json"), "", makeJob, "missing", hour);
  EXPECT_FALSE(r.plan);
  EXPECT_TRUE(r.planPath.empty());
  EXPECT_NE(r.error.find("plan from " + dir.file("plan.json") + " is stale"), std::string::npos)
      << r.error;
  // Planned on the spot from an old topology: the plan carries the topology's time.
  r = planForFramework("", dir.file("t.json"), makeJob, "missing", hour);
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("is stale"), std::string::npos) << r.error;

  // A fresh plan passes the same check; one without topology_time never goes stale.
  PlanResult fresh = planFromFile(dir.file("plan.json"), "");
  fresh.plan->topologyTime = "";
  fresh.plan->seal();
  dropStalePlan(fresh, hour);
  EXPECT_TRUE(fresh.plan) << fresh.error;
}

TEST(PlanForFramework, PlanFileThenTopologyThenNothing) {
  testing::TempDir dir;
  Plan p = orderedPlan({"a", "b"}, {"b", "a"});
  p.save(dir.file("plan.json"));
  twoRacks().save(dir.file("t.json"));
  int jobsMade = 0;
  auto makeJob = [&] {
    ++jobsMade;
    return job({"a", "b", "c"});
  };
  // A plan file wins; the job is not needed.
  PlanResult r = planForFramework(dir.file("plan.json"), dir.file("t.json"), makeJob, "missing", {});
  ASSERT_TRUE(r.plan) << r.error;
  EXPECT_EQ(*r.plan, p);
  EXPECT_EQ(jobsMade, 0);

  r = planForFramework("", dir.file("t.json"), makeJob, "missing", {});
  ASSERT_TRUE(r.plan) << r.error;
  EXPECT_EQ(r.plan->hosts, (Argv{"a", "b", "c"}));
  EXPECT_TRUE(r.source.madeForJob);
  EXPECT_EQ(jobsMade, 1);

  // An Error from making the job (reading the topology) is the result's error.
  r = planForFramework("", dir.file("t.json"),
                       []() -> Job { RANKMAP_THROW(InvalidInput, "no hosts in it"); }, "missing",
                       {});
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("no hosts in it"), std::string::npos) << r.error;
  EXPECT_EQ(r.source.description, "topology " + dir.file("t.json"));

  r = planForFramework("", "", makeJob, "needs --plan or --topology", {});
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.error, "needs --plan or --topology");
  EXPECT_EQ(r.source.description, "the command line");
  EXPECT_EQ(jobsMade, 1);
}

TEST(PlanFromAgent, AsksForExactlyTheJobsHosts) {
  FakeAgent agent;
  Plan p = orderedPlan({"a", "b", "c"}, {"c", "a", "b"}, 2);
  agent.body_ = p.dump();
  PlanResult r = planFromAgent(agent.url(), job({"a", "b", "c"}, 2), Deadline::afterMs(5000));
  ASSERT_TRUE(r.plan) << r.error;
  EXPECT_EQ(*r.plan, p);
  EXPECT_EQ(agent.lastQuery_, "a,b,c|2");
  EXPECT_TRUE(r.source.madeForJob);
  EXPECT_TRUE(r.known.empty());
}

// A job's mesh goes to the agent as it was resolved here (traffic included), so both plan alike.
TEST(PlanFromAgent, SendsTheJobsMesh) {
  FakeAgent agent;
  agent.body_ = orderedPlan({"a", "b"}, {"b", "a"}, 2).dump();
  std::vector<MeshDim> mesh = reorder::parseMesh("dp=2,pp=2", "--mesh");
  reorder::meshTraffic(mesh, "pp=sendrecv:1MiB", "--traffic");
  PlanResult r = planFromAgent(agent.url(), job({"a", "b"}, 2), Deadline::afterMs(5000), "", mesh);
  ASSERT_TRUE(r.plan) << r.error;
  EXPECT_EQ(agent.lastQuery_, "a,b|2|dp=2,pp=2|dp=allreduce:268435456,pp=sendrecv:1048576");
}

TEST(PlanFromAgent, AddressesComeFromTheAgentsTopology) {
  FakeAgent agent;
  agent.body_ = orderedPlan({"a", "b"}, {"b", "a"}).dump();
  agent.topology_ = twoRacks().dump();
  PlanResult r = planFromAgent(agent.url(), job({"10.0.0.1", "10.0.0.2"}), Deadline::afterMs(5000));
  ASSERT_TRUE(r.plan) << r.error;
  EXPECT_EQ(agent.lastQuery_, "10.0.0.1,10.0.0.2|1");
  EXPECT_EQ(r.known.size(), 4u);
}

TEST(PlanFromAgent, ErrorsSlownessAndDownAgentsGiveNoPlan) {
  FakeAgent agent;
  agent.status_ = 501;
  agent.body_ = "planner not available\n";
  PlanResult r = planFromAgent(agent.url(), job({"a"}), Deadline::afterMs(5000));
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("HTTP 501: planner not available"), std::string::npos) << r.error;

  agent.status_ = 200;
  agent.body_ = "{ not json";
  r = planFromAgent(agent.url(), job({"a"}), Deadline::afterMs(5000));
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("agent plan"), std::string::npos) << r.error;

  // Slow: the bound holds (the agent answers after 1.5 s, the wait ends after 300 ms).
  agent.delayMs_ = 1500;
  auto t0 = std::chrono::steady_clock::now();
  r = planFromAgent(agent.url(), job({"a"}), Deadline::afterMs(300));
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("no answer within"), std::string::npos) << r.error;
  EXPECT_LT(waited, std::chrono::milliseconds(1200));
  agent.delayMs_ = 0;

  // Down: nothing listens on the port any more.
  std::string url = agent.url();
  agent.server_.stop();
  r = planFromAgent(url, job({"a"}), Deadline::afterMs(2000));
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.error.find("GET " + url + "/v1/plan"), std::string::npos) << r.error;
}

TEST(UrlEncode, KeepsUnreservedOnly) {
  EXPECT_EQ(urlEncode("vm-0.a_b~"), "vm-0.a_b~");
  EXPECT_EQ(urlEncode("user@h:1,x y"), "user%40h%3A1%2Cx%20y");
}

}  // namespace
}  // namespace rankmap::launch
