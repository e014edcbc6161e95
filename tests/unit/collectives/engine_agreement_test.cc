// The engine's plan agreement on its real connection path (connectCommunicator over the root
// bootstrap and the TCP transport, ranks as threads on 127.0.0.1): ranks given the same plan
// apply it; ranks given disagreeing plans (different files, one missing, one corrupt, one stale)
// all run identity order, count the refusal, give correct results, and finish well inside their
// deadline.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/bootstrap/root_bootstrap.h"
#include "collectives/communicator.h"
#include "collectives/connect.h"
#include "common/files.h"
#include "tests/unit/common/config_util.h"
#include "tests/unit/common/plan_util.h"
#include "tests/unit/common/rank_threads.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap::coll {
namespace {

constexpr int kRanks = 4;
constexpr auto kTimeout = std::chrono::seconds(20);

struct RankResult {
  bool planApplied = false;
  bool planRejected = false;
  std::vector<int> order;
  std::vector<int32_t> sum;
};

Config config(const std::string& maxAge = "0") {
  return rankmap::testing::configFrom({{"RANKMAP_TRANSPORT", "tcp"},
                                       {"RANKMAP_SOCKET_BUFFER", "0"},
                                       {"RANKMAP_PLAN_MAX_AGE", maxAge}});
}

// Every rank r connects with the plan file paths[r] ("" = none) and runs an allreduce of
// 1000 int32 whose result has a closed form. Fails the test when any rank takes longer than a
// quarter of its deadline (a disagreement must not become a wait).
std::vector<RankResult> runJob(const std::vector<std::string>& paths, const Config& cfg) {
  std::vector<RankResult> out(paths.size());
  const int n = static_cast<int>(paths.size());
  bootstrap::RootListener listener("127.0.0.1:0");
  const std::string root = listener.address();
  CommOptions options = CommOptions::fromConfig(cfg);
  options.timeout = kTimeout;
  const auto start = std::chrono::steady_clock::now();
  rankmap::testing::runRanks(n, [&](int r) {
    const Deadline deadline = Deadline::after(kTimeout);
    auto bs = r == 0 ? bootstrap::makeRootBootstrap(std::move(listener), n, deadline)
                     : bootstrap::makeRootBootstrap(r, n, root, deadline);
    LocalPlan local = loadLocalPlan(paths[static_cast<size_t>(r)], r, n, cfg);
    auto comm = connectCommunicator(*bs, cfg, options, std::move(local), deadline);
    const uint64_t count = 1000;
    std::vector<int32_t> in(count), sum(count);
    for (uint64_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i * (r + 1));
    comm->allreduce(in.data(), sum.data(), count, DataType::kInt32, ReduceOp::kSum);
    RankResult& res = out[static_cast<size_t>(r)];
    res.planApplied = comm->plan().has_value();
    res.planRejected = comm->stats().planRejected;
    res.order = comm->order();
    res.sum = std::move(sum);
  });
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, std::chrono::duration<double>(kTimeout).count() / 4)
      << "the job waited instead of deciding";
  // sum over r of i * (r + 1) = i * n(n+1)/2, on every rank.
  for (const auto& res : out)
    for (uint64_t i = 0; i < res.sum.size(); ++i)
      EXPECT_EQ(res.sum[i], static_cast<int32_t>(i * n * (n + 1) / 2)) << "element " << i;
  return out;
}

std::vector<int> identityOrder(int n) {
  std::vector<int> o(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) o[static_cast<size_t>(i)] = i;
  return o;
}

void expectIdentityEverywhere(const std::vector<RankResult>& res, bool counted = true) {
  for (size_t r = 0; r < res.size(); ++r) {
    EXPECT_FALSE(res[r].planApplied) << "rank " << r;
    EXPECT_EQ(res[r].planRejected, counted) << "rank " << r;
    EXPECT_EQ(res[r].order, identityOrder(static_cast<int>(res.size()))) << "rank " << r;
  }
}

class EngineAgreement : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = rankmap::testing::orderedPlan({"h0", "h1", "h2", "h3"}, {"h2", "h0", "h3", "h1"});
    other_ = rankmap::testing::orderedPlan({"h0", "h1", "h2", "h3"}, {"h1", "h3", "h0", "h2"});
    plan_.save(dir_.file("plan.json"));
    other_.save(dir_.file("other.json"));
    dir_.write("corrupt.json", readFile(dir_.file("plan.json")).substr(0, 200));
  }
  std::vector<std::string> same(const std::string& name) {
    return std::vector<std::string>(kRanks, dir_.file(name));
  }
  rankmap::testing::TempDir dir_;
  Plan plan_, other_;
};

TEST_F(EngineAgreement, SamePlanEverywhereIsApplied) {
  auto res = runJob(same("plan.json"), config());
  for (const auto& r : res) {
    EXPECT_TRUE(r.planApplied);
    EXPECT_FALSE(r.planRejected);
    EXPECT_EQ(r.order, plan_.inversePermutation());
  }
}

TEST_F(EngineAgreement, DifferentPlanFilesMeanIdentityOnEveryRank) {
  auto paths = same("plan.json");
  paths[2] = dir_.file("other.json");
  expectIdentityEverywhere(runJob(paths, config()));
}

TEST_F(EngineAgreement, OneMissingPlanMeansIdentityOnEveryRank) {
  auto paths = same("plan.json");
  paths[1] = dir_.file("missing.json");
  expectIdentityEverywhere(runJob(paths, config()));
  paths[1] = "";  // RANKMAP_PLAN unset on one rank
  expectIdentityEverywhere(runJob(paths, config()));
}

TEST_F(EngineAgreement, OneCorruptPlanMeansIdentityOnEveryRank) {
  auto paths = same("plan.json");
  paths[3] = dir_.file("corrupt.json");
  expectIdentityEverywhere(runJob(paths, config()));
}

TEST_F(EngineAgreement, NoPlanAnywhereIsIdentityWithoutARefusal) {
  expectIdentityEverywhere(runJob(std::vector<std::string>(kRanks, ""), config()),
                           /*counted=*/false);
}

TEST_F(EngineAgreement, StalePlanIsRefusedWhenAnAgeIsSet) {
  Plan old = plan_;
  old.topologyTime = "2020-01-01T00:00:00Z";
  old.seal();
  old.save(dir_.file("old.json"));
  // No limit (the default): the plan applies.
  for (const auto& r : runJob(same("old.json"), config())) EXPECT_TRUE(r.planApplied);
  // RANKMAP_PLAN_MAX_AGE=7d: stale on every rank, identity order everywhere.
  expectIdentityEverywhere(runJob(same("old.json"), config("168h")));
}

}  // namespace
}  // namespace rankmap::coll
