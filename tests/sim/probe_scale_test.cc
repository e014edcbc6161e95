// The production probe round (probe/round.h) against simulated datacenters: the hierarchy it
// recovers (adjusted Rand index per level against the truth), what it spends (bandwidth
// measurements per host, simulated time) and the link capacities it states.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "probe/round.h"
#include "reorder/cost_model.h"
#include "reorder/hierarchy.h"
#include "reorder/planner.h"
#include "tests/sim/datacenter.h"
#include "tests/sim/scenario.h"
#include "tests/sim/sim_fleet.h"

namespace rankmap::sim {
namespace {

struct Scored {
  probe::RoundOutcome out;
  double rackAri = 0;
  double podAri = 0;
  double flowsPerHost = 0;
  double planGap = 0;  // the plan's predicted allreduce time over the optimum's, minus 1
};

// Labels of the live hosts only (dead ones are out of the round).
double ari(const Datacenter& dc, const std::vector<int>& found, bool pods) {
  std::vector<int> a, b;
  for (size_t h = 0; h < dc.hosts(); ++h) {
    if (!dc.alive(static_cast<int>(h))) continue;
    a.push_back(pods ? dc.podOf(static_cast<int>(h)) : dc.rackOf(static_cast<int>(h)));
    b.push_back(found.empty() ? 0 : found[h]);
  }
  return reorder::adjustedRandIndex(a, b);
}

// The plan from the probe's topology and the plan from the truth, both scored on the true
// network (16 MiB allreduce, live hosts only): the gap is what the probe's errors cost.
double planGap(const Datacenter& dc, const SimFleet& fleet, const Topology& probed) {
  std::vector<HostsEntry> live;
  for (size_t h = 0; h < dc.hosts(); ++h)
    if (dc.alive(static_cast<int>(h)))
      live.push_back({fleet.host(static_cast<int>(h)).name, "", 0});
  Topology found = reorder::selectHosts(probed, live, "hosts", "probe");
  Topology truth = reorder::selectHosts(truthTopology(dc, fleet), live, "hosts", "truth");
  reorder::PlanOptions po;
  auto best = reorder::planTopology(truth, po);
  auto got = reorder::planTopology(found, po);
  std::vector<std::string> names;
  for (const auto& h : truth.hosts) names.push_back(h.name);
  const uint64_t bytes = 16ull << 20;
  double optimum = reorder::predictedAllreduceUs(best.model, names, best.plan, bytes);
  double ours = reorder::predictedAllreduceUs(best.model, names, got.plan, bytes);
  auto algo = [&](const reorder::PlanResult& r) {
    std::string out;
    for (const auto& range : r.plan.collectives.at("allreduce"))
      out += fmt::format(" {}:{}", range.minBytes, algorithmName(range.algorithm));
    return out + fmt::format(" weights {}", r.plan.chunkWeights.size());
  };
  std::printf("plan: %.0f us on the true network, optimum %.0f us (%+.1f%%)\n  ours%s\n  best%s\n",
              ours, optimum, 100 * (ours / optimum - 1), algo(got).c_str(), algo(best).c_str());
  return ours / optimum - 1;
}

Scored probeOnce(const DatacenterSpec& spec, probe::RoundOptions opts = {}) {
  Datacenter dc(spec);
  SimFleet fleet(dc);
  Scored s;
  s.out = probe::runRound(fleet, opts, Deadline::after(std::chrono::minutes(10)));
  s.planGap = planGap(dc, fleet, s.out.topology);
  const auto& lv = s.out.structure.levels;
  s.rackAri = ari(dc, lv.empty() ? std::vector<int>{} : lv[0], false);
  s.podAri = ari(dc, lv.size() < 2 ? std::vector<int>{} : lv[1], true);
  s.flowsPerHost = static_cast<double>(s.out.cost.bandwidthFlows) / static_cast<double>(dc.hosts());
  return s;
}

// probeOnce with `seed` for both the datacenter and the round.
Scored probeSeeded(DatacenterSpec spec, uint64_t seed) {
  spec.seed = seed;
  probe::RoundOptions opts;
  opts.seed = seed;
  return probeOnce(spec, opts);
}

TEST(ProbeScale, ThreeTiersFromRoundTrips) {
  DatacenterSpec spec;
  spec.pods = 2;
  spec.racksPerPod = 4;
  spec.hostsPerRack = {16, 12, 9};
  spec.deadHosts = {5, 40};
  Scored s = probeOnce(spec);
  EXPECT_EQ(s.out.structure.signal, "latency");
  EXPECT_DOUBLE_EQ(s.rackAri, 1.0);
  EXPECT_DOUBLE_EQ(s.podAri, 1.0);
  EXPECT_LE(s.flowsPerHost, 32);
  EXPECT_EQ(s.out.deadHosts.size(), 2u);
  RecordProperty("sim_seconds", std::to_string(s.out.cost.seconds));
  std::printf("sim seconds %.2f flows/host %.1f trials %llu pings %llu\n", s.out.cost.seconds,
              s.flowsPerHost, static_cast<unsigned long long>(s.out.cost.trials),
              static_cast<unsigned long long>(s.out.cost.latencyPairs));
}

// The emulated cloud's shape: one tier of `racks` x `hosts`, flat round trips, ±5% noise.
DatacenterSpec emucloudShape(int racks, int hosts, double hostMbps, double uplinkMbps) {
  DatacenterSpec spec;
  spec.pods = 1;
  spec.racksPerPod = racks;
  spec.hostsPerRack = {hosts};
  spec.hostMbps = hostMbps;
  spec.rackUplinkMbps = uplinkMbps;
  spec.podOversubscription = 1;
  spec.rackLatencyUs = 0;
  spec.podLatencyUs = 0;
  spec.noise = 0.05;
  return spec;
}

TEST(ProbeScale, RacksFromBandwidthWhenRoundTripsAreFlat) {
  Scored s = probeOnce(emucloudShape(8, 8, 100, 25));
  EXPECT_EQ(s.out.structure.signal, "bandwidth");
  EXPECT_DOUBLE_EQ(s.rackAri, 1.0);
  EXPECT_LE(s.flowsPerHost, 32);
  const auto& t = s.out.topology;
  ASSERT_TRUE(t.links.has_value());
  for (size_t a = 0; a < t.size(); ++a)
    for (size_t b = 0; b < t.size(); ++b) {
      if (a == b) continue;
      bool sameRack = s.out.structure.levels[0][a] == s.out.structure.levels[0][b];
      double want = sameRack ? 100 : 25;
      auto got = t.bandwidthMbps.at(a, b);
      ASSERT_TRUE(got.has_value());
      EXPECT_NEAR(*got, want, 0.1 * want) << a << " -> " << b;
    }
  std::printf("sim seconds %.2f flows/host %.1f trials %llu\n", s.out.cost.seconds, s.flowsPerHost,
              static_cast<unsigned long long>(s.out.cost.trials));
}

// The structure trials' near flows inside racks are host-link readings too (one flow per host and
// direction in a trial, no uplink crossed): a host direction with two of them in the estimate's
// band takes no flow of the host links' shifts, and every host link is still stated at its rate.
// Before, both shifts ran in full (two flows per host, 320 here).
TEST(ProbeScale, NearFlowsOfTheStructureStandInForTheHostLinksShifts) {
  DatacenterSpec spec = emucloudShape(8, 20, 1000, 250);
  Datacenter dc(spec);
  SimFleet fleet(dc);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  ASSERT_EQ(out.structure.signal, "bandwidth");
  const size_t n = dc.hosts();
  size_t shiftFlows = 0;
  std::vector<std::vector<double>> outs(n), ins(n);
  for (const auto& r : out.readings) {
    if (r.kind != "bandwidth") continue;
    if (r.phase == "hosts") ++shiftFlows;
    if (dc.rackOf(static_cast<size_t>(r.src)) != dc.rackOf(static_cast<size_t>(r.dst))) continue;
    outs[static_cast<size_t>(r.src)].push_back(r.value);
    ins[static_cast<size_t>(r.dst)].push_back(r.value);
  }
  EXPECT_LT(shiftFlows, n / 4) << "the shifts ran " << shiftFlows << " flows";
  auto inBand = [](const std::vector<double>& v) {
    if (v.empty()) return size_t{0};
    const double best = *std::max_element(v.begin(), v.end());
    return static_cast<size_t>(
        std::count_if(v.begin(), v.end(), [&](double x) { return x >= probe::kHostBand * best; }));
  };
  const auto& links = out.topology.links;
  ASSERT_TRUE(links.has_value());
  for (size_t h = 0; h < n; ++h) {
    EXPECT_GE(inBand(outs[h]), probe::kHostLinkReadings) << "host " << h << " out";
    EXPECT_GE(inBand(ins[h]), probe::kHostLinkReadings) << "host " << h << " in";
    EXPECT_NEAR(links->hosts[h].outMbps, 1000, 50) << "host " << h;
    EXPECT_NEAR(links->hosts[h].inMbps, 1000, 50) << "host " << h;
  }
}

// Racks of 4, 3 and 3 behind 500, 125 and 250 Mbit/s uplinks (the emulated cloud of issue 14): a
// single flow between two racks reads the narrower uplink, so one shift of flows bounds each
// uplink only from below (the 250 Mbit/s rack's inbound read 125 from the 125 Mbit/s rack, and
// every pair into it was inferred at half its rate); further shifts take each direction's best.
TEST(ProbeScale, UnequalUplinksAreEachMeasured) {
  DatacenterSpec spec = emucloudShape(3, 4, 1000, 250);
  spec.hostsPerRack = {4, 3, 3};
  Datacenter dc(spec);
  dc.setRackUplinkMbps(0, 500);
  dc.setRackUplinkMbps(1, 125);
  dc.setRackUplinkMbps(2, 250);
  SimFleet fleet(dc);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  const auto& t = out.topology;
  ASSERT_TRUE(t.links.has_value());
  for (size_t a = 0; a < t.size(); ++a)
    for (size_t b = 0; b < t.size(); ++b) {
      if (a == b) continue;
      const double want = dc.aloneMbps(static_cast<int>(a), static_cast<int>(b));
      auto got = t.bandwidthMbps.at(a, b);
      ASSERT_TRUE(got.has_value());
      EXPECT_NEAR(*got, want, 0.1 * want) << a << " -> " << b;
    }
}

// A fleet that passes every call to the simulated one; the fault-injecting fleets below change
// what its bandwidth trials return.
class ForwardingFleet : public probe::Fleet {
 public:
  explicit ForwardingFleet(SimFleet& inner) : inner_(inner) {}
  size_t size() const override { return inner_.size(); }
  const Host& host(int h) const override { return inner_.host(h); }
  std::vector<bool> alive(Deadline d) override { return inner_.alive(d); }
  std::vector<probe::Outcome<LatencyStats>> latency(const std::vector<probe::HostPair>& pairs,
                                                    const probe::LatencyOptions& opts,
                                                    Deadline d) override {
    return inner_.latency(pairs, opts, d);
  }
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts, Deadline d,
                                                probe::LoadedPings* pings) override {
    return inner_.bandwidth(flows, opts, d, pings);
  }
  probe::FleetCost cost() const override { return inner_.cost(); }

