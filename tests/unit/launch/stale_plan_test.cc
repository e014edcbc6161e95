// The stale-plan watch of `rankmap run` (launch/stale_plan.h): the pure verdict, and the watch
// itself beside a dummy job (`sleep`) while a loopback HTTP server standing in for rankmapd
// publishes a plan from a newer topology.
#include "launch/stale_plan.h"

#include <httplib.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/files.h"
#include "launch/process.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap::launch {
namespace {

// The launched plan: 4 hosts, input order vm0..vm3, ring vm2 vm0 vm3 vm1, topology version 1.
Plan launchedPlan() {
  Plan p = Plan::identity({"vm0", "vm1", "vm2", "vm3"}, 1);
  p.order = {"vm2", "vm0", "vm3", "vm1"};
  p.epoch = 1;
  p.derivePermutation();
  p.seal();
  return p;
}

// What an agent would answer for the launched order as input order, on topology `epoch`: ring
// `order`, predicted planUs against inputOrderUs (the launched order).
Plan agentPlan(const Plan& launched, std::vector<std::string> order, int64_t epoch, double planUs,
               double inputUs) {
  Plan p = Plan::identity(launched.order, launched.ranksPerHost);
  p.order = std::move(order);
  p.epoch = epoch;
  p.predicted.basis = "allreduce 16 MiB ring";
  p.predicted.planUs = planUs;
  p.predicted.inputOrderUs = inputUs;
  p.predicted.speedup = inputUs / planUs;
  p.derivePermutation();
  p.seal();
  return p;
}

TEST(JudgeStale, OnlyANewerTopologyWithAFasterOtherOrder) {
  Plan l = launchedPlan();
  std::vector<std::string> other{"vm0", "vm1", "vm2", "vm3"};
  EXPECT_FALSE(judgeStale(l, l, 0.1).stale);
  EXPECT_FALSE(judgeStale(l, agentPlan(l, other, 1, 100, 200), 0.1).stale) << "same version";
  EXPECT_FALSE(judgeStale(l, agentPlan(l, l.order, 2, 100, 100), 0.1).stale) << "same order";
  StaleVerdict small = judgeStale(l, agentPlan(l, other, 2, 95, 100), 0.1);
  EXPECT_FALSE(small.stale) << small.reason;
  ASSERT_TRUE(small.gain);
  EXPECT_NEAR(*small.gain, 100.0 / 95, 1e-9);
  StaleVerdict big = judgeStale(l, agentPlan(l, other, 2, 100, 150), 0.1);
  EXPECT_TRUE(big.stale) << big.reason;
  ASSERT_TRUE(big.gain);
  EXPECT_DOUBLE_EQ(*big.gain, 1.5);
  // A plan whose input order is not the job's: newer and another order, gain not predicted.
  Plan unrelated = Plan::identity({"vm0", "vm1", "vm2", "vm3"}, 1);
  unrelated.order = other;
  unrelated.epoch = 3;
  unrelated.seal();
  StaleVerdict u = judgeStale(l, unrelated, 0.1);
  EXPECT_TRUE(u.stale);
  EXPECT_FALSE(u.gain);
  EXPECT_NE(u.reason.find("not predicted"), std::string::npos) << u.reason;
}

// A loopback stand-in for rankmapd's GET /v1/plan whose answer the test replaces.
class PublishingAgent {
 public:
  PublishingAgent() {
    server_.Get("/v1/plan", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      query_ = req.get_param_value("hosts") + "|" + req.get_param_value("ranks_per_host");
      ++requests_;
      res.status = 200;
      res.set_content(body_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 2000 && !server_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~PublishingAgent() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void publish(const Plan& p) {
    std::lock_guard<std::mutex> lock(mu_);
    body_ = p.dump();
  }
  int requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  std::string query() {
    std::lock_guard<std::mutex> lock(mu_);
    return query_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::string body_;
  std::string query_;
  int requests_ = 0;
};

bool waitUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

// A plan for a job's mesh is judged by its step, not by the world ring it also predicts: here
// the ring would call it stale (100 vs 150 us) but the step gains 5% only, inside the margin.
TEST(JudgeStale, AMeshPlanIsJudgedByItsStep) {
  Plan l = launchedPlan();
  Plan c = agentPlan(l, {"vm0", "vm1", "vm2", "vm3"}, 2, 100, 150);
  c.mesh = PlanMesh{{{"dp", 2, "allreduce", 1 << 20, 0, {}}, {"pp", 2, "sendrecv", 1 << 16, 0, {}}},
                    950,
                    1000,
                    1000};
  c.seal();
  StaleVerdict v = judgeStale(l, c, 0.1);
  EXPECT_FALSE(v.stale) << v.reason;
  ASSERT_TRUE(v.gain);
  EXPECT_NEAR(*v.gain, 1000.0 / 950, 1e-9);
  EXPECT_NE(v.reason.find("step for mesh dp=2,pp=2 950.0 us vs 1000.0 us"), std::string::npos)
      << v.reason;
  c.mesh->stepUs = 500;
  c.seal();
  EXPECT_TRUE(judgeStale(l, c, 0.1).stale);
}

TEST(StalePlanWatch, AgentPublishingANewerTopologyIsToldOnceWhileTheJobRuns) {
  rankmap::testing::TempDir dir;
  Plan launched = launchedPlan();
  PublishingAgent agent;
  agent.publish(launched);  // the agent still gives the job's plan
  std::mutex linesMu;
  std::vector<std::string> lines;
  StalePlanOptions o;
  o.every = std::chrono::milliseconds(50);
  o.requestTimeout = std::chrono::seconds(2);
  o.metricsDir = dir.path();
  o.sourceName = "agent " + agent.url();
  Child job = spawn({"sleep", "30"});
  auto t0 = std::chrono::steady_clock::now();
  StalePlanWatch watch(launched, agentStaleSource(agent.url(), "", launched), o,
                       [&](const std::string& line) {
                         std::lock_guard<std::mutex> lock(linesMu);
                         lines.push_back(line);
                       });
  const std::string prom = watch.metricsPath();
  ASSERT_EQ(prom, dir.file("rankmap_run_" + std::to_string(::getpid()) + ".prom"));
  ASSERT_TRUE(waitUntil([&] { return watch.checks() >= 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(watch.notices(), 0u);
  EXPECT_NE(readFile(prom).find("rankmap_run_plan_stale{"), std::string::npos);
  EXPECT_NE(readFile(prom).find("} 0\n"), std::string::npos) << readFile(prom);
  // The job's hosts in the launched order are the input order the agent plans from.
  EXPECT_EQ(agent.query(), "vm2,vm0,vm3,vm1|1");

  Plan newer = agentPlan(launched, {"vm0", "vm1", "vm2", "vm3"}, 2, 100, 150);
  agent.publish(newer);
  ASSERT_TRUE(waitUntil([&] { return watch.notices() == 1; }, std::chrono::seconds(10)));
  const uint64_t at = watch.checks();
  ASSERT_TRUE(waitUntil([&] { return watch.checks() >= at + 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(watch.notices(), 1u) << "once per new plan, not once per check";
  {
    std::lock_guard<std::mutex> lock(linesMu);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("plan " + launched.hash.substr(0, 19) + " is stale"),
              std::string::npos)
        << lines[0];
    EXPECT_NE(lines[0].find("plan " + newer.hash.substr(0, 19) + " (topology version 2)"),
              std::string::npos)
        << lines[0];
    EXPECT_NE(lines[0].find("predicted 1.50x faster"), std::string::npos) << lines[0];
  }
  std::string text = readFile(prom);
  EXPECT_NE(text.find("current_plan=\"" + newer.hash.substr(0, 19) + "\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rankmap_run_plan_predicted_gain{"), std::string::npos);
  EXPECT_NE(text.find("} 1.5\n"), std::string::npos) << text;
  EXPECT_EQ(watch.failures(), 0u);

  // The job was never disturbed; ending it ends the watch at once, and its file goes.
  EXPECT_TRUE(job.running());
  job.kill(SIGTERM);
  job.wait();
  auto s0 = std::chrono::steady_clock::now();
  watch.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - s0, std::chrono::seconds(2));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_FALSE(std::filesystem::exists(prom));
  const int after = agent.requests();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(agent.requests(), after) << "no request after stop()";
}

TEST(StalePlanWatch, DownAgentIsCountedNeverTold) {
  Plan launched = launchedPlan();
  StalePlanOptions o;
  o.every = std::chrono::milliseconds(20);
  o.requestTimeout = std::chrono::milliseconds(500);
  int said = 0;
  StalePlanWatch watch(launched, agentStaleSource("http://127.0.0.1:9", "", launched), o,
                       [&](const std::string&) { ++said; });
  ASSERT_TRUE(waitUntil([&] { return watch.failures() >= 2; }, std::chrono::seconds(10)));
  watch.stop();
  EXPECT_EQ(said, 0);
  EXPECT_EQ(watch.notices(), 0u);
  EXPECT_EQ(watch.metricsPath(), "");
}

TEST(StalePlanWatch, PlanFileReplacedByANewerOneIsToldOnceCorruptOnesAreCounted) {
  rankmap::testing::TempDir dir;
  Plan launched = launchedPlan();
  const std::string path = dir.file("plan.json");
  launched.save(path);
  std::atomic<int> said{0};
  StalePlanOptions o;
  o.every = std::chrono::milliseconds(20);
  StalePlanWatch watch(launched, fileStaleSource(path, fileIdentity(path), launched), o,
                       [&](const std::string&) { ++said; });
  ASSERT_TRUE(waitUntil([&] { return watch.checks() >= 2; }, std::chrono::seconds(10)));
  writeFileAtomic(path, "{ not a plan");
  ASSERT_TRUE(waitUntil([&] { return watch.failures() >= 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(said.load(), 0);
  Plan newer = agentPlan(launched, {"vm3", "vm2", "vm1", "vm0"}, 5, 10, 30);
  newer.save(path);
  ASSERT_TRUE(waitUntil([&] { return watch.notices() == 1; }, std::chrono::seconds(10)));
  const uint64_t at = watch.checks();
  ASSERT_TRUE(waitUntil([&] { return watch.checks() >= at + 3; }, std::chrono::seconds(10)));
  watch.stop();
  EXPECT_EQ(said.load(), 1);
  EXPECT_EQ(watch.failures(), 1u) << "the corrupt file is one failure, not one per check";
}

TEST(StalePlanWatch, ZeroIntervalMeansNoWatch) {
  Plan launched = launchedPlan();
  StalePlanOptions o;
  o.every = std::chrono::milliseconds(0);
  int calls = 0;
  StalePlanWatch watch(
      launched,
      [&](Deadline) {
        ++calls;
        return launched;
      },
      o, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  watch.stop();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(watch.checks(), 0u);
}

}  // namespace
}  // namespace rankmap::launch
