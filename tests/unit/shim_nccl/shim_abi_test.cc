// librankmap_nccl.so through its exported symbols: the test links it ahead of nccl_test_double
// (libnccl.so.2), so every ncclX call below resolves to the shim exactly as under LD_PRELOAD,
// and the double's own nested ncclBcast -> ncclBroadcast call comes back through the shim too.
// The plan comes from RANKMAP_PLAN, set before the first NCCL call of the process.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "common/crypto.h"
#include "common/json.h"
#include "shim_nccl/agreed_plan.h"
#include "tests/unit/shim_nccl/cuda_driver_test_double.h"
#include "tests/unit/shim_nccl/nccl_api.h"
#include "tests/unit/shim_nccl/nccl_test_double.h"
#include "tests/unit/shim_nccl/shim_test_util.h"

extern "C" int cuCtxSetCurrent(void* ctx);

namespace {

namespace abi = rankmap::shim_nccl::abi;
namespace nd = rankmap::testing::nccl_double;
namespace cd = rankmap::testing::cuda_double;
using rankmap::testing::pattern;
using rankmap::testing::runRanks;

// 2 hosts x 2 ranks, hosts swapped: app 0,1 -> NCCL 2,3; app 2,3 -> NCCL 0,1.
const rankmap::Plan& plan() {
  static const rankmap::Plan p = rankmap::testing::makePlan(2, 2, {1, 0});
  return p;
}

class PlanEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/rankmap-nccl-abi-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    plan().save(dir_ + "/plan.json");
    setenv("RANKMAP_PLAN", (dir_ + "/plan.json").c_str(), 1);
    setenv("RANKMAP_TIMEOUT", "20s", 1);
    // The shim counts communicators and traffic for a profile (the MPI shim would write it).
    setenv("RANKMAP_PROFILE_OUT", (dir_ + "/profile.json").c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

 private:
  std::string dir_;
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new PlanEnvironment);

void* contextOf(int rank) { return reinterpret_cast<void*>(0x7000 + rank); }
abi::Stream streamOf(int rank) { return reinterpret_cast<abi::Stream>(0x3000 + rank); }

struct World {
  std::vector<abi::Comm> comms = std::vector<abi::Comm>(4, nullptr);
  World() {
    abi::UniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), abi::kSuccess);
    runRanks(4, [&](int a) {
      cuCtxSetCurrent(contextOf(a));
      EXPECT_EQ(ncclCommInitRank(&comms[static_cast<size_t>(a)], 4, id, a), abi::kSuccess);
    });
  }
  ~World() {
    for (auto c : comms) {
      if (c != nullptr) {
        EXPECT_EQ(ncclCommDestroy(c), abi::kSuccess);
      }
    }
    EXPECT_EQ(nd::liveComms(), 0);
    EXPECT_EQ(cd::liveAllocations(), 0u);
  }
};