 protected:
  SimFleet& inner_;
};

// A fleet that holds back one reading of the single-flow uplink trial (the flows with its
// longer window, probe::kUplinkWindowFactor): the first such flow reads 15% low, once, as a
// descheduled sender does on the emulated cloud (one of eight flows 8-15% low in about one
// trial in three). Everything else is the simulated datacenter's.
class OneSlowUplinkReading : public ForwardingFleet {
 public:
  using ForwardingFleet::ForwardingFleet;
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts, Deadline d,
                                                probe::LoadedPings* pings) override {
    auto out = inner_.bandwidth(flows, opts, d, pings);
    if (!held_ && opts.maxMs == probe::kUplinkWindowFactor * probe::BandwidthOptions{}.maxMs &&
        !out.empty() && out.front().value) {
      *out.front().value *= 0.85;
      held_ = flows.front();
    }
    return out;
  }
  std::optional<probe::HostPair> held() const { return held_; }

 private:
  std::optional<probe::HostPair> held_;
};

// One low reading in the single-flow uplink trial is measured again: its rack's uplink and the
// pair itself (`measured`) are stated at what they carry, not 15% below (every pair of that
// rack's direction was inferred low before: 22% of 4032 pairs outside ±10% on the emulated
// cloud, emucloud_agents_probe_64).
TEST(ProbeScale, ALowUplinkReadingIsMeasuredAgain) {
  DatacenterSpec spec = emucloudShape(8, 8, 100, 25);
  spec.noise = 0;
  Datacenter dc(spec);
  SimFleet sim(dc);
  OneSlowUplinkReading fleet(sim);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  ASSERT_TRUE(fleet.held().has_value());
  const auto& t = out.topology;
  ASSERT_TRUE(t.links.has_value());
  for (const auto& up : t.links->uplinks.at(0)) {
    EXPECT_NEAR(up.outMbps, 25, 0.5);
    EXPECT_NEAR(up.inMbps, 25, 0.5);
  }
  auto [a, b] = *fleet.held();
  auto got = t.bandwidthMbps.at(static_cast<size_t>(a), static_cast<size_t>(b));
  ASSERT_TRUE(got.has_value());
  EXPECT_NEAR(*got, 25, 0.5) << a << " -> " << b;
}

