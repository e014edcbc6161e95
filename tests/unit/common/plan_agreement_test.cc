// The plan agreement (common/plan_agreement.h) that the MPI shim, the NCCL shim and the engine
// share: what every rank decides from the gathered votes, how a rank reads its plan, the votes'
// wire form, stale plans, and the one-vote-at-a-time check of the NCCL vote server.
#include "common/plan_agreement.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/files.h"
#include "tests/unit/common/plan_util.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;

Plan makePlan(std::vector<std::string> hosts, std::vector<std::string> order, int k = 1) {
  return testing::orderedPlan(std::move(hosts), std::move(order), k, 0.9, 3.2);
}

std::vector<PlanVote> agreeing(const Plan& p, std::vector<std::string> hosts) {
  std::vector<PlanVote> v(hosts.size());
  for (size_t r = 0; r < v.size(); ++r) {
    v[r].rank = static_cast<int>(r);
    v[r].worldSize = static_cast<int>(hosts.size());
    v[r].status = PlanStatus::kOk;
    v[r].hash = p.hash;
    v[r].host = hosts[r];
    v[r].checkHosts = true;
  }
  return v;
}

// The verdict as every rank computes it: with its plan, or none.
PlanVerdict decide(const std::vector<PlanVote>& votes, const std::optional<Plan>& plan) {
  return judgePlan(votes, plan ? &*plan : nullptr);
}

