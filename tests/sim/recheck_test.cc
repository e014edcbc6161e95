// The incremental re-probe (probe/recheck.h) against simulated datacenters: after a full round,
// a check of an unchanged network finds nothing and costs a fraction of the round; a rack whose
// uplink halved is named alone and its re-probe restores the link model; dead, moved and new
// hosts send the caller to a full round.
#include "probe/recheck.h"

#include <gtest/gtest.h>

#include <chrono>

#include "tests/sim/datacenter.h"
#include "tests/sim/sim_fleet.h"

namespace rankmap::sim {
namespace {

Deadline later() { return Deadline::after(std::chrono::minutes(10)); }

// The probe_scale_test datacenter: 1024 hosts, 32 racks of 32 in 4 pods, 1:4 at the rack, 1:2
// at the pod, +-10% noise, 3 dead hosts.
DatacenterSpec hosts1024() {
  DatacenterSpec spec;
  spec.pods = 4;
  spec.racksPerPod = 8;
  spec.hostsPerRack = {32};
  spec.rackOversubscription = 4;
  spec.podOversubscription = 2;
  spec.noise = 0.1;
  spec.deadHosts = {7, 500, 1001};
  return spec;
}

// The emulated cloud's shape: flat round trips, host 100 / rack uplink 25 Mbit/s (one flow
// fills an uplink).
DatacenterSpec thinUplinks() {
  DatacenterSpec spec;
  spec.pods = 1;
  spec.racksPerPod = 8;
  spec.hostsPerRack = {8};
  spec.hostMbps = 100;
  spec.rackOversubscription = 32;
  spec.podOversubscription = 1;
  spec.rackLatencyUs = 0;
  spec.podLatencyUs = 0;
  spec.noise = 0.05;
  return spec;
}

struct World {
  explicit World(const DatacenterSpec& spec) : dc(spec), fleet(dc) {
    round = probe::runRound(fleet, opts, later());
  }
  probe::RecheckOutcome check(const Topology& t) {
    return probe::runRecheck(fleet, t, {}, opts, later());
  }
  // Index of the topology's innermost group that holds `host`.
  int rackGroup(int host) const {
    const auto& groups = round.topology.groups[0].groups;
    for (size_t g = 0; g < groups.size(); ++g)
      for (const auto& name : groups[g])
        if (name == fleet.host(host).name) return static_cast<int>(g);
    return -1;
  }
  Datacenter dc;
  SimFleet fleet;
  probe::RoundOptions opts;
  probe::RoundOutcome round;
};

void print(const char* what, const probe::FleetCost& c, size_t hosts) {
  std::printf("%s: %llu flows (%.2f per host) in %llu trials, %llu pings, %.2f simulated s\n", what,
              static_cast<unsigned long long>(c.bandwidthFlows),
              static_cast<double>(c.bandwidthFlows) / static_cast<double>(hosts),
              static_cast<unsigned long long>(c.trials),
              static_cast<unsigned long long>(c.latencyPairs), c.seconds);
}

// No dead hosts here: a liveness check that waits for silent hosts costs the simulator's
// deadHostMs (2 s), as it costs the round (HalvedRackUplinkIsNamedAndRepaired has them).
TEST(Recheck, UnchangedNetworkAtAFractionOfARound) {
  DatacenterSpec spec = hosts1024();
  spec.deadHosts.clear();
  World w(spec);
  const size_t n = w.dc.hosts();
  auto c = w.check(w.round.topology);
  EXPECT_EQ(c.result.verdict, probe::RecheckVerdict::Unchanged) << c.result.reason;
  EXPECT_TRUE(c.result.changed.empty());
  EXPECT_TRUE(c.deadHosts.empty());
  // Host links: one flow per host; uplinks: kLoadMargin x capacity / host rate per group and
  // level (12 per rack, 48 per pod here) -- O(groups + c N) with c < 2.
  EXPECT_LE(c.cost.bandwidthFlows, 2 * n);
  EXPECT_LE(c.cost.trials, 3u);  // host links, racks, pods
  EXPECT_LE(c.cost.bandwidthFlows, w.round.cost.bandwidthFlows / 3);
  EXPECT_LE(c.cost.seconds, w.round.cost.seconds / 3);  // 3 trials of the round's 9
  print("full round", w.round.cost, n);
  print("check", c.cost, n);
}

TEST(Recheck, HalvedRackUplinkIsNamedAndRepaired) {
  World w(hosts1024());
  const size_t n = w.dc.hosts();
  const int rack = 5;
  const double truth = w.dc.rackUplinkMbps(rack) / 2;
  w.dc.setRackUplinkMbps(rack, truth);
  auto c = w.check(w.round.topology);
  ASSERT_EQ(c.result.verdict, probe::RecheckVerdict::Groups) << c.result.reason;
  EXPECT_TRUE(c.result.hostsInPlace);
  const int g = w.rackGroup(rack * 32);
  ASSERT_EQ(c.result.groups.size(), 1u) << fmt::format("{}", fmt::join(c.result.names, ", "));
  EXPECT_EQ(c.result.groups[0], (probe::GroupChange{0, g, false, true}));
  EXPECT_NEAR(c.result.maxChange, 0.5, 0.1);

  auto r = probe::runRepair(w.fleet, w.round.topology, c.result.groups, w.opts, later());
  EXPECT_TRUE(r.deadHosts.empty());
  const auto& up = r.topology.links->uplinks[0][static_cast<size_t>(g)];
  EXPECT_NEAR(up.outMbps, truth, 0.1 * truth);
  EXPECT_NEAR(up.inMbps, truth, 0.1 * truth);
  // Everything else kept: the other racks' uplinks and every host link.
  for (size_t k = 0; k < r.topology.links->uplinks[0].size(); ++k) {
    if (k == static_cast<size_t>(g)) continue;
    EXPECT_EQ(r.topology.links->uplinks[0][k], w.round.topology.links->uplinks[0][k]) << k;
  }
  EXPECT_EQ(r.topology.links->hosts, w.round.topology.links->hosts);
  EXPECT_EQ(r.topology.groups, w.round.topology.groups);
  EXPECT_LE(r.cost.bandwidthFlows, w.round.cost.bandwidthFlows / 20);
  // The check of the repaired topology finds nothing more.
  auto again = w.check(r.topology);
  EXPECT_EQ(again.result.verdict, probe::RecheckVerdict::Unchanged)
      << again.result.reason << fmt::format(" {}", fmt::join(again.result.names, ", "));
  print("full round", w.round.cost, n);
  print("check", c.cost, n);
  print("group re-probe", r.cost, n);
}

TEST(Recheck, ThinUplinkHalvedIsRepairedFromSingleFlows) {
  World w(thinUplinks());
  ASSERT_EQ(w.round.topology.groups.size(), 1u);
  auto quiet = w.check(w.round.topology);
  EXPECT_EQ(quiet.result.verdict, probe::RecheckVerdict::Unchanged) << quiet.result.reason;
  const int rack = 3;
  w.dc.setRackUplinkMbps(rack, 12.5);
  auto c = w.check(w.round.topology);
  ASSERT_EQ(c.result.verdict, probe::RecheckVerdict::Groups) << c.result.reason;
  const int g = w.rackGroup(rack * 8);
  ASSERT_EQ(c.result.groups.size(), 1u) << fmt::format("{}", fmt::join(c.result.names, ", "));
  EXPECT_EQ(c.result.groups[0], (probe::GroupChange{0, g, false, true}));
  auto r = probe::runRepair(w.fleet, w.round.topology, c.result.groups, w.opts, later());
  const auto& up = r.topology.links->uplinks[0][static_cast<size_t>(g)];
  EXPECT_NEAR(up.outMbps, 12.5, 1.25);
  EXPECT_NEAR(up.inMbps, 12.5, 1.25);
  // Pairs across that uplink now read its capacity, measured or inferred.
  for (int b = 0; b < 64; ++b) {
    if (b / 8 == rack) continue;
    auto v = r.topology.bandwidthMbps.at(static_cast<size_t>(rack * 8), static_cast<size_t>(b));
    ASSERT_TRUE(v.has_value());
    EXPECT_NEAR(*v, 12.5, 1.5) << b;
  }
  EXPECT_EQ(w.check(r.topology).result.verdict, probe::RecheckVerdict::Unchanged);
  EXPECT_NO_THROW(Topology::parse(r.topology.dump(), "repaired"));  // a valid document
}

TEST(Recheck, DeadMovedAndNewHostsNeedAFullRound) {
  World w(hosts1024());
  // A host that moved to a rack of another pod: its group-mates' round trips show it.
  w.dc.moveHost(200, 20);
  auto moved = w.check(w.round.topology);
  EXPECT_EQ(moved.result.verdict, probe::RecheckVerdict::Full);
  EXPECT_EQ(moved.result.movedHosts, std::vector<int>{200}) << moved.result.reason;
  EXPECT_FALSE(moved.result.hostsInPlace);
  w.dc.moveHost(200, 6);
  EXPECT_EQ(w.check(w.round.topology).result.verdict, probe::RecheckVerdict::Unchanged);
  // A host that died.
  w.dc.setAlive(300, false);
  auto dead = w.check(w.round.topology);
  EXPECT_EQ(dead.result.verdict, probe::RecheckVerdict::Full);
  EXPECT_NE(dead.result.reason.find("h0300"), std::string::npos) << dead.result.reason;
  EXPECT_EQ(dead.deadHosts, std::vector<std::string>{"h0300"});
  EXPECT_FALSE(dead.result.hostsInPlace);
  w.dc.setAlive(300, true);
  // A host out of the topology (dead at the round) that answers now.
  w.dc.setAlive(7, true);
  auto joined = w.check(w.round.topology);
  EXPECT_EQ(joined.result.verdict, probe::RecheckVerdict::Full);
  EXPECT_NE(joined.result.reason.find("h0007"), std::string::npos) << joined.result.reason;
  EXPECT_FALSE(joined.result.hostsInPlace);
  // Many racks changed at once: not confined to a few groups.
  w.dc.setAlive(7, false);
  for (int r = 0; r < 8; ++r) w.dc.setRackUplinkMbps(r, w.dc.rackUplinkMbps(r) / 2);
  auto many = w.check(w.round.topology);
  EXPECT_EQ(many.result.verdict, probe::RecheckVerdict::Full);
  EXPECT_GE(many.result.groups.size(), 8u) << many.result.reason;
  EXPECT_TRUE(many.result.hostsInPlace);  // a full round for links alone
}

}  // namespace
}  // namespace rankmap::sim
