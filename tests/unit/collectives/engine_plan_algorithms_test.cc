// hier over groups of any sizes with chunk weights, and packed trees, run through the
// Communicator from a plan as plan.json carries them (shuffled order, innermost groups of host
// names, chunk weights per position, trees over host positions, one or two ranks per host), on
// loopback and TCP: world sizes 1-16 (odd ones and non-powers of two included), group layouts
// (one group, equal, three unequal as 4+3+3, singletons, all singletons), weights (uniform,
// skewed, with zeros), counts 0, 1, primes and multi-segment (64-byte test segments), every type
// and operator on a subset and a representative set elsewhere, in and out of place. Every
// element is checked bit for bit against engine_values.h's closed forms; the plan's algorithm
// must run (no fallback). Plans the engine cannot run fall back visibly.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <random>
#include <string_view>

#include <gtest/gtest.h>

#include "collectives/communicator.h"
#include "common/plan.h"
#include "tests/unit/collectives/engine_values.h"
#include "tests/unit/collectives/harness.h"
#include "tests/unit/collectives/type_lists.h"

namespace rankmap::coll {
namespace {

using testing::Backend;
using testing::expectedBuffer;
using testing::inputBuffer;
using testing::spawn;

// Group sizes (over hosts) of a layout.
std::vector<int> layoutSizes(const std::string& layout, int n) {
  if (layout == "one") return {n};
  if (layout == "equal") {
    for (int k : {4, 3, 2})
      if (n % k == 0 && n > k) return std::vector<int>(static_cast<size_t>(n / k), k);
    return {};
  }
  if (layout == "three") {
    if (n < 3) return {};
    std::vector<int> s;
    for (int i = 0; i < 3; ++i) s.push_back(n / 3 + (i < n % 3 ? 1 : 0));
    return s;
  }
  if (layout == "singletons") {
    if (n < 4) return {};
    std::vector<int> s{1, (n - 2) / 2, n - 2 - (n - 2) / 2, 1};
    if (s[2] == 0) s.erase(s.begin() + 2);
    return s;
  }
  if (layout == "ones")
    return n >= 2 ? std::vector<int>(static_cast<size_t>(n), 1) : std::vector<int>{};
  return {};
}

// A plan over `hosts` hosts with `rph` ranks each, a shuffled order, innermost groups of the
// given sizes along the order, chunk weights per position (0 none, 1 skewed, 2 with zeros, the
// first group's all 0, 3 leaders) and `trees` random spanning trees over positions (weights 1, 2,
// 0, ...).
Plan layoutPlan(int hosts, int rph, const std::vector<int>& sizes, int weights, int trees,
                unsigned seed) {
  std::vector<std::string> names;
  for (int i = 0; i < hosts; ++i) names.push_back(fmt::format("h{}", i));
  Plan p = Plan::identity(names, rph);
  std::mt19937 rng(seed);
  std::shuffle(p.order.begin(), p.order.end(), rng);
  p.derivePermutation();
  if (!sizes.empty()) {
    HierarchyLevel level;
    level.name = "rack";
    level.confidence = 1;
    size_t next = 0;
    for (int k : sizes) {
      level.groups.emplace_back();
      for (int j = 0; j < k; ++j) level.groups.back().push_back(p.order[next++]);
    }
    p.groups.push_back(level);
  }
  if (weights == 3) {
    // Leaders, as the planner writes them for unequal uplinks: each group's weight on one host
    // (its second, where it has one), the second group's nothing (its first host sends).
    p.chunkWeights.assign(static_cast<size_t>(hosts), 0);
    size_t start = 0;
    for (size_t g = 0; g < sizes.size(); ++g) {
      const size_t k = static_cast<size_t>(sizes[g]);
      if (g != 1 || sizes.size() == 1)
        p.chunkWeights[start + std::min<size_t>(1, k - 1)] = 0.1 * (g + 1);
      start += k;
    }
  } else if (weights > 0) {
    for (int q = 0; q < hosts; ++q)
      p.chunkWeights.push_back(weights == 1 ? 0.05 * (1 + (q * 7) % 5) : (q % 3 == 1 ? 0 : 0.1));
    if (weights == 2 && sizes.size() > 1)
      for (int q = 0; q < sizes.front(); ++q) p.chunkWeights[static_cast<size_t>(q)] = 0;
  }
  for (int t = 0; t < trees; ++t) {
    PackedTree tree;
    tree.weight = t % 3 == 2 ? 0.0 : 1.0 + t % 3;
    tree.parent.assign(static_cast<size_t>(hosts), -1);
    std::vector<int> o(static_cast<size_t>(hosts));
    std::iota(o.begin(), o.end(), 0);
    std::shuffle(o.begin(), o.end(), rng);
    for (int i = 1; i < hosts; ++i)
      tree.parent[static_cast<size_t>(o[static_cast<size_t>(i)])] =
          o[static_cast<size_t>(rng() % static_cast<unsigned>(i))];
    p.trees.push_back(std::move(tree));
  }
  p.confidence = 1;
  p.seal();
  return p;
}

CommOptions options(Algorithm algo, uint64_t segmentBytes) {
  CommOptions o;
  o.timeout = std::chrono::seconds(60);
  o.segmentBytes = segmentBytes;
  o.numSlots = 3;
  o.algorithm = algo;
  return o;
}

std::string firstDifference(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                            size_t es) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) return fmt::format("element {} of {} differs", i / es, got.size() / es);
  return got.size() == want.size() ? "" : "sizes differ";
}