TEST(PlanAgreement, AllRanksAgreeingReorder) {
  Plan p = makePlan({"a", "b", "c", "d"}, {"c", "a", "d", "b"});
  PlanVerdict d = decide(agreeing(p, {"x", "x", "x", "x"}), p);
  EXPECT_TRUE(d.apply) << d.reason;
  EXPECT_NE(d.reason.find(p.hash.substr(0, 19)), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("3.20x"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("not checked"), std::string::npos) << d.reason;
}

TEST(PlanAgreement, ARankWithoutPlanMeansIdentityAndNamesIt) {
  Plan p = makePlan({"a", "b", "c", "d"}, {"c", "a", "d", "b"});
  auto v = agreeing(p, {"x", "x", "x", "x"});
  v[3].status = PlanStatus::kInvalid;
  v[3].hash.clear();
  v[3].reason = "cannot read /p.json";
  PlanVerdict d = decide(v, p);
  EXPECT_FALSE(d.apply);
  EXPECT_NE(d.reason.find("rank(s) 3 have no usable plan"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("cannot read /p.json"), std::string::npos) << d.reason;
}

TEST(PlanAgreement, NoPlanAnywhere) {
  std::vector<PlanVote> v(3);
  for (int r = 0; r < 3; ++r) v[r] = PlanVote{r, 3, PlanStatus::kNone, {}, "RANKMAP_PLAN is not set", "x", true};
  PlanVerdict d = decide(v, std::nullopt);
  EXPECT_FALSE(d.apply);
  EXPECT_NE(d.reason.find("no rank has a usable plan"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("RANKMAP_PLAN is not set"), std::string::npos) << d.reason;
}

TEST(PlanAgreement, DisagreementMeansIdentityAndListsBothPlans) {
  Plan p = makePlan({"a", "b", "c", "d"}, {"c", "a", "d", "b"});
  Plan q = makePlan({"a", "b", "c", "d"}, {"b", "a", "d", "c"});
  auto v = agreeing(p, {"x", "x", "x", "x"});
  v[0].hash = q.hash;
  for (const auto& mine : {p, q}) {
    PlanVerdict d = decide(v, mine);  // every rank, whichever plan it holds, decides alike
    EXPECT_FALSE(d.apply);
    EXPECT_NE(d.reason.find("disagree"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("on rank(s) 1-3"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("on rank(s) 0"), std::string::npos) << d.reason;
  }
}

TEST(PlanAgreement, WorldSizeMustMatch) {
  Plan p = makePlan({"a", "b"}, {"b", "a"}, 2);  // 4 ranks
  auto v = agreeing(p, {"x", "x", "x"});
  PlanVerdict d = decide(v, p);  // votes for p, but three ranks voted
  EXPECT_FALSE(d.apply);
  EXPECT_NE(d.reason.find("for 4 ranks, the job has 3"), std::string::npos) << d.reason;
}

TEST(PlanAgreement, HostsAreCheckedWhenTheyArePlanHosts) {
  Plan p = makePlan({"vm0", "vm1", "vm2"}, {"vm2", "vm0", "vm1"}, 2);
  // The launcher order the plan assumes: old rank r on hosts[r / 2].
  auto ok = agreeing(p, {"vm0", "vm0", "vm1", "vm1", "vm2", "vm2"});
  PlanVerdict d = decide(ok, p);
  EXPECT_TRUE(d.apply) << d.reason;
  EXPECT_NE(d.reason.find("hosts checked"), std::string::npos) << d.reason;

  // The launcher put ranks elsewhere: a plan for another order must not be applied.
  auto moved = agreeing(p, {"vm1", "vm1", "vm0", "vm0", "vm2", "vm2"});
  d = decide(moved, p);
  EXPECT_FALSE(d.apply);
  EXPECT_NE(d.reason.find("expects rank 0 on vm0, the launcher put it on vm1"), std::string::npos)
      << d.reason;

  // Unless a rank turned the check off (RANKMAP_MPI_CHECK_HOSTS=0).
  moved[2].checkHosts = false;
  EXPECT_TRUE(decide(moved, p).apply);
}

TEST(PlanAgreement, FullyQualifiedPlanHostsMatchShortHostnames) {
  Plan p = makePlan({"vm0.cloud.example", "vm1.cloud.example"}, {"vm1.cloud.example", "vm0.cloud.example"});
  EXPECT_TRUE(decide(agreeing(p, {"vm0", "vm1"}), p).apply);
  EXPECT_FALSE(decide(agreeing(p, {"vm1", "vm0"}), p).apply);
}

TEST(PlanAgreement, PlanNotMatchingTheAgreedHashIsRefused) {
  Plan p = makePlan({"a", "b"}, {"b", "a"});
  Plan q = makePlan({"a", "b"}, {"a", "b"});
  EXPECT_FALSE(decide(agreeing(p, {"x", "x"}), q).apply);
  // Without a plan of its own (the NCCL vote server) the verdict rests on the votes alone.
  EXPECT_TRUE(decide(agreeing(p, {"x", "x"}), std::nullopt).apply);
}

PlanVote localVote(const std::string& path, int worldSize, std::optional<Plan>& got,
                   PlanChecks checks = {}) {
  return localPlanVote(path, 0, worldSize, checks, got);
}

TEST(PlanAgreement, LocalVoteReadsThePlan) {
  testing::TempDir dir;
  Plan p = makePlan({"a", "b"}, {"b", "a"}, 2);
  p.save(dir.file("plan.json"));
  std::optional<Plan> got;
  PlanVote v = localVote(dir.file("plan.json"), 4, got);
  EXPECT_EQ(v.status, PlanStatus::kOk) << v.reason;
  EXPECT_EQ(v.hash, p.hash);
  EXPECT_EQ(v.worldSize, 4);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, p);
  EXPECT_EQ(shortHostName("node7.example"), "node7");
}

TEST(PlanAgreement, LocalVoteRefusesBadPlans) {
  testing::TempDir dir;
  Plan p = makePlan({"a", "b"}, {"b", "a"}, 2);
  p.save(dir.file("plan.json"));
  std::optional<Plan> got;

  PlanVote v = localVote("", 4, got);
  EXPECT_EQ(v.status, PlanStatus::kNone);
  EXPECT_NE(v.reason.find("RANKMAP_PLAN is not set"), std::string::npos);

  v = localVote(dir.file("missing.json"), 4, got);
  EXPECT_EQ(v.status, PlanStatus::kInvalid);
  EXPECT_NE(v.reason.find("missing.json"), std::string::npos) << v.reason;
  EXPECT_FALSE(got);

  v = localVote(dir.file("plan.json"), 6, got);
  EXPECT_EQ(v.status, PlanStatus::kInvalid);
  EXPECT_NE(v.reason.find("for 4 ranks, the job has 6"), std::string::npos) << v.reason;
  EXPECT_FALSE(got);

  // A plan edited after sealing: its hash no longer matches.
  std::string text = readFile(dir.file("plan.json"));
  auto at = text.find("\"confidence\": 0.9");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 17, "\"confidence\": 0.8");
  writeFileAtomic(dir.file("edited.json"), text);
  v = localVote(dir.file("edited.json"), 4, got);
  EXPECT_EQ(v.status, PlanStatus::kInvalid);
  EXPECT_NE(v.reason.find("hash"), std::string::npos) << v.reason;
}

Plan measuredAt(const std::string& time) {
  Plan p = makePlan({"a", "b"}, {"b", "a"});
  p.topologyTime = time;
  p.seal();
  return p;
}

std::chrono::system_clock::time_point at(const std::string& time) { return *parseUtcTime(time); }

TEST(PlanAgreement, StalePlansAreRefusedOnlyWhenAnAgeIsSet) {
  testing::TempDir dir;
  Plan p = measuredAt("2026-11-20T12:00:00Z");
  p.save(dir.file("plan.json"));
  EXPECT_EQ(Plan::load(dir.file("plan.json")).topologyTime, "2026-11-20T12:00:00Z");
  std::optional<Plan> got;
  PlanChecks checks;
  checks.now = at("2026-11-25T12:00:00Z");

  checks.maxAge = milliseconds(0);  // the default: no limit
  EXPECT_EQ(localVote(dir.file("plan.json"), 2, got, checks).status, PlanStatus::kOk);

  checks.maxAge = hours(24 * 7);
  EXPECT_EQ(localVote(dir.file("plan.json"), 2, got, checks).status, PlanStatus::kOk);
  EXPECT_EQ(planAge(p, checks.now), hours(24 * 5));

  checks.maxAge = hours(24);
  PlanVote v = localVote(dir.file("plan.json"), 2, got, checks);
  EXPECT_EQ(v.status, PlanStatus::kStale);
  EXPECT_FALSE(got);
  EXPECT_NE(v.reason.find("stale"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("5.0 days"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("RANKMAP_PLAN_MAX_AGE"), std::string::npos) << v.reason;

  // A plan without topology_time has no age: never stale.
  Plan timeless = measuredAt("");
  EXPECT_FALSE(planAge(timeless, checks.now));
  EXPECT_EQ(planVote(timeless, 0, 2, checks).status, PlanStatus::kOk);
}

TEST(PlanAgreement, OneStaleRankMeansIdentityForAll) {
  // Ranks whose clocks disagree about the age: the vote makes them decide alike.
  Plan p = measuredAt("2026-11-24T12:00:00Z");
  PlanChecks fresh, late;
  fresh.maxAge = late.maxAge = hours(24);
  fresh.now = at("2026-11-25T11:59:59Z");
  late.now = at("2026-11-25T12:00:01Z");
  std::vector<PlanVote> votes = {planVote(p, 0, 2, fresh), planVote(p, 1, 2, late)};
  votes[1].rank = 1;
  EXPECT_EQ(votes[0].status, PlanStatus::kOk);
  EXPECT_EQ(votes[1].status, PlanStatus::kStale);
  PlanVerdict d = decide(votes, p);
  EXPECT_FALSE(d.apply);
  EXPECT_NE(d.reason.find("rank(s) 1 have no usable plan"), std::string::npos) << d.reason;
  EXPECT_NE(d.reason.find("stale"), std::string::npos) << d.reason;
}

TEST(PlanAgreement, PlanTopologyTimeIsValidated) {
  Plan p = measuredAt("2026-11-20T12:00:00.123Z");
  EXPECT_EQ(Plan::parse(p.dump(), "p").topologyTime, "2026-11-20T12:00:00.123Z");
  for (std::string bad : {"yesterday", "2026-11-20 12:00:00", "2026-11-20T12:00:00+01:00",
                          "2026-13-20T12:00:00Z", "2026-11-20T12:00:00.Z"}) {
    Json j = Json::parse(p.dump());
    j["topology_time"] = bad;
    try {
      Plan::fromJson(j, "plan.json");
      ADD_FAILURE() << "accepted topology_time " << bad;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find("/topology_time: expected an RFC 3339 UTC time"),
                std::string::npos) << e.what();
    }
  }
}

TEST(PlanAgreement, VotesSurviveTheWire) {
  PlanVote v{3, 8, PlanStatus::kStale, "sha256:abc", "plan x is stale", "vm3", true};
  EXPECT_EQ(PlanVote::decode(v.encode(), "test"), v);
  PlanVote empty;
  EXPECT_EQ(PlanVote::decode(empty.encode(), "test"), empty);
  // Over-long fields are cut to their bounds, never beyond kMaxEncodedBytes.
  PlanVote big{0, 1, PlanStatus::kInvalid, std::string(500, 'h'), std::string(9000, 'r'),
               std::string(900, 'n'), false};
  std::string bytes = big.encode();
  EXPECT_LE(bytes.size(), PlanVote::kMaxEncodedBytes);
  EXPECT_EQ(PlanVote::decode(bytes, "test").status, PlanStatus::kInvalid);
}

TEST(PlanAgreement, MalformedVotesNameTheSourceAndField) {
  std::string good = PlanVote{1, 2, PlanStatus::kOk, "sha256:a", "", "h", false}.encode();
  auto expectError = [](const std::string& bytes, const std::string& words) {
    try {
      PlanVote::decode(bytes, "rank 7's vote");
      ADD_FAILURE() << "accepted a malformed vote (" << words << ")";
    } catch (const InvalidInput& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("rank 7's vote"), std::string::npos) << what;
      EXPECT_NE(what.find(words), std::string::npos) << what;
    }
  };
  expectError("", "length");
  expectError(good.substr(0, good.size() - 1), "length");
  expectError(good + "x", "length");
  std::string v = good;
  v[0] = 9;
  expectError(v, "version");
  v = good;
  v[9] = 7;
  expectError(v, "status");
  v = good;
  v[10] = 2;
  expectError(v, "check_hosts");
  v = good;
  v[11] = static_cast<char>(0xff);
  v[12] = static_cast<char>(0xff);
  expectError(v, "hash length");
}

PlanVote okVote(int rank, int n, std::string hash = "sha256:a") {
  return PlanVote{rank, n, PlanStatus::kOk, std::move(hash), {}, {}, false};
}

TEST(PlanAgreement, IncrementalCheckFindsEveryDisagreementAtOnce) {
  auto expectIdentity = [](const PlanVote& v, const std::set<int>& seen, const std::string& words,
                           std::string_view expect = "sha256:a") {
    auto d = checkPlanVote(okVote(0, 3), seen, v, expect);
    ASSERT_TRUE(d);
    EXPECT_FALSE(d->apply);
    EXPECT_NE(d->reason.find(words), std::string::npos) << d->reason;
  };
  EXPECT_FALSE(checkPlanVote(okVote(0, 3), {0}, okVote(1, 3), "sha256:a"));
  EXPECT_FALSE(checkPlanVote(okVote(0, 3), {0}, okVote(1, 3)));
  expectIdentity(okVote(1, 3, "sha256:b"), {0}, "holds plan sha256:b");
  PlanVote none{1, 3, PlanStatus::kInvalid, {}, "plan p is for 4 ranks, the job has 3", {}, false};
  expectIdentity(none, {0}, "no usable plan");
  expectIdentity(okVote(1, 4), {0}, "says 4 ranks");
  expectIdentity(okVote(0, 3), {0}, "voted twice");
  expectIdentity(okVote(5, 3), {0}, "outside");
  // And the final verdict agrees with the votes in any order.
  EXPECT_TRUE(judgePlan({okVote(2, 3), okVote(0, 3), okVote(1, 3)}, nullptr).apply);
  EXPECT_FALSE(judgePlan({okVote(2, 3), okVote(0, 3)}, nullptr).apply);
  EXPECT_FALSE(judgePlan({okVote(0, 3), okVote(0, 3), okVote(1, 3)}, nullptr).apply);
}

}  // namespace
}  // namespace rankmap
