// Live re-planning (collectives/live_plan.h): ranks as threads over the loopback transport start
// with plan A from a plan file; rank 0 replaces the file between two calls. Rank 0 writes after
// its call kReplaceAt returns and before call kReplaceAt + 1 starts, and no rank finishes call
// kReplaceAt + 1 before rank 0 starts it, so every rank's poll at the next vote sees the new
// file: the call index of a switch is known in advance. Every call is an int32 sum checked
// element by element.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/communicator.h"
#include "collectives/live_plan.h"
#include "common/files.h"
#include "tests/unit/collectives/engine_values.h"
#include "tests/unit/collectives/harness.h"
#include "tests/unit/common/plan_util.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap::coll {
namespace {

using testing::Backend;
using testing::spawn;

constexpr int kLiveRanks = 5;
constexpr uint64_t kVoteEvery = 4;
constexpr uint64_t kCalls = 24;
constexpr uint64_t kCount = 1001;
const std::vector<std::string> kHosts = {"h0", "h1", "h2", "h3", "h4"};

Plan planWithEpoch(std::vector<std::string> order, int64_t epoch) {
  Plan p = rankmap::testing::orderedPlan(kHosts, std::move(order));
  p.epoch = epoch;
  p.seal();
  return p;
}

// A plan in `order` whose allreduce runs `algo` at every size, priced by a model in which ring
// takes ringUs and tree treeUs (alpha only).
Plan pricedPlan(std::vector<std::string> order, int64_t epoch, Algorithm algo, double ringUs,
                double treeUs) {
  Plan p = rankmap::testing::orderedPlan(kHosts, std::move(order));
  p.epoch = epoch;
  AlgoRange r;
  r.algorithm = algo;
  p.collectives["allreduce"] = {r};
  p.models["allreduce"].algorithms[Algorithm::kRing] = AlgoModel{ringUs, 0};
  p.models["allreduce"].algorithms[Algorithm::kTree] = AlgoModel{treeUs, 0};
  p.seal();
  return p;
}

struct RankLog {
  std::vector<std::string> planPerCall;  // hash in use after each call ("" = identity)
  Communicator::Stats stats;
  std::vector<int> order;
};

// A job of kCalls allreduces; before call i on rank 0, replace(i) may rewrite plan files.
// files[r] is rank r's plan file; every rank starts with `start`.
std::vector<RankLog> runJob(const std::vector<std::string>& files, const Plan& start,
                            const std::function<void(uint64_t)>& replace, bool live = true,
                            bool withBarriers = false) {
  std::vector<RankLog> logs(kLiveRanks);
  const auto t0 = std::chrono::steady_clock::now();
  spawn(kLiveRanks, Backend::Loopback, [&](transport::Context& ctx) {
    const int r = ctx.rank();
    CommOptions o;
    o.timeout = std::chrono::seconds(20);
    o.live.enabled = live;
    o.live.voteEvery = kVoteEvery;
    o.live.pollInterval = std::chrono::milliseconds(0);
    o.live.planFile = files[static_cast<size_t>(r)];
    Communicator comm(ctx, o, start);
    const auto in = testing::inputBuffer(DataType::kInt32, ReduceOp::kSum, r, kCount);
    const auto want = testing::expectedBuffer(DataType::kInt32, ReduceOp::kSum, kLiveRanks, kCount);
    std::vector<std::byte> out(want.size());
    RankLog& log = logs[static_cast<size_t>(r)];
    for (uint64_t i = 0; i < kCalls; ++i) {
      if (r == 0) replace(i);
      if (withBarriers) comm.barrier();  // a 0-byte call before each allreduce
      std::memset(out.data(), 0xA5, out.size());
      comm.allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
      ASSERT_EQ(std::memcmp(out.data(), want.data(), want.size()), 0)
          << "rank " << r << ", call " << i << ": wrong sum";
      log.planPerCall.push_back(comm.plan() ? comm.plan()->hash : std::string());
    }
    log.stats = comm.stats();
    log.order = comm.order();
  });
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0) << "the job waited instead of deciding";
  return logs;
}

// The first call that ran under `hash` on rank r, or kCalls.
uint64_t firstCallWith(const RankLog& log, const std::string& hash) {
  for (uint64_t i = 0; i < log.planPerCall.size(); ++i)
    if (log.planPerCall[i] == hash) return i;
  return kCalls;
}

