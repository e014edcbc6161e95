// The engine end to end: Communicator + executor + schedules + reductions over the real
// transports of the harness. Every collective, every algorithm, world sizes 1-16 (odd ones
// included), counts 0, 1, primes and multi-segment (64-byte test segments), every type, every
// operator, in and out of place, on loopback; a representative subset on TCP. Results are
// checked element by element against engine_values.h's closed forms, bit for bit.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "collectives/communicator.h"
#include "collectives/reduce/half.h"
#include "common/config.h"
#include "common/error.h"
#include "common/plan.h"
#include "tests/unit/collectives/engine_values.h"
#include "tests/unit/collectives/harness.h"
#include "tests/unit/collectives/type_lists.h"
#include "tests/unit/common/config_util.h"

namespace rankmap::coll {
namespace {

using testing::Backend;
using testing::expectedBuffer;
using testing::inputBuffer;
using testing::kAllOps;
using testing::kAllTypes;
using testing::spawn;

CommOptions testOptions(std::optional<Algorithm> algo, uint64_t segmentBytes = 64) {
  CommOptions o;
  o.timeout = std::chrono::seconds(60);
  o.segmentBytes = segmentBytes;
  o.numSlots = 3;
  o.algorithm = algo;
  return o;
}

// A plan over n single-rank hosts with a shuffled order and, when n factors, equal groups.
Plan testPlan(int n, unsigned seed) {
  std::vector<std::string> hosts;
  for (int i = 0; i < n; ++i) hosts.push_back(fmt::format("h{}", i));
  Plan p = Plan::identity(hosts);
  std::mt19937 rng(seed);
  std::shuffle(p.order.begin(), p.order.end(), rng);
  p.derivePermutation();
  int k = 0;
  for (int cand : {4, 3, 2})
    if (n % cand == 0 && n > cand) {
      k = cand;
      break;
    }
  if (k > 0) {
    HierarchyLevel level;
    level.name = "rack";
    level.confidence = 1;
    for (int g = 0; g < n / k; ++g) {
      std::vector<std::string> members;
      for (int j = 0; j < k; ++j) members.push_back(p.order[static_cast<size_t>(g * k + j)]);
      level.groups.push_back(members);
    }
    p.groups.push_back(level);
  }
  p.confidence = 0.9;
  p.seal();
  return p;
}

std::string hexDiff(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                    size_t es) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      size_t e = i / es;
      uint64_t g = 0, w = 0;
      std::memcpy(&g, got.data() + e * es, es);
      std::memcpy(&w, want.data() + e * es, es);
      return fmt::format("element {} of {}: got {:#x}, want {:#x}", e, got.size() / es, g, w);
    }
  return "sizes differ";
}

#define EXPECT_BYTES(got, want, es, what)                                                   \
  do {                                                                                      \
    if ((got) != (want)) {                                                                  \
      ADD_FAILURE() << what << ": " << hexDiff(got, want, es);                              \
      return;                                                                               \
    }                                                                                       \
  } while (0)

