// Exhaustive, network-free tests of the algorithm generators: every (collective, algorithm)
// over world sizes 1-16, counts 0, 1, primes and multi-segment, tiny and large segments, in and
// out of place, identity and shuffled orders, simulated with rendezvous messages and the
// executor's blocking policy (schedule_sim.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "collectives/algorithms/algorithms.h"
#include "collectives/algorithms/common.h"
#include "collectives/schedule/schedule.h"
#include "common/error.h"
#include "tests/unit/collectives/schedule_sim.h"

namespace rankmap::coll {
namespace {

using testing::checkOutcome;
using testing::SimSetup;
using testing::simulate;

std::vector<int> shuffledOrder(int n, unsigned seed) {
  std::vector<int> o(static_cast<size_t>(n));
  std::iota(o.begin(), o.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(o.begin(), o.end(), rng);
  return o;
}

// Runs one configuration; returns "" or what went wrong.
std::string runOne(Algorithm algo, AlgoParams p, bool expectDecline = false) {
  std::vector<Schedule> scheds;
  for (int r = 0; r < p.worldSize; ++r) {
    p.rank = r;
    try {
      scheds.push_back(buildSchedule(algo, p));
    } catch (const NotSupported& e) {
      if (expectDecline) return "";
      return std::string("declined: ") + e.what();
    }
  }
  if (expectDecline) return "expected a decline";
  const SimSetup setup{.collective = p.collective,
                       .worldSize = p.worldSize,
                       .count = p.count,
                       .elementSize = p.elementSize,
                       .root = p.root,
                       .inPlace = p.inPlace};
  try {
    auto outcome = simulate(setup, scheds);
    return checkOutcome(setup, outcome);
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string describe(Algorithm algo, const AlgoParams& p) {
  return fmt::format(
      "{} {} n={} count={} es={} seg={}B slots={} root={} inPlace={} order={} groups={}",
      algorithmName(algo), collectiveName(p.collective), p.worldSize, p.count, p.elementSize,
      p.segmentBytes, p.numSlots, p.root, p.inPlace,
      p.order.empty() ? "identity" : fmt::format("{}", fmt::join(p.order, ",")), p.groups.size());
}

// One point of the sweeps below: 4-byte elements, 2 slots for one-element segments, else 8.
AlgoParams sweepPoint(Collective coll, int n, uint64_t count, uint64_t segBytes, bool inPlace) {
  AlgoParams p;
  p.collective = coll;
  p.worldSize = n;
  p.count = count;
  p.elementSize = 4;
  p.segmentBytes = segBytes;
  p.numSlots = segBytes == 4 ? 2 : 8;
  p.inPlace = inPlace;
  return p;
}

struct Case {
  Collective collective;
  Algorithm algorithm;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << collectiveName(c.collective) << " " << algorithmName(c.algorithm);
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return std::string(collectiveName(info.param.collective)) + "_" +
         std::string(algorithmName(info.param.algorithm));
}

class ScheduleMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(ScheduleMatrix, EveryElementExactlyOnceNoDeadlock) {
  const auto [coll, algo] = GetParam();
  const bool pow2Only = algo == Algorithm::kRhd && coll != Collective::kAllreduce;
  int failures = 0;
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 13, 16}) {
    const bool declines = pow2Only && (n & (n - 1)) != 0;
    for (uint64_t count : {0, 1, 2, 7, 13, 64}) {
      if (coll == Collective::kBarrier && count > 0) continue;
      for (uint64_t segBytes : {4, 12, 1 << 20}) {
        if (n > 8 && segBytes == 4) continue;  // one-element segments: small sizes cover them
        for (bool inPlace : {false, true}) {
          for (int orderKind = 0; orderKind < 2; ++orderKind) {
            AlgoParams p = sweepPoint(coll, n, count, segBytes, inPlace);
            p.root = (n > 1 && (coll == Collective::kBroadcast || coll == Collective::kReduce))
                         ? static_cast<int>((count + 1) % static_cast<uint64_t>(n))
                         : 0;
            if (orderKind == 1) p.order = shuffledOrder(n, static_cast<unsigned>(n * 31 + count));
            std::string err = runOne(algo, p, declines);
            if (!err.empty()) {
              ADD_FAILURE() << describe(algo, p) << ": " << err;
              if (++failures > 5) return;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Generators, ScheduleMatrix,
                         ::testing::Values(Case{Collective::kAllreduce, Algorithm::kRing},
                                           Case{Collective::kAllreduce, Algorithm::kTree},
                                           Case{Collective::kAllreduce, Algorithm::kRhd},
                                           Case{Collective::kAllgather, Algorithm::kRing},
                                           Case{Collective::kAllgather, Algorithm::kRhd},
                                           Case{Collective::kReduceScatter, Algorithm::kRing},
                                           Case{Collective::kReduceScatter, Algorithm::kRhd},
                                           Case{Collective::kBroadcast, Algorithm::kRing},
                                           Case{Collective::kBroadcast, Algorithm::kTree},
                                           Case{Collective::kReduce, Algorithm::kRing},
                                           Case{Collective::kReduce, Algorithm::kTree},
                                           Case{Collective::kBarrier, Algorithm::kDissemination}),
                         caseName);

// Groups of the given sizes, members drawn from a shuffled order.
std::vector<std::vector<int>> makeGroups(const std::vector<int>& sizes, unsigned seed) {
  int n = std::accumulate(sizes.begin(), sizes.end(), 0);
  auto o = shuffledOrder(n, seed);
  std::vector<std::vector<int>> g;
  size_t next = 0;
  for (int k : sizes) {
    g.emplace_back();
    for (int i = 0; i < k; ++i) g.back().push_back(o[next++]);
  }
  return g;
}

// Group layouts of n ranks: one group; equal groups where n factors; three groups as equal as
// possible (4+3+3 at 10); singletons at both ends around two middle groups; all singletons.
std::vector<std::pair<std::string, std::vector<int>>> layouts(int n) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  out.push_back({"one", {n}});
  for (int k : {4, 3, 2})
    if (n % k == 0 && n > k) {
      out.push_back({"equal", std::vector<int>(static_cast<size_t>(n / k), k)});
      break;
    }
  if (n >= 4) {
    std::vector<int> three;
    for (int i = 0; i < 3; ++i) three.push_back(n / 3 + (i < n % 3 ? 1 : 0));
    out.push_back({"three", three});
    out.push_back({"singletons", {1, (n - 2) / 2, n - 2 - (n - 2) / 2, 1}});
    if (out.back().second[2] == 0) out.back().second.erase(out.back().second.begin() + 2);
  }
  if (n >= 2) out.push_back({"ones", std::vector<int>(static_cast<size_t>(n), 1)});
  return out;
}

// Chunk weights per rank: uniform (none), skewed, with zeros (a third of the ranks and every
// member of the first group), or leaders (each group's weight on its last member, the second
// group's nothing).
std::vector<double> weightsOf(int kind, int n, const std::vector<std::vector<int>>& groups) {
  std::vector<double> w;
  if (kind == 0) return w;
  if (kind == 3) {
    w.assign(static_cast<size_t>(n), 0);
    for (size_t g = 0; g < groups.size(); ++g)
      if (g != 1 || groups.size() == 1) w[static_cast<size_t>(groups[g].back())] = 1.0 + g;
    return w;
  }
  for (int r = 0; r < n; ++r) w.push_back(kind == 1 ? 0.5 + (r * 7) % 5 : (r % 3 == 1 ? 0 : 1 + r));
  if (kind == 2 && groups.size() > 1)
    for (int r : groups.front()) w[static_cast<size_t>(r)] = 0;
  return w;
}

TEST(ScheduleHier, EveryLayoutAndWeighting) {
  int failures = 0;
  for (int n : {1, 2, 3, 5, 7, 8, 10, 13, 16}) {
    for (const auto& [name, sizes] : layouts(n)) {
      for (int wk = 0; wk < 4; ++wk) {
        for (uint64_t count : {0, 1, 13, 64}) {
          for (uint64_t segBytes : {4, 12, 1 << 20}) {
            if (n > 8 && segBytes == 4) continue;
            for (bool inPlace : {false, true}) {
              AlgoParams p = sweepPoint(Collective::kAllreduce, n, count, segBytes, inPlace);
              p.groups = makeGroups(sizes, static_cast<unsigned>(n * 100 + sizes.size() + count));
              p.weights = weightsOf(wk, n, p.groups);
              std::string err = runOne(Algorithm::kHier, p);
              if (!err.empty()) {
                ADD_FAILURE() << describe(Algorithm::kHier, p) << " layout " << name << " weights "
                              << wk << ": " << err;
                if (++failures > 5) return;
              }
            }
          }
        }
      }
    }
  }
}

// Bytes each rank sends across groups, and inside its group, for hier on `p`.
struct HierBytes {
  std::vector<uint64_t> across, inside;
};
HierBytes hierBytes(AlgoParams p) {
  HierBytes out;
  std::vector<int> groupOf(static_cast<size_t>(p.worldSize));
  for (size_t g = 0; g < p.groups.size(); ++g)
    for (int r : p.groups[g]) groupOf[static_cast<size_t>(r)] = static_cast<int>(g);
  for (int r = 0; r < p.worldSize; ++r) {
    p.rank = r;
    uint64_t across = 0, inside = 0;
    for (const auto& st : buildSchedule(Algorithm::kHier, p).steps)
      if (st.kind == StepKind::kSend)
        (groupOf[static_cast<size_t>(st.peer)] == groupOf[static_cast<size_t>(r)] ? inside
                                                                                  : across) +=
            st.src.bytes / p.elementSize;
    out.across.push_back(across);
    out.inside.push_back(inside);
  }
  return out;
}

// Across m groups without weights, each piece goes round a ring of its holders (groups in
// order): group p of share x_p (its size over the job's) sends 2 - x_p - x_(p+1) of the vector
// to the next group. With weights, direct exchange: group g of share x_g (its weight over the
// total) sends 1 + (m-2) x_g whatever the others' shares, each member in proportion to its
// block. Inside a group (ring order as listed) a member sends every block but its own in the
// reduce-scatter and every block but its successor's in the allgather.
TEST(ScheduleHier, CrossGroupLoadsFollowTheShares) {
  const uint64_t count = 1 << 16;
  AlgoParams p = sweepPoint(Collective::kAllreduce, 10, count, 1 << 12, false);
  p.groups = {{0, 1, 2, 3}, {4, 5, 6}, {7, 8, 9}};  // 4 + 3 + 3
  auto sentByGroup = [&](const HierBytes& b) {
    std::vector<double> out;
    for (const auto& g : p.groups) {
      uint64_t sent = 0;
      for (int r : g) sent += b.across[static_cast<size_t>(r)];
      out.push_back(static_cast<double>(sent) / count);
    }
    return out;
  };
  // Without weights: rings, shares by size (0.4, 0.3, 0.3).
  HierBytes b = hierBytes(p);
  auto sent = sentByGroup(b);
  const double bySize[3] = {0.4, 0.3, 0.3};
  for (size_t g = 0; g < 3; ++g)
    EXPECT_NEAR(sent[g], 2 - bySize[g] - bySize[(g + 1) % 3], 1e-3) << "group " << g;
  // Weights: group shares 3/4, 0, 1/4; inside group 0 the members weigh 1:1:2:4.
  p.weights = {0.75 / 8, 0.75 / 8, 0.75 * 2 / 8, 0.75 * 4 / 8, 0,
               0,        0,        0.25 / 3,     0.25 / 3,     0.25 / 3};
  b = hierBytes(p);
  sent = sentByGroup(b);
  const double shares[3] = {0.75, 0, 0.25};
  for (size_t g = 0; g < 3; ++g) EXPECT_NEAR(sent[g], 1 + shares[g], 1e-3) << "group " << g;
  // Group 1 weighs 0: its first member holds its partial sums and alone sends them across.
  EXPECT_NEAR(static_cast<double>(b.across[4]) / count, 1, 1e-3);
  EXPECT_EQ(b.across[5], 0u);
  EXPECT_EQ(b.across[6], 0u);
  // Group 0's members move 1.75 times their blocks across.
  const double member[4] = {1.0 / 8, 1.0 / 8, 2.0 / 8, 4.0 / 8};
  for (int j = 0; j < 4; ++j)
    EXPECT_NEAR(static_cast<double>(b.across[static_cast<size_t>(j)]), 1.75 * member[j] * count, 16)
        << "member " << j;
  // Inside group 0 (ring order 0 1 2 3): reduce-scatter sends 1 - own block, the allgather
  // 1 - the successor's block.
  for (int j = 0; j < 4; ++j)
    EXPECT_NEAR(static_cast<double>(b.inside[static_cast<size_t>(j)]),
                (2 - member[j] - member[(j + 1) % 4]) * count, 4)
        << "member " << j;
  // Weights all 0: direct exchange with shares by size.
  p.weights.assign(10, 0);
  sent = sentByGroup(hierBytes(p));
  for (size_t g = 0; g < 3; ++g) EXPECT_NEAR(sent[g], 1 + bySize[g], 1e-3) << "group " << g;
  // Leaders (what the planner writes for unequal uplinks): each group's share on one member.
  // Only the leaders send across, each to the other two leaders (one peer per group pair);
  // inside, every member but the leader sends the whole vector in the reduce-scatter (the chain
  // to the leader), and every member but the leader's predecessor in the allgather.
  p.weights = {0, 0.75, 0, 0, 0, 0, 0, 0, 0, 0.25};
  b = hierBytes(p);
  const int leaders[3] = {1, 4, 9};
  for (int r : {0, 2, 3, 5, 6, 7, 8})
    EXPECT_EQ(b.across[static_cast<size_t>(r)], 0u) << "rank " << r;
  for (size_t g = 0; g < 3; ++g)
    EXPECT_NEAR(static_cast<double>(b.across[static_cast<size_t>(leaders[g])]) / count,
                1 + shares[g], 1e-3)
        << "leader of group " << g;
  for (int r = 0; r < 10; ++r) {
    std::set<int> peers;
    p.rank = r;
    for (const auto& st : buildSchedule(Algorithm::kHier, p).steps)
      if (st.kind == StepKind::kSend) peers.insert(st.peer);
    const bool leader = r == 1 || r == 4 || r == 9;
    EXPECT_EQ(peers.size(), leader ? 3u : 1u) << "rank " << r;  // leaders: next member + 2
  }
  // Group 0, ring 0 1 2 3, leader 1: 0 (the leader's predecessor) and 1 send once, 2 and 3 twice.
  const double insideOf[4] = {1, 1, 2, 2};
  for (int j = 0; j < 4; ++j)
    EXPECT_NEAR(static_cast<double>(b.inside[static_cast<size_t>(j)]) / count, insideOf[j], 1e-3)
        << "member " << j;
}

TEST(ScheduleHier, DeclinesMissingOrBrokenGroupsOnly) {
  AlgoParams p;
  p.worldSize = 5;
  EXPECT_TRUE(declineReason(Algorithm::kHier, p).has_value());  // no groups
  p.groups = {{0, 1, 2}, {3, 4}};
  EXPECT_FALSE(declineReason(Algorithm::kHier, p).has_value());  // unequal groups run
  p.groups = {{0, 1, 2}, {3}, {4}};
  EXPECT_FALSE(declineReason(Algorithm::kHier, p).has_value());  // and singletons
  p.groups = {{0, 1, 2, 3, 4}, {}};
  EXPECT_TRUE(declineReason(Algorithm::kHier, p).has_value());  // an empty group
  p.groups = {{0, 1}, {1, 2}};
  p.worldSize = 4;
  EXPECT_TRUE(declineReason(Algorithm::kHier, p).has_value());  // overlapping, incomplete
  p.groups = {{0, 1}, {2, 3}};
  EXPECT_FALSE(declineReason(Algorithm::kHier, p).has_value());
  p.weights = {1, 2, 3};  // one per rank expected
  EXPECT_THROW(buildSchedule(Algorithm::kHier, p), InvalidInput);
  p.weights = {1, -2, 3, 4};
  EXPECT_THROW(buildSchedule(Algorithm::kHier, p), InvalidInput);
  p.weights = {1, 2, std::nan(""), 4};
  EXPECT_THROW(buildSchedule(Algorithm::kHier, p), InvalidInput);
  p.weights.clear();
  p.collective = Collective::kAllgather;
  EXPECT_TRUE(declineReason(Algorithm::kHier, p).has_value());
  EXPECT_THROW(buildSchedule(Algorithm::kHier, p), NotSupported);
}

// Weighted blocks: every element in exactly one block, block i starting at floor(len * W_<i /
// W), zero weights empty, all-zero weights equal.
TEST(WeightedBlocks, CoverEveryElementOnce) {
  using algo::Range;
  for (uint64_t len : std::vector<uint64_t>{0, 1, 2, 7, 13, 1000, 1ull << 40}) {
    for (const std::vector<double>& w : std::vector<std::vector<double>>{{1},
                                                                         {1, 1, 1},
                                                                         {0, 1, 0, 3},
                                                                         {0, 0},
                                                                         {1e-9, 1, 1e9},
                                                                         {0.3, 0.3, 0.4},
                                                                         {5, 0, 0, 0, 0, 1}}) {
      auto units = algo::weightUnits(w);
      auto blocks = algo::weightedBlocks(Range{5, len}, units);
      ASSERT_EQ(blocks.size(), w.size());
      uint64_t at = 5;
      for (size_t i = 0; i < blocks.size(); ++i) {
        EXPECT_EQ(blocks[i].begin, at) << "len " << len << " block " << i;
        at = blocks[i].end();
        if (w[i] == 0 && std::accumulate(w.begin(), w.end(), 0.0) > 0) {
          EXPECT_EQ(blocks[i].len, 0u) << "len " << len << " block " << i;
        }
      }
      EXPECT_EQ(at, 5 + len);
    }
  }
  // Proportional to within one element.
  auto blocks = algo::weightedBlocks(algo::Range{0, 1000}, algo::weightUnits({1, 3, 6}));
  EXPECT_EQ(blocks[0].len, 100u);
  EXPECT_EQ(blocks[1].len, 300u);
  EXPECT_EQ(blocks[2].len, 600u);
  auto equal = algo::weightedBlocks(algo::Range{0, 10}, algo::weightUnits({0, 0, 0}));
  EXPECT_EQ(equal[0].len + equal[1].len + equal[2].len, 10u);
  for (const auto& b : equal) EXPECT_TRUE(b.len == 3 || b.len == 4) << b.len;
}

// Random spanning trees over n ranks: each rank after the first (in a shuffled order) hangs
// below an earlier one; `shape` 1 makes stars (everything below one centre), 2 chains.
std::vector<int> randomTree(int n, unsigned seed, int shape) {
  auto o = shuffledOrder(n, seed);
  std::mt19937 rng(seed + 1);
  std::vector<int> parent(static_cast<size_t>(n), -1);
  for (int i = 1; i < n; ++i) {
    int up = shape == 1   ? 0
             : shape == 2 ? i - 1
                          : static_cast<int>(rng() % static_cast<unsigned>(i));
    parent[static_cast<size_t>(o[static_cast<size_t>(i)])] = o[static_cast<size_t>(up)];
  }
  return parent;
}

TEST(ScheduleTrees, EveryTreeShapeAndWeighting) {
  int failures = 0;
  for (int n : {1, 2, 3, 5, 7, 8, 10, 13, 16}) {
    for (int numTrees : {1, 3, 5}) {
      for (int wk = 0; wk < 4; ++wk) {
        for (uint64_t count : {0, 1, 13, 64}) {
          for (uint64_t segBytes : {4, 12, 1 << 20}) {
            if (n > 8 && segBytes == 4) continue;
            for (bool inPlace : {false, true}) {
              AlgoParams p = sweepPoint(Collective::kAllreduce, n, count, segBytes, inPlace);
              for (int t = 0; t < numTrees; ++t) {
                RankTree tree;
                tree.parent = randomTree(n, static_cast<unsigned>(n * 31 + t * 7 + count), t % 3);
                // Weights: equal, skewed, or every other tree 0 (the last one never).
                tree.weight = wk == 0   ? 1.0
                              : wk == 1 ? 1.0 + 3 * t
                                        : (t % 2 == 0 && t + 1 < numTrees ? 0.0 : 0.5);
                p.trees.push_back(std::move(tree));
              }
              std::string err = runOne(Algorithm::kTrees, p);
              if (!err.empty()) {
                ADD_FAILURE() << describe(Algorithm::kTrees, p) << " trees " << numTrees
                              << " weights " << wk << ": " << err;
                if (++failures > 5) return;
              }
            }
          }
        }
      }
    }
  }
}

// A tree edge carries its tree's piece once each way: a leaf sends its piece up and nothing
// down, a centre sends its piece up (unless root) and down to each child.
TEST(ScheduleTrees, EachEdgeCarriesItsPieceOnceEachWay) {
  const int n = 6;
  const uint64_t count = 6000;
  AlgoParams p = sweepPoint(Collective::kAllreduce, n, count, 1 << 10, false);
  // Tree 0 (weight 2): a star on rank 0; tree 1 (weight 1): a chain 5-4-3-2-1-0 rooted at 5.
  p.trees = {{2.0, {-1, 0, 0, 0, 0, 0}}, {1.0, {1, 2, 3, 4, 5, -1}}};
  for (int r = 0; r < n; ++r) {
    p.rank = r;
    uint64_t sent = 0;
    for (const auto& st : buildSchedule(Algorithm::kTrees, p).steps)
      if (st.kind == StepKind::kSend) sent += st.src.bytes / p.elementSize;
    const uint64_t star = r == 0 ? 5 * 4000 : 4000;  // pieces: 4000 and 2000 elements
    const uint64_t chain = r == 5 ? 2000 : r == 0 ? 2000 : 2 * 2000;
    EXPECT_EQ(sent, star + chain) << "rank " << r;
  }
}

TEST(ScheduleTrees, DeclinesWithoutValidTrees) {
  AlgoParams p;
  p.worldSize = 4;
  auto why = declineReason(Algorithm::kTrees, p);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("packed trees"), std::string::npos) << *why;
  p.trees = {{1.0, {-1, 0, 1, 2}}};
  EXPECT_FALSE(declineReason(Algorithm::kTrees, p).has_value());
  for (const std::vector<int>& bad :
       std::vector<std::vector<int>>{{-1, 0, 1},        // too few
                                     {-1, -1, 1, 2},    // two roots
                                     {-1, 2, 3, 1},     // a loop below the root
                                     {-1, 0, 9, 2},     // out of range
                                     {-1, 1, 1, 2}}) {  // its own parent
    p.trees = {{1.0, bad}};
    why = declineReason(Algorithm::kTrees, p);
    ASSERT_TRUE(why.has_value()) << fmt::format("{}", fmt::join(bad, ","));
    EXPECT_NE(why->find("not a spanning tree"), std::string::npos) << *why;
    EXPECT_THROW(buildSchedule(Algorithm::kTrees, p), NotSupported);
  }
  p.trees = {{0.0, {-1, 0, 1, 2}}};
  EXPECT_TRUE(declineReason(Algorithm::kTrees, p).has_value());  // weighs nothing
  p.trees = {{1.0, {-1, 0, 1, 2}}};
  p.collective = Collective::kBroadcast;
  EXPECT_TRUE(declineReason(Algorithm::kTrees, p).has_value());
}

TEST(ScheduleDeclines, RhdAndTreesAndBarrier) {
  AlgoParams p;
  p.collective = Collective::kAllgather;
  p.worldSize = 6;
  EXPECT_TRUE(declineReason(Algorithm::kRhd, p).has_value());
  p.worldSize = 8;
  EXPECT_FALSE(declineReason(Algorithm::kRhd, p).has_value());
  p.collective = Collective::kAllreduce;
  p.worldSize = 6;
  EXPECT_FALSE(declineReason(Algorithm::kRhd, p).has_value());   // non-powers of two handled
  EXPECT_TRUE(declineReason(Algorithm::kTrees, p).has_value());  // no trees
  p.collective = Collective::kBarrier;
  EXPECT_TRUE(declineReason(Algorithm::kRing, p).has_value());
  EXPECT_FALSE(declineReason(Algorithm::kDissemination, p).has_value());
}

TEST(ScheduleParams, RejectsBadOrderAndRoot) {
  AlgoParams p;
  p.worldSize = 4;
  p.count = 8;
  p.order = {0, 1, 1, 3};
  EXPECT_THROW(buildSchedule(Algorithm::kRing, p), InvalidInput);
  p.order = {0, 1, 2};
  EXPECT_THROW(buildSchedule(Algorithm::kRing, p), InvalidInput);
  p.order.clear();
  p.collective = Collective::kBroadcast;
  p.root = 4;
  EXPECT_THROW(buildSchedule(Algorithm::kRing, p), InvalidInput);
}

// Other element sizes: regions stay element-aligned, segments round down to whole elements.
TEST(ScheduleElementSizes, OddSegmentBytes) {
  for (size_t es : {1, 2, 8}) {
    for (Algorithm algo : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd}) {
      AlgoParams p;
      p.worldSize = 5;
      p.count = 23;
      p.elementSize = es;
      p.segmentBytes = 13;  // not a multiple of the element size
      std::string err = runOne(algo, p);
      EXPECT_EQ(err, "") << describe(algo, p);
    }
  }
}

// An allreduce of 8000 int32 over 8 ranks in 1000-byte segments.
AlgoParams eightRanks() {
  AlgoParams p;
  p.worldSize = 8;
  p.count = 8 * 1000;
  p.elementSize = 4;
  p.segmentBytes = 1000;
  return p;
}

// The ring is bandwidth-optimal: each rank sends 2 (n-1)/n of the vector, not more, and each
// step is one block, not the whole buffer.
TEST(ScheduleRing, SendsTwoBlocksPerStepWorthOfData) {
  AlgoParams p = eightRanks();
  const int n = p.worldSize;
  const uint64_t count = p.count;
  for (int r = 0; r < n; ++r) {
    p.rank = r;
    Schedule s = buildSchedule(Algorithm::kRing, p);
    uint64_t sent = 0, largest = 0;
    for (const auto& st : s.steps)
      if (st.kind == StepKind::kSend) {
        sent += st.src.bytes;
        largest = std::max(largest, st.src.bytes);
      }
    EXPECT_EQ(sent, 2 * (n - 1) * count * 4 / n);
    EXPECT_LE(largest, 1000u);
    EXPECT_LE(s.scratchBytes(), 8u * 1024u);  // 8 slots of one segment, 64-byte aligned
  }
}

// Ring weights: every weighting gives exact results (simulated, every layout of the weights
// over a shuffled order), and position p sends 2 - w_p - w_(p+1) of the vector to p + 1 (one-hot:
// the holder and its predecessor send it once, everyone else twice).
TEST(ScheduleRing, RingWeightsSizeEachPositionsBlock) {
  int failures = 0;
  for (int n : {1, 2, 3, 5, 8, 13}) {
    for (int wk = 1; wk < 4; ++wk) {
      for (uint64_t count : {0, 1, 13, 64}) {
        for (uint64_t segBytes : {4, 12, 1 << 20}) {
          for (bool inPlace : {false, true}) {
            AlgoParams p = sweepPoint(Collective::kAllreduce, n, count, segBytes, inPlace);
            p.order = makeGroups({n}, static_cast<unsigned>(n * 7 + count)).front();
            p.ringWeights = weightsOf(wk, n, {p.order});
            std::string err = runOne(Algorithm::kRing, p);
            if (!err.empty()) {
              ADD_FAILURE() << describe(Algorithm::kRing, p) << " ring weights " << wk << ": "
                            << err;
              if (++failures > 5) return;
            }
          }
        }
      }
    }
  }
  AlgoParams p = eightRanks();
  const int n = p.worldSize;
  const uint64_t count = p.count;
  p.order = {3, 1, 4, 0, 5, 7, 2, 6};
  p.ringWeights.assign(n, 0);
  p.ringWeights[4] = 2.5;  // the rank at position 2 holds the whole vector
  for (int pos = 0; pos < n; ++pos) {
    p.rank = p.order[static_cast<size_t>(pos)];
    uint64_t sent = 0;
    for (const auto& st : buildSchedule(Algorithm::kRing, p).steps)
      if (st.kind == StepKind::kSend) {
        EXPECT_EQ(st.peer, p.order[static_cast<size_t>((pos + 1) % n)]);
        sent += st.src.bytes;
      }
    EXPECT_EQ(sent, (pos == 1 || pos == 2 ? 1 : 2) * count * 4) << "position " << pos;
  }
  p.ringWeights = {1, 2, 3};
  EXPECT_THROW(buildSchedule(Algorithm::kRing, p), InvalidInput);
  p.ringWeights = {1, 1, 1, 1, 1, 1, 1, -1};
  EXPECT_THROW(buildSchedule(Algorithm::kRing, p), InvalidInput);
}

// rhd takes partners nearest first: with racks of 4 contiguous in the order, only the last
// halving (1/8 of the vector) and the first doubling step cross racks, 1/4 of the vector per rank
// instead of the whole vector with partners at distance n/2 first.
TEST(ScheduleRhd, BigExchangesStayLocal) {
  const int n = 8;
  const uint64_t count = 8 * 1024;
  AlgoParams p;
  p.worldSize = n;
  p.count = count;
  p.elementSize = 4;
  p.segmentBytes = 1 << 20;
  p.order = {3, 1, 0, 2, 7, 6, 4, 5};  // racks {3,1,0,2} and {7,6,4,5}, each contiguous
  auto rackOf = [&](int rank) {
    return std::find(p.order.begin(), p.order.end(), rank) - p.order.begin() < 4 ? 0 : 1;
  };
  for (int r = 0; r < n; ++r) {
    p.rank = r;
    Schedule s = buildSchedule(Algorithm::kRhd, p);
    uint64_t cross = 0, local = 0;
    for (const auto& st : s.steps)
      if (st.kind == StepKind::kSend)
        (rackOf(st.peer) == rackOf(r) ? local : cross) += st.src.bytes;
    EXPECT_EQ(cross, 2 * count * 4 / 8) << "rank " << r;
    EXPECT_EQ(local + cross, 2 * (n - 1) * count * 4 / n) << "rank " << r;
  }
}

// Dependencies derived from regions: a receive into a region being sent waits for the send.
TEST(SegmentFor, MessageOver64BetweenTheFloorAndTheLargest) {
  constexpr uint64_t K = 1024, M = 1024 * K;
  EXPECT_EQ(segmentFor(8, M), 256 * K);       // small messages: one segment of the floor
  EXPECT_EQ(segmentFor(16 * M, M), 256 * K);  // 16 MiB / 64
  EXPECT_EQ(segmentFor(32 * M, M), 512 * K);
  EXPECT_EQ(segmentFor(64 * M, M), M);  // capped by the largest
  EXPECT_EQ(segmentFor(1024 * M, M), M);
  EXPECT_EQ(segmentFor(64 * M, 12), 12u);  // a largest below the floor wins
  EXPECT_EQ(segmentFor(64 * M, 4 * M), M);
}

// The dispatch order the executors and the simulator share: lowest ready step first, a step
// only once all its dependencies completed, each step exactly once.
TEST(ReadySteps, LowestReadyFirstAndOnlyAfterItsDependencies) {
  Schedule s;
  s.steps.resize(5);
  // 0 and 1 free; 2 needs 0 and 1; 3 needs 0; 4 needs 3.
  auto deps = [&](size_t i, std::vector<uint32_t> d) {
    s.steps[i].depBegin = static_cast<uint32_t>(s.deps.size());
    s.deps.insert(s.deps.end(), d.begin(), d.end());
    s.steps[i].depEnd = static_cast<uint32_t>(s.deps.size());
  };
  deps(2, {0, 1});
  deps(3, {0});
  deps(4, {3});
  ReadySteps r(s);
  EXPECT_EQ(r.pop(), 0u);
  EXPECT_EQ(r.pop(), 1u);
  EXPECT_TRUE(r.empty());
  r.complete(1);
  EXPECT_TRUE(r.empty());  // 2 still waits for 0
  r.complete(0);
  EXPECT_EQ(r.pop(), 2u);
  EXPECT_EQ(r.pop(), 3u);
  EXPECT_TRUE(r.empty());
  r.complete(2);
  r.complete(3);
  EXPECT_EQ(r.pop(), 4u);
  EXPECT_TRUE(r.empty());
}

TEST(ScheduleBuilder, DerivesHazards) {
  BuilderOptions o;
  o.worldSize = 2;
  o.elementSize = 4;
  o.inputBytes = o.outputBytes = 64;
  o.segmentBytes = 16;
  ScheduleBuilder b(o);
  b.send(1, b.output(0, 4));                       // 0: reads out[0,16)
  b.recv(1, b.output(2, 4));                       // 1: writes out[8,24): WAR on 0
  b.recvReduce(1, b.output(8, 4), b.input(8, 4));  // 2: independent
  b.send(1, b.output(8, 4));                       // 3: RAW on 2
  b.copy(b.output(0, 2), b.input(0, 2));           // 4: WAR on 0, WAW on 1? no: out[0,8) vs [8,24)
  Schedule s = b.finish();
  ASSERT_EQ(s.steps.size(), 5u);
  auto deps = [&](size_t i) {
    auto d = s.depsOf(i);
    return std::vector<uint32_t>(d.begin(), d.end());
  };
  EXPECT_EQ(deps(0), std::vector<uint32_t>{});
  EXPECT_EQ(deps(1), std::vector<uint32_t>{0});
  EXPECT_EQ(deps(2), std::vector<uint32_t>{});
  EXPECT_EQ(deps(3), std::vector<uint32_t>{2});
  EXPECT_EQ(deps(4), std::vector<uint32_t>{0});
  EXPECT_EQ(s.steps[0].msg, 0u);
  EXPECT_EQ(s.steps[3].msg, 1u);
  EXPECT_EQ(s.steps[1].msg, 0u);
  EXPECT_EQ(s.steps[2].msg, 1u);
}

TEST(ScheduleBuilder, InPlaceAliasRewritesInput) {
  BuilderOptions o;
  o.worldSize = 2;
  o.elementSize = 4;
  o.inputBytes = 16;
  o.outputBytes = 32;
  o.alias = {Alias::Kind::kInputInOutput, 16};
  ScheduleBuilder b(o);
  b.copy(b.output(4, 4), b.input(0, 4));  // a copy onto itself disappears
  b.send(1, b.input(0, 4));
  Schedule s = b.finish();
  ASSERT_EQ(s.steps.size(), 1u);
  EXPECT_EQ(s.steps[0].src, (Region{BufferId::kOutput, 16, 16}));
}

// The simulator must catch what it is there to catch (tests that can fail).
Schedule handMade(int rank, int n, uint64_t bytes, std::vector<Step> steps,
                  std::vector<std::vector<uint32_t>> deps) {
  Schedule s;
  s.rank = rank;
  s.worldSize = n;
  s.elementSize = 4;
  s.bufferBytes[0] = s.bufferBytes[1] = bytes;
  s.bufferBytes[2] = bytes;
  for (size_t i = 0; i < steps.size(); ++i) {
    steps[i].depBegin = static_cast<uint32_t>(s.deps.size());
    for (auto d : deps[i]) s.deps.push_back(d);
    steps[i].depEnd = static_cast<uint32_t>(s.deps.size());
    s.steps.push_back(steps[i]);
  }
  return s;
}

Step sendStep(int peer, uint32_t msg, Region src) {
  return {.kind = StepKind::kSend, .peer = peer, .msg = msg, .dst = {}, .src = src, .tmp = {}};
}

Step recvStep(int peer, uint32_t msg, Region dst) {
  return {.kind = StepKind::kRecv, .peer = peer, .msg = msg, .dst = dst, .src = {}, .tmp = {}};
}

// What the simulator reports for `s`, or "" when it accepts them.
std::string simulationError(const SimSetup& setup, const std::vector<Schedule>& s) {
  try {
    simulate(setup, s);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Simulator, CatchesDeadlock) {
  // Both ranks wait for their receive before sending (send depends on recv): a cycle.
  const Region in{BufferId::kInput, 0, 8}, out{BufferId::kOutput, 0, 8};
  std::vector<Schedule> s;
  for (int r = 0; r < 2; ++r)
    s.push_back(handMade(r, 2, 8, {recvStep(1 - r, 0, out), sendStep(1 - r, 0, in)}, {{}, {0}}));
  const SimSetup setup{.collective = Collective::kBroadcast, .worldSize = 2, .count = 2};
  const std::string error = simulationError(setup, s);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << "reported: '" << error << "'";
}

TEST(Simulator, CatchesMissingDependencyAndLengthMismatch) {
  const Region out{BufferId::kOutput, 0, 8}, in{BufferId::kInput, 0, 8};
  const SimSetup setup{.collective = Collective::kAllgather, .worldSize = 2, .count = 2};
  {
    // Rank 0 sends out[0,8) and receives into the same region with no dependency between.
    std::vector<Schedule> s;
    const Step copy{.kind = StepKind::kCopy, .dst = out, .src = in, .tmp = {}};
    s.push_back(handMade(0, 2, 8, {copy, sendStep(1, 0, out), recvStep(1, 0, out)}, {{}, {0}, {}}));
    s.push_back(handMade(1, 2, 8, {sendStep(0, 0, in), recvStep(0, 0, out)}, {{}, {}}));
    EXPECT_THROW(simulate(setup, s), std::runtime_error);
  }
  {
    std::vector<Schedule> s;
    s.push_back(handMade(0, 2, 8, {sendStep(1, 0, in)}, {{}}));
    s.push_back(handMade(1, 2, 8, {recvStep(0, 0, Region{BufferId::kOutput, 0, 4})}, {{}}));
    const std::string error = simulationError(setup, s);
    EXPECT_NE(error.find("expects"), std::string::npos) << "reported: '" << error << "'";
  }
}

TEST(Simulator, CatchesDoubleContributionAndWrongResult) {
  // Rank 1 reduces rank 0's data into its input twice: contributions overlap.
  const Region in{BufferId::kInput, 0, 4}, out{BufferId::kOutput, 0, 4};
  const Region tmp0{BufferId::kScratch, 0, 4};
  const SimSetup setup{.collective = Collective::kAllreduce, .worldSize = 2, .count = 1};
  const Step rr{.kind = StepKind::kRecvReduce, .peer = 0, .dst = out, .src = in, .tmp = tmp0};
  Step rr2 = rr;
  rr2.msg = 1;
  rr2.src = out;
  std::vector<Schedule> s;
  s.push_back(handMade(0, 2, 4, {sendStep(1, 0, in), sendStep(1, 1, in)}, {{}, {}}));
  s.push_back(handMade(1, 2, 4, {rr, rr2}, {{}, {0}}));
  EXPECT_THROW(simulate(setup, s), std::runtime_error);
  // A correct-looking run whose result is incomplete: rank 0 never gets the sum.
  std::vector<Schedule> t;
  t.push_back(handMade(0, 2, 4, {sendStep(1, 0, in)}, {{}}));
  t.push_back(handMade(1, 2, 4, {rr}, {{}}));
  auto outcome = simulate(setup, t);
  EXPECT_NE(checkOutcome(setup, outcome), "");
}

TEST(Trees, BinaryAndDoubleTreesAreValid) {
  for (int n = 1; n <= 64; ++n) {
    for (int t = 0; t < 2; ++t) {
      int roots = 0;
      std::vector<int> interior(static_cast<size_t>(n), 0);
      for (int x = 0; x < n; ++x) {
        TreeNode node = doubleTree(n, x, t);
        EXPECT_LE(node.children.size(), 2u);
        if (node.parent < 0) {
          ++roots;
        } else {
          ASSERT_LT(node.parent, n);
          auto pc = doubleTree(n, node.parent, t).children;
          EXPECT_NE(std::find(pc.begin(), pc.end(), x), pc.end())
              << "n=" << n << " tree " << t << ": " << x << " not a child of its parent";
        }
        for (int c : node.children) {
          ASSERT_GE(c, 0);
          ASSERT_LT(c, n);
          EXPECT_EQ(doubleTree(n, c, t).parent, x);
        }
      }
      EXPECT_EQ(roots, 1) << "n=" << n << " tree " << t;
      // Connected: walking up from every node reaches the root within n steps.
      for (int x = 0; x < n; ++x) {
        int y = x, steps = 0;
        while (doubleTree(n, y, t).parent >= 0 && steps <= n) {
          y = doubleTree(n, y, t).parent;
          ++steps;
        }
        EXPECT_LE(steps, n);
      }
    }
  }
}

// Most interior nodes of one tree are leaves of the other (the point of the double tree).
TEST(Trees, DoubleTreeSpreadsInteriorNodes) {
  for (int n : {8, 13, 16}) {
    int both = 0;
    for (int x = 0; x < n; ++x)
      if (!doubleTree(n, x, 0).children.empty() && !doubleTree(n, x, 1).children.empty()) ++both;
    EXPECT_LE(both, 2) << "n=" << n;
  }
}

}  // namespace
}  // namespace rankmap::coll