// A fleet where one VM also sends another tenant's traffic across its rack's uplink: its own
// single flows across the uplink (the flows with the uplink trial's longer window) read
// `factor` of what its rack-mates get, since it shares its class on the uplink with that
// traffic (emucloud_agents_reprobe: 62 Mbit/s where the rack's other hosts got 50). The VM is
// the sender of the first such flow, the one the round picks first.
class NoisyUplinkSender : public ForwardingFleet {
 public:
  NoisyUplinkSender(SimFleet& inner, double factor) : ForwardingFleet(inner), factor_(factor) {}
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts, Deadline d,
                                                probe::LoadedPings* pings) override {
    auto out = inner_.bandwidth(flows, opts, d, pings);
    if (opts.maxMs != probe::kUplinkWindowFactor * probe::BandwidthOptions{}.maxMs) return out;
    if (!noisy_ && !flows.empty()) noisy_ = flows.front().first;
    for (size_t k = 0; k < flows.size(); ++k)
      if (flows[k].first == *noisy_ && out[k].value) *out[k].value *= factor_;
    return out;
  }
  std::optional<int> noisy() const { return noisy_; }

 private:
  double factor_;
  std::optional<int> noisy_;
};

// The noisy VM's flow is not its rack's: its rack's uplink is stated at what the other hosts
// get, whether that VM reads high or low (it was stated at the noisy VM's reading, the round's
// first pick, before 2026-12-03).
TEST(ProbeScale, OneSendersUplinkReadingIsNotItsRacks) {
  for (double factor : {1.3, 1.6, 0.7}) {
    DatacenterSpec spec = emucloudShape(8, 8, 100, 25);
    spec.noise = 0;
    Datacenter dc(spec);
    SimFleet sim(dc);
    NoisyUplinkSender fleet(sim, factor);
    auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
    ASSERT_TRUE(fleet.noisy().has_value());
    const auto& t = out.topology;
    ASSERT_TRUE(t.links.has_value());
    ASSERT_EQ(t.groups.size(), 1u);
    for (const auto& up : t.links->uplinks.at(0)) {
      EXPECT_NEAR(up.outMbps, 25, 0.5) << "factor " << factor;
      EXPECT_NEAR(up.inMbps, 25, 0.5) << "factor " << factor;
    }
  }
}

// Uplinks of one rate whose single flows agree (the emulated cloud's 16 VMs: 74.7-74.8 Mbit/s of
// 75) vouch for each other: no flow runs again from other hosts, one trial of three windows
// fewer (every pair ran again before 2026-12-07), and every uplink is stated at its rate.
TEST(ProbeScale, UplinksThatAgreeAreNotMeasuredAgain) {
  DatacenterSpec spec = emucloudShape(4, 4, 300, 75);
  spec.noise = 0.02;
  Datacenter dc(spec);
  SimFleet fleet(dc);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  const auto& t = out.topology;
  ASSERT_TRUE(t.links.has_value());
  ASSERT_EQ(t.groups.size(), 1u);
  size_t singles = 0;
  for (const auto& r : out.readings) singles += r.phase == "uplinks";
  EXPECT_EQ(singles, 4u) << "one single flow per rack pair of the shift";
  for (const auto& up : t.links->uplinks.at(0)) {
    EXPECT_NEAR(up.outMbps, 75, 75 * 0.05);
    EXPECT_NEAR(up.inMbps, 75, 75 * 0.05);
  }
}