// Runs every collective in the matrix on one rank; the same sequence on every rank.
void runMatrix(Communicator& comm, const std::vector<uint64_t>& counts, bool fullTypes) {
  const int n = comm.size(), me = comm.rank();
  for (uint64_t count : counts) {
    std::vector<std::pair<DataType, ReduceOp>> combos;
    if (fullTypes) {
      for (DataType t : kAllTypes)
        for (ReduceOp op : kAllOps) combos.push_back({t, op});
    } else {
      combos = {{DataType::kInt32, ReduceOp::kSum}, {DataType::kFloat16, ReduceOp::kAvg},
                {DataType::kUint8, ReduceOp::kMax}, {DataType::kInt64, ReduceOp::kProd},
                {DataType::kBFloat16, ReduceOp::kMin}, {DataType::kFloat64, ReduceOp::kSum}};
    }
    for (auto [t, op] : combos) {
      const size_t es = elementSize(t);
      const std::string what = fmt::format("rank {} of {}, {} {} x {} ({})", me, n, count,
                                           dataTypeName(t), reduceOpName(op),
                                           algorithmName(comm.lastSelection().algorithm));
      for (bool inPlace : {false, true}) {
        // allreduce
        {
          auto in = inputBuffer(t, op, me, count);
          auto want = expectedBuffer(t, op, n, count);
          std::vector<std::byte> out(in.size());
          if (inPlace) {
            comm.allreduce(in.data(), in.data(), count, t, op);
            EXPECT_BYTES(in, want, es, "allreduce in place " + what);
          } else {
            auto keep = in;
            comm.allreduce(in.data(), out.data(), count, t, op);
            EXPECT_BYTES(out, want, es, "allreduce " + what);
            EXPECT_BYTES(in, keep, es, "allreduce input changed " + what);
          }
        }
        // reducescatter: rank r's block of the reduction of n * count elements
        {
          auto in = inputBuffer(t, op, me, count * static_cast<uint64_t>(n));
          auto want = expectedBuffer(t, op, n, count, count * static_cast<uint64_t>(me));
          if (inPlace) {
            comm.reduceScatter(in.data(), in.data() + count * es * static_cast<size_t>(me), count, t, op);
            std::vector<std::byte> got(in.begin() + static_cast<long>(count * es * static_cast<size_t>(me)),
                                       in.begin() + static_cast<long>(count * es * static_cast<size_t>(me + 1)));
            EXPECT_BYTES(got, want, es, "reducescatter in place " + what);
          } else {
            std::vector<std::byte> out(count * es);
            comm.reduceScatter(in.data(), out.data(), count, t, op);
            EXPECT_BYTES(out, want, es, "reducescatter " + what);
          }
        }
        // reduce to a root that moves with the count
        {
          const int root = static_cast<int>(count % static_cast<uint64_t>(n));
          auto in = inputBuffer(t, op, me, count);
          auto want = expectedBuffer(t, op, n, count);
          std::vector<std::byte> out(in.size(), std::byte{0x5A});
          auto untouched = out;
          if (inPlace) {
            comm.reduce(in.data(), in.data(), count, t, op, root);
            if (me == root) EXPECT_BYTES(in, want, es, "reduce in place " + what);
          } else {
            comm.reduce(in.data(), me == root ? out.data() : nullptr, count, t, op, root);
            if (me == root) EXPECT_BYTES(out, want, es, "reduce " + what);
          }
        }
        if (op != ReduceOp::kSum) continue;  // data movement: once per type
        // allgather
        {
          std::vector<std::byte> out(count * es * static_cast<size_t>(n));
          std::vector<std::byte> want;
          for (int r = 0; r < n; ++r) {
            auto b = inputBuffer(t, op, r, count);
            want.insert(want.end(), b.begin(), b.end());
          }
          auto in = inputBuffer(t, op, me, count);
          if (inPlace) {
            // std::copy, not memcpy: at count 0 both data() are null, which memcpy forbids.
            std::copy(in.begin(), in.end(),
                      out.begin() + static_cast<long>(count * es * static_cast<size_t>(me)));
            comm.allgather(out.data() + count * es * static_cast<size_t>(me), out.data(), count, t);
          } else {
            comm.allgather(in.data(), out.data(), count, t);
          }
          EXPECT_BYTES(out, want, es, std::string("allgather ") + (inPlace ? "in place " : "") + what);
        }
        // broadcast
        {
          const int root = static_cast<int>((count + 1) % static_cast<uint64_t>(n));
          auto src = inputBuffer(t, op, root, count);
          if (inPlace) {
            std::vector<std::byte> buf = me == root ? src : std::vector<std::byte>(src.size());
            comm.broadcast(buf.data(), buf.data(), count, t, root);
            EXPECT_BYTES(buf, src, es, "broadcast in place " + what);
          } else {
            std::vector<std::byte> out(src.size());
            comm.broadcast(me == root ? src.data() : nullptr, out.data(), count, t, root);
            EXPECT_BYTES(out, src, es, "broadcast " + what);
          }
        }
      }
    }
  }
  comm.barrier();
}

