#include "shim_nccl/rank_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "tests/unit/shim_nccl/shim_test_util.h"

namespace rankmap::shim_nccl {
namespace {

TEST(RankTable, IdentityAndPermutation) {
  auto id = RankTable::identity(4);
  EXPECT_TRUE(id.isIdentity());
  EXPECT_EQ(id.toReal(2), 2);
  auto t = RankTable::fromPermutation({2, 3, 0, 1});
  EXPECT_FALSE(t.isIdentity());
  for (int a = 0; a < 4; ++a) EXPECT_EQ(t.toApp(t.toReal(a)), a);
  EXPECT_EQ(t.toReal(0), 2);
  EXPECT_EQ(t.toApp(0), 2);
  // Out of range passes through unchanged so that NCCL reports it.
  EXPECT_EQ(t.toReal(-1), -1);
  EXPECT_EQ(t.toReal(4), 4);
  EXPECT_EQ(t.toApp(7), 7);
  EXPECT_TRUE(RankTable::fromPermutation({0, 1, 2}).isIdentity());
}

TEST(RankTable, RejectsNonPermutations) {
  EXPECT_THROW(RankTable::fromPermutation({0, 0}), InvalidInput);
  EXPECT_THROW(RankTable::fromPermutation({0, 2}), InvalidInput);
  EXPECT_THROW(RankTable::fromPermutation({-1, 0}), InvalidInput);
}

TEST(RankTable, CopiesMergeAHostsRanks) {
  // 3 hosts x 2 ranks, order h2 h0 h1: app 0,1 -> real 2,3; app 2,3 -> 4,5; app 4,5 -> 0,1.
  auto p = testing::makePlan(3, 2, {2, 0, 1});
  auto t = RankTable::fromPermutation(p.permutation);
  auto toApp = realOrderToAppOrder(t, 8);
  ASSERT_EQ(toApp.size(), 2u);  // h0,h1 stay adjacent (real 2..5), h2 moves (real 0..1)
  EXPECT_EQ(toApp[0], (BlockCopy{0, 16, 32}));
  EXPECT_EQ(toApp[1], (BlockCopy{32, 0, 16}));
  auto toReal = appOrderToRealOrder(t, 8);
  ASSERT_EQ(toReal.size(), 2u);
  EXPECT_EQ(toReal[0], (BlockCopy{16, 0, 32}));
  EXPECT_EQ(toReal[1], (BlockCopy{0, 32, 16}));
  EXPECT_TRUE(realOrderToAppOrder(t, 0).empty());
  EXPECT_EQ(realOrderToAppOrder(RankTable::identity(5), 4).size(), 1u);
}

// Exhaustive over small permutations and block sizes: applying the copies moves every byte of
// real block toReal(a) to app block a, and the inverse direction undoes it.
TEST(RankTable, CopiesAreExactForEveryPermutation) {
  for (int n = 1; n <= 6; ++n) {
    std::vector<int> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    do {
      auto t = RankTable::fromPermutation(perm);
      for (size_t block : {1u, 3u, 8u}) {
        std::vector<unsigned char> app(n * block), real(n * block, 0), back(n * block, 0);
        for (size_t i = 0; i < app.size(); ++i) app[i] = static_cast<unsigned char>(i * 7 + 1);
        size_t covered = 0;
        for (const auto& c : appOrderToRealOrder(t, block)) {
          std::memcpy(real.data() + c.dst, app.data() + c.src, c.bytes);
          covered += c.bytes;
        }
        ASSERT_EQ(covered, app.size());
        for (int a = 0; a < n; ++a)
          ASSERT_EQ(0,
                    std::memcmp(real.data() + t.toReal(a) * block, app.data() + a * block, block));
        for (const auto& c : realOrderToAppOrder(t, block))
          std::memcpy(back.data() + c.dst, real.data() + c.src, c.bytes);
        ASSERT_EQ(back, app);
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

}  // namespace
}  // namespace rankmap::shim_nccl