TEST(ShimAbi, OnlyTranslatedOrCountedFunctionsAreInterposed) {
  auto objectOf = [](const char* sym) {
    Dl_info info{};
    void* p = dlsym(RTLD_DEFAULT, sym);
    if (p == nullptr || dladdr(p, &info) == 0) return std::string("?");
    return std::filesystem::path(info.dli_fname).filename().string();
  };
  EXPECT_EQ(objectOf("ncclAllGather"), "librankmap_nccl.so");
  EXPECT_EQ(objectOf("ncclCommInitRank"), "librankmap_nccl.so");
  EXPECT_EQ(objectOf("ncclAllReduce"), "librankmap_nccl.so");  // counted for a profile
  EXPECT_EQ(objectOf("ncclCommCount"), "libnccl.so.2");
  EXPECT_EQ(objectOf("pncclAllGather"), "libnccl.so.2");  // the shim never exports pnccl*
  // The shim needs no CUDA runtime: nothing in this process loaded one.
  for (const char* cudart : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
    EXPECT_EQ(dlopen(cudart, RTLD_NOLOAD | RTLD_LAZY), nullptr) << cudart;
}

TEST(ShimAbi, InitPermutesAndUserRankIsTranslated) {
  nd::resetCalls();
  World w;
  std::map<int, int> byApp;
  for (const auto& c : nd::calls())
    if (c.fn == "ncclCommInitRank")
      for (int a = 0; a < 4; ++a)
        if (c.context == contextOf(a)) byApp[a] = c.rank;
  ASSERT_EQ(byApp.size(), 4u);
  for (int a = 0; a < 4; ++a) {
    EXPECT_EQ(byApp[a], plan().permutation[static_cast<size_t>(a)]);
    int user = -1;
    EXPECT_EQ(ncclCommUserRank(w.comms[static_cast<size_t>(a)], &user), abi::kSuccess);
    EXPECT_EQ(user, a);
  }
}

// ncclBcast is implemented inside NCCL by calling ncclBroadcast, which resolves to the shim
// again: the re-entry guard must pass it through, or the root would be translated twice.
TEST(ShimAbi, NestedBroadcastInsideBcastIsNotTranslatedAgain) {
  World w;
  for (int root = 0; root < 4; ++root) {
    nd::resetCalls();
    runRanks(4, [&](int a) {
      std::vector<int32_t> buf(3);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(a, i);
      EXPECT_EQ(ncclBcast(buf.data(), buf.size(), abi::kInt32, root,
                          w.comms[static_cast<size_t>(a)], streamOf(a)),
                abi::kSuccess);
      for (size_t i = 0; i < buf.size(); ++i)
        EXPECT_EQ(buf[i], pattern(root, i)) << "root " << root;
    });
    int bcasts = 0, broadcasts = 0;
    for (const auto& c : nd::calls()) {
      if (c.fn == "ncclBcast") ++bcasts;
      if (c.fn == "ncclBroadcast") ++broadcasts;
      if (c.fn == "ncclBcast" || c.fn == "ncclBroadcast") {
        EXPECT_EQ(c.root, plan().permutation[static_cast<size_t>(root)]) << c.fn;
      }
    }
    EXPECT_EQ(bcasts, 4);
    EXPECT_EQ(broadcasts, 4);
  }
}

TEST(ShimAbi, BlockOrderIsRestoredThroughTheLibrary) {
  World w;
  runRanks(4, [&](int a) {
    const size_t count = 5;
    std::vector<int32_t> mine(count), all(4 * count, -1), a2aIn(4 * count), a2a(4 * count, -1);
    for (size_t i = 0; i < count; ++i) mine[i] = pattern(a, i);
    for (size_t i = 0; i < 4 * count; ++i) a2aIn[i] = pattern(a, i);
    abi::Comm comm = w.comms[static_cast<size_t>(a)];
    EXPECT_EQ(ncclAllGather(mine.data(), all.data(), count, abi::kInt32, comm, streamOf(a)),
              abi::kSuccess);
    EXPECT_EQ(ncclAlltoAll(a2aIn.data(), a2a.data(), count, abi::kInt32, comm, streamOf(a)),
              abi::kSuccess);
    for (int r = 0; r < 4; ++r)
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(all[static_cast<size_t>(r) * count + i], pattern(r, i));
        EXPECT_EQ(a2a[static_cast<size_t>(r) * count + i],
                  pattern(r, static_cast<size_t>(a) * count + i));
      }
    // Untranslated: AllReduce goes straight to NCCL and is order-independent for integers.
    std::vector<int32_t> sum(count, -1);
    EXPECT_EQ(
        ncclAllReduce(mine.data(), sum.data(), count, abi::kInt32, abi::kSum, comm, streamOf(a)),
        abi::kSuccess);
    for (size_t i = 0; i < count; ++i)
      EXPECT_EQ(sum[i], pattern(0, i) + pattern(1, i) + pattern(2, i) + pattern(3, i));
  });
}

TEST(ShimAbi, ExceptionsBecomeNcclResults) {
  World w;
  cd::failAllocations(4);
  runRanks(4, [&](int a) {
    std::vector<int32_t> mine(2), all(8);
    EXPECT_EQ(ncclAllGather(mine.data(), all.data(), 2, abi::kInt32,
                            w.comms[static_cast<size_t>(a)], streamOf(a)),
              abi::kUnhandledCudaError);
  });
  cd::failAllocations(0);
}

