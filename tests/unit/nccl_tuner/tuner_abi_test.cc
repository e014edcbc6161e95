// librankmap_nccl_tuner.so through NCCL's tuner plugin ABI, as NCCL uses it: dlopen (RTLD_LOCAL),
// the versioned structs looked up by name, init/getCollInfo/finalize through their function
// pointers, with cost tables of NCCL's shape.
//
// The process is an NCCL job of 8 ranks on 8 hosts as far as the tuner can tell: it links
// librankmap_nccl.so ahead of nccl_test_double (libnccl.so.2), as LD_PRELOAD would, and the
// environment below creates one communicator through the shim, whose plan agreement applies the
// plan (a planner's plan of 2 racks with slow uplinks). The tuner asks the shim for that plan.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/unit/common/rank_threads.h"
#include "tests/unit/nccl_tuner/tuner_test_util.h"
#include "tests/unit/shim_nccl/nccl_api.h"
#include "tests/unit/shim_nccl/nccl_test_double.h"

namespace {

namespace abi = rankmap::nccl_tuner::abi;
namespace sabi = rankmap::shim_nccl::abi;
using rankmap::Plan;
using rankmap::testing::expectedAdd;
using rankmap::testing::Table;

const std::string kTunerLib = RANKMAP_TUNER_LIB;
const std::string kDouble = RANKMAP_TUNER_DOUBLE;
constexpr int kRanks = 8;

const Plan& plan() {
  static const Plan p = rankmap::testing::modelPlan(rankmap::testing::racksTopology(2500, 50));
  return p;
}

std::string dir;
std::vector<sabi::Comm> world(kRanks, nullptr);

// The log so far (the shim's and the tuner's lines).
std::string logText() {
  std::ifstream in(dir + "/log");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Job : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/rankmap-tuner-abi-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
    plan().save(dir + "/plan.json");
    // Read by the shim at its first NCCL call and by the tuner at its first init.
    setenv("RANKMAP_PLAN", (dir + "/plan.json").c_str(), 1);
    setenv("RANKMAP_TIMEOUT", "20s", 1);
    setenv("RANKMAP_LOG_FILE", (dir + "/log").c_str(), 1);
    sabi::UniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), sabi::kSuccess);
    rankmap::testing::runRanks(kRanks, [&](int r) {
      ASSERT_EQ(ncclCommInitRank(&world[static_cast<size_t>(r)], kRanks, id, r), sabi::kSuccess);
    });
  }
  void TearDown() override {
    for (auto c : world) {
      if (c != nullptr) {
        EXPECT_EQ(ncclCommDestroy(c), sabi::kSuccess);
      }
    }
    EXPECT_EQ(rankmap::testing::nccl_double::liveComms(), 0);
    std::filesystem::remove_all(dir);
  }
};

const auto* const kJob = ::testing::AddGlobalTestEnvironment(new Job);

