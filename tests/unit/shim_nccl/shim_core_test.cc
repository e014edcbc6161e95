// The NCCL shim's translation logic against nccl_test_double (a fake libnccl.so.2 over a world of
// threads) and cuda_driver_test_double (a fake libcuda.so.1 over host memory). One Shim per
// simulated rank, as one process per rank would have, so that ranks can hold different plans.
#include "shim_nccl/shim.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "tests/unit/common/temp_dir.h"
#include "tests/unit/shim_nccl/cuda_driver_test_double.h"
#include "tests/unit/shim_nccl/nccl_test_double.h"
#include "tests/unit/shim_nccl/shim_test_util.h"

extern "C" int cuCtxSetCurrent(void* ctx);
extern "C" int cuCtxGetCurrent(void** ctx);

namespace rankmap::shim_nccl {
namespace {

namespace nd = rankmap::testing::nccl_double;
namespace cd = rankmap::testing::cuda_double;
using rankmap::testing::makePlan;
using rankmap::testing::pattern;
using rankmap::testing::runRanks;

constexpr abi::DataType kI32 = abi::kInt32;

std::unique_ptr<Shim> makeShim(std::optional<Plan> plan) {
  ShimOptions o;
  o.plan = std::move(plan);
  o.timeout = std::chrono::seconds(20);
  return std::make_unique<Shim>(
      [] {
        void* h = dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_LAZY);
        if (h == nullptr) RANKMAP_THROW(NotSupported, "nccl_test_double is not loaded");
        return resolveRealNccl(h, "nccl_test_double");
      },
      [] { return CudaDriver::load(); }, std::move(o));
}

// A shim whose plan is the file at `path`, watched as RANKMAP_PLAN is (plan_watch.h).
std::unique_ptr<Shim> makeWatchingShim(const std::string& path) {
  ShimOptions o;
  o.planSource = path;
  o.timeout = std::chrono::seconds(20);
  return std::make_unique<Shim>(
      [] {
        void* h = dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_LAZY);
        if (h == nullptr) RANKMAP_THROW(NotSupported, "nccl_test_double is not loaded");
        return resolveRealNccl(h, "nccl_test_double");
      },
      [] { return CudaDriver::load(); }, std::move(o));
}

abi::Stream streamOf(int rank) { return reinterpret_cast<abi::Stream>(0x5000 + rank); }
void* contextOf(int rank) { return reinterpret_cast<void*>(0x9000 + rank); }

// Which NCCL rank each app rank's init passed, found through the context each rank's thread made
// current (the double records it with every call).
std::map<int, int> initRanksByApp(int n) {
  std::map<int, int> out;
  for (const auto& c : nd::calls()) {
    if (c.fn.rfind("ncclCommInitRank", 0) != 0) continue;
    for (int a = 0; a < n; ++a)
      if (c.context == contextOf(a)) out[a] = c.rank;
  }
  return out;
}

void waitHelpersDone() {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (nd::liveHelpers() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// A communicator of n thread ranks, each with its own Shim and plan.
struct Group {
  int n = 0;
  std::vector<std::unique_ptr<Shim>> shims;
  std::vector<abi::Comm> comms;

  Group(int size, const std::function<std::optional<Plan>(int)>& planOf) : n(size) {
    for (int a = 0; a < n; ++a) shims.push_back(makeShim(planOf(a)));
    comms.assign(static_cast<size_t>(n), nullptr);
  }

  void init(abi::Result expect = abi::kSuccess) {
    abi::UniqueId id;
    ASSERT_EQ(shims[0]->getUniqueId(&id), abi::kSuccess);
    runRanks(n, [&](int a) {
      cuCtxSetCurrent(contextOf(a));
      EXPECT_EQ(
          shims[static_cast<size_t>(a)]->commInitRank(&comms[static_cast<size_t>(a)], n, id, a),
          expect);
    });
  }

  ~Group() {
    for (int a = 0; a < n; ++a)
      if (comms[static_cast<size_t>(a)] != nullptr)
        shims[static_cast<size_t>(a)]->commDestroy(comms[static_cast<size_t>(a)]);
    waitHelpersDone();
    EXPECT_EQ(nd::liveComms(), 0);
    EXPECT_EQ(cd::liveAllocations(), 0u);
    EXPECT_EQ(cd::badFrees(), 0u);
  }

  Shim& shim(int a) { return *shims[static_cast<size_t>(a)]; }
  abi::Comm comm(int a) { return comms[static_cast<size_t>(a)]; }
};

class ShimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nd::resetCalls();
    cd::resetCopies();
    nd::setAsyncDelay(std::chrono::milliseconds(30));
  }
};

// --- init and plan agreement --------------------------------------------------------------------

TEST_F(ShimTest, InitGivesNcclThePlansRank) {
  Plan p = makePlan(3, 2, {2, 0, 1});
  Group g(6, [&](int) { return p; });
  g.init();
  auto ranks = initRanksByApp(6);
  ASSERT_EQ(ranks.size(), 6u);
  for (int a = 0; a < 6; ++a) {
    EXPECT_EQ(ranks[a], p.permutation[static_cast<size_t>(a)]) << "app rank " << a;
    int user = -1;
    EXPECT_EQ(g.shim(a).commUserRank(g.comm(a), &user), abi::kSuccess);
    EXPECT_EQ(user, a);
    EXPECT_EQ(g.shim(a).counters().permutedComms.load(), 1u);
    // What the tuner plugin is told: this plan for 6 ranks, nothing for other sizes.
    Shim::AgreedPlan agreed = g.shim(a).agreedPlan(6);
    EXPECT_EQ(agreed.status, AgreedPlanStatus::kApplied);
    ASSERT_NE(agreed.plan, nullptr);
    EXPECT_EQ(agreed.plan->hash, p.hash);
    EXPECT_EQ(g.shim(a).agreedPlan(3).status, AgreedPlanStatus::kNoAgreement);
    EXPECT_EQ(g.shim(a).agreedPlan(3).plan, nullptr);
  }
}

TEST_F(ShimTest, NoPlanMeansNoAgreementAndIdentity) {
  Group g(3, [](int) { return std::nullopt; });
  g.init();
  auto ranks = initRanksByApp(3);
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(ranks[a], a);
    EXPECT_EQ(g.shim(a).counters().identityComms.load(), 0u);  // nobody voted
    Shim::AgreedPlan agreed = g.shim(a).agreedPlan(3);
    EXPECT_EQ(agreed.status, AgreedPlanStatus::kNoPlan);
    EXPECT_NE(agreed.reason.find("RANKMAP_PLAN is not set"), std::string::npos) << agreed.reason;
  }
}

