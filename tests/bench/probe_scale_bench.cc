// The structure-first probe (probe/round.h) against simulated datacenters of 256 to 4096 hosts:
// what it costs (simulated probe time, bandwidth measurements, pings, bytes) and what it finds
// (adjusted Rand index of racks and pods against the truth), with the wall time of the whole
// simulation on this machine. Numbers go to docs/performance.md. With --recheck, after each
// round: the light check of the unchanged network, then of one rack whose uplink halved, and
// that rack's group re-probe (probe/recheck.h), each with what it spent.
//
//   probe_scale_bench [--hosts 256,1024,4096] [--noise 0.1] [--dead 3] [--background 0]
//                     [--unequal] [--seed 1] [--recheck] [--per-flow-ms 1]
//
//   --per-flow-ms  the fleet clock's CPU per flow of a trial (SimTiming::perFlowMs; the default
//                  is the emulated cloud's, where every agent shares two cores)
//
// With --emucloud-shape, the simulator's side of the comparison with the emulated cloud
// (tests/emucloud/sim_agreement_bench.py): one datacenter shaped as `emucloud up --vms VMS
// --racks RACKS --host-mbit HOST --uplink-mbit UPLINK` shapes its testbed, the probe round on
// it, the plan from what the probe found, and the 16 MiB ring allreduce of that plan, in its
// order as the engine runs it, scored on the true network (reorder::predictedAllreduceUs):
//
//   probe_scale_bench --emucloud-shape VMS,RACKS,HOST,UPLINK [--rack-of R0,R1,...]
//                     [--max-flows N] [--order I,J,...] [--seed 7] [--noise 0.05]
//                     [--agent-cores 2] [--json]
//
//   --rack-of    each VM's rack (truth.json's order); default: dealt round-robin in VM order
//   --max-flows  the agents' max_parallel_flows (probe flows at once; 0 = no limit)
//   --agent-cores  the cores the testbed's agents share (the topology push's CPU; default 2)
//   --order      also score the ring in this order of VM indices (the testbed's plan)
//   --json       one JSON object instead of the table
//
// With --scenario, one scenario (tests/sim/scenario.h: its keys, defaults and scoring), printed
// as one JSON line:
//
//   probe_scale_bench --scenario [--topology-out FILE] [--truth-out FILE] [KEY=VALUE ...]
//
//   --topology-out  also write the probe's topology.json there (for `rankmap plan` and `show`)
//   --truth-out     also write the true topology of the live hosts there (same names): to
//                   compare what the probe found with what is
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "agent/topology_push.h"
#include "common/config.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "probe/recheck.h"
#include "probe/round.h"
#include "probe/stats.h"
#include "reorder/cost_model.h"
#include "reorder/hierarchy.h"
#include "reorder/planner.h"
#include "tests/sim/datacenter.h"
#include "tests/sim/scenario.h"
#include "tests/sim/sim_fleet.h"