// Allreduces of every count x (type, op) in and out of place on one rank, each checked.
void allreduces(Communicator& comm, const std::vector<uint64_t>& counts, bool fullTypes,
                const std::string& label) {
  const int n = comm.size(), me = comm.rank();
  std::vector<std::pair<DataType, ReduceOp>> combos;
  if (fullTypes) {
    for (DataType t : testing::kAllTypes)
      for (ReduceOp op : testing::kAllOps) combos.push_back({t, op});
  } else {
    combos = {{DataType::kInt32, ReduceOp::kSum},    {DataType::kFloat16, ReduceOp::kAvg},
              {DataType::kUint8, ReduceOp::kMax},    {DataType::kInt64, ReduceOp::kProd},
              {DataType::kBFloat16, ReduceOp::kMin}, {DataType::kFloat64, ReduceOp::kSum}};
  }
  for (uint64_t count : counts)
    for (auto [t, op] : combos)
      for (bool inPlace : {false, true}) {
        const size_t es = elementSize(t);
        auto in = inputBuffer(t, op, me, count);
        const auto want = expectedBuffer(t, op, n, count);
        std::vector<std::byte> out(in.size());
        if (inPlace) {
          comm.allreduce(in.data(), in.data(), count, t, op);
          out = in;
        } else {
          comm.allreduce(in.data(), out.data(), count, t, op);
        }
        const std::string diff = firstDifference(out, want, es);
        if (!diff.empty()) {
          ADD_FAILURE() << label << " rank " << me << ": allreduce " << count << " x "
                        << dataTypeName(t) << " " << reduceOpName(op)
                        << (inPlace ? " in place" : "") << " ("
                        << algorithmName(comm.lastSelection().algorithm) << "): " << diff;
          return;
        }
      }
}

struct PlanCase {
  Backend backend;
  int hosts;
  int ranksPerHost;
  std::string layout;  // hier: layoutSizes(); trees: "none"
  int weights;         // hier: 0 uniform, 1 skewed, 2 zeros, 3 leaders
  Algorithm algorithm;
  int trees;  // trees: how many
};

std::string caseName(const PlanCase& c) {
  return fmt::format("{}_h{}x{}_{}_{}_w{}_t{}", transport::backendName(c.backend), c.hosts,
                     c.ranksPerHost, algorithmName(c.algorithm), c.layout, c.weights, c.trees);
}