// A fleet whose flow `held` reads `factor` of its rate (30% low unless told) in its first
// `times` readings (every reading with times < 0), as a sender descheduled on a loaded machine
// does; the emulated cloud at 64 VMs had one in-rack pair at 64-74% after its confirmation in 5
// of 13 rounds (emucloud_agents_probe_64), and at 16 VMs pairs at 83-89% (2026-11-28).
class HeldBackFlow : public ForwardingFleet {
 public:
  HeldBackFlow(SimFleet& inner, std::vector<probe::HostPair> held, int times, double factor = 0.7)
      : ForwardingFleet(inner), factor_(factor) {
    for (const auto& p : held) held_[p] = {times, {}};
  }
  HeldBackFlow(SimFleet& inner, probe::HostPair held, int times, double factor = 0.7)
      : HeldBackFlow(inner, std::vector<probe::HostPair>{held}, times, factor) {}
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts, Deadline d,
                                                probe::LoadedPings* pings) override {
    auto out = inner_.bandwidth(flows, opts, d, pings);
    ++calls_;
    for (size_t k = 0; k < flows.size(); ++k) {
      auto it = held_.find(flows[k]);
      if (it == held_.end() || !out[k].value) continue;
      auto& h = it->second;
      h.calls.push_back(calls_);
      if (h.left != 0) *out[k].value *= factor_;
      if (h.left > 0) --h.left;
    }
    return out;
  }
  // The fleet calls (1, 2, ...) that read `p`, in order.
  const std::vector<int>& callsOf(probe::HostPair p) const { return held_.at(p).calls; }
  int readings() const { return static_cast<int>(held_.begin()->second.calls.size()); }

 private:
  struct Held {
    int left = 0;
    std::vector<int> calls;
  };
  std::map<probe::HostPair, Held> held_;
  double factor_;
  int calls_ = 0;
};

// An in-rack flow held back in its first reading and in its confirmation is measured a third
// time, alone, and stated at its rate; one that reads low every time stays low.
TEST(ProbeScale, AFlowHeldBackTwiceIsMeasuredAThirdTime) {
  DatacenterSpec spec = emucloudShape(4, 6, 100, 25);
  spec.noise = 0;
  std::vector<probe::HostPair> inRack;
  {
    Datacenter dc(spec);
    SimFleet sim(dc);
    auto out = probe::runRound(sim, {}, Deadline::after(std::chrono::minutes(10)));
    for (const auto& [a, b] : out.topology.measured)
      if (dc.rackOf(static_cast<size_t>(a)) == dc.rackOf(static_cast<size_t>(b)))
        inRack.emplace_back(a, b);
  }
  ASSERT_FALSE(inRack.empty());
  const auto held = inRack.front();
  // 0.87: beyond the probe's 10% noise band, which the pair's accuracy is judged by (a third
  // reading was taken only below 85% until 2026-11-28).
  for (double factor : {0.7, 0.87})
    for (int times : {2, -1}) {
      Datacenter dc(spec);
      SimFleet sim(dc);
      HeldBackFlow fleet(sim, held, times, factor);
      auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
      auto got = out.topology.bandwidthMbps.at(static_cast<size_t>(held.first),
                                               static_cast<size_t>(held.second));
      ASSERT_TRUE(got.has_value());
      EXPECT_GE(fleet.readings(), 3) << "times " << times << " factor " << factor;
      EXPECT_NEAR(*got, times < 0 ? 100 * factor : 100, 0.5)
          << held.first << " -> " << held.second << " factor " << factor;
    }
}

// From kReconfirmTogetherHosts hosts the third readings run together: flows inside racks with no
// host in common, held back twice each, take their third reading in one trial, and each is stated
// at its rate. Round trips show the racks, so that the host links' shifts run: a bandwidth search
// inside the racks leaves its near flows as the host links' readings instead.
TEST(ProbeScale, FromManyHostsTheThirdReadingsRunTogether) {
  DatacenterSpec spec = emucloudShape(8, 20, 1000, 250);
  spec.noise = 0;
  spec.rackLatencyUs = 10;
  ASSERT_GE(spec.racksPerPod * spec.hostsPerRack[0], probe::kReconfirmTogetherHosts);
  std::vector<probe::HostPair> held;
  {
    Datacenter dc(spec);
    SimFleet sim(dc);
    auto out = probe::runRound(sim, {}, Deadline::after(std::chrono::minutes(10)));
    // Pairs read by the host links' flows only, so that their first two readings are those
    // that the held-back flow would have confirmed.
    std::map<probe::HostPair, std::set<std::string>> phases;
    for (const auto& r : out.readings)
      if (r.kind == "bandwidth") phases[{r.src, r.dst}].insert(r.phase);
    std::set<int> used;
    std::set<int> racks;
    for (const auto& [p, in] : phases) {
      const auto [a, b] = p;
      const int rack = dc.rackOf(static_cast<size_t>(a));
      if (in != std::set<std::string>{"hosts"} || rack != dc.rackOf(static_cast<size_t>(b)) ||
          racks.count(rack) || used.count(a) || used.count(b))
        continue;
      held.emplace_back(a, b);
      racks.insert(rack);
      used.insert({a, b});
      if (held.size() == 3) break;
    }
  }
  ASSERT_EQ(held.size(), 3u);
  Datacenter dc(spec);
  SimFleet sim(dc);
  HeldBackFlow fleet(sim, held, 2);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  std::set<int> third;
  for (const auto& p : held) {
    const auto& calls = fleet.callsOf(p);
    ASSERT_GE(calls.size(), 3u) << p.first << " -> " << p.second;
    third.insert(calls[2]);
    auto got =
        out.topology.bandwidthMbps.at(static_cast<size_t>(p.first), static_cast<size_t>(p.second));
    ASSERT_TRUE(got.has_value());
    EXPECT_NEAR(*got, 1000, 5) << p.first << " -> " << p.second;
  }
  EXPECT_EQ(third.size(), 1u) << "the third readings took " << third.size() << " trials";
}

