// The tuner's logic without NCCL: the cost adjustment against its closed form and against the
// planner's models of a measured network, the decision when to adjust, NCCL's library naming
// rule, and chaining to a real plugin library (nccl_tuner_test_double).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <set>

#include "common/error.h"
#include "nccl_tuner/chain.h"
#include "nccl_tuner/costs.h"
#include "nccl_tuner/plugin_names.h"
#include "nccl_tuner/tuner.h"
#include "tests/unit/nccl_tuner/tuner_test_util.h"

namespace rankmap::nccl_tuner {
namespace {

using testing::expectedAdd;
using testing::modelPlan;
using testing::racksTopology;
using testing::Table;

const std::string kDouble = RANKMAP_TUNER_DOUBLE;
const std::string kTunerLib = RANKMAP_TUNER_LIB;

// One plan for the whole file: 8 hosts in 2 racks, 2.5 Gbit/s uplinks adding 50 us each.
const Plan& slowUplinkPlan() {
  static const Plan p = modelPlan(racksTopology(2500, 50));
  return p;
}

std::unique_ptr<Tuner> makeTuner(size_t nRanks, size_t nNodes, const AgreedPlanSource& agreed,
                                 TunerSettings settings = {}, int version = 6) {
  TunerInit init;
  init.version = version;
  init.nRanks = nRanks;
  init.nNodes = nNodes;
  std::unique_ptr<Tuner> t;
  EXPECT_EQ(Tuner::create(init, settings, agreed, &t), abi::Result::kSuccess);
  return t;
}

AgreedPlanSource agreedOn(const Plan& p) {
  return [p](int) { return AgreedPlan{p, "", false}; };
}

TEST(TunerCosts, TableShapeIsChecked) {
  Table t;
  EXPECT_THROW(CostTable(nullptr, 7, 3), InvalidInput);
  EXPECT_THROW(CostTable(t.raw(), 0, 3), InvalidInput);
  EXPECT_THROW(CostTable(t.raw(), 7, 65), InvalidInput);
  CostTable c(t.raw(), 7, 3);
  EXPECT_EQ(c.at(abi::kRing, abi::kSimple), 50);  // row-major, as NCCL's 2-D array
  EXPECT_FALSE(c.usable(abi::kCollNetDirect, abi::kSimple));
}

TEST(TunerCosts, NcclNamesMapToThePlans) {
  EXPECT_EQ(planCollective(abi::kAllReduce), "allreduce");
  EXPECT_EQ(planCollective(abi::kAllGather), "allgather");
  EXPECT_EQ(planCollective(abi::kReduceScatter), "reducescatter");
  EXPECT_EQ(planCollective(abi::kBroadcast), "broadcast");
  EXPECT_EQ(planCollective(abi::kReduce), "");
  EXPECT_EQ(planCollective(5), "");  // ncclFuncSendRecv
  EXPECT_EQ(planAlgorithm(abi::kRing), Algorithm::kRing);
  EXPECT_EQ(planAlgorithm(abi::kTree), Algorithm::kTree);
  EXPECT_EQ(planAlgorithm(abi::kNvlsTree), Algorithm::kTree);
  EXPECT_EQ(planAlgorithm(abi::kPat), Algorithm::kRhd);
  EXPECT_FALSE(planAlgorithm(abi::kCollNetDirect));
  EXPECT_FALSE(planAlgorithm(abi::kNvls));
  EXPECT_FALSE(planAlgorithm(42));
}

// Every usable entry gets alpha + bytes * beta / efficiency of its algorithm's model (the bound
// where there is none); ignored entries stay ignored.
TEST(TunerCosts, AddNetworkTimeIsTheClosedForm) {
  CollectiveModel m;
  m.algorithms[Algorithm::kRing] = {100, 0.01};
  m.algorithms[Algorithm::kTree] = {40, 0.03};
  m.lowerBoundUsPerByte = 0.002;
  Table t(7, true);
  t.at(abi::kCollNetChain, abi::kSimple) = 10;  // no model: gets the bound
  const Table before = t;
  CostTable c(t.raw(), t.algos, t.protos);
  const double bytes = 1 << 20;
  int usable = 0;
  for (float x : before.v) usable += x >= 0;
  EXPECT_EQ(addNetworkTime(c, m, bytes), usable);
  const double eff[3] = {0.5, 120.0 / 128.0, 1.0};
  for (int a = 0; a < 7; ++a)
    for (int p = 0; p < 3; ++p) {
      if (before.at(a, p) < 0) {
        EXPECT_EQ(t.at(a, p), -1.0f) << a << "," << p;
        continue;
      }
      double alpha = 0, beta = m.lowerBoundUsPerByte;  // PAT: no rhd model here, so the bound
      if (a == abi::kRing) alpha = 100, beta = 0.01;
      if (a == abi::kTree) alpha = 40, beta = 0.03;
      EXPECT_FLOAT_EQ(t.at(a, p),
                      static_cast<float>(before.at(a, p) + alpha + bytes * beta / eff[p]))
          << a << "," << p;
    }
}

// The planner's models of a slow uplink: the double binary tree crosses the uplink more often
// than a ring in rack order (larger beta), but climbs fewer tiers in sequence (smaller alpha).
TEST(TunerCosts, PlannerModelsTheMeasuredTiers) {
  const Plan& p = slowUplinkPlan();
  ASSERT_EQ(p.hosts.size(), 8u);
  for (const auto& coll : {"allreduce", "allgather", "reducescatter", "broadcast"})
    ASSERT_TRUE(p.models.count(coll)) << coll;
  const auto& ar = p.models.at("allreduce");
  const AlgoModel ring = ar.algorithms.at(Algorithm::kRing);
  const AlgoModel tree = ar.algorithms.at(Algorithm::kTree);
  EXPECT_GT(tree.betaUsPerByte, ring.betaUsPerByte);
  EXPECT_LT(tree.alphaUs, ring.alphaUs);
  // The ring's share of the uplink: 2 (w-1)/w bytes per byte at 2.5 Gbit/s.
  EXPECT_NEAR(ring.betaUsPerByte, 2.0 * 7 / 8 / (2500 / 8.0), 1e-9);
  EXPECT_GT(ar.lowerBoundUsPerByte, 0);
  EXPECT_LE(ar.lowerBoundUsPerByte, ring.betaUsPerByte);
}

// What NCCL then picks: at 64 MiB the ring (NCCL thought tree), with Simple over LL128 (LL128's
// flags cost wire time on a slow link); at 8 bytes the tree where NCCL thought ring (the ring's
// 2(w-1) steps pay the uplink latency twice per lap).
TEST(TunerCosts, ChoiceFollowsTheMeasuredNetwork) {
  const CollectiveModel& m = slowUplinkPlan().models.at("allreduce");
  Table large;
  ASSERT_EQ(large.cheapest(), std::make_pair(int{abi::kTree}, int{abi::kLL128}));
  CostTable cl(large.raw(), large.algos, large.protos);
  addNetworkTime(cl, m, 64.0 * (1 << 20));
  EXPECT_EQ(large.cheapest(), std::make_pair(int{abi::kRing}, int{abi::kSimple}));

  Table small;
  small.at(abi::kRing, abi::kLL) = 10;  // NCCL: ring LL for tiny messages
  small.at(abi::kTree, abi::kLL) = 14;
  ASSERT_EQ(small.cheapest(), std::make_pair(int{abi::kRing}, int{abi::kLL}));
  CostTable cs(small.raw(), small.algos, small.protos);
  addNetworkTime(cs, m, 8);
  EXPECT_EQ(small.cheapest(), std::make_pair(int{abi::kTree}, int{abi::kLL}));
}

TEST(TunerDecision, AdjustsOnlyInterNodeCollectivesThePlanModels) {
  const Plan& p = slowUplinkPlan();
  auto t = makeTuner(8, 8, agreedOn(p));
  ASSERT_TRUE(t->active()) << t->reason();
  const double bytes = 4 << 20;
  for (int func : {abi::kAllReduce, abi::kAllGather, abi::kReduceScatter, abi::kBroadcast}) {
    Table table(7, func == abi::kAllGather || func == abi::kReduceScatter);
    const Table before = table;
    int nChannels = 0;
    ASSERT_EQ(t->getCollInfo(static_cast<abi::Func>(func), bytes, 1, table.raw(), table.algos,
                             table.protos, 0, &nChannels),
              abi::Result::kSuccess);
    EXPECT_EQ(nChannels, 0);  // untouched: NCCL chooses
    const std::string coll(planCollective(func));
    for (int a = 0; a < table.algos; ++a)
      for (int p2 = 0; p2 < table.protos; ++p2) {
        if (before.at(a, p2) < 0) {
          EXPECT_EQ(table.at(a, p2), before.at(a, p2));
          continue;
        }
        EXPECT_FLOAT_EQ(table.at(a, p2),
                        static_cast<float>(before.at(a, p2) + expectedAdd(p, coll, a, p2, bytes)))
            << coll << " " << a << "," << p2;
      }
  }
  for (int func : {int{abi::kReduce}, 5, 6, 7}) {  // reduce, send/recv: not modelled
    Table table;
    int nChannels = 0;
    t->getCollInfo(static_cast<abi::Func>(func), bytes, 1, table.raw(), 7, 3, 0, &nChannels);
    EXPECT_EQ(table.v, Table().v) << func;
  }
  EXPECT_EQ(t->counters().adjusted.load(), 4u);
  EXPECT_EQ(t->finalize(), abi::Result::kSuccess);
}

void expectUntouched(Tuner& t) {
  Table table;
  int nChannels = 0;
  EXPECT_EQ(t.getCollInfo(abi::kAllReduce, 1 << 20, 1, table.raw(), 7, 3, 0, &nChannels),
            abi::Result::kSuccess);
  EXPECT_EQ(table.v, Table().v);
}

TEST(TunerDecision, NothingToSayLeavesTheTable) {
  const Plan& p = slowUplinkPlan();
  int asked = 0;
  auto counting = [&](int) {
    ++asked;
    return AgreedPlan{p, "", false};
  };
  {
    auto t = makeTuner(8, 1, counting);  // one node
    EXPECT_FALSE(t->active());
    EXPECT_NE(t->reason().find("one node"), std::string::npos) << t->reason();
    expectUntouched(*t);
    EXPECT_EQ(asked, 0);
  }
  {
    auto t = makeTuner(8, 4, counting);  // not the plan's hosts
    EXPECT_FALSE(t->active());
    EXPECT_NE(t->reason().find("is for 8 ranks on 8 hosts"), std::string::npos) << t->reason();
    expectUntouched(*t);
  }
  {
    auto t = makeTuner(8, 8, [](int n) {
      return AgreedPlan{std::nullopt, "no plan agreement for " + std::to_string(n), true};
    });
    EXPECT_FALSE(t->active());
    EXPECT_EQ(t->reason(), "no plan agreement for 8");
    expectUntouched(*t);
  }
  {
    Plan old = p;  // a plan from before models existed
    old.models.clear();
    old.seal();
    auto t = makeTuner(8, 8, agreedOn(old));
    EXPECT_FALSE(t->active());
    EXPECT_NE(t->reason().find("no cost models"), std::string::npos) << t->reason();
    expectUntouched(*t);
  }
  {
    auto t = makeTuner(8, 8, agreedOn(p), {.enabled = false, .chain = ""});
    EXPECT_FALSE(t->active());
    EXPECT_EQ(t->reason(), "RANKMAP_NCCL_TUNER=0");
    expectUntouched(*t);
  }
}

// Without librankmap_nccl.so in the process (this test links none), nobody can vouch that the
// other ranks hold the same plan.
TEST(TunerDecision, WithoutTheShimThereIsNoAgreedPlan) {
  AgreedPlan a = askShim(8);
  EXPECT_FALSE(a.plan);
  EXPECT_TRUE(a.warn);
  EXPECT_NE(a.reason.find("librankmap_nccl.so (the NCCL shim) is not loaded"), std::string::npos)
      << a.reason;
}

TEST(TunerNames, FollowNcclsPluginRule) {
  EXPECT_EQ(tunerLibraryCandidates(""), std::vector<std::string>{"libnccl-tuner.so"});
  EXPECT_EQ(tunerLibraryCandidates("aws"),
            (std::vector<std::string>{"aws", "libnccl-tuner-aws.so"}));
  EXPECT_EQ(tunerLibraryCandidates("librankmap_nccl_tuner.so"),
            std::vector<std::string>{"librankmap_nccl_tuner.so"});
  EXPECT_EQ(tunerLibraryCandidates("/opt/x/libfoo.so"),
            std::vector<std::string>{"/opt/x/libfoo.so"});
  EXPECT_EQ(tunerLibraryCandidates("foo.so"),
            (std::vector<std::string>{"foo.so", "libnccl-tuner-foo.so.so"}));
  EXPECT_TRUE(isRankmapTuner(kTunerLib));
  EXPECT_TRUE(isRankmapTuner("librankmap_nccl_tuner.so"));
  EXPECT_FALSE(isRankmapTuner(kDouble));
}

TEST(TunerChain, PicksTheNewestStructNoNewerThanTheCaller) {
  auto v6 = ChainPlugin::load(kDouble, 6);
  EXPECT_EQ(v6->version(), 5);
  EXPECT_EQ(v6->name(), "testdouble");
  EXPECT_EQ(v6->path(), kDouble);
  EXPECT_FALSE(v6->hasChunkSize());
  EXPECT_EQ(ChainPlugin::load(kDouble, 5)->version(), 5);
  EXPECT_EQ(ChainPlugin::load(kDouble, 4)->version(), 3);
  EXPECT_EQ(ChainPlugin::load(kDouble, 3)->version(), 3);
}

TEST(TunerChain, UnusableLibrariesAreNamed) {
  try {
    ChainPlugin::load("/nonexistent/libnccl-tuner-gone.so", 6);
    FAIL() << "loaded a missing library";
  } catch (const IoError& e) {
    EXPECT_NE(
        std::string(e.what()).find("RANKMAP_NCCL_TUNER_CHAIN=/nonexistent/libnccl-tuner-gone.so"),
        std::string::npos)
        << e.what();
  }
  try {
    ChainPlugin::load("libm.so.6", 6);  // a library, but no tuner
    FAIL() << "took libm for a tuner";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("exports no tuner plugin of version 3 to 6"),
              std::string::npos)
        << e.what();
  }
  try {
    ChainPlugin::load(kTunerLib, 6);
    FAIL() << "chained to itself";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("is rankmap's tuner itself"), std::string::npos)
        << e.what();
  }
}

