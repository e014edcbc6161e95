// Selection is a pure function: override > plan > default > ring, with declines falling back.
#include <gtest/gtest.h>

#include "collectives/selection.h"
#include "common/plan.h"

namespace rankmap::coll {
namespace {

Request req(Collective c, uint64_t count, int n, DataType t = DataType::kFloat32) {
  Request r;
  r.collective = c;
  r.count = count;
  r.type = t;
  r.worldSize = n;
  return r;
}

Capabilities caps(int n, std::vector<std::vector<int>> groups = {}) {
  Capabilities c;
  c.worldSize = n;
  c.groups = std::move(groups);
  return c;
}

Plan planWith(const std::string& coll, std::vector<AlgoRange> ranges, int n = 8) {
  std::vector<std::string> hosts;
  for (int i = 0; i < n; ++i) hosts.push_back("h" + std::to_string(i));
  Plan p = Plan::identity(hosts);
  p.collectives[coll] = std::move(ranges);
  p.seal();
  return p;
}

TEST(Selection, DefaultsBySize) {
  EXPECT_EQ(choose(req(Collective::kAllreduce, 16, 8), caps(8), nullptr, {}).algorithm, Algorithm::kRhd);
  EXPECT_EQ(choose(req(Collective::kAllreduce, 1 << 20, 8), caps(8), nullptr, {}).algorithm, Algorithm::kRing);
  EXPECT_EQ(choose(req(Collective::kAllgather, 16, 8), caps(8), nullptr, {}).algorithm, Algorithm::kRhd);
  EXPECT_EQ(choose(req(Collective::kAllgather, 16, 6), caps(6), nullptr, {}).algorithm, Algorithm::kRing);
  EXPECT_EQ(choose(req(Collective::kBroadcast, 16, 6), caps(6), nullptr, {}).algorithm, Algorithm::kTree);
  EXPECT_EQ(choose(req(Collective::kBroadcast, 1 << 20, 6), caps(6), nullptr, {}).algorithm, Algorithm::kRing);
  auto b = choose(req(Collective::kBarrier, 0, 6), caps(6), nullptr, Overrides{Algorithm::kRing});
  EXPECT_EQ(b.algorithm, Algorithm::kDissemination);
  EXPECT_FALSE(b.fellBack);
}

TEST(Selection, AllgatherBytesAreTheWholeBuffer) {
  // nccl-tests convention: allgather size = count * n * element size.
  EXPECT_EQ(req(Collective::kAllgather, 100, 8).bytes(), 100u * 8 * 4);
  EXPECT_EQ(req(Collective::kAllreduce, 100, 8).bytes(), 100u * 4);
}

TEST(Selection, PlanRangesChooseAndDeclinesFallBack) {
  Plan p = planWith("allreduce", {AlgoRange{0, 4096, Algorithm::kTree, 0, 0, 0},
                                  AlgoRange{4096, AlgoRange::kUnbounded, Algorithm::kHier, 0, 0, 0}});
  auto small = choose(req(Collective::kAllreduce, 100, 8), caps(8), &p, {});
  EXPECT_EQ(small.algorithm, Algorithm::kTree);
  EXPECT_EQ(small.source, "plan");
  EXPECT_FALSE(small.fellBack);
  // hier without groups declines: the default (ring at this size) runs, counted as a fallback.
  auto big = choose(req(Collective::kAllreduce, 1 << 20, 8), caps(8), &p, {});
  EXPECT_EQ(big.algorithm, Algorithm::kRing);
  EXPECT_TRUE(big.fellBack);
  ASSERT_EQ(big.declined.size(), 1u);
  EXPECT_NE(big.declined[0].find("hier"), std::string::npos);
  // ... and with equal groups it runs.
  auto grouped = choose(req(Collective::kAllreduce, 1 << 20, 8),
                        caps(8, {{0, 1, 2, 3}, {4, 5, 6, 7}}), &p, {});
  EXPECT_EQ(grouped.algorithm, Algorithm::kHier);
  // A plan without an entry for the collective: defaults, no fallback.
  auto ag = choose(req(Collective::kAllgather, 1 << 20, 8), caps(8), &p, {});
  EXPECT_EQ(ag.source, "default");
  EXPECT_FALSE(ag.fellBack);
}

TEST(Selection, OverrideBeatsPlanAndFallsBackWhenDeclined) {
  Plan p = planWith("allreduce", {AlgoRange{0, AlgoRange::kUnbounded, Algorithm::kTree, 0, 0, 0}});
  auto s = choose(req(Collective::kAllreduce, 100, 8), caps(8), &p, Overrides{Algorithm::kRing});
  EXPECT_EQ(s.algorithm, Algorithm::kRing);
  EXPECT_EQ(s.source, "override");
  auto d = choose(req(Collective::kAllgather, 100, 6), caps(6), &p, Overrides{Algorithm::kRhd});
  EXPECT_EQ(d.algorithm, Algorithm::kRing);  // rhd allgather needs a power of two
  EXPECT_TRUE(d.fellBack);
  auto t = choose(req(Collective::kAllreduce, 100, 8), caps(8), nullptr, Overrides{Algorithm::kTrees});
  EXPECT_TRUE(t.fellBack);
  EXPECT_NE(t.algorithm, Algorithm::kTrees);
}

}  // namespace
}  // namespace rankmap::coll