// A fleet whose `busy`-th structure trial (a call with one flow from every host) reads every
// in-rack flow at 30% of its rate: the machine loaded at that moment, as the emulated cloud's
// two cores are when a trial holds more in-rack flows than they carry (2026-11-28: one trial's
// in-rack flows at 158-571 Mbit/s of 1000, two of them between the same two groups).
class BusyTrial : public ForwardingFleet {
 public:
  BusyTrial(SimFleet& inner, const Datacenter& dc, int busy)
      : ForwardingFleet(inner), dc_(dc), busy_(busy) {}
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts, Deadline d,
                                                probe::LoadedPings* pings) override {
    auto out = inner_.bandwidth(flows, opts, d, pings);
    if (flows.size() == dc_.hosts() && trials_++ == busy_)
      for (size_t k = 0; k < flows.size(); ++k)
        if (out[k].value && dc_.rackOf(flows[k].first) == dc_.rackOf(flows[k].second))
          *out[k].value *= 0.3;
    return out;
  }

 private:
  const Datacenter& dc_;
  int busy_;
  int trials_ = 0;
};

// Slow readings of one busy trial decide no two groups apart: every rack is found whole, whichever
// trial the load hits (two slow readings of one trial split a rack before 2026-11-28).
TEST(ProbeScale, OneBusyTrialSplitsNoRack) {
  DatacenterSpec spec = emucloudShape(4, 4, 1000, 250);
  for (int busy = 0; busy < 5; ++busy) {
    Datacenter dc(spec);
    SimFleet sim(dc);
    BusyTrial fleet(sim, dc, busy);
    auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
    const auto& lv = out.structure.levels;
    EXPECT_DOUBLE_EQ(ari(dc, lv.empty() ? std::vector<int>{} : lv[0], false), 1.0)
        << "busy trial " << busy;
  }
}

// A fleet whose first trial of a ring with at most `crossings` cross-rack hops (the structure's
// ring: ring trials are the calls with a byte cap, probe::kRingWindowShare) reads its slowest hop
// at 23% of its rate, once: on the emulated cloud (8 VMs, host 1000, uplink 250 Mbit/s) one
// structure-ring hop read 57 Mbit/s, and the plan kept the provider's order (1.00x).
class SlowRingHop : public ForwardingFleet {
 public:
  SlowRingHop(SimFleet& inner, const Datacenter& dc, size_t crossings)
      : ForwardingFleet(inner), dc_(dc), crossings_(crossings) {}
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts, Deadline d,
                                                probe::LoadedPings* pings) override {
    auto out = inner_.bandwidth(flows, opts, d, pings);
    if (held_ || opts.maxBytes >= probe::BandwidthOptions{}.maxBytes ||
        flows.size() != dc_.hosts())
      return out;
    size_t cross = 0, slowest = 0;
    for (size_t k = 0; k < flows.size(); ++k) {
      cross += dc_.rackOf(flows[k].first) != dc_.rackOf(flows[k].second);
      if (out[k].value && (!out[slowest].value || *out[k].value < *out[slowest].value))
        slowest = k;
    }
    if (cross <= crossings_ && out[slowest].value) {
      *out[slowest].value *= 0.23;
      held_ = true;
    }
    return out;
  }
  bool held() const { return held_; }

 private:
  const Datacenter& dc_;
  size_t crossings_;
  bool held_ = false;
};

// One slow hop in one trial of the structure's ring does not decide the plan: each ring is
// measured twice and every hop keeps its better reading, so the plan still groups the racks.
TEST(ProbeScale, OneSlowRingHopKeepsTheRackOrder) {
  DatacenterSpec spec = emucloudShape(2, 4, 1000, 250);
  spec.rackOfHost = {0, 1, 0, 1, 0, 1, 0, 1};  // the provider's order alternates the racks
  Datacenter dc(spec);
  SimFleet sim(dc);
  SlowRingHop fleet(sim, dc, 2);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  ASSERT_TRUE(fleet.held());
  auto r = reorder::planTopology(out.topology, reorder::PlanOptions{});
  size_t cross = 0;
  for (size_t i = 0; i < r.order.size(); ++i)
    cross += dc.rackOf(r.order[i]) != dc.rackOf(r.order[(i + 1) % r.order.size()]);
  EXPECT_EQ(cross, 2u) << "the plan's ring crosses the uplinks " << cross << " times";
}

// A structure's ring that reads as the link model predicts, hop by hop, is read once, and the
// input order's ring, which the model puts far below it (the provider's order crosses the
// uplinks on most hops), is not run: the ring checks cost one trial, not four. The planner
// prices the input order by the model and still groups the racks.
TEST(ProbeScale, AStructureRingAsModelledIsReadOnce) {
  DatacenterSpec spec = emucloudShape(4, 4, 300, 75);
  for (int h = 0; h < 16; ++h) spec.rackOfHost.push_back(h % 4);  // racks dealt round robin
  Datacenter dc(spec);
  SimFleet fleet(dc);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  size_t ringFlows = 0;
  for (const auto& r : out.readings) ringFlows += r.phase == "rings";
  EXPECT_EQ(ringFlows, 16u);
  ASSERT_EQ(out.topology.rings.size(), 1u);
  EXPECT_EQ(out.topology.rings[0].name, "structure");
  auto r = reorder::planTopology(out.topology, reorder::PlanOptions{});
  size_t cross = 0;
  for (size_t i = 0; i < r.order.size(); ++i)
    cross += dc.rackOf(r.order[i]) != dc.rackOf(r.order[(i + 1) % r.order.size()]);
  EXPECT_EQ(cross, 4u) << "the plan's ring crosses the uplinks " << cross << " times";
  // The input order by the model: every hop crosses an uplink, four hops share each.
  EXPECT_NEAR(r.inputRing.bottleneckMbps, 75.0 / 4, 0.15 * 75 / 4);
}