// The chained plugin first (it doubles), rankmap's addition after: 2x + add, not 2 (x + add).
TEST(TunerChain, ChainedPluginRunsFirstAndKeepsItsOutputs) {
  testing::resetDoubleLog(kDouble);
  const Plan& p = slowUplinkPlan();
  for (int version : {6, 4}) {
    auto t = makeTuner(8, 8, agreedOn(p), {.enabled = true, .chain = kDouble}, version);
    ASSERT_TRUE(t->active());
    ASSERT_NE(t->chain(), nullptr);
    Table table;
    const Table before = table;
    int nChannels = 0;
    const double bytes = 1 << 20;
    ASSERT_EQ(t->getCollInfo(abi::kAllReduce, bytes, 1, table.raw(), 7, 3, 1, &nChannels),
              abi::Result::kSuccess);
    EXPECT_EQ(nChannels, 7);  // the chained plugin's choice stays
    for (int a = 0; a < 7; ++a)
      for (int q = 0; q < 3; ++q) {
        if (before.at(a, q) < 0) continue;
        EXPECT_FLOAT_EQ(
            table.at(a, q),
            static_cast<float>(2 * before.at(a, q) + expectedAdd(p, "allreduce", a, q, bytes)));
      }
    EXPECT_EQ(t->finalize(), abi::Result::kSuccess);
  }
  EXPECT_EQ(testing::doubleLog(kDouble),
            "init v5 ranks=8 nodes=8\ngetCollInfo v5 coll=4 bytes=1048576\nfinalize v5\n"
            "init v3 ranks=8 nodes=8\ngetCollInfo v3 coll=4 bytes=1048576\nfinalize v3\n");
}

