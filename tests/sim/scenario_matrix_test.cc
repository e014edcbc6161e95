// The scenario matrix at 1024 simulated hosts (tests/sim/scenario.h), three seeds each, provider
// order shuffled, ±10% noise, 3 dead hosts: what holds in every scenario, whatever the structure
// found. The plan is never slower than the provider's order beyond 2% (the ring checks keep it
// from an order a measurement does not support), its prediction is within 10% of its time on the
// true network, and every dead host is named. The structure finds the racks in every scenario here
// (close latency tiers at 1:1.5 by round trips without each host's offset), and the plan is within
// 5% of the optimum (issue 43's target), with no more levels than the network has, and the round
// takes at most 60 simulated seconds. What the structure finds and costs in each scenario,
// against the targets, is in docs/performance.md ("Scale: scenario matrix"), from
// `probe_scale_bench --scenario`.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/sim/scenario.h"

namespace rankmap::sim {
namespace {

struct Case {
  const char* name;
  std::vector<std::string> settings;
  // Bandwidth flows per host at most (0: not asserted). Racks 1:4 and 1:8 under pods 1:2 show
  // two slow bands in the search's first trial and find the pods in about 6 trials (31-34 flows
  // per host over the round; 42-55 when flows between racks of a pod decided nothing). Racks 1:8
  // under pods 1:1 and six thinned uplinks: a loaded search ends after trials that join nothing
  // (probe/structure.cc, kLoadedJoinlessTrials); before, it went on deciding stray hosts apart,
  // a flow per host and trial (seed 3: 22.3; thinned, seed 1: 50.7). Six thinned uplinks with
  // tenants' flows: also after two trials whose flows tested almost no open pair
  // (kLoadedLowYield; 42.1-48.6 before).
  double maxFlowsPerHost = 0;
  // Rack ARI at least (0: not asserted). Slow hosts stand by once their own link shows as what
  // limits them (probe/structure.cc, kSelfFullRatio); before, each split off its rack at every
  // level (ARI 0.89, 40-54 flows per host).
  double minRackAri = 0;
  // Share of host pairs whose stated rate is within 10% of the true one, at least (0: not
  // asserted). Slow hosts: a rack's uplink loaded only by a lone slow host (or a group too small
  // to fill it) in the load trials is loaded again by a larger group (probe/links.cc); before, it
  // was stated at that host's rate, 95-99% low (0.71-0.91 of the pairs within 10%).
  double minPairsWithin10 = 0;
};

const Case kCases[] = {
    {"flat_1_2", {"rack_over=2"}},
    {"flat_1_3", {"rack_over=3"}},
    {"flat_1_4", {"rack_over=4"}, 35},
    {"flat_1_8", {"rack_over=8"}, 35},
    {"close_tiers", {"rack_over=1.5", "pod_over=1.5", "rack_us=3", "pod_us=4", "jitter_us=5"}},
    {"unequal", {"rack_sizes=1,48,7,33,16,2,40,24", "racks_per_pod=3,9,5,13"}},
    {"slow_hosts", {"slow=0.1", "slow_factor=0.4"}, 32, 0.98, 0.95},
    {"thinned_and_tenants", {"thin=6", "background=2048"}, 32},
    {"racks_1_8_pods_1_1", {"rack_over=8", "pod_over=1"}, 20},
    {"racks_of_2", {"rack_sizes=2", "rack_over=2"}},
};

class ScenarioMatrix : public ::testing::TestWithParam<std::tuple<size_t, int>> {};

TEST_P(ScenarioMatrix, NeverSlowerThanTheProviderAndPredictedWithinTenPercent) {
  const auto& c = kCases[std::get<0>(GetParam())];
  std::vector<std::string> settings = c.settings;
  settings.push_back("hosts=1024");
  settings.push_back("seed=" + std::to_string(std::get<1>(GetParam())));
  const Json j = runScenario(Scenario::parse(settings)).json;
  std::printf("%s %s\n", c.name, j.dump().c_str());
  const double plan = j["plan_true_ms"], provider = j["provider_ms"],
               predicted = j["plan_predicted_ms"];
  EXPECT_LE(plan, 1.02 * provider) << j.dump();
  EXPECT_LE(std::abs(predicted / plan - 1), 0.10) << j.dump();
  EXPECT_EQ(j["dead_found"], 3) << j.dump();
  EXPECT_LE(plan, 1.05 * static_cast<double>(j["optimum_ms"])) << j.dump();
  // Every scenario's network has two levels (racks, pods). A third was the racks found twice:
  // the search inside the racks found split a few (a small rack merged into its neighbour) and
  // stated that as a level; it now corrects the racks (probe/structure.cc).
  EXPECT_LE(static_cast<int>(j["levels"]), 2) << j.dump();
  // Issue 43's round time at 1024 hosts, each agent on a machine of its own (agent_cores=0; on the
  // emulated cloud's two shared cores half of these rounds would take 61-88 s).
  EXPECT_LE(static_cast<double>(j["sim_s"]), 60) << j.dump();
  if (c.maxFlowsPerHost > 0) {
    EXPECT_LE(static_cast<double>(j["flows_per_host"]), c.maxFlowsPerHost) << j.dump();
  }
  if (c.minRackAri > 0) {
    EXPECT_GE(static_cast<double>(j["rack_ari"]), c.minRackAri) << j.dump();
  }
  if (c.minPairsWithin10 > 0) {
    EXPECT_GE(static_cast<double>(j["pairs_within_10pct"]), c.minPairsWithin10) << j.dump();
  }
  RecordProperty("plan_over_optimum", std::to_string(plan / static_cast<double>(j["optimum_ms"])));
}

INSTANTIATE_TEST_SUITE_P(Hosts1024, ScenarioMatrix,
                         ::testing::Combine(::testing::Range<size_t>(0, std::size(kCases)),
                                            ::testing::Values(1, 2, 3)),
                         [](const auto& info) {
                           return std::string(kCases[std::get<0>(info.param)].name) + "_seed" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Racks of two behind uplinks of one host's rate, where one rack split costs the ring half its
// rate (1.86x the optimum). Seed 8: a host of two racks read like a slow one and stood by, so that
// its rack-mate's uplink was never full and round trips between those two racks and two hosts
// whose rack-mate is dead read near: one group of six, whose ring split both racks; a bystander's
// flow at its host rate now ends its standing by (probe/structure.cc, kBystanderProbes). Seed 17:
// the last racks left read just above the near cut in trials of many round trips, and the trials
// after, too few round trips to judge queues by, were read as "no queues"; they are now read as
// the trial before. Seed 24: the host rate carried into the search inside the pods was the pods'
// top band, and crossing flows within a band of it read near (rateInDoubt): no racks at all.
class RacksOfTwo : public ::testing::TestWithParam<int> {};

TEST_P(RacksOfTwo, EveryPairKeptTogether) {
  const Json j = runScenario(Scenario::parse({"hosts=1024", "seed=" + std::to_string(GetParam()),
                                              "rack_sizes=2", "rack_over=2"}))
                     .json;
  EXPECT_LE(static_cast<double>(j["plan_true_ms"]), 1.05 * static_cast<double>(j["optimum_ms"]))
      << j.dump();
}

INSTANTIATE_TEST_SUITE_P(Seeds, RacksOfTwo, ::testing::Values(8, 17, 24));

// At 4096 hosts (seed 2) one host of a rack of two stood by from the search over all hosts on, as
// in seed 8 above, but its group there had no near reading left open, so no probe freed it: inside
// the pods its rack-mate's uplink was never full, and that rack and two hosts whose rack-mates are
// dead became one group of four, whose ring split the rack (1.53x the optimum). Every bystander
// now sends one flow alone before the search inside the pods, and one at its host rate stands by
// no more (probe/structure.cc, recheckBystanders).
TEST(RacksOfTwoAt4096Hosts, ABystanderIsCheckedBeforeTheSearchInsideThePods) {
  const Json j =
      runScenario(Scenario::parse({"hosts=4096", "seed=2", "rack_sizes=2", "rack_over=2"})).json;
  EXPECT_LE(static_cast<double>(j["plan_true_ms"]), 1.05 * static_cast<double>(j["optimum_ms"]))
      << j.dump();
  EXPECT_GE(static_cast<double>(j["rack_ari"]), 0.999) << j.dump();
}

// At 4096 hosts (seed 3) the search over all hosts joined two pods of 907 and 942 hosts on 6
// trials with a near reading between them against 5 with a far one (between groups that large
// nearly every trial holds both): rack ARI 0.67, 38.6 flows per host, 42.6 requests per host.
// Two groups of 64 hosts or more now join only on twice as many near trials as far ones. The
// plan was then still 1.53x the optimum: four racks had one host in each of two pods, and the
// searches inside the pods left each host alone. Hosts alone in their group whose flows read a
// shared uplink now find their rack-mates by group testing (probe/structure.cc,
// rejoinSplitRacks: 8 hosts, 7 trials).
TEST(RacksOfTwoAt4096Hosts, TwoLargeGroupsJoinOnlyOnTwiceAsManyNearTrials) {
  const Json j =
      runScenario(Scenario::parse({"hosts=4096", "seed=3", "rack_sizes=2", "rack_over=2"})).json;
  EXPECT_LE(static_cast<double>(j["plan_true_ms"]), 1.05 * static_cast<double>(j["optimum_ms"]))
      << j.dump();
  EXPECT_GE(static_cast<double>(j["rack_ari"]), 0.99) << j.dump();
  EXPECT_GE(static_cast<double>(j["pod_ari"]), 0.99) << j.dump();
  EXPECT_LE(static_cast<double>(j["flows_per_host"]), 32) << j.dump();
  EXPECT_LE(static_cast<double>(j["requests"]), 40.0 * 4096) << j.dump();
}

// Six thinned uplinks with 2 x N tenants' flows at 4096 hosts (seed 8): the search inside the pods
// loaded, then read "no queues" from its 7th trial on (its last groups' few round trips), after
// which no loaded-search stop applied, and it ran 3895 flows a trial for 8 more trials with one
// pair of groups left open: 36.1 flows per host, 40.1 requests per host. A search that loaded
// now also ends after three trials that change nothing (probe/structure.cc).
TEST(ThinUplinksAt4096Hosts, ASearchThatStopsLoadingEndsWhenIdle) {
  const Json j =
      runScenario(Scenario::parse({"hosts=4096", "seed=8", "thin=6", "background=8192"})).json;
  EXPECT_LE(static_cast<double>(j["flows_per_host"]), 32) << j.dump();
  EXPECT_LE(static_cast<double>(j["requests"]), 40.0 * 4096) << j.dump();
  EXPECT_LE(static_cast<double>(j["plan_true_ms"]), 1.05 * static_cast<double>(j["optimum_ms"]))
      << j.dump();
}

}  // namespace
}  // namespace rankmap::sim
