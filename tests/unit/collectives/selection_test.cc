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
  EXPECT_EQ(choose(req(Collective::kAllreduce, 16, 8), caps(8), nullptr, {}).algorithm,
            Algorithm::kRhd);
  EXPECT_EQ(choose(req(Collective::kAllreduce, 1 << 20, 8), caps(8), nullptr, {}).algorithm,
            Algorithm::kRing);
  EXPECT_EQ(choose(req(Collective::kAllgather, 16, 8), caps(8), nullptr, {}).algorithm,
            Algorithm::kRhd);
  EXPECT_EQ(choose(req(Collective::kAllgather, 16, 6), caps(6), nullptr, {}).algorithm,
            Algorithm::kRing);
  EXPECT_EQ(choose(req(Collective::kBroadcast, 16, 6), caps(6), nullptr, {}).algorithm,
            Algorithm::kTree);
  EXPECT_EQ(choose(req(Collective::kBroadcast, 1 << 20, 6), caps(6), nullptr, {}).algorithm,
            Algorithm::kRing);
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
  Plan p =
      planWith("allreduce", {AlgoRange{0, 4096, Algorithm::kTree, 0, 0, 0},
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
  // ... and with groups it runs, equal or not, singletons included.
  for (const auto& groups :
       std::vector<std::vector<std::vector<int>>>{{{0, 1, 2, 3}, {4, 5, 6, 7}},
                                                  {{0, 1, 2}, {3, 4, 5, 6}, {7}},
                                                  {{0}, {1, 2, 3, 4, 5, 6, 7}}}) {
    auto grouped = choose(req(Collective::kAllreduce, 1 << 20, 8), caps(8, groups), &p, {});
    EXPECT_EQ(grouped.algorithm, Algorithm::kHier);
    EXPECT_FALSE(grouped.fellBack);
  }
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
  auto t =
      choose(req(Collective::kAllreduce, 100, 8), caps(8), nullptr, Overrides{Algorithm::kTrees});
  EXPECT_TRUE(t.fellBack);
  EXPECT_NE(t.algorithm, Algorithm::kTrees);
  ASSERT_EQ(t.declined.size(), 1u);
  EXPECT_NE(t.declined[0].find("packed trees"), std::string::npos) << t.declined[0];
}

TEST(Selection, PackedTreesRunWhenThePlanHasThem) {
  Plan p =
      planWith("allreduce", {AlgoRange{0, AlgoRange::kUnbounded, Algorithm::kTrees, 0, 0, 0}}, 4);
  Capabilities c = caps(4);
  c.trees = {{0.5, {-1, 0, 0, 0}}, {0.5, {1, -1, 1, 2}}};
  auto s = choose(req(Collective::kAllreduce, 1 << 20, 4), c, &p, {});
  EXPECT_EQ(s.algorithm, Algorithm::kTrees);
  EXPECT_EQ(s.source, "plan");
  EXPECT_FALSE(s.fellBack);
  // Not for other collectives: the plan has no entry there; an override falls back.
  auto ag = choose(req(Collective::kAllgather, 1 << 20, 4), c, &p, Overrides{Algorithm::kTrees});
  EXPECT_TRUE(ag.fellBack);
  EXPECT_EQ(ag.algorithm, Algorithm::kRing);
  // A tree that does not span the ranks declines with the reason.
  c.trees[1].parent = {1, -1, 3, 2};
  auto bad = choose(req(Collective::kAllreduce, 1 << 20, 4), c, &p, {});
  EXPECT_TRUE(bad.fellBack);
  ASSERT_EQ(bad.declined.size(), 1u);
  EXPECT_NE(bad.declined[0].find("not a spanning tree"), std::string::npos) << bad.declined[0];
}

}  // namespace
}  // namespace rankmap::coll