namespace {

using rankmap::sim::Datacenter;
using rankmap::sim::DatacenterSpec;

constexpr uint64_t kRingBytes = 16ull << 20;

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
  rows.push_back(
      {dc.hosts(), "check, unchanged", recheckVerdictName(quiet.result.verdict), quiet.cost});
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

std::vector<double> numbers(const std::string& list) {
  std::vector<double> out;
  std::stringstream ss(list);
  for (std::string t; std::getline(ss, t, ',');) out.push_back(std::stod(t));
  return out;
}

std::vector<int> integers(const std::string& list) {
  std::vector<int> out;
  for (double v : numbers(list)) out.push_back(static_cast<int>(v));
  return out;
}

struct Args {
  std::vector<int> sizes = {256, 1024, 4096};
  double noise = 0.1;
  int dead = 3, background = 0;
  bool unequal = false, recheck = false;
  uint64_t seed = 1;
  // --emucloud-shape mode
  std::vector<double> shape;  // vms, racks, host Mbit/s, uplink Mbit/s
  std::vector<int> rackOf, order;
  size_t maxFlows = 0;
  bool noiseGiven = false;
  bool json = false;
  rankmap::sim::SimTiming timing;
  double agentCores = 2;  // --emucloud-shape: the cores the testbed's agents share
};

Args parseArgs(int argc, char** argv) {
  Args r;
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
      r.sizes = integers(next());
    } else if (a == "--noise") {
      r.noise = std::stod(next());
      r.noiseGiven = true;
    } else if (a == "--dead") {
      r.dead = std::stoi(next());
    } else if (a == "--background") {
      r.background = std::stoi(next());
    } else if (a == "--unequal") {
      r.unequal = true;
    } else if (a == "--recheck") {
      r.recheck = true;
    } else if (a == "--seed") {
      r.seed = std::stoull(next());
    } else if (a == "--emucloud-shape") {
      r.shape = numbers(next());
      if (r.shape.size() != 4 || r.shape[0] < 1 || r.shape[1] < 1 || r.shape[1] > r.shape[0] ||
          !(r.shape[2] > 0) || !(r.shape[3] > 0)) {
        std::fprintf(stderr,
                     "probe_scale_bench: --emucloud-shape: expected VMS,RACKS,HOST,UPLINK with "
                     "1 <= RACKS <= VMS and rates > 0\n");
        std::exit(2);
      }
    } else if (a == "--rack-of") {
      r.rackOf = integers(next());
    } else if (a == "--order") {
      r.order = integers(next());
    } else if (a == "--max-flows") {
      r.maxFlows = std::stoull(next());
    } else if (a == "--agent-cores") {
      r.agentCores = std::stod(next());
    } else if (a == "--per-flow-ms") {
      r.timing.perFlowMs = std::stod(next());
    } else if (a == "--json") {
      r.json = true;
    } else {
      std::fprintf(stderr, "probe_scale_bench: unknown argument %s\n", a.c_str());
      std::exit(2);
    }
  }
  return r;
}