// A host that dies after some of its pairs were measured alone (an agent killed mid-round, the
// fault matrix's first agent row) is out of the round: the topology lists none of its pairs as
// measured, since its matrix entries are null, and it loads again from its own JSON (a store
// holding it was refused when the coordinating agent restarted).
class DiesAfterItsFirstFlows : public ForwardingFleet {
 public:
  // The victim dies after `flows` of its flows were measured.
  DiesAfterItsFirstFlows(SimFleet& inner, Datacenter& dc, int victim, int flows)
      : ForwardingFleet(inner), dc_(dc), victim_(victim), left_(flows) {}
  std::vector<probe::Outcome<double>> bandwidth(const std::vector<probe::HostPair>& flows,
                                                const probe::BandwidthOptions& opts, Deadline d,
                                                probe::LoadedPings* pings) override {
    auto out = inner_.bandwidth(flows, opts, d, pings);
    for (size_t k = 0; k < flows.size(); ++k)
      if ((flows[k].first == victim_ || flows[k].second == victim_) && out[k].value) --left_;
    if (left_ <= 0 && dc_.alive(victim_)) dc_.setAlive(victim_, false);
    return out;
  }

 private:
  Datacenter& dc_;
  int victim_;
  int left_;
};

TEST(ProbeScale, AHostDeadMidRoundHasNoMeasuredPairs) {
  const int victim = 2;
  int measuredBeforeDeath = 0;  // rounds in which the victim had a pair measured alone
  for (int flows = 1; flows <= 12; ++flows) {
    DatacenterSpec spec = emucloudShape(2, 2, 400, 100);
    spec.noise = 0;
    Datacenter dc(spec);
    SimFleet sim(dc);
    DiesAfterItsFirstFlows fleet(sim, dc, victim, flows);
    auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
    if (out.deadHosts.empty()) continue;  // it outlived the round
    ASSERT_EQ(out.deadHosts, std::vector<std::string>{fleet.host(victim).name});
    for (const auto& r : out.readings)
      if (r.kind == "bandwidth" && r.alone && (r.src == victim || r.dst == victim)) {
        ++measuredBeforeDeath;
        break;
      }
    for (auto [a, b] : out.topology.measured) {
      EXPECT_NE(a, victim) << "after " << flows << " flows: " << a << " -> " << b;
      EXPECT_NE(b, victim) << "after " << flows << " flows: " << a << " -> " << b;
    }
    Topology again = Topology::fromJson(out.topology.toJson(), "the round's topology");
    EXPECT_EQ(again.measured, out.topology.measured);
  }
  EXPECT_GT(measuredBeforeDeath, 0) << "no case where the victim died after a pair measured alone";
}

// A brown-out: one host's link at 1% of its rate during the round. The round ends and names that
// host as degraded (the bandwidth structure may give it a group of its own whose uplink is its
// host link's rate: the name is how the round says so); a healthy round names none.
TEST(ProbeScale, AHostLinkAtOnePercentIsNamedDegraded) {
  DatacenterSpec spec = emucloudShape(2, 2, 400, 100);
  spec.noise = 0.05;
  {
    Datacenter dc(spec);
    SimFleet fleet(dc);
    auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
    EXPECT_TRUE(out.degradedHosts.empty()) << fmt::format("{}", fmt::join(out.degradedHosts, "; "));
  }
  spec.slowHosts = {{3, 0.01}};
  Datacenter dc(spec);
  SimFleet fleet(dc);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  EXPECT_TRUE(out.deadHosts.empty());
  ASSERT_EQ(out.degradedHosts.size(), 1u) << fmt::format("{}", fmt::join(out.degradedHosts, "; "));
  EXPECT_EQ(out.degradedHosts[0].rfind(fleet.host(3).name + " ", 0), 0u) << out.degradedHosts[0];
  EXPECT_EQ(probe::degradedHosts(out.topology), out.degradedHosts);
}

// The browned-out host's rack-mate is not named with it. With ±5% noise, in 5 of 300 seeds (1 of
// 4 hosts at 1%) the structure split their rack into two groups of one, and every flow into the
// rack-mate before the host links were estimated came from the browned-out host (the structure
// trials and the lone hosts' trade): its inbound link read 4 Mbit/s. The emulated cloud's fault
// matrix named such a second host once (docs/reliability.md, "Flakes").
TEST(ProbeScale, ABrownedOutHostsRackMateIsNotNamedDegraded) {
  for (auto [victim, seed] :
       {std::pair<int, uint64_t>{3, 25}, {3, 65}, {3, 121}, {1, 21}, {1, 139}}) {
    DatacenterSpec spec = emucloudShape(2, 2, 400, 100);
    spec.slowHosts = {{victim, 0.01}};
    const auto& out = probeSeeded(spec, seed).out;
    ASSERT_EQ(out.degradedHosts.size(), 1u)
        << "seed " << seed << ": " << fmt::format("{}", fmt::join(out.degradedHosts, "; "));
    EXPECT_EQ(
        out.degradedHosts[0].rfind(out.topology.hosts[static_cast<size_t>(victim)].name + " ", 0),
        0u)
        << out.degradedHosts[0];
  }
}