TEST(TunerChain, ChainedErrorsReachNccl) {
  const Plan& p = slowUplinkPlan();
  setenv("TUNER_DOUBLE_FAIL", "init", 1);
  {
    TunerInit init;
    init.nRanks = 8;
    init.nNodes = 8;
    std::unique_ptr<Tuner> t;
    EXPECT_EQ(Tuner::create(init, {.enabled = true, .chain = kDouble}, agreedOn(p), &t),
              abi::Result::kInternalError);
    EXPECT_EQ(t, nullptr);
  }
  setenv("TUNER_DOUBLE_FAIL", "getCollInfo", 1);
  {
    auto t = makeTuner(8, 8, agreedOn(p), {.enabled = true, .chain = kDouble});
    Table table;
    int nChannels = 0;
    EXPECT_EQ(t->getCollInfo(abi::kAllReduce, 1 << 20, 1, table.raw(), 7, 3, 0, &nChannels),
              abi::Result::kInternalError);
    EXPECT_EQ(t->counters().chainErrors.load(), 1u);
    EXPECT_EQ(t->finalize(), abi::Result::kSuccess);
  }
  unsetenv("TUNER_DOUBLE_FAIL");
}

TEST(TunerChain, MissingChainStillTunes) {
  const Plan& p = slowUplinkPlan();
  auto t = makeTuner(8, 8, agreedOn(p), {.enabled = true, .chain = "/nonexistent/libx.so"});
  EXPECT_TRUE(t->active());
  EXPECT_EQ(t->chain(), nullptr);
  Table table;
  int nChannels = 0;
  EXPECT_EQ(t->getCollInfo(abi::kAllReduce, 1 << 20, 1, table.raw(), 7, 3, 0, &nChannels),
            abi::Result::kSuccess);
  EXPECT_FLOAT_EQ(
      table.at(abi::kRing, abi::kSimple),
      static_cast<float>(50 + expectedAdd(p, "allreduce", abi::kRing, abi::kSimple, 1 << 20)));
}

}  // namespace
}  // namespace rankmap::nccl_tuner