// This process's part of a job profile (common/comm_profile.h), through the exported C function the
// MPI shim calls: one entry per communicator (4 NCCL ranks of one communicator in this process are
// one), its key from the unique id, children keyed alike on every member, traffic as the
// busiest rank passed it (messages: summed).
TEST(ShimAbi, ProfileRecordCountsCommunicatorsAndTheirTraffic) {
  using RecordFn = size_t (*)(char*, size_t);
  auto record = reinterpret_cast<RecordFn>(dlsym(RTLD_DEFAULT, "rankmap_nccl_profile_record"));
  ASSERT_NE(record, nullptr);
  abi::UniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), abi::kSuccess);
  std::vector<abi::Comm> world(4, nullptr), half(4, nullptr);
  runRanks(4, [&](int a) {
    cuCtxSetCurrent(contextOf(a));
    const size_t i = static_cast<size_t>(a);
    ASSERT_EQ(ncclCommInitRank(&world[i], 4, id, a), abi::kSuccess);
    std::vector<int32_t> mine(5, a), all(20, 0);
    EXPECT_EQ(ncclAllGather(mine.data(), all.data(), 5, abi::kInt32, world[i], streamOf(a)),
              abi::kSuccess);
    EXPECT_EQ(ncclCommSplit(world[i], a % 2, a, &half[i], nullptr), abi::kSuccess);
    for (int step = 0; step < 3; ++step)
      EXPECT_EQ(
          ncclAllReduce(mine.data(), all.data(), 5, abi::kInt32, abi::kSum, half[i], streamOf(a)),
          abi::kSuccess);
    EXPECT_EQ(ncclGroupStart(), abi::kSuccess);
    EXPECT_EQ(ncclSend(mine.data(), 5, abi::kInt32, 1 - a / 2, half[i], streamOf(a)),
              abi::kSuccess);
    EXPECT_EQ(ncclRecv(all.data(), 5, abi::kInt32, 1 - a / 2, half[i], streamOf(a)), abi::kSuccess);
    EXPECT_EQ(ncclGroupEnd(), abi::kSuccess);
  });
  std::string text(record(nullptr, 0), '\0');
  ASSERT_GT(text.size(), 2u);
  ASSERT_EQ(record(text.data(), text.size() + 1), text.size());
  rankmap::Json entries = rankmap::parseJson(text, "record");
  const std::string key =
      rankmap::sha256Hex(std::string_view(id.internal, sizeof(id.internal))).substr(0, 16);
  auto at = std::find_if(entries.begin(), entries.end(),
                         [&](const rankmap::Json& e) { return e["k"] == key; });
  ASSERT_NE(at, entries.end()) << text;
  EXPECT_EQ((*at)["m"], "ncclCommInitRank");
  EXPECT_EQ((*at)["t"].dump(), R"({"allgather":[1,80]})");
  // The two children (colours 0 and 1) follow their parent, each once, with different keys.
  ASSERT_GE(entries.end() - at, 3) << text;
  const rankmap::Json& c0 = *(at + 1);
  const rankmap::Json& c1 = *(at + 2);
  EXPECT_EQ(c0["m"], "ncclCommSplit");
  EXPECT_EQ(c1["m"], "ncclCommSplit");
  EXPECT_NE(c0["k"], c1["k"]);
  EXPECT_EQ(c0["c"].get<int>(), (*at)["c"].get<int>() + 1);
  // Each child: 3 allreduces of 20 bytes; 2 ranks sent one message of 20 bytes each.
  EXPECT_EQ(c0["t"].dump(), R"({"allreduce":[3,60],"sendrecv":[2,40]})");
  EXPECT_EQ(c1["t"].dump(), c0["t"].dump());
  runRanks(4, [&](int a) {
    const size_t i = static_cast<size_t>(a);
    EXPECT_EQ(ncclCommDestroy(half[i]), abi::kSuccess);
    EXPECT_EQ(ncclCommDestroy(world[i]), abi::kSuccess);
  });
}

// ncclCommInitAll calls ncclGetUniqueId inside NCCL; under the guard it passes through.
// The tuner plugin's question (agreed_plan.h), through the exported C function.
TEST(ShimAbi, AgreedPlanIsAnsweredForTheTuner) {
  auto ask = reinterpret_cast<RankmapNcclAgreedPlanFn>(
      dlsym(RTLD_DEFAULT, rankmap::shim_nccl::kAgreedPlanSymbol));
  ASSERT_NE(ask, nullptr);
  World w;
  std::string text(1 << 16, '\0');
  size_t length = 0;
  ASSERT_EQ(ask(4, text.data(), text.size(), &length), 1);
  ASSERT_LE(length, text.size());
  text.resize(length);
  EXPECT_EQ(rankmap::Plan::parse(text, "answer").hash, plan().hash);
  // A buffer too small gets the length, so the caller can ask again.
  char small[8];
  EXPECT_EQ(ask(4, small, sizeof(small), &length), 1);
  EXPECT_EQ(length, text.size());
  EXPECT_EQ(std::string(small, sizeof(small)), text.substr(0, sizeof(small)));
  std::string reason(512, '\0');
  EXPECT_EQ(ask(3, reason.data(), reason.size(), &length), 0);
  reason.resize(std::min(length, reason.size()));
  EXPECT_NE(reason.find("no plan agreement for a communicator of 3 ranks"), std::string::npos)
      << reason;
  EXPECT_EQ(ask(0, reason.data(), reason.size(), &length), -1);
  EXPECT_EQ(ask(4, nullptr, 8, &length), -1);
  EXPECT_EQ(ask(4, reason.data(), reason.size(), nullptr), -1);
}

TEST(ShimAbi, InitAllPassesThrough) {
  abi::Comm comms[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), abi::kSuccess);
  for (int i = 0; i < 2; ++i) {
    int user = -1;
    EXPECT_EQ(ncclCommUserRank(comms[i], &user), abi::kSuccess);
    EXPECT_EQ(user, i);
    EXPECT_EQ(ncclCommDestroy(comms[i]), abi::kSuccess);
  }
}

}  // namespace