// The contention shape (racks of 4 at 250 Mbit/s behind 500: a permutation does not congest the
// uplinks) where the search over all hosts saw two bands in its first trial, a flow slowed by the
// moment (here ±20% noise; on the emulated cloud a busy core), and then joined every host, since
// crossing flows read near: no structure and no contention fit before (in 8 of 150 seeds; the
// emulated cloud's `emucloud_agents_contention` found no shared links once in CI). Such a search
// now falls back to the contention fit, as one band does.
TEST(ProbeScale, TwoBandsThatSplitNothingFallBackToTheContentionFit) {
  for (uint64_t seed : {37, 38, 41, 47}) {
    DatacenterSpec spec = emucloudShape(2, 4, 250, 500);
    spec.noise = 0.2;
    Scored s = probeSeeded(spec, seed);
    EXPECT_EQ(s.out.structure.signal, "contention") << "seed " << seed;
    EXPECT_DOUBLE_EQ(s.rackAri, 1.0) << "seed " << seed;
  }
}

// A host whose own link carries half the others' rate (the emulated cloud's coordinating agent
// read 459-516 Mbit/s of 1000 in `engine_table_bench.py`, and `emucloud_prior` split its
// coordinator off its rack twice) stays in its rack: it never read near by the top band's cut,
// and its rack-mates' flows could read far by it, so the search made it a rack of its own in
// every seed (8 hosts, 2 racks, 1000/250 Mbit/s); it is now judged by its own best reading.
// Seeds 27 and 10 of victims 0 and 3 still split (a second rack-mate left alone: two groups read
// near the slow host, which then joins neither).
TEST(ProbeScale, AHostAtHalfRateStaysInItsRack) {
  for (int victim : {0, 3, 5})
    for (uint64_t seed : {1, 2, 3, 4, 5}) {
      DatacenterSpec spec = emucloudShape(2, 4, 1000, 250);
      spec.slowHosts = {{victim, 0.5}};
      Scored s = probeSeeded(spec, seed);
      const auto& lv = s.out.structure.levels;
      EXPECT_DOUBLE_EQ(s.rackAri, 1.0)
          << "victim " << victim << " seed " << seed << ": "
          << (lv.empty() ? std::string("no levels") : fmt::format("{}", fmt::join(lv[0], ",")));
    }
}

// A host alone in its rack has no rack-mate to measure its host link with: it is measured
// across (a flow out and one in), not stated as 0.
TEST(ProbeScale, HostsAloneInTheirRackHaveTheirLinksMeasured) {
  DatacenterSpec spec;
  spec.pods = 1;
  spec.racksPerPod = 5;
  spec.hostsPerRack = {5, 1, 4, 1, 1};
  spec.hostMbps = 1000;
  spec.rackOversubscription = 1;
  spec.podOversubscription = 1;
  spec.noise = 0.05;
  Datacenter dc(spec);
  SimFleet fleet(dc);
  auto out = probe::runRound(fleet, {}, Deadline::after(std::chrono::minutes(10)));
  ASSERT_EQ(out.structure.signal, "latency");
  EXPECT_DOUBLE_EQ(ari(dc, out.structure.levels.at(0), false), 1.0);
  ASSERT_TRUE(out.topology.links.has_value());
  const auto& hosts = out.topology.links->hosts;
  ASSERT_EQ(hosts.size(), dc.hosts());
  for (size_t h = 0; h < hosts.size(); ++h) {
    EXPECT_NEAR(hosts[h].outMbps, 1000, 100) << "host " << h << " (rack " << dc.rackOf(h) << ")";
    EXPECT_NEAR(hosts[h].inMbps, 1000, 100) << "host " << h << " (rack " << dc.rackOf(h) << ")";
  }
}

// Host links from readings with ±10% noise (the simulator's default), 256 hosts in flat racks
// 1:4: the median stated is the true 1000 Mbit/s within 1.5% (1000-1005 on seeds 1-3). The mean
// of the readings within 10% of the best kept their upper half: 1033-1039, and the plan's rings
// 1-2.5% faster than they ran (probe::kHostBand).
TEST(ProbeScale, HostLinksAreStatedWithoutTheNoisesBias) {
  const auto r = runScenario(Scenario::parse({"hosts=256", "rack_over=4", "seed=1", "dead=0"}));
  ASSERT_TRUE(r.topology.links.has_value());
  std::vector<double> stated;
  for (const auto& c : r.topology.links->hosts) {
    stated.push_back(c.outMbps);
    stated.push_back(c.inMbps);
  }
  std::sort(stated.begin(), stated.end());
  EXPECT_NEAR(stated[stated.size() / 2], 1000, 15);
}

// Flat round trips with stalls (an agent not scheduled for a while, as on the loaded emulated
// cloud): a few slow pings open a gap in the sorted round trips that is no tier. The racks they
// would suggest must not be taken; the bandwidth trials find the true ones.
TEST(ProbeScale, StalledPingsOnFlatRoundTripsAreNoTier) {
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    DatacenterSpec spec = emucloudShape(4, 4, 1000, 250);
    spec.stalledHostFraction = 0.1 * static_cast<double>(1 + seed % 9);  // 0.1 .. 0.9
    Scored s = probeSeeded(spec, seed);
    EXPECT_EQ(s.out.structure.signal, "bandwidth")
        << "seed " << seed << ", stalled " << spec.stalledHostFraction;
    EXPECT_DOUBLE_EQ(s.rackAri, 1.0) << "seed " << seed << ", stalled " << spec.stalledHostFraction;
  }
}