class LivePlan : public ::testing::Test {
 protected:
  std::vector<std::string> oneFile() {
    return std::vector<std::string>(kLiveRanks, dir_.file("plan.json"));
  }
  rankmap::testing::TempDir dir_;
  Plan a_ = planWithEpoch({"h3", "h0", "h4", "h1", "h2"}, 1);
  Plan b_ = planWithEpoch({"h1", "h4", "h2", "h0", "h3"}, 2);
  Plan c_ = planWithEpoch({"h2", "h3", "h0", "h4", "h1"}, 2);
};

TEST_F(LivePlan, AReplacedFileIsAdoptedByEveryRankAtTheSameCall) {
  a_.save(dir_.file("plan.json"));
  auto logs = runJob(oneFile(), a_, [&](uint64_t i) {
    if (i == 11) b_.save(dir_.file("plan.json"));  // votes before calls 4, 8, 12, ...
  });
  for (int r = 0; r < kLiveRanks; ++r) {
    const RankLog& l = logs[static_cast<size_t>(r)];
    EXPECT_EQ(firstCallWith(l, b_.hash), 12u) << "rank " << r;
    EXPECT_EQ(l.planPerCall[11], a_.hash) << "rank " << r;
    EXPECT_EQ(l.stats.planSwitches, 1u) << "rank " << r;
    EXPECT_EQ(l.stats.lastSwitchCall, 12u) << "rank " << r;
    EXPECT_EQ(l.stats.planVotes, (kCalls - 1) / kVoteEvery) << "rank " << r;
    EXPECT_EQ(l.stats.planVotesDisagreed, 0u) << "rank " << r;
    EXPECT_EQ(l.order, b_.inversePermutation()) << "rank " << r;
    EXPECT_EQ(l.stats.collectives, kCalls) << "votes are not counted as the user's calls";
  }
}

TEST_F(LivePlan, AFileReplacedBeforeTheCommunicatorsExistIsAdoptedAtTheFirstVote) {
  b_.save(dir_.file("plan.json"));  // the ranks were given A, then the file changed under them
  auto logs = runJob(oneFile(), a_, [](uint64_t) {});
  for (int r = 0; r < kLiveRanks; ++r) {
    EXPECT_EQ(firstCallWith(logs[static_cast<size_t>(r)], b_.hash), kVoteEvery) << "rank " << r;
    EXPECT_EQ(logs[static_cast<size_t>(r)].stats.planSwitches, 1u) << "rank " << r;
  }
}

TEST_F(LivePlan, RanksOfferedDifferentPlansKeepTheirPlanAndSayWhy) {
  std::vector<std::string> files;
  for (int r = 0; r < kLiveRanks; ++r) {
    files.push_back(dir_.file("plan" + std::to_string(r) + ".json"));
    a_.save(files.back());
  }
  auto logs = runJob(files, a_, [&](uint64_t i) {
    if (i != 11) return;
    for (int r = 0; r < kLiveRanks; ++r) (r < 2 ? b_ : c_).save(files[static_cast<size_t>(r)]);
  });
  for (int r = 0; r < kLiveRanks; ++r) {
    const RankLog& l = logs[static_cast<size_t>(r)];
    EXPECT_EQ(firstCallWith(l, a_.hash), 0u);
    EXPECT_EQ(l.planPerCall.back(), a_.hash) << "rank " << r;
    EXPECT_EQ(l.stats.planSwitches, 0u) << "rank " << r;
    EXPECT_EQ(l.stats.planVotesDisagreed, 3u) << "rank " << r << ": votes before 12, 16, 20";
    EXPECT_EQ(l.order, a_.inversePermutation()) << "rank " << r;
  }
}

TEST_F(LivePlan, ACorruptReplacementIsIgnoredAndALaterGoodOneAdopted) {
  a_.save(dir_.file("plan.json"));
  const std::string good = b_.dump();
  auto logs = runJob(oneFile(), a_, [&](uint64_t i) {
    if (i == 7) dir_.write("plan.json", good.substr(0, good.size() / 2));
    if (i == 15) dir_.write("plan.json", good);
  });
  for (int r = 0; r < kLiveRanks; ++r) {
    const RankLog& l = logs[static_cast<size_t>(r)];
    EXPECT_EQ(l.stats.planFilesRejected, 1u) << "rank " << r;
    EXPECT_EQ(firstCallWith(l, b_.hash), 16u) << "rank " << r;
    EXPECT_EQ(l.planPerCall[15], a_.hash) << "rank " << r << ": the corrupt file was adopted";
    EXPECT_EQ(l.stats.planSwitches, 1u) << "rank " << r;
  }
}