struct MatrixCase {
  Backend backend;
  int worldSize;
  Algorithm algorithm;
};

void PrintTo(const MatrixCase& c, std::ostream* os) {
  *os << transport::backendName(c.backend) << " n=" << c.worldSize << " " << algorithmName(c.algorithm);
}

class EngineMatrix : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(EngineMatrix, EveryCollectiveBitExact) {
  const auto c = GetParam();
  const bool loopback = c.backend == Backend::Loopback;
  // Loopback: the full matrix; TCP: a representative subset (bigger segments, fewer combos).
  const std::vector<uint64_t> counts =
      loopback ? std::vector<uint64_t>{0, 1, 13, 97} : std::vector<uint64_t>{0, 1, 97, 5003};
  std::atomic<uint64_t> fallbacks{0};
  std::atomic<int> hierRan{0};
  const Plan plan = testPlan(c.worldSize, static_cast<unsigned>(c.worldSize));
  spawn(c.worldSize, c.backend, [&](transport::Context& ctx) {
    Communicator comm(ctx, testOptions(c.algorithm, loopback ? 64 : 1024), plan);
    // Every type x every operator up to 8 ranks; beyond, one combination per type family (the
    // schedules themselves are checked for every size by collectives_schedule_test).
    runMatrix(comm, counts, loopback && c.worldSize <= 8);
    if (loopback) {
      // Multi-segment with many segments per block, fewer combinations.
      runMatrix(comm, {1031}, false);
    }
    // Probe what allreduce chose for this algorithm.
    std::vector<int32_t> one(3, 1), out(3);
    comm.allreduce(one.data(), out.data(), 3, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(out, std::vector<int32_t>(3, comm.size()));
    if (comm.lastSelection().algorithm == Algorithm::kHier) ++hierRan;
    fallbacks += comm.fallbacks();
  });
  if (c.algorithm == Algorithm::kHier) {
    // hier runs where the plan has equal groups, and falls back (counted) elsewhere.
    const bool groups = !plan.groups.empty();
    EXPECT_EQ(hierRan.load(), groups ? c.worldSize : 0);
    if (!groups) {
      EXPECT_GT(fallbacks.load(), 0u);
    }
  }
}

std::vector<MatrixCase> matrixCases() {
  std::vector<MatrixCase> cases;
  for (int n : {1, 2, 3, 5, 7, 8, 13, 16})
    for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd, Algorithm::kHier})
      cases.push_back({Backend::Loopback, n, a});
  for (int n : {2, 3, 5, 8})
    for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd, Algorithm::kHier})
      cases.push_back({Backend::Tcp, n, a});
  // hier with real groups: 6 = 3 x 2, 12 = 3 x 4 (testPlan picks the group size).
  cases.push_back({Backend::Loopback, 6, Algorithm::kHier});
  cases.push_back({Backend::Loopback, 12, Algorithm::kHier});
  cases.push_back({Backend::Tcp, 6, Algorithm::kHier});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, EngineMatrix, ::testing::ValuesIn(matrixCases()),
                         [](const auto& info) {
                           return fmt::format("{}_n{}_{}", transport::backendName(info.param.backend),
                                              info.param.worldSize,
                                              algorithmName(info.param.algorithm));
                         });