// Two pods of `racksPerPod` racks of `hostsPerRack`, both levels oversubscribed `over`, with
// 20 us round trips, `rackStepUs` more across racks and `podStepUs` more across pods, under VM
// jitter of up to 5 us per host and per ping, and ±10% bandwidth noise.
DatacenterSpec closeTiers(int racksPerPod, int hostsPerRack, double over, double rackStepUs,
                          double podStepUs) {
  DatacenterSpec spec;
  spec.pods = 2;
  spec.racksPerPod = racksPerPod;
  spec.hostsPerRack = {hostsPerRack};
  spec.rackOversubscription = over;
  spec.podOversubscription = over;
  spec.hostLatencyUs = 5;  // one way per host link: round trip 20 us
  spec.rackLatencyUs = rackStepUs / 4;
  spec.podLatencyUs = podStepUs / 4;
  spec.hostJitterUs = 5;
  spec.sampleJitterUs = 5;
  spec.noise = 0.1;
  return spec;
}

// Tiers of +10% (rack) and +15% (pod) on 20 us round trips, under VM jitter of up to 5 us per
// host and per ping (more than a tier step on a pair), in two pods (half of a host's leaders share
// its pod, so a median over them is no longer the tier across pods): round trips without each
// host's offset show the racks and pods; bandwidth alone would not (1:1.25 everywhere).
TEST(ProbeScale, CloseTiersUnderVmJitterFromRoundTrips) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    DatacenterSpec spec = closeTiers(8, 16, 1.25, 2, 3);
    spec.deadHosts = {3};
    Scored s = probeSeeded(spec, seed);
    EXPECT_EQ(s.out.structure.signal, "latency") << "seed " << seed;
    EXPECT_GE(s.rackAri, 0.95) << "seed " << seed;
    EXPECT_DOUBLE_EQ(s.podAri, 1.0) << "seed " << seed;
  }
}

// Racks of two under close tiers (+15%/+20%, jitter 5 us): a host meets its one rack-mate in a
// single ping, and a rack split in two has its uplink carry two ring flows each way. Two causes,
// each alone failing this test: one reading just above the rack boundary (1024 hosts, seeds 4, 5
// and 7: the plan 1.39-1.59x the optimum; here seed 9), fixed by hosts left alone pinging their
// nearest partners again; and a host's offset off by a whole tier step (here seeds 1, 3 and 4:
// 1-2 racks split), fixed by moving each offset to where its pings sit on the tiers. Each fix
// alone fails this test; with both, seeds 1-16 pass.
TEST(ProbeScale, RacksOfTwoUnderCloseTiersStayWhole) {
  for (uint64_t seed : {1, 3, 4, 9}) {
    DatacenterSpec spec = closeTiers(128, 2, 1.5, 3, 4);
    Scored s = probeSeeded(spec, seed);
    EXPECT_EQ(s.out.structure.signal, "latency") << "seed " << seed;
    EXPECT_DOUBLE_EQ(s.rackAri, 1.0) << "seed " << seed;
    EXPECT_LT(s.planGap, 0.05) << "seed " << seed;
  }
}

// The same jitter on flat round trips, with agents stalled during a step (a tenth to a third of
// them, each by 2-40x), is no tier: neither kind of latency structure is taken.
TEST(ProbeScale, VmJitterOnFlatRoundTripsIsNoTier) {
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    DatacenterSpec spec = emucloudShape(8, 32, 1000, 8000);
    spec.hostJitterUs = 5;
    spec.sampleJitterUs = 5;
    spec.noise = 0.1;
    spec.stalledHostFraction = 0.1 * static_cast<double>(seed);
    Scored s = probeSeeded(spec, seed);
    EXPECT_NE(s.out.structure.signal, "latency") << "seed " << seed;
  }
}

// Two racks of four behind an uplink of twice the host rate (2:1): no single flow and few blind
// permutations show it; the contention fit does.
TEST(ProbeScale, MildOversubscriptionFromTheContentionFit) {
  DatacenterSpec spec;
  spec.pods = 1;
  spec.racksPerPod = 2;
  spec.hostsPerRack = {4};
  spec.hostMbps = 250;
  spec.rackOversubscription = 2;  // 4 x 250 / 2 = 500
  spec.podOversubscription = 1;
  spec.rackLatencyUs = 0;
  spec.podLatencyUs = 0;
  spec.noise = 0.03;
  Scored s = probeOnce(spec);
  EXPECT_DOUBLE_EQ(s.rackAri, 1.0) << s.out.structure.signal;
  EXPECT_EQ(s.out.topology.sharedLinks.size(), 2u);
}

// The scale target: 1024 hosts, 32 racks of 32 in 4 pods, 1:4 at the rack, 1:2 at the
// pod, +-10% noise, 3 dead hosts.
TEST(ProbeScale, Hosts1024) {
  DatacenterSpec spec;
  spec.pods = 4;
  spec.racksPerPod = 8;
  spec.hostsPerRack = {32};
  spec.rackOversubscription = 4;
  spec.podOversubscription = 2;
  spec.noise = 0.1;
  spec.deadHosts = {7, 500, 1001};
  auto t0 = std::chrono::steady_clock::now();
  Scored s = probeOnce(spec);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.out.structure.signal, "latency");
  EXPECT_DOUBLE_EQ(s.rackAri, 1.0);
  EXPECT_DOUBLE_EQ(s.podAri, 1.0);
  EXPECT_LE(s.flowsPerHost, 32);
  EXPECT_LE(s.out.cost.seconds, 60);
  EXPECT_EQ(s.out.deadHosts.size(), 3u);
  EXPECT_LE(s.planGap, 0.05);
  std::printf("1024: sim seconds %.2f flows/host %.1f trials %llu pings %llu wall %.2f s\n",
              s.out.cost.seconds, s.flowsPerHost,
              static_cast<unsigned long long>(s.out.cost.trials),
              static_cast<unsigned long long>(s.out.cost.latencyPairs), wall);
}

}  // namespace
}  // namespace rankmap::sim