TEST_F(ShimTest, CreatorWithoutPlanMeansIdentityEvenIfOthersHaveOne) {
  Plan p = makePlan(4, 1, {3, 2, 1, 0});
  Group g(4, [&](int a) { return a == 0 ? std::nullopt : std::optional<Plan>(p); });
  g.init();
  auto ranks = initRanksByApp(4);
  for (int a = 0; a < 4; ++a) EXPECT_EQ(ranks[a], a);
}

// Every way of disagreeing leaves every rank with identity, never a duplicate rank in NCCL.
TEST_F(ShimTest, DisagreementMeansIdentityForEveryRank) {
  Plan p = makePlan(2, 2, {1, 0});
  Plan other = makePlan(2, 2, {1, 0});
  other.confidence = 0.5;
  other.seal();
  Plan wrongSize = makePlan(3, 1, {2, 1, 0});
  std::vector<std::function<std::optional<Plan>(int)>> cases = {
      [&](int a) { return a == 3 ? other : p; },
      [&](int a) { return a == 2 ? std::nullopt : std::optional<Plan>(p); },
      [&](int) { return wrongSize; },
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    nd::resetCalls();
    Group g(4, cases[i]);
    g.init();
    auto ranks = initRanksByApp(4);
    ASSERT_EQ(ranks.size(), 4u) << "case " << i;
    for (int a = 0; a < 4; ++a) {
      EXPECT_EQ(ranks[a], a) << "case " << i;
      EXPECT_EQ(g.shim(a).counters().permutedComms.load(), 0u);
      EXPECT_EQ(g.shim(a).counters().identityComms.load(), 1u);
      // The tuner plugin must not tune with a plan that was not agreed on.
      Shim::AgreedPlan agreed = g.shim(a).agreedPlan(4);
      EXPECT_EQ(agreed.plan, nullptr) << "case " << i;
      EXPECT_TRUE(agreed.status == AgreedPlanStatus::kIdentity ||
                  (!cases[i](a) && agreed.status == AgreedPlanStatus::kNoPlan))
          << "case " << i << ": " << agreed.reason;
    }
  }
}

TEST_F(ShimTest, ScalableInitUsesTheFirstIdsAgreement) {
  Plan p = makePlan(2, 2, {1, 0});
  Group g(4, [&](int) { return p; });
  abi::UniqueId ids[2];
  ASSERT_EQ(g.shim(0).getUniqueId(&ids[0]), abi::kSuccess);
  ASSERT_EQ(g.shim(2).getUniqueId(&ids[1]), abi::kSuccess);
  runRanks(4, [&](int a) {
    cuCtxSetCurrent(contextOf(a));
    EXPECT_EQ(
        g.shim(a).commInitRankScalable(&g.comms[static_cast<size_t>(a)], 4, a, 2, ids, nullptr),
        abi::kSuccess);
  });
  auto ranks = initRanksByApp(4);
  for (int a = 0; a < 4; ++a) EXPECT_EQ(ranks[a], p.permutation[static_cast<size_t>(a)]);
}

// --- every translated collective, over several plans --------------------------------------------

struct PlanCase {
  int hosts;
  int ranksPerHost;
  std::vector<int> order;
};

class ShimCollectives : public ShimTest, public ::testing::WithParamInterface<PlanCase> {};

void expectCopiesOnRankStreams(int n) {
  std::set<abi::Stream> streams;
  for (int a = 0; a < n; ++a) streams.insert(streamOf(a));
  for (const auto& c : cd::copies())
    EXPECT_TRUE(streams.count(static_cast<abi::Stream>(c.stream))) << "copy on a foreign stream";
}