// Inexact floating point: every rank must end with the same bits, whatever the algorithm.
TEST(Engine, FloatResultsIdenticalOnAllRanks) {
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd, Algorithm::kHier}) {
    for (int n : {6, 7}) {
      for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
        const uint64_t count = 3001;
        std::vector<std::vector<std::byte>> results(static_cast<size_t>(n));
        const Plan plan = testPlan(n, 99);
        spawn(n, Backend::Loopback, [&](transport::Context& ctx) {
          Communicator comm(ctx, testOptions(algo, 256), plan);
          std::mt19937 rng(static_cast<unsigned>(ctx.rank() + 1));
          std::vector<std::byte> in(count * elementSize(t));
          for (uint64_t i = 0; i < count; ++i) {
            double v = std::uniform_real_distribution<double>(-1.0, 1.0)(rng) * 1e3;
            testing::storeFloat(t, v, in.data() + i * elementSize(t));
          }
          std::vector<std::byte> out(in.size());
          comm.allreduce(in.data(), out.data(), count, t, ReduceOp::kSum);
          results[static_cast<size_t>(ctx.rank())] = out;
        });
        for (int r = 1; r < n; ++r)
          EXPECT_EQ(results[static_cast<size_t>(r)], results[0])
              << algorithmName(algo) << " n=" << n << " " << dataTypeName(t) << ": rank " << r
              << " differs from rank 0";
      }
    }
  }
}

// What a plan does to floating-point sums (README, docs/reliability.md "Results"): the ring runs
// in the plan's order, so each element is added in another order than without a plan. Results
// then differ from identity order's in the last bits, never by more than two sums' rounding
// error, 2 (n-1) eps sum|x| per element; integers stay exact (EngineMatrix).
TEST(Engine, FloatSumsUnderAPlanDifferFromIdentityOnlyByRounding) {
  const int n = 7;
  const uint64_t count = 3001;
  auto run = [&](const std::optional<Plan>& plan) {
    std::vector<std::vector<float>> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
    spawn(n, Backend::Loopback, [&](transport::Context& ctx) {
      std::unique_ptr<Communicator> comm =
          plan ? std::make_unique<Communicator>(ctx, testOptions(Algorithm::kRing, 256), *plan)
               : std::make_unique<Communicator>(ctx, testOptions(Algorithm::kRing, 256));
      std::mt19937 rng(static_cast<unsigned>(ctx.rank() + 1));
      auto& x = in[static_cast<size_t>(ctx.rank())];
      for (uint64_t i = 0; i < count; ++i)
        x.push_back(static_cast<float>(std::uniform_real_distribution<double>(-1.0, 1.0)(rng) * 1e3));
      auto& y = out[static_cast<size_t>(ctx.rank())];
      y.resize(count);
      comm->allreduce(x.data(), y.data(), count, DataType::kFloat32, ReduceOp::kSum);
    });
    return std::make_pair(in, out);
  };
  const auto [in, plain] = run(std::nullopt);
  const auto [in2, planned] = run(testPlan(n, 99));
  ASSERT_EQ(in, in2);
  const double eps = std::numeric_limits<float>::epsilon();
  size_t differing = 0;
  for (uint64_t i = 0; i < count; ++i) {
    double abs = 0;
    for (int r = 0; r < n; ++r) abs += std::fabs(in[static_cast<size_t>(r)][i]);
    const double a = plain[0][i], b = planned[0][i];
    EXPECT_LE(std::fabs(a - b), 2 * (n - 1) * eps * abs) << "element " << i;
    differing += a != b ? 1 : 0;
  }
  // Not bitwise identical: a claim of identical float results would be false.
  EXPECT_GT(differing, 0u);
  std::printf("float32 sums of %d ranks under a plan: %zu of %llu elements differ from identity "
              "order's in the last bits\n",
              n, differing, static_cast<unsigned long long>(count));
}