class EnginePlanAlgorithm : public ::testing::TestWithParam<PlanCase> {};

TEST_P(EnginePlanAlgorithm, RunsThePlansAlgorithmBitExact) {
  const PlanCase c = GetParam();
  const bool loopback = c.backend == Backend::Loopback;
  const std::vector<int> sizes = layoutSizes(c.layout, c.hosts);
  const Plan plan = layoutPlan(c.hosts, c.ranksPerHost, sizes, c.weights, c.trees,
                               static_cast<unsigned>(c.hosts * 13 + c.weights));
  const int n = c.hosts * c.ranksPerHost;
  const std::vector<uint64_t> counts =
      loopback ? std::vector<uint64_t>{0, 1, 13, 97, 1031} : std::vector<uint64_t>{0, 1, 97, 5003};
  // Every type x operator on the three-group layout up to 10 ranks; a representative set
  // elsewhere (the schedules themselves are checked exhaustively by collectives_schedule_test).
  const bool fullTypes = loopback && n <= 10 && (c.layout == "three" || c.trees > 0);
  std::atomic<int> ran{0};
  std::atomic<uint64_t> fallbacks{0};
  spawn(n, c.backend, [&](transport::Context& ctx) {
    Communicator comm(ctx, options(c.algorithm, loopback ? 64 : 1024), plan);
    allreduces(comm, counts, fullTypes, caseName(c));
    if (comm.lastSelection().algorithm == c.algorithm) ++ran;
    fallbacks += comm.fallbacks();
  });
  EXPECT_EQ(ran.load(), n) << "the plan's " << algorithmName(c.algorithm) << " did not run";
  EXPECT_EQ(fallbacks.load(), 0u);
}

std::vector<PlanCase> planCases() {
  std::vector<PlanCase> cases;
  for (int h : {1, 2, 3, 5, 7, 8, 10, 13, 16}) {
    for (const char* layout : {"one", "equal", "three", "singletons", "ones"}) {
      if (layoutSizes(layout, h).empty()) continue;
      for (int w : {0, 1, 2})
        cases.push_back({Backend::Loopback, h, 1, layout, w, Algorithm::kHier, 0});
      if (std::string_view(layout) == "three" || std::string_view(layout) == "singletons")
        cases.push_back({Backend::Loopback, h, 1, layout, 3, Algorithm::kHier, 0});
    }
    for (int t : {1, 3, 5})
      cases.push_back({Backend::Loopback, h, 1, "none", 0, Algorithm::kTrees, t});
  }
  // Two ranks per host: groups of hosts' ranks; trees with a chain inside each host.
  cases.push_back({Backend::Loopback, 5, 2, "three", 1, Algorithm::kHier, 0});
  cases.push_back({Backend::Loopback, 5, 2, "three", 2, Algorithm::kHier, 0});
  cases.push_back({Backend::Loopback, 5, 2, "three", 3, Algorithm::kHier, 0});
  cases.push_back({Backend::Loopback, 5, 2, "none", 0, Algorithm::kTrees, 3});
  cases.push_back({Backend::Loopback, 3, 3, "none", 0, Algorithm::kTrees, 2});
  // TCP: the emulated cloud's shape (4+3+3) and odd sizes.
  for (int h : {3, 5, 10})
    for (int w : {0, 1, 2}) cases.push_back({Backend::Tcp, h, 1, "three", w, Algorithm::kHier, 0});
  cases.push_back({Backend::Tcp, 7, 1, "singletons", 1, Algorithm::kHier, 0});
  cases.push_back({Backend::Tcp, 10, 1, "three", 3, Algorithm::kHier, 0});
  cases.push_back({Backend::Tcp, 5, 1, "none", 0, Algorithm::kTrees, 3});
  cases.push_back({Backend::Tcp, 10, 1, "none", 0, Algorithm::kTrees, 4});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, EnginePlanAlgorithm, ::testing::ValuesIn(planCases()),
                         [](const auto& info) { return caseName(info.param); });

