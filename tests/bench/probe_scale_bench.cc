// The structure-first probe (probe/round.h) against simulated datacenters of 256 to 4096 hosts:
// what it costs (simulated probe time, bandwidth measurements, pings, bytes) and what it finds
// (adjusted Rand index of racks and pods against the truth), with the wall time of the whole
// simulation on this machine. Numbers go to docs/performance.md. With --recheck, after each
// round: the light check of the unchanged network, then of one rack whose uplink halved, and
// that rack's group re-probe (probe/recheck.h), each with what it spent.
//
//   probe_scale_bench [--hosts 256,1024,4096] [--noise 0.1] [--dead 3] [--background 0]
//                     [--unequal] [--seed 1] [--recheck]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "probe/recheck.h"
#include "probe/round.h"
#include "reorder/hierarchy.h"
#include "tests/sim/datacenter.h"
#include "tests/sim/sim_fleet.h"

namespace {

using rankmap::sim::Datacenter;
using rankmap::sim::DatacenterSpec;

double ari(const Datacenter& dc, const std::vector<std::vector<int>>& levels, size_t level,
           bool pods) {
  std::vector<int> a, b;
  for (size_t h = 0; h < dc.hosts(); ++h) {
    if (!dc.alive(static_cast<int>(h))) continue;
    a.push_back(pods ? dc.podOf(static_cast<int>(h)) : dc.rackOf(static_cast<int>(h)));
    b.push_back(level < levels.size() ? levels[level][h] : 0);
  }
  return rankmap::reorder::adjustedRandIndex(a, b);
}

struct RecheckRow {
  size_t hosts = 0;
  std::string step, verdict;
  rankmap::probe::FleetCost cost;
};

// The full round, the check of the unchanged network, the check after rack 1's uplink halved
// (the rack the dead hosts of --dead 3 leave whole) and that rack's group re-probe.
std::vector<RecheckRow> runRechecks(Datacenter& dc, rankmap::sim::SimFleet& fleet,
                                    const rankmap::probe::RoundOutcome& round,
                                    const rankmap::probe::RoundOptions& opts) {
  using namespace rankmap::probe;
  auto later = [] { return rankmap::Deadline::after(std::chrono::minutes(30)); };
  std::vector<RecheckRow> rows;
  rows.push_back({dc.hosts(), "full round", "", round.cost});
  auto quiet = runRecheck(fleet, round.topology, {}, opts, later());
  rows.push_back({dc.hosts(), "check, unchanged", recheckVerdictName(quiet.result.verdict),
                  quiet.cost});
  dc.setRackUplinkMbps(1, dc.rackUplinkMbps(1) / 2);
  auto halved = runRecheck(fleet, round.topology, {}, opts, later());
  std::string names;
  for (const auto& n : halved.result.names) names += (names.empty() ? " " : ", ") + n;
  rows.push_back({dc.hosts(), "check, rack 1 uplink halved",
                  recheckVerdictName(halved.result.verdict) + names, halved.cost});
  if (halved.result.verdict == RecheckVerdict::Groups) {
    auto r = runRepair(fleet, round.topology, halved.result.groups, opts, later());
    rows.push_back({dc.hosts(), "group re-probe", "", r.cost});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {256, 1024, 4096};
  double noise = 0.1;
  int dead = 3, background = 0;
  bool unequal = false, recheck = false;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "probe_scale_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--hosts") {
      sizes.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) sizes.push_back(std::stoi(t));
    } else if (a == "--noise") {
      noise = std::stod(next());
    } else if (a == "--dead") {
      dead = std::stoi(next());
    } else if (a == "--background") {
      background = std::stoi(next());
    } else if (a == "--unequal") {
      unequal = true;
    } else if (a == "--recheck") {
      recheck = true;
    } else if (a == "--seed") {
      seed = std::stoull(next());
    } else {
      std::fprintf(stderr, "probe_scale_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  std::vector<std::vector<RecheckRow>> rechecks;
  std::printf("| hosts | pods x racks x hosts | sim probe s | bw flows (per host) | trials | "
              "pings | bulk GB | rack ARI | pod ARI | dead found | wall s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int n : sizes) {
    DatacenterSpec spec;
    spec.hostsPerRack = unequal ? std::vector<int>{40, 32, 24} : std::vector<int>{32};
    int racks = n / 32;
    spec.pods = racks >= 64 ? 8 : racks >= 16 ? 4 : 2;
    spec.racksPerPod = racks / spec.pods;
    spec.rackOversubscription = 4;
    spec.podOversubscription = 2;
    spec.noise = noise;
    spec.backgroundFlows = background;
    spec.seed = seed;
    for (int k = 0; k < dead; ++k) spec.deadHosts.push_back((k * 7919 + 5) % n);
    auto t0 = std::chrono::steady_clock::now();
    Datacenter dc(spec);
    rankmap::sim::SimFleet fleet(dc);
    rankmap::probe::RoundOptions opts;
    opts.seed = seed;
    auto out = rankmap::probe::runRound(fleet, opts,
                                        rankmap::Deadline::after(std::chrono::minutes(30)));
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& c = out.cost;
    std::printf("| %zu | %d x %d x %s | %.1f | %llu (%.1f) | %llu | %llu | %.1f | %.3f | %.3f | "
                "%zu of %d | %.1f |\n",
                dc.hosts(), spec.pods, spec.racksPerPod, unequal ? "40/32/24" : "32", c.seconds,
                static_cast<unsigned long long>(c.bandwidthFlows),
                static_cast<double>(c.bandwidthFlows) / static_cast<double>(dc.hosts()),
                static_cast<unsigned long long>(c.trials),
                static_cast<unsigned long long>(c.latencyPairs), c.bulkBytes / 1e9,
                ari(dc, out.structure.levels, 0, false), ari(dc, out.structure.levels, 1, true),
                out.deadHosts.size(), dead, wall);
    std::fflush(stdout);
    if (recheck) rechecks.push_back(runRechecks(dc, fleet, out, opts));
  }
  if (!rechecks.empty()) {
    std::printf("\n| hosts | step | verdict | bw flows (per host) | trials | pings | sim s |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const auto& rows : rechecks)
      for (const auto& r : rows)
        std::printf("| %zu | %s | %s | %llu (%.2f) | %llu | %llu | %.2f |\n", r.hosts,
                    r.step.c_str(), r.verdict.c_str(),
                    static_cast<unsigned long long>(r.cost.bandwidthFlows),
                    static_cast<double>(r.cost.bandwidthFlows) / static_cast<double>(r.hosts),
                    static_cast<unsigned long long>(r.cost.trials),
                    static_cast<unsigned long long>(r.cost.latencyPairs), r.cost.seconds);
  }
  return 0;
}
