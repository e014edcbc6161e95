#include "probe/schedule.h"

#include <gtest/gtest.h>

#include <set>

namespace rankmap::probe {
namespace {

class RoundRobinTest : public ::testing::TestWithParam<int> {};

TEST_P(RoundRobinTest, EveryPairOnceNoHostTwiceInARound) {
  int n = GetParam();
  auto rounds = roundRobin(n);
  int expectedRounds = n < 2 ? 0 : (n % 2 == 0 ? n - 1 : n);
  EXPECT_EQ(static_cast<int>(rounds.size()), expectedRounds);
  std::set<HostPair> seen;
  for (size_t r = 0; r < rounds.size(); ++r) {
    std::set<int> busy;
    EXPECT_EQ(static_cast<int>(rounds[r].size()), n / 2) << "round " << r;
    for (auto [a, b] : rounds[r]) {
      ASSERT_GE(a, 0);
      ASSERT_LT(b, n);
      ASSERT_LT(a, b) << "pairs are (low, high)";
      EXPECT_TRUE(busy.insert(a).second) << "host " << a << " twice in round " << r;
      EXPECT_TRUE(busy.insert(b).second) << "host " << b << " twice in round " << r;
      EXPECT_TRUE(seen.insert({a, b}).second) << "pair " << a << "," << b << " twice";
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n * (n - 1) / 2));
}

INSTANTIATE_TEST_SUITE_P(N1to33, RoundRobinTest, ::testing::Range(1, 34));

TEST(ShiftTrials, PermutationsCoverEveryOrderedPairOnce) {
  int n = 7;
  auto trials = shiftTrials(n, 100);
  ASSERT_EQ(trials.size(), 6u);
  std::set<HostPair> seen;
  for (const auto& t : trials) {
    std::set<int> src, dst;
    for (auto [a, b] : t) {
      EXPECT_NE(a, b);
      src.insert(a);
      dst.insert(b);
      EXPECT_TRUE(seen.insert({a, b}).second);
    }
    EXPECT_EQ(src.size(), 7u);
    EXPECT_EQ(dst.size(), 7u);
  }
  EXPECT_EQ(seen.size(), 42u);
  EXPECT_EQ(shiftTrials(16, 5).size(), 5u);
  EXPECT_TRUE(shiftTrials(1, 5).empty());
}

}  // namespace
}  // namespace rankmap::probe
