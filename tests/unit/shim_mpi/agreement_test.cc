// The shim's plan agreement (shim_mpi/agreement.h) without MPI: what every rank decides from the
// gathered views, and how a rank reads its plan.
#include "shim_mpi/agreement.h"

#include <gtest/gtest.h>

#include "common/config.h"
#include "common/files.h"
#include "tests/unit/common/config_util.h"
#include "tests/unit/common/plan_util.h"
#include "tests/unit/shim_mpi/subprocess.h"

namespace rankmap::shim_mpi {
namespace {

Plan makePlan(std::vector<std::string> hosts, std::vector<std::string> order, int k = 1) {
  return testing::orderedPlan(std::move(hosts), std::move(order), k, 0.9, 3.2);
}

std::vector<RankView> agreeing(const Plan& p, std::vector<std::string> hosts) {
  std::vector<RankView> v(hosts.size());
  for (size_t r = 0; r < v.size(); ++r) {
    v[r].status = PlanStatus::kOk;
    v[r].hash = p.hash;
    v[r].host = hosts[r];
  }
  return v;
}

TEST(ShimAgreement, AllRanksAgreeingReorder) {
  Plan p = makePlan({"a", "b", "c", "d"}, {"c", "a", "d", "b"});
  Decision d = decide(agreeing(p, {"x", "x", "x", "x"}), p);
  EXPECT_TRUE(d.reorder) << d.message;
  EXPECT_NE(d.message.find(p.hash.substr(0, 19)), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("3.20x"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("not checked"), std::string::npos) << d.message;
}

TEST(ShimAgreement, ARankWithoutPlanMeansIdentityAndNamesIt) {
  Plan p = makePlan({"a", "b", "c", "d"}, {"c", "a", "d", "b"});
  auto v = agreeing(p, {"x", "x", "x", "x"});
  v[3].status = PlanStatus::kInvalid;
  v[3].hash.clear();
  v[3].reason = "cannot read /p.json";
  Decision d = decide(v, p);
  EXPECT_FALSE(d.reorder);
  EXPECT_NE(d.message.find("rank(s) 3 have no usable plan"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("cannot read /p.json"), std::string::npos) << d.message;
}

TEST(ShimAgreement, NoPlanAnywhere) {
  std::vector<RankView> v(3);
  for (auto& x : v) x.reason = "RANKMAP_PLAN is not set";
  Decision d = decide(v, std::nullopt);
  EXPECT_FALSE(d.reorder);
  EXPECT_NE(d.message.find("no rank has a usable plan"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("RANKMAP_PLAN is not set"), std::string::npos) << d.message;
}

TEST(ShimAgreement, DisagreementMeansIdentityAndListsBothPlans) {
  Plan p = makePlan({"a", "b", "c", "d"}, {"c", "a", "d", "b"});
  Plan q = makePlan({"a", "b", "c", "d"}, {"b", "a", "d", "c"});
  auto v = agreeing(p, {"x", "x", "x", "x"});
  v[0].hash = q.hash;
  for (const auto& mine : {p, q}) {
    Decision d = decide(v, mine);  // every rank, whichever plan it holds, decides alike
    EXPECT_FALSE(d.reorder);
    EXPECT_NE(d.message.find("disagree"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("on rank(s) 1-3"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("on rank(s) 0"), std::string::npos) << d.message;
  }
}

TEST(ShimAgreement, WorldSizeMustMatch) {
  Plan p = makePlan({"a", "b"}, {"b", "a"}, 2);  // 4 ranks
  auto v = agreeing(p, {"x", "x", "x"});
  Decision d = decide(v, p);
  EXPECT_FALSE(d.reorder);
  EXPECT_NE(d.message.find("for 4 ranks, the job has 3"), std::string::npos) << d.message;
}

TEST(ShimAgreement, HostsAreCheckedWhenTheyArePlanHosts) {
  Plan p = makePlan({"vm0", "vm1", "vm2"}, {"vm2", "vm0", "vm1"}, 2);
  // The launcher order the plan assumes: old rank r on hosts[r / 2].
  auto ok = agreeing(p, {"vm0", "vm0", "vm1", "vm1", "vm2", "vm2"});
  Decision d = decide(ok, p);
  EXPECT_TRUE(d.reorder) << d.message;
  EXPECT_NE(d.message.find("hosts checked"), std::string::npos) << d.message;

  // The launcher put ranks elsewhere: a plan for another order must not be applied.
  auto moved = agreeing(p, {"vm1", "vm1", "vm0", "vm0", "vm2", "vm2"});
  d = decide(moved, p);
  EXPECT_FALSE(d.reorder);
  EXPECT_NE(d.message.find("expects rank 0 on vm0, the launcher put it on vm1"), std::string::npos)
      << d.message;

  // Unless a rank turned the check off (RANKMAP_MPI_CHECK_HOSTS=0).
  moved[2].checkHosts = false;
  EXPECT_TRUE(decide(moved, p).reorder);
}

TEST(ShimAgreement, FullyQualifiedPlanHostsMatchShortHostnames) {
  Plan p = makePlan({"vm0.cloud.example", "vm1.cloud.example"}, {"vm1.cloud.example", "vm0.cloud.example"});
  EXPECT_TRUE(decide(agreeing(p, {"vm0", "vm1"}), p).reorder);
  EXPECT_FALSE(decide(agreeing(p, {"vm1", "vm0"}), p).reorder);
}

TEST(ShimAgreement, PlanNotMatchingTheAgreedHashIsRefused) {
  Plan p = makePlan({"a", "b"}, {"b", "a"});
  Plan q = makePlan({"a", "b"}, {"a", "b"});
  EXPECT_FALSE(decide(agreeing(p, {"x", "x"}), q).reorder);
  EXPECT_FALSE(decide(agreeing(p, {"x", "x"}), std::nullopt).reorder);
}

Config configWith(const std::string& plan) {
  return testing::configFrom({{"RANKMAP_PLAN", plan}});
}

TEST(ShimAgreement, LocalViewReadsThePlan) {
  testing::TempDir dir;
  Plan p = makePlan({"a", "b"}, {"b", "a"}, 2);
  p.save(dir.file("plan.json"));
  std::optional<Plan> got;
  RankView v = loadLocalView(configWith(dir.file("plan.json")), 4, "node7.example", got);
  EXPECT_EQ(v.status, PlanStatus::kOk) << v.reason;
  EXPECT_EQ(v.hash, p.hash);
  EXPECT_EQ(v.host, "node7");
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, p);
}

TEST(ShimAgreement, LocalViewRefusesBadPlans) {
  testing::TempDir dir;
  Plan p = makePlan({"a", "b"}, {"b", "a"}, 2);
  p.save(dir.file("plan.json"));
  std::optional<Plan> got;

  RankView v = loadLocalView(configWith(""), 4, "h", got);
  EXPECT_EQ(v.status, PlanStatus::kNone);
  EXPECT_NE(v.reason.find("RANKMAP_PLAN is not set"), std::string::npos);

  v = loadLocalView(configWith(dir.file("missing.json")), 4, "h", got);
  EXPECT_EQ(v.status, PlanStatus::kInvalid);
  EXPECT_NE(v.reason.find("missing.json"), std::string::npos) << v.reason;
  EXPECT_FALSE(got);

  v = loadLocalView(configWith(dir.file("plan.json")), 6, "h", got);
  EXPECT_EQ(v.status, PlanStatus::kInvalid);
  EXPECT_NE(v.reason.find("for 4 ranks, the job has 6"), std::string::npos) << v.reason;
  EXPECT_FALSE(got);

  // A plan edited after sealing: its hash no longer matches.
  std::string text = readFile(dir.file("plan.json"));
  auto at = text.find("\"confidence\": 0.9");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 17, "\"confidence\": 0.8");
  writeFileAtomic(dir.file("edited.json"), text);
  v = loadLocalView(configWith(dir.file("edited.json")), 4, "h", got);
  EXPECT_EQ(v.status, PlanStatus::kInvalid);
  EXPECT_NE(v.reason.find("hash"), std::string::npos) << v.reason;
}

}  // namespace
}  // namespace rankmap::shim_mpi