TEST_P(ShimCollectives, EveryCollectiveKeepsAppSemantics) {
  const PlanCase& pc = GetParam();
  Plan p = makePlan(pc.hosts, pc.ranksPerHost, pc.order);
  const int n = static_cast<int>(p.worldSize());
  Group g(n, [&](int) { return p; });
  g.init();
  const size_t nn = static_cast<size_t>(n);
  runRanks(n, [&](int a) {
    Shim& s = g.shim(a);
    abi::Comm comm = g.comm(a);
    abi::Stream st = streamOf(a);
    for (size_t count : {size_t{1}, size_t{5}}) {
      std::vector<int32_t> mine(count), out(count), big(nn * count), bigOut(nn * count);
      for (size_t i = 0; i < count; ++i) mine[i] = pattern(a, i);

      // Broadcast and the deprecated in-place Bcast, from every root.
      for (int root = 0; root < n; ++root) {
        std::fill(out.begin(), out.end(), -1);
        EXPECT_EQ(s.broadcast(mine.data(), out.data(), count, kI32, root, comm, st), abi::kSuccess);
        for (size_t i = 0; i < count; ++i)
          EXPECT_EQ(out[i], pattern(root, i)) << "bcast root " << root;
        std::vector<int32_t> buf = mine;
        EXPECT_EQ(s.bcast(buf.data(), count, kI32, root, comm, st), abi::kSuccess);
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(buf[i], pattern(root, i));
      }

      // Reduce (sum) to every root; other ranks' buffers stay untouched.
      for (int root = 0; root < n; ++root) {
        std::fill(out.begin(), out.end(), -1);
        EXPECT_EQ(s.reduce(mine.data(), out.data(), count, kI32, abi::kSum, root, comm, st),
                  abi::kSuccess);
        for (size_t i = 0; i < count; ++i) {
          int32_t sum = 0;
          for (int r = 0; r < n; ++r) sum += pattern(r, i);
          EXPECT_EQ(out[i], a == root ? sum : -1);
        }
      }

      // AllGather, out of place and in place.
      std::fill(bigOut.begin(), bigOut.end(), -1);
      EXPECT_EQ(s.allGather(mine.data(), bigOut.data(), count, kI32, comm, st), abi::kSuccess);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          EXPECT_EQ(bigOut[static_cast<size_t>(r) * count + i], pattern(r, i)) << "allgather";
      std::fill(big.begin(), big.end(), -1);
      std::copy(mine.begin(), mine.end(), big.begin() + static_cast<long>(a * count));
      EXPECT_EQ(s.allGather(big.data() + a * count, big.data(), count, kI32, comm, st),
                abi::kSuccess);
      EXPECT_EQ(big, bigOut) << "in-place allgather";

      // ReduceScatter (sum), out of place and in place.
      for (size_t i = 0; i < nn * count; ++i) big[i] = pattern(a, i);
      std::fill(out.begin(), out.end(), -1);
      EXPECT_EQ(s.reduceScatter(big.data(), out.data(), count, kI32, abi::kSum, comm, st),
                abi::kSuccess);
      for (size_t i = 0; i < count; ++i) {
        int32_t sum = 0;
        for (int r = 0; r < n; ++r) sum += pattern(r, static_cast<size_t>(a) * count + i);
        EXPECT_EQ(out[i], sum) << "reducescatter";
        EXPECT_EQ(big[static_cast<size_t>(a) * count + i],
                  pattern(a, static_cast<size_t>(a) * count + i));
      }
      std::vector<int32_t> expectRs = out;
      EXPECT_EQ(
          s.reduceScatter(big.data(), big.data() + a * count, count, kI32, abi::kSum, comm, st),
          abi::kSuccess);
      EXPECT_TRUE(
          std::equal(expectRs.begin(), expectRs.end(), big.begin() + static_cast<long>(a * count)))
          << "in-place reducescatter";

      // AlltoAll: block b of rank a goes to rank b.
      for (size_t i = 0; i < nn * count; ++i) big[i] = pattern(a, i);
      std::fill(bigOut.begin(), bigOut.end(), -1);
      EXPECT_EQ(s.alltoAll(big.data(), bigOut.data(), count, kI32, comm, st), abi::kSuccess);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          EXPECT_EQ(bigOut[static_cast<size_t>(r) * count + i],
                    pattern(r, static_cast<size_t>(a) * count + i))
              << "alltoall";

      // Gather and Scatter to/from every root (gather also in place at the root).
      for (int root = 0; root < n; ++root) {
        std::fill(bigOut.begin(), bigOut.end(), -1);
        EXPECT_EQ(s.gather(mine.data(), bigOut.data(), count, kI32, root, comm, st), abi::kSuccess);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            EXPECT_EQ(bigOut[static_cast<size_t>(r) * count + i], a == root ? pattern(r, i) : -1);
        std::fill(big.begin(), big.end(), -1);
        std::copy(mine.begin(), mine.end(), big.begin() + static_cast<long>(a * count));
        EXPECT_EQ(s.gather(big.data() + a * count, big.data(), count, kI32, root, comm, st),
                  abi::kSuccess);
        if (a == root) {
          EXPECT_EQ(big, bigOut) << "in-place gather";
        }

        for (size_t i = 0; i < nn * count; ++i) big[i] = pattern(a, i);
        std::fill(out.begin(), out.end(), -1);
        EXPECT_EQ(s.scatter(big.data(), out.data(), count, kI32, root, comm, st), abi::kSuccess);
        for (size_t i = 0; i < count; ++i)
          EXPECT_EQ(out[i], pattern(root, static_cast<size_t>(a) * count + i)) << "scatter";
      }

      // Send/recv around the app's ring, in a group.
      std::fill(out.begin(), out.end(), -1);
      EXPECT_EQ(s.groupStart(), abi::kSuccess);
      EXPECT_EQ(s.send(mine.data(), count, kI32, (a + 1) % n, comm, st), abi::kSuccess);
      EXPECT_EQ(s.recv(out.data(), count, kI32, (a + n - 1) % n, comm, st), abi::kSuccess);
      EXPECT_EQ(s.groupEnd(), abi::kSuccess);
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(out[i], pattern((a + n - 1) % n, i)) << "p2p";
    }
  });
  expectCopiesOnRankStreams(n);
  // With a non-identity plan, the fix-ups really ran.
  if (!RankTable::fromPermutation(p.permutation).isIdentity()) {
    EXPECT_GT(g.shim(0).counters().fixupCopies.load(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, ShimCollectives,
                         ::testing::Values(PlanCase{2, 2, {1, 0}}, PlanCase{3, 2, {2, 0, 1}},
                                           PlanCase{5, 1, {3, 1, 4, 0, 2}},
                                           PlanCase{7, 1, {6, 5, 4, 3, 2, 1, 0}},
                                           PlanCase{1, 3, {0}}, PlanCase{1, 1, {0}}));

// --- groups -------------------------------------------------------------------------------------

TEST_F(ShimTest, GroupDefersFixupsUntilAfterTheRealGroupEnd) {
  Plan p = makePlan(3, 1, {1, 2, 0});
  Group g(3, [&](int) { return p; });
  g.init();
  runRanks(3, [&](int a) {
    Shim& s = g.shim(a);
    const size_t count = 4;
    std::vector<int32_t> mine(count), ag(3 * count, -1), rsIn(3 * count), rs(count, -1),
        a2aIn(3 * count), a2a(3 * count, -1);
    for (size_t i = 0; i < count; ++i) mine[i] = pattern(a, i);
    for (size_t i = 0; i < 3 * count; ++i) rsIn[i] = a2aIn[i] = pattern(a, i);
    EXPECT_EQ(s.groupStart(), abi::kSuccess);
    EXPECT_EQ(s.groupStart(), abi::kSuccess);  // nested
    EXPECT_EQ(s.allGather(mine.data(), ag.data(), count, kI32, g.comm(a), streamOf(a)),
              abi::kSuccess);
    EXPECT_EQ(s.groupEnd(), abi::kSuccess);  // inner end: still nothing runs
    EXPECT_EQ(
        s.reduceScatter(rsIn.data(), rs.data(), count, kI32, abi::kSum, g.comm(a), streamOf(a)),
        abi::kSuccess);
    EXPECT_EQ(s.alltoAll(a2aIn.data(), a2a.data(), count, kI32, g.comm(a), streamOf(a)),
              abi::kSuccess);
    // Nothing may have touched the outputs yet: NCCL has not run, so a fix-up copy now would
    // have copied scratch garbage.
    EXPECT_TRUE(std::all_of(ag.begin(), ag.end(), [](int32_t v) { return v == -1; }));
    EXPECT_TRUE(std::all_of(a2a.begin(), a2a.end(), [](int32_t v) { return v == -1; }));
    EXPECT_EQ(s.groupEnd(), abi::kSuccess);
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(ag[static_cast<size_t>(r) * count + i], pattern(r, i));
        EXPECT_EQ(a2a[static_cast<size_t>(r) * count + i],
                  pattern(r, static_cast<size_t>(a) * count + i));
      }
    for (size_t i = 0; i < count; ++i) {
      int32_t sum = 0;
      for (int r = 0; r < 3; ++r) sum += pattern(r, static_cast<size_t>(a) * count + i);
      EXPECT_EQ(rs[i], sum);
    }
  });
}

// One thread inits two ranks of the same communicator in one group (nccl-tests -g 2): the shim
// cannot vote for both while blocked in the first, so it defers both to ncclGroupEnd, each with
// the CUDA context that was current at its call.
TEST_F(ShimTest, InitsInAGroupAreDeferredWithTheirContexts) {
  Plan p = makePlan(2, 2, {1, 0});
  std::vector<std::unique_ptr<Shim>> process;  // 2 processes, one Shim each
  process.push_back(makeShim(p));
  process.push_back(makeShim(p));
  std::vector<abi::Comm> comms(4, nullptr);
  abi::UniqueId id;
  ASSERT_EQ(process[0]->getUniqueId(&id), abi::kSuccess);
  runRanks(2, [&](int proc) {
    Shim& s = *process[static_cast<size_t>(proc)];
    EXPECT_EQ(s.groupStart(), abi::kSuccess);
    for (int l = 0; l < 2; ++l) {
      int a = 2 * proc + l;
      cuCtxSetCurrent(contextOf(a));
      EXPECT_EQ(s.commInitRank(&comms[static_cast<size_t>(a)], 4, id, a), abi::kSuccess);
    }
    EXPECT_EQ(s.groupEnd(), abi::kSuccess);
    void* now = nullptr;
    cuCtxGetCurrent(&now);
    EXPECT_EQ(now, contextOf(2 * proc + 1)) << "the thread's context is restored";
    EXPECT_EQ(s.counters().deferredInits.load(), 2u);
    // Use both ranks from this one thread, in a group as such programs must.
    const size_t count = 3;
    std::vector<std::vector<int32_t>> mine(2, std::vector<int32_t>(count)),
        out(2, std::vector<int32_t>(4 * count, -1));
    EXPECT_EQ(s.groupStart(), abi::kSuccess);
    for (int l = 0; l < 2; ++l) {
      int a = 2 * proc + l;
      for (size_t i = 0; i < count; ++i) mine[static_cast<size_t>(l)][i] = pattern(a, i);
      EXPECT_EQ(s.allGather(mine[static_cast<size_t>(l)].data(), out[static_cast<size_t>(l)].data(),
                            count, kI32, comms[static_cast<size_t>(a)], streamOf(a)),
                abi::kSuccess);
    }
    EXPECT_EQ(s.groupEnd(), abi::kSuccess);
    for (int l = 0; l < 2; ++l)
      for (int r = 0; r < 4; ++r)
        for (size_t i = 0; i < count; ++i)
          EXPECT_EQ(out[static_cast<size_t>(l)][static_cast<size_t>(r) * count + i], pattern(r, i));
  });
  auto ranks = initRanksByApp(4);
  ASSERT_EQ(ranks.size(), 4u) << "every init ran with the context current at its call";
  for (int a = 0; a < 4; ++a) EXPECT_EQ(ranks[a], p.permutation[static_cast<size_t>(a)]);
  for (int a = 0; a < 4; ++a)
    process[static_cast<size_t>(a / 2)]->commDestroy(comms[static_cast<size_t>(a)]);
  EXPECT_EQ(nd::liveComms(), 0);
  EXPECT_EQ(cd::liveAllocations(), 0u);
}

// --- non-blocking communicators -----------------------------------------------------------------

abi::Result pollUntilDone(Shim& s, abi::Comm comm) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  abi::Result state = abi::kInProgress;
  while (std::chrono::steady_clock::now() < until) {
    EXPECT_EQ(s.real().commGetAsyncError(comm, &state), abi::kSuccess);
    if (state != abi::kInProgress) return state;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return state;
}

TEST_F(ShimTest, NonBlockingCommsWaitBeforeFixups) {
  Plan p = makePlan(2, 2, {1, 0});
  Group g(4, [&](int) { return p; });
  abi::UniqueId id;
  ASSERT_EQ(g.shim(0).getUniqueId(&id), abi::kSuccess);
  runRanks(4, [&](int a) {
    Shim& s = g.shim(a);
    cuCtxSetCurrent(contextOf(a));
    abi::ConfigPrefix config{sizeof(abi::ConfigPrefix), abi::kConfigMagic, 22809, 0};
    abi::Comm& comm = g.comms[static_cast<size_t>(a)];
    abi::Result r = s.commInitRankConfig(&comm, 4, id, a, &config);
    EXPECT_TRUE(r == abi::kInProgress || r == abi::kSuccess) << abi::resultName(r);
    EXPECT_EQ(pollUntilDone(s, comm), abi::kSuccess);

    const size_t count = 6;
    std::vector<int32_t> mine(count), out(4 * count, -1);
    for (size_t i = 0; i < count; ++i) mine[i] = pattern(a, i);
    r = s.allGather(mine.data(), out.data(), count, kI32, comm, streamOf(a));
    EXPECT_TRUE(r == abi::kInProgress || r == abi::kSuccess) << abi::resultName(r);
    // The fix-up is on the stream once the call returns (here: done, streams are immediate).
    for (int q = 0; q < 4; ++q)
      for (size_t i = 0; i < count; ++i)
        EXPECT_EQ(out[static_cast<size_t>(q) * count + i], pattern(q, i)) << "ungrouped";
    EXPECT_EQ(pollUntilDone(s, comm), abi::kSuccess);

    std::fill(out.begin(), out.end(), -1);
    std::vector<int32_t> rsIn(4 * count), rs(count, -1);
    for (size_t i = 0; i < 4 * count; ++i) rsIn[i] = pattern(a, i);
    EXPECT_EQ(s.groupStart(), abi::kSuccess);
    EXPECT_EQ(s.allGather(mine.data(), out.data(), count, kI32, comm, streamOf(a)), abi::kSuccess);
    EXPECT_EQ(s.reduceScatter(rsIn.data(), rs.data(), count, kI32, abi::kSum, comm, streamOf(a)),
              abi::kSuccess);
    r = s.groupEnd();
    EXPECT_TRUE(r == abi::kInProgress || r == abi::kSuccess) << abi::resultName(r);
    EXPECT_EQ(pollUntilDone(s, comm), abi::kSuccess);
    for (int q = 0; q < 4; ++q)
      for (size_t i = 0; i < count; ++i)
        EXPECT_EQ(out[static_cast<size_t>(q) * count + i], pattern(q, i)) << "grouped";
    for (size_t i = 0; i < count; ++i) {
      int32_t sum = 0;
      for (int q = 0; q < 4; ++q) sum += pattern(q, static_cast<size_t>(a) * count + i);
      EXPECT_EQ(rs[i], sum);
    }
  });
}

// --- split and shrink ---------------------------------------------------------------------------

TEST_F(ShimTest, SplitChildrenFollowKeyThenAppRank) {
  Plan p = makePlan(2, 2, {1, 0});  // app 0,1 -> NCCL 2,3 and app 2,3 -> NCCL 0,1
  Group g(4, [&](int) { return p; });
  g.init();
  for (bool tiedKeys : {true, false}) {
    std::vector<abi::Comm> child(4, nullptr);
    runRanks(4, [&](int a) {
      int key = tiedKeys ? 0 : 10 - a;
      EXPECT_EQ(g.shim(a).commSplit(g.comm(a), a % 2, key, &child[static_cast<size_t>(a)], nullptr),
                abi::kSuccess);
      int user = -1, real = -1;
      EXPECT_EQ(g.shim(a).commUserRank(child[static_cast<size_t>(a)], &user), abi::kSuccess);
      // Colour 0 holds app ranks {0, 2}; colour 1 holds {1, 3}.
      int expect = tiedKeys ? a / 2 : 1 - a / 2;
      EXPECT_EQ(user, expect) << "app rank " << a << (tiedKeys ? " (tied keys)" : "");
      // NCCL orders the child in plan order: app 2 (NCCL 0) before app 0 (NCCL 2).
      EXPECT_EQ(g.shim(a).real().commUserRank(child[static_cast<size_t>(a)], &real),
                abi::kSuccess);
      EXPECT_EQ(real, a < 2 ? 1 : 0) << "app rank " << a;
      // The child's AllGather is in the application's child order.
      std::vector<int32_t> mine{pattern(a, 0)}, out(2, -1);
      EXPECT_EQ(g.shim(a).allGather(mine.data(), out.data(), 1, kI32, child[static_cast<size_t>(a)],
                                    streamOf(a)),
                abi::kSuccess);
      int first = tiedKeys ? a % 2 : 2 + a % 2;
      EXPECT_EQ(out[0], pattern(first, 0));
    });
    for (int a = 0; a < 4; ++a) g.shim(a).commDestroy(child[static_cast<size_t>(a)]);
  }
}

// Inside a group the colours and keys cannot be gathered before ncclGroupEnd: the child keeps
// NCCL's order by (key, app rank), with no table, and that is counted and warned.
TEST_F(ShimTest, SplitInsideAGroupKeepsNcclsOrderVisibly) {
  Plan p = makePlan(2, 2, {1, 0});
  Group g(4, [&](int) { return p; });
  g.init();
  std::vector<abi::Comm> child(4, nullptr);
  runRanks(4, [&](int a) {
    EXPECT_EQ(g.shim(a).groupStart(), abi::kSuccess);
    EXPECT_EQ(g.shim(a).commSplit(g.comm(a), a % 2, 0, &child[static_cast<size_t>(a)], nullptr),
              abi::kSuccess);
    EXPECT_EQ(g.shim(a).groupEnd(), abi::kSuccess);
    int user = -1, real = -1;
    EXPECT_EQ(g.shim(a).commUserRank(child[static_cast<size_t>(a)], &user), abi::kSuccess);
    EXPECT_EQ(g.shim(a).real().commUserRank(child[static_cast<size_t>(a)], &real), abi::kSuccess);
    EXPECT_EQ(user, a / 2);
    EXPECT_EQ(real, user) << "NCCL's order, no table";
    EXPECT_EQ(g.shim(a).counters().unorderedSplits.load(), 1u);
  });
  for (int a = 0; a < 4; ++a) g.shim(a).commDestroy(child[static_cast<size_t>(a)]);
}

struct SplitCase {
  PlanCase plan;
  int colors;      // colour = app rank % colors; -1 (NoColor) for app ranks listed in noColor
  bool tiedKeys;   // key 0 for all, else n - app rank (the reverse of app order)
  std::vector<int> noColor;
};

class ShimSplit : public ShimTest, public ::testing::WithParamInterface<SplitCase> {};

// Each child's NCCL order is the plan's order restricted to its members; the application sees
// NCCL's semantics without the shim: members ordered by (key, parent rank).
TEST_P(ShimSplit, ChildrenAreInPlanOrderAppSeesKeyOrder) {
  const SplitCase& sc = GetParam();
  Plan p = makePlan(sc.plan.hosts, sc.plan.ranksPerHost, sc.plan.order);
  const int n = static_cast<int>(p.worldSize());
  Group g(n, [&](int) { return p; });
  g.init();
  std::set<int> none(sc.noColor.begin(), sc.noColor.end());
  auto colorOf = [&](int a) { return none.count(a) ? abi::kSplitNoColor : a % sc.colors; };
  auto keyOf = [&](int a) { return sc.tiedKeys ? 0 : n - a; };
  std::vector<abi::Comm> child(static_cast<size_t>(n), nullptr);
  runRanks(n, [&](int a) {
    ASSERT_EQ(g.shim(a).commSplit(g.comm(a), colorOf(a), keyOf(a), &child[static_cast<size_t>(a)],
                                  nullptr),
              abi::kSuccess);
    abi::Comm c = child[static_cast<size_t>(a)];
    if (none.count(a)) {
      EXPECT_EQ(c, nullptr);
      return;
    }
    std::vector<int> members;
    for (int b = 0; b < n; ++b)
      if (colorOf(b) == colorOf(a)) members.push_back(b);
    std::vector<int> appOrder = members, planOrder = members;
    std::sort(appOrder.begin(), appOrder.end(),
              [&](int x, int y) { return std::make_pair(keyOf(x), x) < std::make_pair(keyOf(y), y); });
    std::sort(planOrder.begin(), planOrder.end(), [&](int x, int y) {
      return p.permutation[static_cast<size_t>(x)] < p.permutation[static_cast<size_t>(y)];
    });
    auto indexIn = [](const std::vector<int>& v, int x) {
      return static_cast<int>(std::find(v.begin(), v.end(), x) - v.begin());
    };
    int real = -1, user = -1;
    EXPECT_EQ(g.shim(a).real().commUserRank(c, &real), abi::kSuccess);
    EXPECT_EQ(real, indexIn(planOrder, a)) << "app rank " << a << ": NCCL rank in plan order";
    EXPECT_EQ(g.shim(a).commUserRank(c, &user), abi::kSuccess);
    EXPECT_EQ(user, indexIn(appOrder, a)) << "app rank " << a << ": child rank by (key, rank)";
    const size_t m = members.size();
    std::vector<int32_t> mine{pattern(a, 0)}, out(m, -1);
    EXPECT_EQ(g.shim(a).allGather(mine.data(), out.data(), 1, kI32, c, streamOf(a)),
              abi::kSuccess);
    for (size_t k = 0; k < m; ++k) EXPECT_EQ(out[k], pattern(appOrder[k], 0));
    for (size_t root = 0; root < m; ++root) {
      int32_t got = -1;
      EXPECT_EQ(g.shim(a).broadcast(mine.data(), &got, 1, kI32, static_cast<int>(root), c,
                                    streamOf(a)),
                abi::kSuccess);
      EXPECT_EQ(got, pattern(appOrder[root], 0));
    }
  });
  for (int a = 0; a < n; ++a)
    if (child[static_cast<size_t>(a)] != nullptr) g.shim(a).commDestroy(child[static_cast<size_t>(a)]);
}

INSTANTIATE_TEST_SUITE_P(
    Plans, ShimSplit,
    ::testing::Values(SplitCase{{3, 2, {2, 0, 1}}, 1, true, {}},   // one colour: the plan's order
                      SplitCase{{3, 2, {2, 0, 1}}, 2, false, {}},
                      SplitCase{{5, 1, {3, 1, 4, 0, 2}}, 2, true, {4}},
                      SplitCase{{7, 1, {6, 5, 4, 3, 2, 1, 0}}, 3, false, {0, 5}},
                      SplitCase{{4, 2, {1, 3, 0, 2}}, 3, true, {}},
                      SplitCase{{8, 1, {0, 2, 4, 6, 1, 3, 5, 7}}, 2, false, {3}}));

TEST_F(ShimTest, ShrinkTranslatesExcludedRanksAndKeepsAppOrder) {
  Plan p = makePlan(2, 2, {1, 0});
  Group g(4, [&](int) { return p; });
  g.init();
  std::vector<abi::Comm> child(4, nullptr);
  runRanks(4, [&](int a) {
    if (a == 1) return;  // excluded ranks do not call
    int exclude[] = {1};
    EXPECT_EQ(
        g.shim(a).commShrink(g.comm(a), exclude, 1, &child[static_cast<size_t>(a)], nullptr, 0),
        abi::kSuccess);
    int user = -1;
    EXPECT_EQ(g.shim(a).commUserRank(child[static_cast<size_t>(a)], &user), abi::kSuccess);
    EXPECT_EQ(user, a == 0 ? 0 : a - 1);
    std::vector<int32_t> mine{pattern(a, 0)}, out(3, -1);
    EXPECT_EQ(g.shim(a).allGather(mine.data(), out.data(), 1, kI32, child[static_cast<size_t>(a)],
                                  streamOf(a)),
              abi::kSuccess);
    EXPECT_EQ(out, (std::vector<int32_t>{pattern(0, 0), pattern(2, 0), pattern(3, 0)}));
  });
  auto calls = nd::calls();
  for (const auto& c : calls) {
    if (c.fn == "ncclCommShrink") {
      EXPECT_EQ(c.count, 1u);
    }
  }
  for (int a = 0; a < 4; ++a)
    if (child[static_cast<size_t>(a)] != nullptr)
      g.shim(a).commDestroy(child[static_cast<size_t>(a)]);
}

// --- plans replaced while the job runs ----------------------------------------------------------

// A new communicator of every shim in `g`, from a fresh unique id made by app rank 0's shim.
std::vector<abi::Comm> initAnother(Group& g) {
  std::vector<abi::Comm> comms(static_cast<size_t>(g.n), nullptr);
  abi::UniqueId id;
  EXPECT_EQ(g.shim(0).getUniqueId(&id), abi::kSuccess);
  runRanks(g.n, [&](int a) {
    cuCtxSetCurrent(contextOf(a));
    EXPECT_EQ(g.shim(a).commInitRank(&comms[static_cast<size_t>(a)], g.n, id, a), abi::kSuccess);
  });
  return comms;
}

void destroyAll(Group& g, std::vector<abi::Comm>& comms) {
  for (int a = 0; a < g.n; ++a)
    if (comms[static_cast<size_t>(a)] != nullptr)
      g.shim(a).commDestroy(comms[static_cast<size_t>(a)]);
}

// The NCCL root that a Broadcast from every app root reached on `comms`: which table each rank's
// communicator holds, seen from NCCL's side.
std::vector<int> realRootsOf(Group& g, const std::vector<abi::Comm>& comms) {
  std::vector<int> roots;
  for (int root = 0; root < g.n; ++root) {
    nd::resetCalls();
    runRanks(g.n, [&](int a) {
      int32_t v = pattern(a, 0), out = -1;
      EXPECT_EQ(g.shim(a).broadcast(&v, &out, 1, kI32, root, comms[static_cast<size_t>(a)],
                                    streamOf(a)),
                abi::kSuccess);
      EXPECT_EQ(out, pattern(root, 0)) << "broadcast from app root " << root;
    });
    std::set<int> seen;
    for (const auto& c : nd::calls())
      if (c.fn == "ncclBroadcast") seen.insert(c.root);
    EXPECT_EQ(seen.size(), 1u) << "every rank named one NCCL root";
    roots.push_back(seen.empty() ? -1 : *seen.begin());
  }
  return roots;
}

TEST(PlanWatchTest, ReloadsAReplacedFileKeepsTheLastGoodOneOtherwise) {
  rankmap::testing::TempDir dir;
  const std::string path = dir.file("plan.json");
  Plan p1 = makePlan(4, 1, {3, 2, 1, 0});
  Plan p2 = makePlan(4, 1, {1, 3, 0, 2});
  // Nothing at start: no plan, and why.
  PlanWatch w(path, std::nullopt, "no such file", fileIdentity(path));
  EXPECT_EQ(w.snapshot().plan, nullptr);
  EXPECT_EQ(w.snapshot().error, "no such file");
  p1.save(path);
  PlanSnapshot s1 = w.snapshot();
  ASSERT_NE(s1.plan, nullptr);
  EXPECT_EQ(s1.plan->hash, p1.hash);
  EXPECT_EQ(w.snapshot().plan, s1.plan) << "an unchanged file is not read again";
  p2.save(path);
  PlanSnapshot s2 = w.snapshot();
  ASSERT_NE(s2.plan, nullptr);
  EXPECT_EQ(s2.plan->hash, p2.hash);
  EXPECT_EQ(s1.plan->hash, p1.hash) << "a snapshot taken before is not changed";
  EXPECT_EQ(w.reloads(), 2u);
  writeFileAtomic(path, "{ not a plan");
  EXPECT_EQ(w.snapshot().plan, s2.plan) << "a corrupt replacement keeps the last good plan";
  EXPECT_EQ(w.rejected(), 1u);
  ::unlink(path.c_str());
  EXPECT_EQ(w.snapshot().plan, s2.plan) << "a removed file keeps the last good plan";
  // Never a good plan: the error of the latest read is the vote's reason.
  const std::string other = dir.file("other.json");
  writeFileAtomic(other, "[]");
  PlanWatch bad(other, std::nullopt, "", FileIdentity{});
  EXPECT_EQ(bad.snapshot().plan, nullptr);
  EXPECT_FALSE(bad.snapshot().error.empty());
  EXPECT_EQ(bad.rejected(), 1u);
}

// A communicator created after the file was replaced gets the new plan; one created before keeps
// its own, for collectives and for the tuner's answer alike.
TEST_F(ShimTest, CommsCreatedAfterAReplacementGetTheNewPlanOldOnesKeepTheirs) {
  rankmap::testing::TempDir dir;
  const std::string path = dir.file("plan.json");
  Plan p1 = makePlan(3, 2, {2, 0, 1});
  Plan p2 = makePlan(3, 2, {1, 2, 0});
  p1.save(path);
  Group g(6, [](int) { return std::nullopt; });
  for (int a = 0; a < 6; ++a) g.shims[static_cast<size_t>(a)] = makeWatchingShim(path);
  g.init();
  auto before = initRanksByApp(6);
  for (int a = 0; a < 6; ++a) EXPECT_EQ(before[a], p1.permutation[static_cast<size_t>(a)]);

  p2.save(path);  // atomic: write, then rename
  nd::resetCalls();
  std::vector<abi::Comm> later = initAnother(g);
  auto after = initRanksByApp(6);
  for (int a = 0; a < 6; ++a) EXPECT_EQ(after[a], p2.permutation[static_cast<size_t>(a)]);

  std::vector<int> oldRoots = realRootsOf(g, g.comms), newRoots = realRootsOf(g, later);
  for (int a = 0; a < 6; ++a) {
    EXPECT_EQ(oldRoots[static_cast<size_t>(a)], p1.permutation[static_cast<size_t>(a)]);
    EXPECT_EQ(newRoots[static_cast<size_t>(a)], p2.permutation[static_cast<size_t>(a)]);
    EXPECT_EQ(g.shim(a).planWatch().reloads(), 2u);  // the start's read, then p2
    EXPECT_EQ(g.shim(a).counters().permutedComms.load(), 2u);
    Shim::AgreedPlan agreed = g.shim(a).agreedPlan(6);
    EXPECT_EQ(agreed.status, AgreedPlanStatus::kApplied);
    ASSERT_NE(agreed.plan, nullptr);
    EXPECT_EQ(agreed.plan->hash, p2.hash) << "the tuner is told the latest agreed plan";
  }
  destroyAll(g, later);
}

// A replacement that is not a plan: new communicators keep the last good plan (warned, counted).
TEST_F(ShimTest, CorruptReplacementKeepsTheLastGoodPlanForNewComms) {
  rankmap::testing::TempDir dir;
  const std::string path = dir.file("plan.json");
  Plan p1 = makePlan(4, 1, {2, 0, 3, 1});
  p1.save(path);
  Group g(4, [](int) { return std::nullopt; });
  for (int a = 0; a < 4; ++a) g.shims[static_cast<size_t>(a)] = makeWatchingShim(path);
  g.init();
  writeFileAtomic(path, "{\"schema_version\": 1, \"hosts\": [");
  nd::resetCalls();
  std::vector<abi::Comm> later = initAnother(g);
  auto ranks = initRanksByApp(4);
  for (int a = 0; a < 4; ++a) {
    EXPECT_EQ(ranks[a], p1.permutation[static_cast<size_t>(a)]);
    EXPECT_EQ(g.shim(a).planWatch().rejected(), 1u);
    EXPECT_EQ(g.shim(a).counters().identityComms.load(), 0u);
  }
  destroyAll(g, later);
}

// The file is replaced after two ranks made their init call and before the two others did: the
// ranks hold different plans, and the agreement gives every rank identity order (counted,
// warned), never a hang or two ranks claiming one NCCL rank.
TEST_F(ShimTest, PlanReplacedBetweenRanksInitsMeansIdentityForAll) {
  rankmap::testing::TempDir dir;
  const std::string path = dir.file("plan.json");
  Plan p1 = makePlan(4, 1, {3, 2, 1, 0});
  Plan p2 = makePlan(4, 1, {1, 3, 0, 2});
  p1.save(path);
  Group g(4, [](int) { return std::nullopt; });
  for (int a = 0; a < 4; ++a) g.shims[static_cast<size_t>(a)] = makeWatchingShim(path);
  abi::UniqueId id;
  ASSERT_EQ(g.shim(0).getUniqueId(&id), abi::kSuccess);
  std::atomic<int> called{0};
  std::atomic<bool> replaced{false};
  auto waitFor = [](const std::function<bool()>& done) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(done());
  };
  runRanks(4, [&](int a) {
    Shim& s = g.shim(a);
    cuCtxSetCurrent(contextOf(a));
    abi::Comm* out = &g.comms[static_cast<size_t>(a)];
    if (a < 2) {
      // In a group the init is deferred, but its plan is taken at the call.
      EXPECT_EQ(s.groupStart(), abi::kSuccess);
      EXPECT_EQ(s.commInitRank(out, 4, id, a), abi::kSuccess);
      ++called;
      waitFor([&] { return replaced.load(); });
      EXPECT_EQ(s.groupEnd(), abi::kSuccess);
    } else {
      if (a == 2) {
        waitFor([&] { return called.load() == 2; });
        p2.save(path);
        replaced = true;
      }
      waitFor([&] { return replaced.load(); });
      EXPECT_EQ(s.commInitRank(out, 4, id, a), abi::kSuccess);
    }
  });
  auto ranks = initRanksByApp(4);
  ASSERT_EQ(ranks.size(), 4u);
  for (int a = 0; a < 4; ++a) {
    EXPECT_EQ(ranks[a], a);
    EXPECT_EQ(g.shim(a).counters().identityComms.load(), 1u);
    EXPECT_EQ(g.shim(a).counters().permutedComms.load(), 0u);
    EXPECT_EQ(g.shim(a).agreedPlan(4).status, AgreedPlanStatus::kIdentity);
  }
}

// --- shrink: the survivors in plan order --------------------------------------------------------

struct ShrinkCase {
  PlanCase plan;
  std::vector<int> exclude;  // app ranks
};

class ShimShrink : public ShimTest, public ::testing::WithParamInterface<ShrinkCase> {};

// NCCL numbers the survivors contiguously in parent order; the parent is in plan order, so the
// child's NCCL order must be the plan's order restricted to the survivors, while the application
// sees the survivors renumbered in its own order, as NCCL without the shim would give it.
TEST_P(ShimShrink, SurvivorsAreInPlanOrderAppSeesItsOwnOrder) {
  const ShrinkCase& sc = GetParam();
  Plan p = makePlan(sc.plan.hosts, sc.plan.ranksPerHost, sc.plan.order);
  const int n = static_cast<int>(p.worldSize());
  Group g(n, [&](int) { return p; });
  g.init();
  std::set<int> gone(sc.exclude.begin(), sc.exclude.end());
  std::vector<int> survivorsApp, survivorsPlan;
  for (int a = 0; a < n; ++a)
    if (!gone.count(a)) survivorsApp.push_back(a);
  survivorsPlan = survivorsApp;
  std::sort(survivorsPlan.begin(), survivorsPlan.end(), [&](int x, int y) {
    return p.permutation[static_cast<size_t>(x)] < p.permutation[static_cast<size_t>(y)];
  });
  const int m = static_cast<int>(survivorsApp.size());
  std::vector<abi::Comm> child(static_cast<size_t>(n), nullptr);
  runRanks(n, [&](int a) {
    if (gone.count(a)) return;  // excluded ranks do not call
    std::vector<int> exclude = sc.exclude;
    ASSERT_EQ(g.shim(a).commShrink(g.comm(a), exclude.data(), static_cast<int>(exclude.size()),
                                   &child[static_cast<size_t>(a)], nullptr, 0),
              abi::kSuccess);
    abi::Comm c = child[static_cast<size_t>(a)];
    int real = -1, user = -1;
    EXPECT_EQ(g.shim(a).real().commUserRank(c, &real), abi::kSuccess);
    const int expectReal = static_cast<int>(
        std::find(survivorsPlan.begin(), survivorsPlan.end(), a) - survivorsPlan.begin());
    EXPECT_EQ(real, expectReal) << "app rank " << a << ": NCCL rank in plan order";
    EXPECT_EQ(g.shim(a).commUserRank(c, &user), abi::kSuccess);
    const int expectUser = static_cast<int>(
        std::find(survivorsApp.begin(), survivorsApp.end(), a) - survivorsApp.begin());
    EXPECT_EQ(user, expectUser) << "app rank " << a << ": child rank in app order";
    // AllGather in the child's app order, and a broadcast from every child root.
    std::vector<int32_t> mine{pattern(a, 0)}, out(static_cast<size_t>(m), -1);
    EXPECT_EQ(g.shim(a).allGather(mine.data(), out.data(), 1, kI32, c, streamOf(a)),
              abi::kSuccess);
    for (int k = 0; k < m; ++k)
      EXPECT_EQ(out[static_cast<size_t>(k)], pattern(survivorsApp[static_cast<size_t>(k)], 0));
    for (int root = 0; root < m; ++root) {
      int32_t got = -1;
      EXPECT_EQ(g.shim(a).broadcast(mine.data(), &got, 1, kI32, root, c, streamOf(a)),
                abi::kSuccess);
      EXPECT_EQ(got, pattern(survivorsApp[static_cast<size_t>(root)], 0));
    }
  });
  for (int a = 0; a < n; ++a)
    if (child[static_cast<size_t>(a)] != nullptr) g.shim(a).commDestroy(child[static_cast<size_t>(a)]);
}

INSTANTIATE_TEST_SUITE_P(
    Plans, ShimShrink,
    ::testing::Values(ShrinkCase{{2, 2, {1, 0}}, {1}}, ShrinkCase{{2, 2, {1, 0}}, {0, 3}},
                      ShrinkCase{{3, 2, {2, 0, 1}}, {4, 5}},      // a whole host
                      ShrinkCase{{3, 2, {2, 0, 1}}, {0, 3, 5}},   // one rank of each host
                      ShrinkCase{{5, 1, {3, 1, 4, 0, 2}}, {2}},
                      ShrinkCase{{5, 1, {3, 1, 4, 0, 2}}, {0, 4}},
                      ShrinkCase{{7, 1, {6, 5, 4, 3, 2, 1, 0}}, {1, 2, 5}},
                      ShrinkCase{{4, 2, {1, 3, 0, 2}}, {2, 7}},
                      ShrinkCase{{8, 1, {0, 2, 4, 6, 1, 3, 5, 7}}, {3, 4, 6}}));

// A parent not in plan order (its creator had no plan): NCCL's shrink keeps NCCL's order, and a
// rank holding a plan says so (warning, count) rather than pretending.
TEST_F(ShimTest, ShrinkOfAParentNotInPlanOrderKeepsNcclsOrderVisibly) {
  Plan p = makePlan(4, 1, {3, 2, 1, 0});
  Group g(4, [&](int a) { return a == 0 ? std::nullopt : std::optional<Plan>(p); });
  g.init();
  std::vector<abi::Comm> child(4, nullptr);
  runRanks(4, [&](int a) {
    if (a == 2) return;
    int exclude[] = {2};
    ASSERT_EQ(g.shim(a).commShrink(g.comm(a), exclude, 1, &child[static_cast<size_t>(a)], nullptr,
                                   0),
              abi::kSuccess);
    int real = -1, user = -1;
    EXPECT_EQ(g.shim(a).real().commUserRank(child[static_cast<size_t>(a)], &real), abi::kSuccess);
    EXPECT_EQ(g.shim(a).commUserRank(child[static_cast<size_t>(a)], &user), abi::kSuccess);
    EXPECT_EQ(real, a < 2 ? a : a - 1);
    EXPECT_EQ(user, real);
    EXPECT_EQ(g.shim(a).counters().unorderedShrinks.load(), a == 0 ? 0u : 1u);
  });
  for (int a = 0; a < 4; ++a)
    if (child[static_cast<size_t>(a)] != nullptr) g.shim(a).commDestroy(child[static_cast<size_t>(a)]);
}

// --- failures -----------------------------------------------------------------------------------

TEST_F(ShimTest, ScratchAllocationFailureIsACudaErrorAndLeaksNothing) {
  Plan p = makePlan(2, 1, {1, 0});
  Group g(2, [&](int) { return p; });
  g.init();
  cd::failAllocations(2);
  runRanks(2, [&](int a) {
    std::vector<int32_t> mine(2), out(4);
    EXPECT_THROW(g.shim(a).allGather(mine.data(), out.data(), 2, kI32, g.comm(a), streamOf(a)),
                 CudaError);
  });
  cd::failAllocations(0);
}

}  // namespace
}  // namespace rankmap::shim_nccl