TEST_F(LivePlan, OffMeansNoVoteAndNoSwitch) {
  a_.save(dir_.file("plan.json"));
  auto logs = runJob(
      oneFile(), a_, [&](uint64_t i) { if (i == 3) b_.save(dir_.file("plan.json")); },
      /*live=*/false);
  for (int r = 0; r < kLiveRanks; ++r) {
    const RankLog& l = logs[static_cast<size_t>(r)];
    EXPECT_EQ(l.stats.planVotes, 0u) << "rank " << r;
    EXPECT_EQ(l.stats.planVoteNs, 0u) << "rank " << r;
    EXPECT_EQ(l.stats.planSwitches, 0u) << "rank " << r;
    EXPECT_EQ(l.planPerCall.back(), a_.hash) << "rank " << r;
  }
}

TEST_F(LivePlan, APlanThatIsNotBetterByTheMarginIsKept) {
  // Same order; B runs tree, which B's own model puts only 5% below ring (the margin is 10%).
  const std::vector<std::string> order = {"h3", "h0", "h4", "h1", "h2"};
  Plan a = pricedPlan(order, 1, Algorithm::kRing, 100, 95);
  Plan b = pricedPlan(order, 2, Algorithm::kTree, 100, 95);
  a.save(dir_.file("plan.json"));
  auto logs = runJob(oneFile(), a, [&](uint64_t i) {
    if (i == 3) b.save(dir_.file("plan.json"));
  });
  for (int r = 0; r < kLiveRanks; ++r) {
    const RankLog& l = logs[static_cast<size_t>(r)];
    EXPECT_EQ(l.stats.planSwitches, 0u) << "rank " << r;
    EXPECT_EQ(l.stats.planSwitchesDeclined, (kCalls - 1) / kVoteEvery) << "rank " << r;
    EXPECT_EQ(l.planPerCall.back(), a.hash) << "rank " << r;
  }
}

TEST_F(LivePlan, APlanIsJudgedOnTheLargestCallNotOnTheCallTheVoteLandsOn) {
  // Votes land on barriers (every other call); B is priced on the allreduces beside them.
  const std::vector<std::string> order = {"h3", "h0", "h4", "h1", "h2"};
  Plan a = pricedPlan(order, 1, Algorithm::kRing, 100, 95);
  Plan b = pricedPlan(order, 2, Algorithm::kTree, 100, 95);
  a.save(dir_.file("plan.json"));
  auto logs = runJob(
      oneFile(), a, [&](uint64_t i) { if (i == 1) b.save(dir_.file("plan.json")); },
      /*live=*/true, /*withBarriers=*/true);
  for (int r = 0; r < kLiveRanks; ++r) {
    const RankLog& l = logs[static_cast<size_t>(r)];
    EXPECT_EQ(l.stats.planSwitches, 0u) << "rank " << r;
    EXPECT_EQ(l.stats.planSwitchesDeclined, (2 * kCalls - 1) / kVoteEvery) << "rank " << r;
  }
}

// Ranks whose live settings differ (one off, one voting at another interval, one without a
// plan file) agree at creation to run without live re-planning: no vote, no switch, no hang,
// every result right, and each rank says so in its stats.
TEST_F(LivePlan, RanksWithDifferentLiveSettingsTurnItOffOnEveryRank) {
  const std::string file = dir_.file("plan.json");
  a_.save(file);
  for (int odd = 0; odd < 3; ++odd) {
    std::vector<Communicator::Stats> stats(kLiveRanks);
    const auto t0 = std::chrono::steady_clock::now();
    spawn(kLiveRanks, Backend::Loopback, [&](transport::Context& ctx) {
      const int r = ctx.rank();
      CommOptions o;
      o.timeout = std::chrono::seconds(20);
      o.live.voteEvery = kVoteEvery;
      o.live.pollInterval = std::chrono::milliseconds(0);
      o.live.planFile = file;
      if (r == 3 && odd == 0) o.live.enabled = false;
      if (r == 3 && odd == 1) o.live.voteEvery = kVoteEvery + 1;
      if (r == 3 && odd == 2) o.live.planFile.clear();
      Communicator comm(ctx, o, a_);
      const auto in = testing::inputBuffer(DataType::kInt32, ReduceOp::kSum, r, kCount);
      const auto want =
          testing::expectedBuffer(DataType::kInt32, ReduceOp::kSum, kLiveRanks, kCount);
      std::vector<std::byte> out(want.size());
      for (uint64_t i = 0; i < kCalls; ++i) {
        if (r == 0 && i == kVoteEvery) b_.save(file);
        comm.allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
        ASSERT_EQ(std::memcmp(out.data(), want.data(), want.size()), 0)
            << "rank " << r << ", call " << i << ": wrong sum";
      }
      stats[static_cast<size_t>(r)] = comm.stats();
    });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0)
        << "case " << odd << ": the job waited instead of deciding";
    for (int r = 0; r < kLiveRanks; ++r) {
      const auto& st = stats[static_cast<size_t>(r)];
      EXPECT_EQ(st.liveSettingsDisagreed, 1u) << "case " << odd << ", rank " << r;
      EXPECT_EQ(st.planVotes, 0u) << "case " << odd << ", rank " << r;
      EXPECT_EQ(st.planSwitches, 0u) << "case " << odd << ", rank " << r;
    }
    a_.save(file);
  }
}

