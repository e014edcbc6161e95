// The one max-min solver: textbook cases, caps and unlimited links, and the defining property
// of max-min fairness checked on random instances.
#include "common/maxmin.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace rankmap {
namespace {

FlowLinks paths(const std::vector<std::vector<uint32_t>>& p) {
  FlowLinks out;
  for (const auto& f : p) {
    for (uint32_t l : f) out.push(l);
    out.endFlow();
  }
  return out;
}

TEST(MaxMin, EqualSharesOnOneLink) {
  auto r = maxMinFill(std::vector<double>{30}, paths({{0}, {0}, {0}}));
  EXPECT_EQ(r, (std::vector<double>{10, 10, 10}));
}

TEST(MaxMin, LeftoverGoesToTheUnconstrained) {
  // Link 0 (10) carries flows 0 and 1; link 1 (20) carries flows 1 and 2.
  auto r = maxMinFill(std::vector<double>{10, 20}, paths({{0}, {0, 1}, {1}}));
  EXPECT_DOUBLE_EQ(r[0], 5);
  EXPECT_DOUBLE_EQ(r[1], 5);
  EXPECT_DOUBLE_EQ(r[2], 15);
}

TEST(MaxMin, CapsUnlimitedLinksAndEmptyPaths) {
  std::vector<double> room{10, kUnlimitedRate};
  auto r = maxMinFill(room, paths({{0}, {0}, {1}, {}}),
                      std::vector<double>{2, kUnlimitedRate, 7, kUnlimitedRate});
  EXPECT_DOUBLE_EQ(r[0], 2);        // its cap
  EXPECT_DOUBLE_EQ(r[1], 8);        // the rest of link 0
  EXPECT_DOUBLE_EQ(r[2], 7);        // an unlimited link: only its cap
  EXPECT_EQ(r[3], kUnlimitedRate);  // crosses nothing, no cap
  r = maxMinFill(room, paths({{1}}));
  EXPECT_EQ(r[0], kUnlimitedRate);
  r = maxMinFill(std::vector<double>{0}, paths({{0}, {0}}));
  EXPECT_EQ(r, (std::vector<double>{0, 0}));
  EXPECT_TRUE(maxMinFill(room, paths({})).empty());
}

// Max-min fairness: the rates fit every link and cap, and every flow is either at its cap or
// crosses a saturated link on which no flow is faster (its bottleneck).
TEST(MaxMin, RandomInstancesAreMaxMinFair) {
  std::mt19937 rng(7);
  MaxMinFiller filler;
  std::vector<double> rate;
  for (int trial = 0; trial < 500; ++trial) {
    size_t links = 1 + rng() % 12, flows = rng() % 20;
    std::vector<double> room(links);
    for (auto& c : room) c = rng() % 7 == 0 ? kUnlimitedRate : 1 + rng() % 1000;
    std::vector<std::vector<uint32_t>> p(flows);
    std::vector<double> cap(flows, kUnlimitedRate);
    for (size_t f = 0; f < flows; ++f) {
      for (uint32_t l = 0; l < links; ++l)
        if (rng() % 3 == 0) p[f].push_back(l);
      if (rng() % 4 == 0) cap[f] = 1 + rng() % 500;
    }
    FlowLinks fl = paths(p);
    filler.fill(room, fl, cap, rate);
    ASSERT_EQ(rate.size(), flows);
    std::vector<double> load(links, 0);
    for (size_t f = 0; f < flows; ++f)
      if (std::isfinite(rate[f]))
        for (uint32_t l : p[f]) load[l] += rate[f];
    for (size_t l = 0; l < links; ++l)
      EXPECT_LE(load[l], room[l] * (1 + 1e-9) + 1e-9) << "trial " << trial << " link " << l;
    for (size_t f = 0; f < flows; ++f) {
      EXPECT_LE(rate[f], cap[f] * (1 + 1e-12)) << "trial " << trial;
      if (std::abs(rate[f] - cap[f]) <= 1e-9 * cap[f]) continue;
      bool finiteLink = false;
      for (uint32_t l : p[f]) finiteLink = finiteLink || std::isfinite(room[l]);
      if (!finiteLink) {
        EXPECT_EQ(rate[f], kUnlimitedRate) << "trial " << trial;
        continue;
      }
      bool bottleneck = false;
      for (uint32_t l : p[f]) {
        if (!std::isfinite(room[l]) || load[l] < room[l] * (1 - 1e-9)) continue;
        bool fastest = true;
        for (size_t g = 0; g < flows; ++g)
          for (uint32_t k : p[g])
            if (k == l && rate[g] > rate[f] * (1 + 1e-9)) fastest = false;
        bottleneck = bottleneck || fastest;
      }
      EXPECT_TRUE(bottleneck) << "trial " << trial << " flow " << f << " rate " << rate[f];
    }
  }
}

}  // namespace
}  // namespace rankmap
