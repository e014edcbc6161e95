// The simulated datacenter: structure, oversubscribed capacities, max-min sharing of concurrent
// flows, dead and slow hosts, changes between calls, bounded noise, latency tiers, determinism,
// bad specs; and the simulated fleet's clock (SimTiming) on shared cores and on machines of the
// agents' own.
#include "tests/sim/datacenter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "tests/sim/sim_fleet.h"

namespace rankmap::sim {
namespace {

DatacenterSpec quiet() {
  DatacenterSpec s;
  s.pods = 2;
  s.racksPerPod = 2;
  s.hostsPerRack = {8};
  s.hostMbps = 100;
  s.rackOversubscription = 4;  // rack uplink 8 * 100 / 4 = 200
  s.podOversubscription = 2;   // pod uplink 2 * 200 / 2 = 200
  s.noise = 0;
  return s;
}

TEST(Datacenter, UnequalRacksInPods) {
  DatacenterSpec s = quiet();
  s.hostsPerRack = {4, 3};
  Datacenter dc(s);
  EXPECT_EQ(dc.hosts(), 14u);
  EXPECT_EQ(dc.racks(), 4);
  EXPECT_EQ(dc.rackOf(3), 0);
  EXPECT_EQ(dc.rackOf(4), 1);
  EXPECT_EQ(dc.rackOf(7), 2);
  EXPECT_EQ(dc.podOf(6), 0);
  EXPECT_EQ(dc.podOf(7), 1);
  EXPECT_DOUBLE_EQ(dc.rackUplinkMbps(0), 100);  // 4 * 100 / 4
  EXPECT_DOUBLE_EQ(dc.rackUplinkMbps(1), 75);
  EXPECT_DOUBLE_EQ(dc.podUplinkMbps(0), 87.5);  // (100 + 75) / 2
}

// The emulated cloud's shape: VMs dealt to racks by a permutation, uplinks at a given rate.
TEST(Datacenter, PlacedHostsAndGivenUplinks) {
  DatacenterSpec s = quiet();
  s.pods = 1;
  s.racksPerPod = 2;
  s.rackOfHost = {1, 0, 0, 1, 1};
  s.rackUplinkMbps = 25;
  Datacenter dc(s);
  EXPECT_EQ(dc.hosts(), 5u);
  EXPECT_EQ(dc.rackOf(0), 1);
  EXPECT_EQ(dc.rackOf(2), 0);
  EXPECT_DOUBLE_EQ(dc.rackUplinkMbps(0), 25);
  EXPECT_DOUBLE_EQ(dc.rackUplinkMbps(1), 25);
  EXPECT_DOUBLE_EQ(*dc.measure({{1, 2}})[0], 100);  // rack 0 inside
  EXPECT_DOUBLE_EQ(*dc.measure({{0, 1}})[0], 25);   // across the uplinks
  s.rackOfHost = {0, 0, 0};
  EXPECT_THROW(Datacenter{s}, InvalidInput);  // rack 1 empty
  s.rackOfHost = {0, 2};
  EXPECT_THROW(Datacenter{s}, InvalidInput);  // no rack 2
}

TEST(Datacenter, ConcurrentFlowsShareTheUplinksTheyCross) {
  Datacenter dc(quiet());
  EXPECT_DOUBLE_EQ(*dc.measure({{0, 1}})[0], 100);  // inside a rack: the host link
  // Two flows out of rack 0 into rack 1 (same pod): the 200 uplink holds both at host rate.
  auto r = dc.measure({{0, 8}, {1, 9}});
  EXPECT_DOUBLE_EQ(*r[0], 100);
  EXPECT_DOUBLE_EQ(*r[1], 100);
  // Four: 50 each.
  r = dc.measure({{0, 8}, {1, 9}, {2, 10}, {3, 11}});
  for (auto& v : r) EXPECT_DOUBLE_EQ(*v, 50);
  // Eight flows from pod 0 (racks 0, 1) to pod 1: the pod uplink, 200 / 8 each.
  std::vector<std::pair<int, int>> cross;
  for (int i = 0; i < 4; ++i) cross.push_back({i, 16 + i});
  for (int i = 0; i < 4; ++i) cross.push_back({8 + i, 24 + i});
  r = dc.measure(cross);
  for (auto& v : r) EXPECT_DOUBLE_EQ(*v, 25);
  // A host sending two flows splits its own link.
  r = dc.measure({{0, 1}, {0, 2}});
  EXPECT_DOUBLE_EQ(*r[0], 50);
}

// Round trips under load wait in the queue of every link the flows fill, both ways, and only
// there: 128 KiB at a 200 Mbit/s uplink is 5.2 ms, half of it at least (the sawtooth).
TEST(Datacenter, LoadedRoundTripsWaitAtFullLinksOnly) {
  Datacenter dc(quiet());
  const double idleInside = 2 * dc.oneWayUs(0, 2), idleAcross = 2 * dc.oneWayUs(0, 9);
  const double rackQueueUs = 128.0 * 1024 * 8 / 200;
  // Four flows out of rack 0 fill its 200 Mbit/s uplink (and rack 1's downlink).
  std::vector<std::pair<int, int>> flows = {{0, 8}, {1, 9}, {2, 10}, {3, 11}};
  auto us = dc.loadedRttUs(flows, {{0, 4}, {0, 9}, {4, 12}, {0, 16}, {0, 0}});
  EXPECT_DOUBLE_EQ(*us[0], idleInside);                   // inside rack 0: no full link
  EXPECT_GE(*us[1], idleAcross + 2 * 0.5 * rackQueueUs);  // rack 0 up, rack 1 down
  EXPECT_LE(*us[1], idleAcross + 2 * rackQueueUs);
  // From rack 0's host 4, which sends nothing: the queues are first in, first out, so it waits
  // as long.
  EXPECT_GE(*us[2], idleAcross + 2 * 0.5 * rackQueueUs);
  EXPECT_GE(*us[3], 2 * dc.oneWayUs(0, 16) + 0.5 * rackQueueUs);  // rack 0 up, once
  EXPECT_TRUE(us[4]);
  // One flow fills no uplink: across, no wait.
  us = dc.loadedRttUs({{0, 8}}, {{4, 12}});
  EXPECT_DOUBLE_EQ(*us[0], idleAcross);
  // A flow at its host rate fills its host link: every round trip of that host waits there.
  us = dc.loadedRttUs({{0, 1}}, {{0, 2}});
  EXPECT_GE(*us[0], idleInside + 0.5 * 128.0 * 1024 * 8 / 100);
  // A dead end reads nothing.
  DatacenterSpec spec = quiet();
  spec.deadHosts = {5};
  Datacenter withDead(spec);
  EXPECT_FALSE(withDead.loadedRttUs({{0, 8}}, {{0, 5}})[0]);
}

TEST(Datacenter, DeadAndSlowHosts) {
  DatacenterSpec s = quiet();
  s.deadHosts = {5};
  s.slowHosts = {{6, 0.25}};
  Datacenter dc(s);
  EXPECT_FALSE(dc.alive(5));
  auto r = dc.measure({{0, 5}, {0, 6}, {1, 2}});
  EXPECT_FALSE(r[0]);
  EXPECT_DOUBLE_EQ(*r[1], 25);
  EXPECT_DOUBLE_EQ(*r[2], 100);
  EXPECT_FALSE(dc.rttUs(5, 0));
}

TEST(Datacenter, ChangesBetweenCalls) {
  Datacenter dc(quiet());
  // Rack 0's uplink halved: four flows out of it share 100.
  dc.setRackUplinkMbps(0, 100);
  EXPECT_DOUBLE_EQ(dc.rackUplinkMbps(0), 100);
  auto r = dc.measure({{0, 8}, {1, 9}, {2, 10}, {3, 11}});
  for (auto& v : r) EXPECT_DOUBLE_EQ(*v, 25);
  // Host 3 dies and comes back.
  dc.setAlive(3, false);
  EXPECT_FALSE(dc.measure({{0, 3}})[0]);
  dc.setAlive(3, true);
  EXPECT_DOUBLE_EQ(*dc.measure({{0, 3}})[0], 100);
  // Host 3 moves to pod 1: a round trip from rack 0 now crosses the core.
  double before = *dc.rttUs(0, 3);
  dc.moveHost(3, 2);
  EXPECT_EQ(dc.rackOf(3), 2);
  EXPECT_EQ(dc.podOf(3), 1);
  EXPECT_GT(*dc.rttUs(0, 3), 3 * before);
  EXPECT_THROW(dc.moveHost(3, 4), InvalidInput);
  EXPECT_THROW(dc.setAlive(32, true), InvalidInput);
  EXPECT_THROW(dc.setRackUplinkMbps(0, 0), InvalidInput);
}

TEST(Datacenter, NoiseIsBoundedAndDeterministic) {
  DatacenterSpec s = quiet();
  s.noise = 0.1;
  Datacenter a(s), b(s);
  bool varied = false;
  double first = 0;
  for (int i = 0; i < 200; ++i) {
    double v = *a.measure({{0, 1}})[0];
    EXPECT_GE(v, 90);
    EXPECT_LE(v, 110);
    EXPECT_EQ(v, *b.measure({{0, 1}})[0]);  // same spec, same calls, same readings
    if (i == 0) first = v;
    varied = varied || v != first;
  }
  EXPECT_TRUE(varied);
}

TEST(Datacenter, LatencyGrowsWithTheTiersCrossed) {
  Datacenter dc(quiet());
  double rack = *dc.rttUs(0, 1), pod = *dc.rttUs(0, 8), core = *dc.rttUs(0, 16);
  EXPECT_DOUBLE_EQ(rack, 20);   // 2 x (5 + 5)
  EXPECT_DOUBLE_EQ(pod, 60);    // 2 x (10 + 20)
  EXPECT_DOUBLE_EQ(core, 140);  // 2 x (10 + 20 + 40)
}

TEST(Datacenter, BackgroundTenantsTakeTheirShare) {
  DatacenterSpec s = quiet();
  s.backgroundFlows = 64;
  Datacenter busy(s), idle(quiet());
  double lost = 0;
  for (int a = 0; a < 8; ++a) {
    EXPECT_LE(busy.aloneMbps(a, 16 + a), idle.aloneMbps(a, 16 + a) + 1e-9);
    lost += idle.aloneMbps(a, 16 + a) - busy.aloneMbps(a, 16 + a);
  }
  EXPECT_GT(lost, 0);
}

TEST(Datacenter, ThousandsOfHosts) {
  DatacenterSpec s;  // 4 pods x 8 racks x 32 = 1024 hosts
  s.pods = 16;       // 4096
  s.deadHosts = {0, 1000, 4095};
  s.backgroundFlows = 256;
  Datacenter dc(s);
  ASSERT_EQ(dc.hosts(), 4096u);
  std::vector<std::pair<int, int>> round;
  for (int h = 0; h < 4096; h += 2) round.push_back({h, (h + 2049) % 4096});
  auto r = dc.measure(round);
  size_t answered = 0;
  for (auto& v : r) answered += v.has_value();
  EXPECT_EQ(answered, round.size() - 3);  // from 0, from 1000, and 2046 -> 4095
}

// Pods of unequal sizes, thinned and asymmetric uplinks.
TEST(Datacenter, UnequalPodsThinnedAndAsymmetricUplinks) {
  DatacenterSpec s = quiet();
  s.rackOfHost = {0, 0, 1, 1, 2, 2};
  s.rackPod = {0, 0, 1};  // pod 0: racks 0 and 1; pod 1: rack 2
  s.rackUplinkMbps = 100;
  s.thinRacks = {{1, 0.5}};
  s.uplinkDownFactor = 0.8;
  Datacenter dc(s);
  EXPECT_EQ(dc.pods(), 2);
  EXPECT_EQ(dc.podOf(3), 0);
  EXPECT_EQ(dc.podOf(4), 1);
  EXPECT_DOUBLE_EQ(dc.rackUplinkMbps(0), 100);
  EXPECT_DOUBLE_EQ(dc.rackInMbps(0), 80);
  EXPECT_DOUBLE_EQ(dc.rackUplinkMbps(1), 50);  // thinned
  EXPECT_DOUBLE_EQ(dc.rackInMbps(1), 40);
  EXPECT_DOUBLE_EQ(dc.podUplinkMbps(0), 100);  // (100 + 100) / 2: designed, not thinned
  EXPECT_DOUBLE_EQ(dc.podInMbps(0), 80);
  EXPECT_DOUBLE_EQ(*dc.measure({{2, 0}})[0], 50);  // out of the thinned rack
  EXPECT_DOUBLE_EQ(*dc.measure({{0, 2}})[0], 40);  // into it
  s.rackPod = {0, 2, 2};
  EXPECT_THROW(Datacenter{s}, InvalidInput);  // pod 1 empty
  s.rackPod = {0, 0, 1};
  s.thinRacks = {{3, 0.5}};
  EXPECT_THROW(Datacenter{s}, InvalidInput);
  s.thinRacks = {};
  s.uplinkDownFactor = 0;
  EXPECT_THROW(Datacenter{s}, InvalidInput);
}

// VM jitter: a fixed delay per host and a random one per sample, both bounded; the ideal one-way
// latency stays what the tiers say.
TEST(Datacenter, JitterDelaysRoundTripsWithinItsBounds) {
  DatacenterSpec s = quiet();
  s.hostJitterUs = 4;
  s.sampleJitterUs = 2;
  Datacenter dc(s);
  EXPECT_DOUBLE_EQ(dc.oneWayUs(0, 1), 10);
  double lo = 1e9, hi = 0;
  for (int i = 0; i < 500; ++i) {
    double v = *dc.rttUs(0, 1);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, 20);
  EXPECT_LE(hi, 20 + 2 * 4 + 2);
  EXPECT_GT(hi - lo, 1);  // samples vary
  // Another host pair carries other fixed delays: its floor differs.
  double lo2 = 1e9;
  for (int i = 0; i < 500; ++i) lo2 = std::min(lo2, *dc.rttUs(2, 3));
  EXPECT_NE(std::round(lo * 10), std::round(lo2 * 10));
  // Without jitter, readings of a seed are those of a spec without the fields.
  Datacenter plain(quiet()), zero(quiet());
  EXPECT_EQ(*plain.rttUs(0, 8), *zero.rttUs(0, 8));
}

TEST(Datacenter, BadSpecsNameTheField) {
  DatacenterSpec s = quiet();
  s.hostsPerRack = {4, 0};
  EXPECT_THROW(Datacenter{s}, InvalidInput);
  s = quiet();
  s.deadHosts = {99};
  try {
    Datacenter dc(s);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("deadHosts"), std::string::npos) << e.what();
  }
  s = quiet();
  s.rackOversubscription = 0.5;
  EXPECT_THROW(Datacenter{s}, InvalidInput);
}

// A trial's CPU: on shared cores every flow's and round trip's adds up; on machines of their own
// the trial waits for the busiest agent or the coordinator, so many senders cost no more than one.
TEST(SimFleet, OnMachinesOfTheirOwnATrialWaitsForTheBusiestAgent) {
  SimTiming shared;
  shared.agentFlowEndMs = 2;
  shared.agentPingEndMs = 0.5;
  shared.coordinatorRequestMs = 0.1;
  shared.coordinatorPingMs = 0.01;
  SimTiming own = shared;
  own.sharedCores = 0;
  auto trialSeconds = [](const SimTiming& t, const std::vector<probe::HostPair>& flows,
                         const std::vector<probe::HostPair>& pairs) {
    Datacenter dc(quiet());
    SimFleet fleet(dc, t);
    probe::LoadedPings pings;
    pings.pairs = pairs;
    const Deadline d = Deadline::after(std::chrono::seconds(10));
    fleet.bandwidth(flows, probe::BandwidthOptions{}, d, pairs.empty() ? nullptr : &pings);
    return fleet.cost().seconds;
  };
  SimTiming none = shared;  // the rest of the trial: no CPU at all
  none.perFlowMs = 0;
  none.perLoadedPingMs = 0;
  // Four flows out of rack 0; host 0 also pings every other host (31 round trips).
  const std::vector<probe::HostPair> flows = {{0, 8}, {1, 9}, {2, 10}, {3, 11}};
  std::vector<probe::HostPair> pings;
  for (int h = 1; h < 32; ++h) pings.emplace_back(0, h);
  const double base = trialSeconds(none, flows, pings);
  EXPECT_NEAR(trialSeconds(shared, flows, pings) - base, (4 * 1 + 31 * 0.12) / 1000, 1e-9);
  // Host 0: one flow end and 31 round trip ends; the coordinator: 4 requests.
  EXPECT_NEAR(trialSeconds(own, flows, pings) - base, (2 + 31 * 0.5) / 1000, 1e-9);
  // Sixteen flows, each host in one: the busiest agent's flow end, against sixteen on two cores.
  std::vector<probe::HostPair> many;
  for (int h = 0; h < 16; ++h) many.emplace_back(h, h + 16);
  const double manyBase = trialSeconds(none, many, {});
  EXPECT_NEAR(trialSeconds(shared, many, {}) - manyBase, 16 * 1.0 / 1000, 1e-9);
  EXPECT_NEAR(trialSeconds(own, many, {}) - manyBase, 2.0 / 1000, 1e-9);
  // Four shared cores take half the time of two.
  SimTiming four = shared;
  four.sharedCores = 4;
  EXPECT_NEAR(trialSeconds(four, many, {}) - manyBase, 8 * 1.0 / 1000, 1e-9);
  // A coordinator slower than any agent bounds the trial.
  own.coordinatorRequestMs = 1;
  EXPECT_NEAR(trialSeconds(own, many, {}) - manyBase, 16.0 / 1000, 1e-9);
  own.coordinatorRequestMs = 5;
  EXPECT_NEAR(trialSeconds(own, flows, pings) - base, (4 * 5 + 31 * 0.01) / 1000, 1e-9);
}

// On machines of their own, a pinger's reply also waits for its loaded round trips: three rounds
// from 0.4 of its window, each as long as its slowest Pong, at most to the transfer's end. One
// flow fills a 10 Mbit/s uplink (its window 150 ms, then 105 ms to drain its 128 KiB queue); its
// sender's round trips across that uplink wait ~105 ms each, so its reply comes after ~375 ms.
TEST(SimFleet, OnMachinesOfTheirOwnLoadedRoundTripsWaitInTheQueuesTheyCross) {
  DatacenterSpec spec = quiet();
  spec.hostMbps = 10;
  spec.rackOversubscription = 8;  // rack uplink 8 * 10 / 8 = 10
  SimTiming own;
  own.sharedCores = 0;
  own.agentFlowEndMs = own.agentPingEndMs = own.coordinatorRequestMs = own.coordinatorPingMs = 0;
  SimTiming shared = own;
  shared.sharedCores = 2;
  shared.perFlowMs = shared.perLoadedPingMs = 0;
  const std::vector<probe::HostPair> flows = {{0, 8}};
  probe::LoadedPings pings;
  for (int h = 8; h < 16; ++h) pings.pairs.emplace_back(0, h);
  auto seconds = [&](const SimTiming& t) {
    Datacenter dc(spec);
    SimFleet fleet(dc, t);
    fleet.bandwidth(flows, probe::BandwidthOptions{}, Deadline::after(std::chrono::seconds(10)),
                    &pings);
    return fleet.cost().seconds;
  };
  const double sharedS = seconds(shared);
  const double ownS = seconds(own);
  double slowestUs = 0;
  for (const auto& us : pings.us) slowestUs = std::max(slowestUs, us.value_or(0.0));
  ASSERT_GT(slowestUs, 100000);  // the queue: 128 KiB at 10 Mbit/s
  const double windowMs = 150, flowEndMs = windowMs + 128.0 * 1024 / (10e6 / 8 / 1000);
  const double pingEndMs = std::min(0.4 * windowMs + 3 * slowestUs / 1000, 2 * windowMs + 100);
  EXPECT_NEAR(ownS - sharedS, (pingEndMs - flowEndMs) / 1000, 1e-9);
}

}  // namespace
}  // namespace rankmap::sim