// judgeSwitch, rule by rule (the header's numbering; rule 4 in SameStructureIsKeptOut).
TEST(JudgeSwitch, Rules) {
  const std::vector<std::string> order = {"h3", "h0", "h4", "h1", "h2"};
  Plan ring = pricedPlan(order, 1, Algorithm::kRing, 100, 95);
  Plan tree95 = pricedPlan(order, 1, Algorithm::kTree, 100, 95);
  Plan tree80 = pricedPlan(order, 1, Algorithm::kTree, 100, 80);
  // 1.
  EXPECT_FALSE(judgeSwitch(&ring, ring, "allreduce", 1 << 20, 0.1).adopt);
  // 2: priced under the candidate's model, whatever the epochs say.
  EXPECT_FALSE(judgeSwitch(&ring, tree95, "allreduce", 1 << 20, 0.1).adopt);
  EXPECT_TRUE(judgeSwitch(&ring, tree95, "allreduce", 1 << 20, 0.01).adopt);
  EXPECT_TRUE(judgeSwitch(&ring, tree80, "allreduce", 1 << 20, 0.1).adopt);
  // ... unless the user forced an algorithm: the table is not used, nothing would change.
  EXPECT_FALSE(judgeSwitch(&ring, tree80, "allreduce", 1 << 20, 0.1, Algorithm::kRing).adopt);
  // 3: from identity order, the candidate's prediction against the input order.
  Plan predicted = planWithEpoch(order, 1);
  predicted.predicted.planUs = 95;
  predicted.predicted.inputOrderUs = 100;
  predicted.seal();
  EXPECT_FALSE(judgeSwitch(nullptr, predicted, "allreduce", 1 << 20, 0.1).adopt);
  predicted.predicted.planUs = 50;
  predicted.seal();
  EXPECT_TRUE(judgeSwitch(nullptr, predicted, "allreduce", 1 << 20, 0.1).adopt);
  // 5: other orders (no groups) are compared by epoch only.
  Plan older = planWithEpoch({"h1", "h4", "h2", "h0", "h3"}, 1);
  Plan newer = planWithEpoch({"h1", "h4", "h2", "h0", "h3"}, 2);
  EXPECT_FALSE(judgeSwitch(&ring, older, "allreduce", 1 << 20, 0.1).adopt);
  EXPECT_TRUE(judgeSwitch(&ring, newer, "allreduce", 1 << 20, 0.1).adopt);
  EXPECT_TRUE(judgeSwitch(nullptr, older, "allreduce", 1 << 20, 0.1).adopt);
}