// Large messages through the rendezvous path of loopback (sends > 64 KiB complete only when
// matched) with the default largest segment (1 MiB; these 4.5 MiB messages run in 256 KiB
// segments, segmentFor) and 8 slots.
TEST(Engine, LargeMessagesDefaultSegments) {
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd}) {
    spawn(4, Backend::Loopback, [&](transport::Context& ctx) {
      CommOptions o = testOptions(algo, 1u << 20);
      o.numSlots = 8;
      Communicator comm(ctx, o);
      const uint64_t count = (9u << 19) / 4 + 3;  // 4.5 MiB of int32: blocks of > 1 segment
      auto in = inputBuffer(DataType::kInt32, ReduceOp::kSum, ctx.rank(), count);
      std::vector<std::byte> out(in.size());
      comm.allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      auto want = expectedBuffer(DataType::kInt32, ReduceOp::kSum, 4, count);
      EXPECT_TRUE(out == want) << algorithmName(algo) << ": " << hexDiff(out, want, 4);
    });
  }
}

TEST(Engine, PlanForAnotherWorldSizeIsIgnored) {
  const Plan plan = testPlan(6, 3);  // 6 ranks, the job has 4
  spawn(4, Backend::Loopback, [&](transport::Context& ctx) {
    Communicator comm(ctx, testOptions(std::nullopt), plan);
    EXPECT_TRUE(comm.stats().planRejected);
    EXPECT_EQ(comm.fallbacks(), 1u);
    EXPECT_EQ(comm.order(), (std::vector<int>{0, 1, 2, 3}));
    std::vector<int32_t> in(10, ctx.rank()), out(10);
    comm.allreduce(in.data(), out.data(), 10, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(out, std::vector<int32_t>(10, 6));
  });
}

TEST(Engine, PlanOrderAndAlgorithmsAreUsed) {
  Plan plan = testPlan(8, 5);
  plan.collectives["allreduce"] = {AlgoRange{0, 1024, Algorithm::kTree, 0, 0, 0},
                                   AlgoRange{1024, AlgoRange::kUnbounded, Algorithm::kHier, 0, 0, 0}};
  plan.seal();
  spawn(8, Backend::Loopback, [&](transport::Context& ctx) {
    Communicator comm(ctx, testOptions(std::nullopt), plan);
    EXPECT_EQ(comm.order(), plan.inversePermutation());
    EXPECT_EQ(comm.groups().size(), 2u);
    std::vector<int32_t> in(1000, 1), out(1000);
    comm.allreduce(in.data(), out.data(), 100, DataType::kInt32, ReduceOp::kSum);  // 400 B
    EXPECT_EQ(comm.lastSelection().algorithm, Algorithm::kTree);
    EXPECT_EQ(comm.lastSelection().source, "plan");
    comm.allreduce(in.data(), out.data(), 1000, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(comm.lastSelection().algorithm, Algorithm::kHier);
    EXPECT_EQ(out, std::vector<int32_t>(1000, 8));
    EXPECT_EQ(comm.fallbacks(), 0u);
  });
}

TEST(Engine, BarrierWaitsForEveryone) {
  std::atomic<int> arrived{0};
  spawn(5, Backend::Loopback, [&](transport::Context& ctx) {
    Communicator comm(ctx, testOptions(std::nullopt));
    if (ctx.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ++arrived;
    comm.barrier();
    EXPECT_EQ(arrived.load(), 5) << "rank " << ctx.rank() << " left the barrier early";
  });
}

// --- Failures ----------------------------------------------------------------------------------

struct Outcome {
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  double seconds = 0;

  // Runs `call`, keeping the Error it throws and how long it took.
  void record(const std::function<void()>& call) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      call();
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

// A rank that dies mid-collective (its context closes): every other rank returns an error
// within its deadline, and later calls report the broken communicator.
TEST(EngineFailure, DeadPeerMidCollective) {
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd}) {
    const int n = 5;
    std::vector<Outcome> outcomes(static_cast<size_t>(n));
    const auto deadline = std::chrono::milliseconds(1500);
    // Buffers outlive the contexts: after a failure, transfers may still be matched into them
    // until the context is destroyed (the Communicator's contract).
    std::vector<std::vector<float>> ins(n, std::vector<float>(1 << 20, 1.0f)), outs(n, std::vector<float>(1 << 20));
    try {
      spawn(n, Backend::Loopback, [&](transport::Context& ctx) {
        CommOptions o = testOptions(algo, 4096);
        o.timeout = deadline;
        Communicator comm(ctx, o);
        auto& in = ins[static_cast<size_t>(ctx.rank())];
        auto& out = outs[static_cast<size_t>(ctx.rank())];
        comm.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
        if (ctx.rank() == 2) throw std::runtime_error("rank 2 dies");  // harness closes it
        auto& oc = outcomes[static_cast<size_t>(ctx.rank())];
        oc.record([&] {
          for (int i = 0; i < 3; ++i)
            comm.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
        });
        if (oc.code != ErrorCode::kOk) {
          EXPECT_TRUE(comm.broken());
          EXPECT_THROW(comm.barrier(), PeerError);
        }
      });
      FAIL() << "rank 2's failure was not reported";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "rank 2 dies");
    }
    for (int r = 0; r < n; ++r) {
      if (r == 2) continue;
      const auto& oc = outcomes[static_cast<size_t>(r)];
      EXPECT_TRUE(oc.code == ErrorCode::kPeer || oc.code == ErrorCode::kTimeout)
          << algorithmName(algo) << " rank " << r << ": " << oc.message;
      EXPECT_LT(oc.seconds, std::chrono::duration<double>(deadline).count() + 2.0) << oc.message;
      EXPECT_NE(oc.message.find("allreduce"), std::string::npos) << oc.message;
    }
  }
}

// A rank that never joins the call: the others time out naming a peer, within the deadline.
TEST(EngineFailure, MissingPeerTimesOutNamingIt) {
  const int n = 3;
  std::vector<Outcome> outcomes(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> ins(n, std::vector<int32_t>(100, 1)), outs(n, std::vector<int32_t>(100));
  spawn(n, Backend::Loopback, [&](transport::Context& ctx) {
    CommOptions o = testOptions(Algorithm::kRing);
    o.timeout = std::chrono::milliseconds(500);
    Communicator comm(ctx, o);
    if (ctx.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // stays connected, silent
      return;
    }
    auto& in = ins[static_cast<size_t>(ctx.rank())];
    auto& out = outs[static_cast<size_t>(ctx.rank())];
    outcomes[static_cast<size_t>(ctx.rank())].record(
        [&] { comm.allreduce(in.data(), out.data(), 100, DataType::kInt32, ReduceOp::kSum); });
  });
  for (int r : {0, 2}) {
    const auto& oc = outcomes[static_cast<size_t>(r)];
    EXPECT_EQ(oc.code, ErrorCode::kTimeout) << oc.message;
    EXPECT_NE(oc.message.find("rank "), std::string::npos) << oc.message;
    EXPECT_LT(oc.seconds, 1.0) << oc.message;
    EXPECT_GE(oc.seconds, 0.45) << oc.message;
  }
}

// Mismatched counts: a message length mismatch (InvalidInput naming the peer) or a deadline.
TEST(EngineFailure, MismatchedCountsAreDetected) {
  const int n = 3;
  std::vector<Outcome> outcomes(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> ins(n, std::vector<int32_t>(101, 1)), outs(n, std::vector<int32_t>(101));
  spawn(n, Backend::Loopback, [&](transport::Context& ctx) {
    CommOptions o = testOptions(Algorithm::kRing);
    o.timeout = std::chrono::milliseconds(1000);
    Communicator comm(ctx, o);
    const uint64_t count = ctx.rank() == 1 ? 101 : 100;
    auto& in = ins[static_cast<size_t>(ctx.rank())];
    auto& out = outs[static_cast<size_t>(ctx.rank())];
    outcomes[static_cast<size_t>(ctx.rank())].record(
        [&] { comm.allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum); });
  });
  int lengthErrors = 0;
  for (const auto& oc : outcomes) {
    EXPECT_NE(oc.code, ErrorCode::kOk) << "a rank completed a mismatched allreduce";
    if (oc.code == ErrorCode::kInvalidInput) {
      ++lengthErrors;
      EXPECT_NE(oc.message.find("expects"), std::string::npos) << oc.message;
    }
  }
  EXPECT_GE(lengthErrors, 1);
}

// Mismatched types of the same size (float vs int32): no data is exchanged; deadline errors.
TEST(EngineFailure, MismatchedTypesNeverMix) {
  const int n = 2;
  std::vector<Outcome> outcomes(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> ins(n, std::vector<int32_t>(16, 1)), outs(n, std::vector<int32_t>(16));
  spawn(n, Backend::Loopback, [&](transport::Context& ctx) {
    CommOptions o = testOptions(Algorithm::kRing);
    o.timeout = std::chrono::milliseconds(300);
    Communicator comm(ctx, o);
    auto& in = ins[static_cast<size_t>(ctx.rank())];
    auto& out = outs[static_cast<size_t>(ctx.rank())];
    outcomes[static_cast<size_t>(ctx.rank())].record([&] {
      comm.allreduce(in.data(), out.data(), 16,
                     ctx.rank() == 0 ? DataType::kInt32 : DataType::kFloat32, ReduceOp::kSum);
    });
  });
  for (const auto& oc : outcomes) {
    EXPECT_EQ(oc.code, ErrorCode::kTimeout) << oc.message;
    EXPECT_NE(oc.message.find("rank"), std::string::npos) << oc.message;
  }
}

TEST(EngineFailure, ArgumentErrorsBreakNothing) {
  spawn(2, Backend::Loopback, [&](transport::Context& ctx) {
    Communicator comm(ctx, testOptions(std::nullopt));
    std::vector<int32_t> buf(8, 1), out(8);
    EXPECT_THROW(comm.allreduce(nullptr, out.data(), 8, DataType::kInt32, ReduceOp::kSum), InvalidInput);
    EXPECT_THROW(comm.broadcast(buf.data(), out.data(), 8, DataType::kInt32, 2), InvalidInput);
    EXPECT_THROW(comm.allreduce(buf.data(), buf.data() + 1, 4, DataType::kInt32, ReduceOp::kSum),
                 InvalidInput);  // overlapping, not in place
    EXPECT_THROW(comm.allreduce(buf.data(), out.data(), 8, static_cast<DataType>(77), ReduceOp::kSum),
                 InvalidInput);
    EXPECT_FALSE(comm.broken());
    comm.allreduce(buf.data(), out.data(), 8, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(out, std::vector<int32_t>(8, 2));
  });
}

TEST(EngineOptions, FromConfig) {
  Config::LoadOptions lo = rankmap::testing::isolatedLoad(
      {{"RANKMAP_ALGO", "tree"}, {"RANKMAP_TIMEOUT", "7s"}, {"RANKMAP_SEGMENT_SIZE", "512K"}});
  CommOptions o = CommOptions::fromConfig(Config::load(lo));
  EXPECT_EQ(o.algorithm, Algorithm::kTree);
  EXPECT_EQ(o.timeout, std::chrono::seconds(7));
  EXPECT_EQ(o.segmentBytes, 512u << 10);
  // One default for the setting and the code (settings.def, kDefaultSegmentBytes).
  EXPECT_EQ(CommOptions::fromConfig(rankmap::testing::configFrom({})).segmentBytes,
            kDefaultSegmentBytes);
  EXPECT_EQ(CommOptions{}.segmentBytes, kDefaultSegmentBytes);
  lo.env = std::map<std::string, std::string>{{"RANKMAP_ALGO", "bogus"}};
  try {
    CommOptions::fromConfig(Config::load(lo));
    FAIL() << "bogus algorithm accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("RANKMAP_ALGO"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rankmap::coll