// Large vectors through the rendezvous path of loopback with the default segments: 4+3+3 racks,
// leader weights that leave the second rack nothing to reduce across, and three packed trees.
TEST(EnginePlanAlgorithmLarge, DefaultSegments) {
  const Plan plan = layoutPlan(10, 1, {4, 3, 3}, 3, 3, 7);
  for (Algorithm algo : {Algorithm::kHier, Algorithm::kTrees}) {
    spawn(10, Backend::Loopback, [&](transport::Context& ctx) {
      CommOptions o = options(algo, 1u << 20);
      o.numSlots = 8;
      Communicator comm(ctx, o, plan);
      const uint64_t count = (9u << 19) / 4 + 3;  // 4.5 MiB of int32
      auto in = inputBuffer(DataType::kInt32, ReduceOp::kSum, ctx.rank(), count);
      std::vector<std::byte> out(in.size());
      comm.allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      EXPECT_EQ(comm.lastSelection().algorithm, algo);
      auto want = expectedBuffer(DataType::kInt32, ReduceOp::kSum, 10, count);
      EXPECT_EQ(firstDifference(out, want, 4), "") << algorithmName(algo);
    });
  }
}

// What reaches the algorithms from the plan: weights per rank (a host's split over its ranks),
// trees over ranks (a chain inside each host, hosts' first ranks in the host tree).
TEST(EnginePlanAlgorithmInputs, WeightsAndTreesPerRank) {
  Plan plan = Plan::identity({"a", "b", "c"}, 2);
  plan.order = {"c", "a", "b"};
  plan.derivePermutation();             // new rank: c -> 0,1; a -> 2,3; b -> 4,5
  plan.chunkWeights = {0.5, 0.3, 0.2};  // per position: c, a, b
  plan.trees = {{1.0, {-1, 0, 0}}};     // positions: c is the root of a and b
  plan.seal();
  EXPECT_EQ(rankWeightsFromPlan(plan), (std::vector<double>{0.15, 0.15, 0.1, 0.1, 0.25, 0.25}));
  auto trees = rankTreesFromPlan(plan);
  ASSERT_EQ(trees.size(), 1u);
  // Old ranks: a = 0,1; b = 2,3; c = 4,5. c's first rank (4) is the root, 5 below it; a's and
  // b's first ranks below 4, their second ranks below them.
  EXPECT_EQ(trees[0].parent, (std::vector<int>{4, 0, 4, 2, -1, 4}));
}

// A plan whose trees the engine cannot run (world size other than the trees', or trees that
// weigh nothing) falls back visibly: counted, the reason in lastSelection().declined.
TEST(EnginePlanAlgorithmFallback, TreesThatCannotRunFallBackVisibly) {
  Plan plan = layoutPlan(4, 1, {}, 0, 2, 3);
  for (auto& t : plan.trees) t.weight = 0;
  plan.collectives["allreduce"] = {AlgoRange{0, AlgoRange::kUnbounded, Algorithm::kTrees, 0, 0, 0}};
  plan.seal();
  spawn(4, Backend::Loopback, [&](transport::Context& ctx) {
    CommOptions o = options(Algorithm::kRing, 64);
    o.algorithm.reset();
    Communicator comm(ctx, o, plan);
    std::vector<int32_t> in(100, ctx.rank() + 1), out(100);
    comm.allreduce(in.data(), out.data(), 100, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(out, std::vector<int32_t>(100, 10));
    EXPECT_NE(comm.lastSelection().algorithm, Algorithm::kTrees);
    EXPECT_TRUE(comm.lastSelection().fellBack);
    ASSERT_FALSE(comm.lastSelection().declined.empty());
    EXPECT_NE(comm.lastSelection().declined[0].find("weigh 0"), std::string::npos)
        << comm.lastSelection().declined[0];
    EXPECT_EQ(comm.fallbacks(), 1u);
  });
}

}  // namespace
}  // namespace rankmap::coll