// Rule 4: a newer plan with the same groups, algorithm and chunk shares, whose order the order
// in use already follows group by group, is kept out; another grouping, algorithm, share or an
// order that splits a group is not.
TEST(JudgeSwitch, SameStructureIsKeptOut) {
  const std::vector<std::string> hosts = {"a0", "a1", "a2", "b0", "b1", "b2"};
  auto grouped = [&](std::vector<std::string> order, int64_t epoch,
                     std::vector<std::vector<std::string>> groups, Algorithm algo,
                     std::vector<double> weights = {}) {
    Plan p = rankmap::testing::orderedPlan(hosts, std::move(order));
    p.epoch = epoch;
    p.groups = {HierarchyLevel{"rack", 1.0, std::move(groups)}};
    AlgoRange r;
    r.algorithm = algo;
    p.collectives["allreduce"] = {r};
    p.chunkWeights = std::move(weights);
    p.seal();
    return p;
  };
  const std::vector<std::vector<std::string>> racks = {{"a0", "a1", "a2"}, {"b0", "b1", "b2"}};
  Plan cur = grouped({"a0", "a1", "a2", "b0", "b1", "b2"}, 1, racks, Algorithm::kRing);
  // Another order within the same racks, groups listed the other way round: kept.
  Plan noise = grouped({"b2", "b0", "b1", "a1", "a0", "a2"}, 2, {racks[1], racks[0]},
                       Algorithm::kRing);
  EXPECT_TRUE(sameStructure(cur, noise, "allreduce", 1 << 24, 0.1));
  SwitchVerdict v = judgeSwitch(&cur, noise, "allreduce", 1 << 24, 0.1);
  EXPECT_FALSE(v.adopt) << v.reason;
  EXPECT_NE(v.reason.find("same groups"), std::string::npos) << v.reason;
  // A host moved to the other rack: adopted by epoch.
  Plan moved = grouped({"a0", "a2", "b1", "b0", "a1", "b2"}, 2,
                       {{"a0", "a2"}, {"a1", "b0", "b1", "b2"}}, Algorithm::kRing);
  EXPECT_FALSE(sameStructure(cur, moved, "allreduce", 1 << 24, 0.1));
  EXPECT_TRUE(judgeSwitch(&cur, moved, "allreduce", 1 << 24, 0.1).adopt);
  // Same racks but the order in use splits one (a1 between b's): adopted.
  Plan split = grouped({"a0", "b0", "a1", "b1", "b2", "a2"}, 1, racks, Algorithm::kRing);
  EXPECT_FALSE(sameStructure(split, noise, "allreduce", 1 << 24, 0.1));
  EXPECT_TRUE(judgeSwitch(&split, noise, "allreduce", 1 << 24, 0.1).adopt);
  // Same racks, another algorithm: not the same structure.
  Plan hier = grouped({"b2", "b0", "b1", "a1", "a0", "a2"}, 2, racks, Algorithm::kHier);
  EXPECT_FALSE(sameStructure(cur, hier, "allreduce", 1 << 24, 0.1));
  // Same racks and algorithm, one host's share halved (a slowed host link): adopted; a share
  // within the margin: kept.
  Plan curHier = grouped({"a0", "a1", "a2", "b0", "b1", "b2"}, 1, racks, Algorithm::kHier);
  Plan uneven = grouped({"a0", "a1", "a2", "b0", "b1", "b2"}, 2, racks, Algorithm::kHier,
                        {1, 0.5, 1, 1, 1, 1});
  EXPECT_FALSE(sameStructure(curHier, uneven, "allreduce", 1 << 24, 0.1));
  EXPECT_TRUE(judgeSwitch(&curHier, uneven, "allreduce", 1 << 24, 0.1).adopt);
  Plan nearly = grouped({"a0", "a1", "a2", "b0", "b1", "b2"}, 2, racks, Algorithm::kHier,
                        {1, 0.97, 1, 1, 1, 1});
  EXPECT_TRUE(sameStructure(curHier, nearly, "allreduce", 1 << 24, 0.1));
  // Ring ignores the chunk weights; an algorithm forced by the user replaces the plans' tables.
  Plan ringUneven = grouped({"a0", "a1", "a2", "b0", "b1", "b2"}, 2, racks, Algorithm::kRing,
                            {1, 0.5, 1, 1, 1, 1});
  EXPECT_TRUE(sameStructure(cur, ringUneven, "allreduce", 1 << 24, 0.1));
  EXPECT_TRUE(sameStructure(cur, hier, "allreduce", 1 << 24, 0.1, Algorithm::kRing));
  EXPECT_FALSE(judgeSwitch(&cur, hier, "allreduce", 1 << 24, 0.1, Algorithm::kRing).adopt);
  // Trees are laid out from the measured rates: never the same structure.
  Plan tree1 = grouped({"a0", "a1", "a2", "b0", "b1", "b2"}, 1, racks, Algorithm::kTree);
  Plan tree2 = grouped({"a1", "a0", "a2", "b0", "b1", "b2"}, 2, racks, Algorithm::kTree);
  EXPECT_FALSE(sameStructure(tree1, tree2, "allreduce", 1 << 24, 0.1));
  // No groups: rule 5 (epoch).
  Plan flat1 = planWithEpoch({"h3", "h0", "h4", "h1", "h2"}, 1);
  Plan flat2 = planWithEpoch({"h0", "h3", "h4", "h1", "h2"}, 2);
  EXPECT_FALSE(sameStructure(flat1, flat2, "allreduce", 1 << 24, 0.1));
}

