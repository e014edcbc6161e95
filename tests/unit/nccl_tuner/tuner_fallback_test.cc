// librankmap_nccl_tuner.so in an NCCL job whose shim holds no usable plan: CTest runs this twice
// (nccl_tuner_no_plan: RANKMAP_PLAN empty; nccl_tuner_bad_plan: RANKMAP_PLAN names a file that is
// not a plan), with TUNER_TEST_EXPECT holding what the tuner's log line must say. The
// communicator is made through the shim as in any job; the tuner must leave NCCL's table as it
// was and say why.
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
using rankmap::testing::Table;

TEST(TunerFallback, NcclsTableStaysWithoutAnAgreedPlan) {
  const char* expect = std::getenv("TUNER_TEST_EXPECT");
  ASSERT_NE(expect, nullptr) << "run through CTest (nccl_tuner_no_plan, nccl_tuner_bad_plan)";
  char tmpl[] = "/tmp/rankmap-tuner-fallback-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  setenv("RANKMAP_LOG_FILE", (dir + "/log").c_str(), 1);
  setenv("RANKMAP_TIMEOUT", "20s", 1);

  constexpr int kRanks = 4;
  std::vector<sabi::Comm> comms(kRanks, nullptr);
  sabi::UniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), sabi::kSuccess);
  rankmap::testing::runRanks(kRanks, [&](int r) {
    ASSERT_EQ(ncclCommInitRank(&comms[static_cast<size_t>(r)], kRanks, id, r), sabi::kSuccess);
  });

  void* h = dlopen(RANKMAP_TUNER_LIB, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto* t = static_cast<const abi::TunerV6*>(dlsym(h, "ncclTunerPlugin_v6"));
  ASSERT_NE(t, nullptr);
  void* ctx = nullptr;
  ASSERT_EQ(t->init(&ctx, 1, kRanks, kRanks, nullptr, nullptr, nullptr), abi::Result::kSuccess);
  for (int f : {abi::kAllReduce, abi::kAllGather, abi::kReduceScatter, abi::kBroadcast}) {
    Table table;
    int nChannels = 0;
    ASSERT_EQ(t->getCollInfo(ctx, static_cast<abi::Func>(f), 1 << 20, 1, table.raw(), 7, 3, 0,
                             &nChannels),
              abi::Result::kSuccess);
    EXPECT_EQ(table.v, Table().v) << f;
    EXPECT_EQ(nChannels, 0);
  }
  EXPECT_EQ(t->finalize(ctx), abi::Result::kSuccess);

  std::ifstream in(dir + "/log");
  std::stringstream log;
  log << in.rdbuf();
  EXPECT_NE(log.str().find("NCCL tuner: communicator of 4 ranks on 4 nodes: NCCL's costs stay as "
                           "they are: "),
            std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find(expect), std::string::npos) << log.str();
  for (auto c : comms) {
    if (c != nullptr) {
      EXPECT_EQ(ncclCommDestroy(c), sabi::kSuccess);
    }
  }
  EXPECT_EQ(rankmap::testing::nccl_double::liveComms(), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