// The scale table: one line per size.
void scaleTable(const Args& args) {
  std::vector<std::vector<RecheckRow>> rechecks;
  std::printf(
      "| hosts | pods x racks x hosts | sim probe s | bw flows (per host) | trials | "
      "pings | bulk GB | rack ARI | pod ARI | dead found | wall s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int n : args.sizes) {
    DatacenterSpec spec;
    spec.hostsPerRack = args.unequal ? std::vector<int>{40, 32, 24} : std::vector<int>{32};
    int racks = n / 32;
    spec.pods = racks >= 64 ? 8 : racks >= 16 ? 4 : 2;
    spec.racksPerPod = racks / spec.pods;
    spec.rackOversubscription = 4;
    spec.podOversubscription = 2;
    spec.noise = args.noise;
    spec.backgroundFlows = args.background;
    spec.seed = args.seed;
    for (int k = 0; k < args.dead; ++k) spec.deadHosts.push_back((k * 7919 + 5) % n);
    auto t0 = std::chrono::steady_clock::now();
    Datacenter dc(spec);
    rankmap::sim::SimFleet fleet(dc, args.timing);
    rankmap::probe::RoundOptions opts;
    opts.seed = args.seed;
    auto out =
        rankmap::probe::runRound(fleet, opts, rankmap::Deadline::after(std::chrono::minutes(30)));
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& c = out.cost;
    std::printf(
        "| %zu | %d x %d x %s | %.1f | %llu (%.1f) | %llu | %llu | %.1f | %.3f | %.3f | "
        "%zu of %d | %.1f |\n",
        dc.hosts(), spec.pods, spec.racksPerPod, args.unequal ? "40/32/24" : "32", c.seconds,
        static_cast<unsigned long long>(c.bandwidthFlows),
        static_cast<double>(c.bandwidthFlows) / static_cast<double>(dc.hosts()),
        static_cast<unsigned long long>(c.trials), static_cast<unsigned long long>(c.latencyPairs),
        c.bulkBytes / 1e9, ari(dc, out.structure.levels, 0, false),
        ari(dc, out.structure.levels, 1, true), out.deadHosts.size(), args.dead, wall);
    std::fflush(stdout);
    if (args.recheck) rechecks.push_back(runRechecks(dc, fleet, out, opts));
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
}

// The emulated cloud's network (tests/emucloud/emucloud, `up`): one tier of racks on a flat L2,
// every host link and every rack uplink shaped to the given rate per direction. The uplink's
// per-VM HTB classes share it fairly between VMs, not flows; the probe's trials send at most
// one flow per VM and the ring one per uplink direction, where the two are the same, so the
// per-flow max-min model stands for them. Round trips are flat (bridges in namespaces): no
// latency tier, which sends the probe to its bandwidth structure phase as on the testbed.
//
// Capacities are what TCP gets through the shaper: kEmucloudTcpGoodput of the shaped rate. HTB
// counts whole 9014-byte frames (8948 bytes of payload: 0.7% is headers) and its timer runs late
// on two busy CPUs; iperf3 measures one cross-rack flow at 243.5 of 250 Mbit/s (median of 3,
// docs/performance.md, "Shaping"), and the probe reads the same share on the testbed.
constexpr double kEmucloudTcpGoodput = 243.5 / 250;

DatacenterSpec emucloudSpec(const Args& args) {
  DatacenterSpec spec;
  const int vms = static_cast<int>(args.shape[0]), racks = static_cast<int>(args.shape[1]);
  spec.pods = 1;
  spec.racksPerPod = racks;
  spec.rackOfHost = args.rackOf;
  if (spec.rackOfHost.empty())
    for (int v = 0; v < vms; ++v) spec.rackOfHost.push_back(v % racks);
  if (spec.rackOfHost.size() != static_cast<size_t>(vms)) {
    std::fprintf(stderr, "probe_scale_bench: --rack-of has %zu racks for %d VMs\n",
                 spec.rackOfHost.size(), vms);
    std::exit(2);
  }
  spec.hostMbps = args.shape[2] * kEmucloudTcpGoodput;
  spec.rackUplinkMbps = args.shape[3] * kEmucloudTcpGoodput;
  spec.podOversubscription = 1;
  spec.rackLatencyUs = 0;
  spec.podLatencyUs = 0;
  // The testbed's probe readings: every pair within +-5.3% of the shaped rate at 16 and 64 VMs
  // (docs/performance.md, structure-first probe on the emulated cloud).
  spec.noise = args.noiseGiven ? args.noise : 0.05;
  spec.seed = args.seed;
  return spec;
}

// The time of a 16 MiB ring allreduce in `order` (host indices) on `net`, as the engine runs
// it: the plan's algorithm forced to ring, so that predictedAllreduceUs scores the ring alone.
double ringUs(const rankmap::reorder::NetworkModel& net, const std::vector<std::string>& names,
              const std::vector<int>& order) {
  rankmap::Plan ring;
  for (int h : order) ring.order.push_back(names[static_cast<size_t>(h)]);
  ring.collectives["allreduce"] = {rankmap::AlgoRange{}};  // ring over every size
  return rankmap::reorder::predictedAllreduceUs(net, names, ring, kRingBytes);
}

// The push of the probed topology to every agent after the round (agent/topology_push.h), as
// the coordinator (host 0) runs it: the routes of agent::pushRoutes, each copy a flow of the
// document's bytes over the simulated links (max-min; a relay forwards once it has stored its
// copy), then the CPU of storing one copy (parse, validate, hash, serialise the same document,
// timed here: the median of 5) for each agent, spread over `cores` (the emulated cloud's
// agents share the machine's cores, and most copies land at the end of the network phase).
struct PushCost {
  double seconds = 0, networkSeconds = 0, storeMs = 0;
  size_t bytes = 0;
};

PushCost pushCost(Datacenter& dc, const rankmap::sim::SimFleet& fleet, const rankmap::Topology& t,
                  double cores) {
  using Clock = std::chrono::steady_clock;
  PushCost c;
  const std::string text = t.toJson().dump();
  c.bytes = text.size();
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    auto got = rankmap::Topology::fromJson(rankmap::parseJson(text, "push"), "push");
    volatile size_t stored = got.contentHash().size() + got.toJson().dump().size();
    (void)stored;
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  c.storeMs = ms[ms.size() / 2];

  std::vector<rankmap::Host> hosts;
  std::map<std::string, int> index;
  for (size_t h = 0; h < fleet.size(); ++h) {
    hosts.push_back(fleet.host(static_cast<int>(h)));
    index[hosts.back().name] = static_cast<int>(h);
  }
  const auto routes = rankmap::agent::pushRoutes(t, hosts, hosts.front().name);
  struct Copy {
    int src, dst;
    double bits, startS;
    const std::vector<rankmap::Host>* relay;
  };
  const double bits = 8.0 * static_cast<double>(c.bytes);
  std::vector<Copy> waiting, active;
  for (const auto& r : routes) waiting.push_back({0, index.at(r.to.name), bits, 0, &r.relay});
  double now = 0;
  while (!waiting.empty() || !active.empty()) {
    for (size_t k = 0; k < waiting.size();)
      if (waiting[k].startS <= now) {
        active.push_back(waiting[k]);
        waiting.erase(waiting.begin() + static_cast<long>(k));
      } else {
        ++k;
      }
    double nextStart = 1e300;
    for (const auto& w : waiting) nextStart = std::min(nextStart, w.startS);
    if (active.empty()) {
      now = nextStart;
      continue;
    }
    std::vector<std::pair<int, int>> pairs;
    for (const auto& a : active) pairs.emplace_back(a.src, a.dst);
    const auto rates = dc.fairMbps(pairs);
    double dt = nextStart - now;
    for (size_t k = 0; k < active.size(); ++k) dt = std::min(dt, active[k].bits / (rates[k] * 1e6));
    now += dt;
    std::vector<Copy> still;
    for (size_t k = 0; k < active.size(); ++k) {
      active[k].bits -= rates[k] * 1e6 * dt;
      if (active[k].bits > 1e-3) {
        still.push_back(active[k]);
        continue;
      }
      if (active[k].relay)
        for (const auto& h : *active[k].relay)
          waiting.push_back(
              {active[k].dst, index.at(h.name), bits, now + c.storeMs / 1000, nullptr});
    }
    active = std::move(still);
  }
  c.networkSeconds = now;
  c.seconds = now + c.storeMs / 1000 * static_cast<double>(hosts.size() - 1) / std::max(1.0, cores);
  return c;
}

void emucloudRun(const Args& args) {
  DatacenterSpec spec = emucloudSpec(args);
  Datacenter dc(spec);
  rankmap::sim::SimFleet fleet(dc);
  rankmap::probe::RoundOptions opts;
  opts.seed = args.seed;
  opts.maxFlowsPerTrial = args.maxFlows;
  auto out =
      rankmap::probe::runRound(fleet, opts, rankmap::Deadline::after(std::chrono::minutes(30)));
  auto truth = rankmap::reorder::planTopology(rankmap::sim::truthTopology(dc, fleet), {});
  auto found = rankmap::reorder::planTopology(out.topology, {});
  const std::vector<std::string>& names = truth.plan.hosts;  // the fleet's, in host order
  std::map<std::string, int> index;
  for (size_t h = 0; h < names.size(); ++h) index[names[h]] = static_cast<int>(h);
  std::vector<int> planOrder;
  for (const auto& name : found.plan.order) planOrder.push_back(index.at(name));
  const double planRing = ringUs(truth.model, names, planOrder);
  const double optimum = ringUs(truth.model, names, truth.order);
  const double given = args.order.empty() ? 0 : ringUs(truth.model, names, args.order);
  const auto& c = out.cost;
  const double rackAri = ari(dc, out.structure.levels, 0, false);
  // What the probe states for the links (both directions pooled), to set beside the testbed's.
  std::vector<double> hostRates, uplinkRates;
  if (out.topology.links) {
    for (const auto& l : out.topology.links->hosts)
      hostRates.insert(hostRates.end(), {l.outMbps, l.inMbps});
    if (!out.topology.links->uplinks.empty())
      for (const auto& l : out.topology.links->uplinks.front())
        uplinkRates.insert(uplinkRates.end(), {l.outMbps, l.inMbps});
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return rankmap::probe::percentile(v, 0.5);
  };
  const PushCost push = pushCost(dc, fleet, out.topology, args.agentCores);
  if (args.json) {
    std::printf(
        "{\"vms\": %zu, \"racks\": %d, \"host_mbit\": %g, \"uplink_mbit\": %g, "
        "\"tcp_goodput\": %.4f, \"seed\": %llu, \"max_flows\": %zu, \"probe_s\": %.3f, \"trials\": "
        "%llu, "
        "\"bandwidth_flows\": %llu, \"structure\": \"%s\", \"rack_ari\": %.3f, "
        "\"ring_plan_ms\": %.1f, \"ring_optimum_ms\": %.1f, \"ring_order_ms\": %.1f, "
        "\"host_mbps_median\": %.1f, \"uplink_mbps_median\": %.1f, \"push_s\": %.3f, "
        "\"push_network_s\": %.3f, \"push_store_ms\": %.2f, \"push_bytes\": %zu}\n",
        dc.hosts(), dc.racks(), args.shape[2], args.shape[3], kEmucloudTcpGoodput,
        static_cast<unsigned long long>(args.seed), args.maxFlows, c.seconds,
        static_cast<unsigned long long>(c.trials),
        static_cast<unsigned long long>(c.bandwidthFlows), out.structure.signal.c_str(), rackAri,
        planRing / 1000, optimum / 1000, given / 1000, median(hostRates), median(uplinkRates),
        push.seconds, push.networkSeconds, push.storeMs, push.bytes);
    return;
  }
  std::printf(
      "| VMs / racks | host / uplink Mbit/s | max flows | sim probe s | trials | bw flows "
      "| structure | rack ARI | 16 MiB ring, plan (ms) | optimum (ms) | given order (ms) "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  const std::string givenMs = args.order.empty() ? "-" : fmt::format("{:.1f}", given / 1000);
  std::printf("| %zu / %d | %g / %g | %zu | %.1f | %llu | %llu | %s | %.3f | %.1f | %.1f | %s |\n",
              dc.hosts(), dc.racks(), args.shape[2], args.shape[3], args.maxFlows, c.seconds,
              static_cast<unsigned long long>(c.trials),
              static_cast<unsigned long long>(c.bandwidthFlows), out.structure.signal.c_str(),
              rackAri, planRing / 1000, optimum / 1000, givenMs.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--scenario") {
    try {
      rankmap::log::configure(rankmap::Config::load());  // RANKMAP_LOG=debug: the trials
      std::vector<std::string> settings(argv + 2, argv + argc);
      std::string topologyOut, truthOut;
      while (settings.size() >= 2 &&
             (settings[0] == "--topology-out" || settings[0] == "--truth-out")) {
        (settings[0] == "--topology-out" ? topologyOut : truthOut) = settings[1];
        settings.erase(settings.begin(), settings.begin() + 2);
      }
      auto sc = rankmap::sim::Scenario::parse(settings);
      auto result = rankmap::sim::runScenario(sc);
      if (!topologyOut.empty()) result.topology.save(topologyOut);
      if (!truthOut.empty()) result.truth.save(truthOut);
      std::printf("%s\n", result.line().c_str());
    } catch (const rankmap::InvalidInput& e) {
      std::fprintf(stderr, "probe_scale_bench: %s\n", e.what());
      return 2;
    } catch (const rankmap::IoError& e) {  // --topology-out or --truth-out not writable
      std::fprintf(stderr, "probe_scale_bench: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  Args args = parseArgs(argc, argv);
  if (args.shape.empty())
    scaleTable(args);
  else
    emucloudRun(args);
  return 0;
}