// Rule 4b: a newer plan whose order is not faster than the order in use on
// its own measurements is kept out, however new; priced by the plan itself (planned from the
// order in use) or by an OrderPricing of its topology against the order in use.
TEST(JudgeSwitch, AnotherOrderIsPricedAgainstTheOrderInUse) {
  const std::vector<std::string> inUse = {"h3", "h0", "h4", "h1", "h2"};
  const std::vector<std::string> other = {"h1", "h4", "h2", "h0", "h3"};
  Plan cur = planWithEpoch(inUse, 1);
  auto candidate = [&](const std::vector<std::string>& hosts, double planUs, double inputUs) {
    Plan p = rankmap::testing::orderedPlan(hosts, other);
    p.epoch = 2;
    p.predicted.basis = "allreduce 16 MiB ring";
    p.predicted.planUs = planUs;
    p.predicted.inputOrderUs = inputUs;
    p.seal();
    return p;
  };
  // Planned from the order in use: its own prediction prices it.
  SwitchVerdict v = judgeSwitch(&cur, candidate(inUse, 99, 100), "allreduce", 1 << 24, 0.1);
  EXPECT_FALSE(v.adopt) << v.reason;
  EXPECT_NE(v.reason.find("in the order in use"), std::string::npos) << v.reason;
  v = judgeSwitch(&cur, candidate(inUse, 50, 100), "allreduce", 1 << 24, 0.1);
  EXPECT_TRUE(v.adopt) << v.reason;
  // Planned from the launch order, which is not the order in use: its prediction says nothing
  // of the order in use; without a pricing the newer epoch wins (rule 5) ...
  Plan fromLaunch = candidate(kHosts, 99, 100);
  EXPECT_TRUE(judgeSwitch(&cur, fromLaunch, "allreduce", 1 << 24, 0.1).adopt);
  // ... with one from its topology against the order in use, the pricing decides.
  OrderPricing same{2, inUse, "allreduce 16 MiB ring", 100, 100};
  v = judgeSwitch(&cur, fromLaunch, "allreduce", 1 << 24, 0.1, std::nullopt, &same);
  EXPECT_FALSE(v.adopt) << v.reason;
  OrderPricing faster{2, inUse, "allreduce 16 MiB ring", 40, 100};
  EXPECT_TRUE(
      judgeSwitch(&cur, fromLaunch, "allreduce", 1 << 24, 0.1, std::nullopt, &faster).adopt);
  // A pricing of another topology version or against another order is ignored.
  for (OrderPricing p :
       {OrderPricing{1, inUse, "", 100, 100}, OrderPricing{2, other, "", 100, 100}})
    EXPECT_TRUE(judgeSwitch(&cur, fromLaunch, "allreduce", 1 << 24, 0.1, std::nullopt, &p).adopt)
        << p.epoch;
  // The same order as in use is not a question of order (rules 2, 4, 5).
  Plan sameOrder = rankmap::testing::orderedPlan(inUse, inUse);
  sameOrder.epoch = 2;
  sameOrder.predicted.planUs = sameOrder.predicted.inputOrderUs = 100;
  sameOrder.seal();
  EXPECT_TRUE(judgeSwitch(&cur, sameOrder, "allreduce", 1 << 24, 0.1).adopt);
}

TEST(PricingKey, IsZeroWithoutPricingAndFollowsThePrices) {
  OrderPricing a{3, {"h0", "h1"}, "b", 99, 100};
  OrderPricing b = a;
  OrderPricing c = a;
  c.candidateUs = 98;
  OrderPricing d = a;
  std::swap(d.candidateUs, d.againstUs);
  EXPECT_EQ(pricingKey(nullptr), 0u);
  EXPECT_NE(pricingKey(&a), 0u);
  EXPECT_EQ(pricingKey(&a), pricingKey(&b));
  EXPECT_NE(pricingKey(&a), pricingKey(&c));
  EXPECT_NE(pricingKey(&a), pricingKey(&d));
}

TEST(PlanKey, DistinguishesPlansAndIdentity) {
  Plan a = planWithEpoch({"h3", "h0", "h4", "h1", "h2"}, 1);
  Plan b = planWithEpoch({"h1", "h4", "h2", "h0", "h3"}, 1);
  EXPECT_EQ(planKey(nullptr), 0u);
  EXPECT_NE(planKey(&a), 0u);
  EXPECT_NE(planKey(&a), planKey(&b));
  EXPECT_EQ(planKey(&a), planKey(&a));
}

}  // namespace
}  // namespace rankmap::coll
