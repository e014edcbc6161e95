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

// Every directed flow between hosts of different groups, in host order.
std::vector<HostPair> crossGroupFlows(const std::vector<int>& groupOf) {
  std::vector<HostPair> flows;
  for (size_t a = 0; a < groupOf.size(); ++a)
    for (size_t b = 0; b < groupOf.size(); ++b)
      if (groupOf[a] != groupOf[b]) flows.emplace_back(static_cast<int>(a), static_cast<int>(b));
  return flows;
}

// Checks that no slot uses a host, or a group's outbound or inbound uplink, twice; returns the
// number of flows in all slots.
size_t expectDisjointSlots(const std::vector<Round>& slots, const std::vector<int>& groupOf) {
  size_t total = 0;
  for (const auto& slot : slots) {
    std::set<int> hosts, outs, ins;
    for (auto [a, b] : slot) {
      EXPECT_TRUE(hosts.insert(a).second);
      EXPECT_TRUE(hosts.insert(b).second);
      EXPECT_TRUE(outs.insert(groupOf[static_cast<size_t>(a)]).second) << "outbound uplink reused";
      EXPECT_TRUE(ins.insert(groupOf[static_cast<size_t>(b)]).second) << "inbound uplink reused";
    }
    total += slot.size();
  }
  return total;
}

TEST(PackFlows, NoHostOrUplinkTwiceInASlot) {
  // 12 hosts in 3 groups of 4; all cross-group directed flows.
  std::vector<int> groupOf(12);
  for (int h = 0; h < 12; ++h) groupOf[static_cast<size_t>(h)] = h % 3;
  std::vector<HostPair> flows = crossGroupFlows(groupOf);
  auto slots = packFlows(flows, groupOf, 0);
  EXPECT_EQ(expectDisjointSlots(slots, groupOf), flows.size());
  // 3 groups: at most 3 cross flows per slot (one out of and one into each group).
  EXPECT_GE(slots.size(), flows.size() / 3);
}

TEST(PackFlows, RespectsMaxPerSlotAndIntraGroupFlowsIgnoreUplinks) {
  std::vector<int> groupOf = {0, 0, 0, 0};
  std::vector<HostPair> flows = {{0, 1}, {2, 3}, {1, 0}, {3, 2}};
  auto slots = packFlows(flows, groupOf, 0);
  ASSERT_EQ(slots.size(), 2u);  // host-disjoint only
  EXPECT_EQ(slots[0].size(), 2u);
  auto capped = packFlows(flows, groupOf, 1);
  EXPECT_EQ(capped.size(), 4u);
}

TEST(PackFlows, CrossRackFlowsOfFourRacksComeCloseToTheLowerBound) {
  // 16 hosts dealt into 4 racks; all 192 cross-rack flows in host order (what the coordinator's
  // re-measurement passes hand over). Each rack's outbound uplink carries 48 of them, so 48
  // slots is the lower bound; first fit in this order needed 54.
  std::vector<int> groupOf(16);
  for (int h = 0; h < 16; ++h) groupOf[static_cast<size_t>(h)] = (h * 7 + 3) % 16 % 4;
  std::vector<HostPair> flows = crossGroupFlows(groupOf);
  ASSERT_EQ(flows.size(), 192u);
  auto slots = packFlows(flows, groupOf, 4);
  EXPECT_EQ(expectDisjointSlots(slots, groupOf), 192u);
  EXPECT_LE(slots.size(), 51u);
  EXPECT_EQ(packFlows(flows, groupOf, 4), slots);  // deterministic
}

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