// The plugin as NCCL opens it.
void* plugin() {
  static void* h = dlopen(kTunerLib.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(h, nullptr) << dlerror();
  return h;
}

template <typename T>
const T* pluginStruct(int version) {
  return static_cast<const T*>(dlsym(plugin(), abi::symbolName(version)));
}

// One communicator's life through the v6 struct: init, getCollInfo on `table`, finalize.
struct V6Comm {
  const abi::TunerV6* t = pluginStruct<abi::TunerV6>(6);
  void* ctx = nullptr;
  abi::Result initResult;
  V6Comm(size_t nRanks, size_t nNodes) {
    initResult = t->init(&ctx, 0x1234, nRanks, nNodes, nullptr, nullptr, nullptr);
  }
  abi::Result coll(abi::Func f, size_t bytes, Table& table, int* nChannels) {
    return t->getCollInfo(ctx, f, bytes, 1, table.raw(), table.algos, table.protos, 0, nChannels);
  }
  ~V6Comm() {
    if (ctx != nullptr) {
      EXPECT_EQ(t->finalize(ctx), abi::Result::kSuccess);
    }
  }
};

void expectAdjusted(const Table& before, const Table& after, const std::string& coll, double bytes,
                    double scale = 1) {
  for (int a = 0; a < before.algos; ++a)
    for (int p = 0; p < before.protos; ++p) {
      if (before.at(a, p) < 0) {
        EXPECT_EQ(after.at(a, p), before.at(a, p)) << a << "," << p;
        continue;
      }
      EXPECT_FLOAT_EQ(after.at(a, p), static_cast<float>(scale * before.at(a, p) +
                                                         expectedAdd(plan(), coll, a, p, bytes)))
          << coll << " " << a << "," << p;
    }
}

TEST(TunerAbi, ExportsVersions3To6AndNoOther) {
  for (int v = 3; v <= 6; ++v) {
    auto* s = pluginStruct<abi::TunerV3>(v);  // every version starts with name, init
    ASSERT_NE(s, nullptr) << v;
    EXPECT_STREQ(s->name, "rankmap");
  }
  EXPECT_EQ(dlsym(plugin(), "ncclTunerPlugin_v2"), nullptr);  // no cost table to adjust
  EXPECT_EQ(dlsym(plugin(), "ncclTunerPlugin_v7"), nullptr);
  EXPECT_NE(pluginStruct<abi::TunerV6>(6)->getChunkSize, nullptr);
}

// Every version, with the table NCCL of that version passes (6 algorithms for v3's NCCL 2.22).
TEST(TunerAbi, AdjustsTheAgreedPlansCommunicatorThroughEveryVersion) {
  const double bytes = 64 << 20;
  for (int v = 3; v <= 6; ++v) {
    SCOPED_TRACE("v" + std::to_string(v));
    Table table(v == 3 ? 6 : 7);
    const Table before = table;
    void* ctx = nullptr;
    int nChannels = 0;
    abi::Result done = abi::Result::kInternalError;
    if (v == 3) {
      auto* t = pluginStruct<abi::TunerV3>(3);
      ASSERT_EQ(t->init(kRanks, kRanks, nullptr, &ctx), abi::Result::kSuccess);
      ASSERT_EQ(t->getCollInfo(ctx, abi::kAllReduce, bytes, 1, table.raw(), 6, 3, &nChannels),
                abi::Result::kSuccess);
      done = t->destroy(ctx);
    } else if (v == 4) {
      auto* t = pluginStruct<abi::TunerV4>(4);
      ASSERT_EQ(t->init(kRanks, kRanks, nullptr, &ctx), abi::Result::kSuccess);
      ASSERT_EQ(t->getCollInfo(ctx, abi::kAllReduce, bytes, 1, table.raw(), 7, 3, 0, &nChannels),
                abi::Result::kSuccess);
      done = t->destroy(ctx);
    } else {
      auto* t = pluginStruct<abi::TunerV5>(v);  // v6 starts as v5
      ASSERT_EQ(t->init(&ctx, 7, kRanks, kRanks, nullptr, nullptr, nullptr), abi::Result::kSuccess);
      ASSERT_EQ(t->getCollInfo(ctx, abi::kAllReduce, bytes, 1, table.raw(), 7, 3, 0, &nChannels),
                abi::Result::kSuccess);
      done = t->finalize(ctx);
    }
    EXPECT_EQ(done, abi::Result::kSuccess);
    EXPECT_EQ(nChannels, 0);
    expectAdjusted(before, table, "allreduce", bytes);
    // NCCL thought tree; on 2.5 Gbit/s uplinks the ring crosses them less.
    EXPECT_EQ(before.cheapest().first, abi::kTree);
    EXPECT_EQ(table.cheapest(), std::make_pair(int{abi::kRing}, int{abi::kSimple}));
  }
  EXPECT_NE(logText().find("NCCL tuner: communicator of 8 ranks on 8 nodes: adding the measured "
                           "network's time from plan"),
            std::string::npos)
      << logText();
}

TEST(TunerAbi, OnlyModelledCollectivesChange) {
  V6Comm c(kRanks, kRanks);
  ASSERT_EQ(c.initResult, abi::Result::kSuccess);
  Table bcast;
  const Table before = bcast;
  int nChannels = 0;
  ASSERT_EQ(c.coll(abi::kBroadcast, 1 << 20, bcast, &nChannels), abi::Result::kSuccess);
  expectAdjusted(before, bcast, "broadcast", 1 << 20);
  Table reduce;
  ASSERT_EQ(c.coll(abi::kReduce, 1 << 20, reduce, &nChannels), abi::Result::kSuccess);
  EXPECT_EQ(reduce.v, before.v);
}

// Communicators the plan is not about: no agreement of their size, one node, other nodes.
TEST(TunerAbi, OtherCommunicatorsKeepNcclsTable) {
  for (auto [ranks, nodes] : {std::pair<size_t, size_t>{4, 4}, {kRanks, 1}, {kRanks, 4}}) {
    V6Comm c(ranks, nodes);
    ASSERT_EQ(c.initResult, abi::Result::kSuccess);
    Table table;
    int nChannels = 0;
    ASSERT_EQ(c.coll(abi::kAllReduce, 1 << 20, table, &nChannels), abi::Result::kSuccess);
    EXPECT_EQ(table.v, Table().v) << ranks << " ranks on " << nodes << " nodes";
  }
  EXPECT_NE(logText().find("no plan agreement for a communicator of 4 ranks"), std::string::npos)
      << logText();
}

TEST(TunerAbi, ChainsToTheConfiguredTunerFirst) {
  setenv("RANKMAP_NCCL_TUNER_CHAIN", kDouble.c_str(), 1);
  rankmap::testing::resetDoubleLog(kDouble);
  {
    V6Comm c(kRanks, kRanks);
    ASSERT_EQ(c.initResult, abi::Result::kSuccess);
    Table table;
    const Table before = table;
    int nChannels = 0;
    ASSERT_EQ(c.coll(abi::kAllReduce, 1 << 20, table, &nChannels), abi::Result::kSuccess);
    EXPECT_EQ(nChannels, 7);
    expectAdjusted(before, table, "allreduce", 1 << 20, 2);  // doubled first, then adjusted
  }
  EXPECT_EQ(rankmap::testing::doubleLog(kDouble),
            "init v5 ranks=8 nodes=8\ngetCollInfo v5 coll=4 bytes=1048576\nfinalize v5\n");
  // RANKMAP_NCCL_TUNER=0: the chained tuner alone.
  setenv("RANKMAP_NCCL_TUNER", "0", 1);
  {
    V6Comm c(kRanks, kRanks);
    Table table;
    int nChannels = 0;
    ASSERT_EQ(c.coll(abi::kAllReduce, 1 << 20, table, &nChannels), abi::Result::kSuccess);
    for (size_t i = 0; i < table.v.size(); ++i)
      EXPECT_EQ(table.v[i], Table().v[i] >= 0 ? 2 * Table().v[i] : -1.0f) << i;
  }
  unsetenv("RANKMAP_NCCL_TUNER");
  // The chained tuner's errors are NCCL's to handle, as if it had loaded it alone.
  setenv("TUNER_DOUBLE_FAIL", "getCollInfo", 1);
  {
    V6Comm c(kRanks, kRanks);
    Table table;
    int nChannels = 0;
    EXPECT_EQ(c.coll(abi::kAllReduce, 1 << 20, table, &nChannels), abi::Result::kInternalError);
  }
  setenv("TUNER_DOUBLE_FAIL", "init", 1);
  {
    V6Comm c(kRanks, kRanks);
    EXPECT_EQ(c.initResult, abi::Result::kInternalError);
    EXPECT_EQ(c.ctx, nullptr);
  }
  unsetenv("TUNER_DOUBLE_FAIL");
  unsetenv("RANKMAP_NCCL_TUNER_CHAIN");
}

TEST(TunerAbi, UnusableChainIsAWarningAndTheTunerWorksAlone) {
  for (const std::string& chain : {std::string("/nonexistent/libnccl-tuner-gone.so"), kTunerLib}) {
    setenv("RANKMAP_NCCL_TUNER_CHAIN", chain.c_str(), 1);
    V6Comm c(kRanks, kRanks);
    ASSERT_EQ(c.initResult, abi::Result::kSuccess);
    Table table;
    const Table before = table;
    int nChannels = 0;
    ASSERT_EQ(c.coll(abi::kAllReduce, 1 << 20, table, &nChannels), abi::Result::kSuccess);
    expectAdjusted(before, table, "allreduce", 1 << 20);  // once: no chain, no self-call
    EXPECT_NE(logText().find("RANKMAP_NCCL_TUNER_CHAIN=" + chain), std::string::npos) << logText();
  }
  EXPECT_NE(logText().find("is rankmap's tuner itself"), std::string::npos) << logText();
  EXPECT_NE(logText().find("tuning without it"), std::string::npos) << logText();
  unsetenv("RANKMAP_NCCL_TUNER_CHAIN");
}

TEST(TunerAbi, BadSettingIsAnErrorNamingItAndNcclsTableStays) {
  // A first good init configures the tuner's logging (RANKMAP_LOG_FILE), as in a job whose
  // settings change between communicators; with bad settings from the start the error goes to
  // stderr, logging's default.
  { V6Comm ok(kRanks, kRanks); }
  setenv("RANKMAP_NCCL_TUNER", "perhaps", 1);
  {
    // The user's communicator still comes up: the init succeeds and changes nothing.
    V6Comm c(kRanks, kRanks);
    ASSERT_EQ(c.initResult, abi::Result::kSuccess);
    Table table;
    const Table before = table;
    int nChannels = 0;
    ASSERT_EQ(c.coll(abi::kAllReduce, 1 << 20, table, &nChannels), abi::Result::kSuccess);
    EXPECT_EQ(table.v, before.v);
  }
  unsetenv("RANKMAP_NCCL_TUNER");
  const std::string log = logText();
  EXPECT_NE(log.find("NCCL tuner init: "), std::string::npos) << log;
  EXPECT_NE(log.find("RANKMAP_NCCL_TUNER"), std::string::npos) << log;
  EXPECT_NE(log.find("perhaps"), std::string::npos) << log;
}

TEST(TunerAbi, ArgumentsNcclNeverPassesAreRefused) {
  auto* t = pluginStruct<abi::TunerV6>(6);
  Table table;
  int nChannels = 0;
  EXPECT_EQ(t->init(nullptr, 0, kRanks, kRanks, nullptr, nullptr, nullptr),
            abi::Result::kInvalidArgument);
  EXPECT_EQ(t->getCollInfo(nullptr, abi::kAllReduce, 8, 1, table.raw(), 7, 3, 0, &nChannels),
            abi::Result::kInvalidArgument);
  V6Comm c(kRanks, kRanks);
  EXPECT_EQ(t->getCollInfo(c.ctx, abi::kAllReduce, 8, 1, nullptr, 7, 3, 0, &nChannels),
            abi::Result::kInvalidArgument);
  EXPECT_EQ(t->getCollInfo(c.ctx, abi::kAllReduce, 8, 1, table.raw(), 0, 3, 0, &nChannels),
            abi::Result::kInvalidArgument);
  size_t chunk = 4096;
  EXPECT_EQ(t->getChunkSize(c.ctx, abi::kAllReduce, 1 << 20, abi::kRing, abi::kSimple, 4, &chunk),
            abi::Result::kSuccess);
  EXPECT_EQ(chunk, 4096u);  // NCCL's, with no chained tuner to change it
  EXPECT_EQ(table.v, Table().v);
}

}  // namespace
