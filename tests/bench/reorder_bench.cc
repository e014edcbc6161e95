// Planner benchmarks: reorder::makePlan on synthetic 3-level topologies (pods / racks / hosts,
// +-10% noise, 5% missing pairs), and the planner's peak memory per size.
//
//   reorder_bench                         Google Benchmark: time per plan, 64 .. 4096 hosts,
//                                         the stages at 4096 hosts, and plans from a link
//                                         model (BM_MakePlanFromLinks, 1024 and 4096 hosts)
//   reorder_bench --rss 512 1024 2048     peak resident memory of planning (one child per size)
//   reorder_bench --dump 64 4096          the plans (all four collectives), one after another
//   reorder_bench --crossings [SEEDS]     how often the plan's ring crosses each inferred
//                                         level's group boundaries (the minimum is the number
//                                         of groups), on 3-level topologies measured with one
//                                         or both signals, over SEEDS seeds (default 10)
//
// Targets (docs/performance.md, ## Planner): 64 hosts <= 50 ms, 4096 hosts <= 1 s, memory
// linear in the matrix size (N^2).
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "reorder/hierarchy.h"
#include "reorder/measurements.h"
#include "reorder/planner.h"
#include "reorder/synthetic.h"

namespace {

using namespace rankmap;
using namespace rankmap::reorder;

// 3-level hierarchies: hosts per rack, racks per pod, pods.
SyntheticSpec specFor(int hosts) {
  SyntheticSpec s;
  switch (hosts) {
    case 64:
      s.levels = {{8, 400, 5}, {4, 200, 20}}, s.topGroups = 2;
      break;
    case 256:
      s.levels = {{16, 400, 5}, {4, 200, 20}}, s.topGroups = 4;
      break;
    case 512:
      s.levels = {{16, 400, 5}, {8, 200, 20}}, s.topGroups = 4;
      break;
    case 1024:
      s.levels = {{16, 400, 5}, {8, 200, 20}}, s.topGroups = 8;
      break;
    case 2048:
      s.levels = {{32, 400, 5}, {8, 200, 20}}, s.topGroups = 8;
      break;
    case 4096:
      s.levels = {{32, 400, 5}, {16, 200, 20}}, s.topGroups = 8;
      break;
    default:
      std::fprintf(stderr, "no spec for %d hosts\n", hosts), std::exit(2);
  }
  s.noise = 0.10;
  s.missing = 0.05;
  s.seed = 7;
  return s;
}

const SyntheticTopology& topologyFor(int hosts) {
  static std::map<int, std::unique_ptr<SyntheticTopology>> cache;
  auto& slot = cache[hosts];
  if (!slot) {
    cache.clear();  // one 4096-host topology is ~1 GB; keep one at a time
    auto& fresh = cache[hosts];
    fresh = std::make_unique<SyntheticTopology>(makeSynthetic(specFor(hosts)));
    return *fresh;
  }
  return *slot;
}

PlanOptions benchOptions() {
  PlanOptions o;
  o.hashTopology = false;  // serialising 16M pairs to JSON is I/O, not planning
  o.source = "bench";
  return o;
}

void BM_MakePlan(benchmark::State& state) {
  const SyntheticTopology& syn = topologyFor(static_cast<int>(state.range(0)));
  PlanOptions o = benchOptions();
  double ari = 0;
  for (auto _ : state) {
    PlanResult r = planTopology(syn.topology, o);
    benchmark::DoNotOptimize(r.plan.order.data());
    ari = 1;
    for (size_t l = 0; l < syn.truth.levels.size(); ++l)
      ari = std::min(
          ari, l < r.hierarchy.levels.size()
                   ? adjustedRandIndex(syn.truth.levels[l].groupOf, r.hierarchy.levels[l].groupOf)
                   : 0.0);
  }
  state.counters["hosts"] = static_cast<double>(syn.topology.size());
  state.counters["min_ARI"] = ari;
}
BENCHMARK(BM_MakePlan)
    ->Arg(64)
    ->Arg(256)
    ->Arg(512)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// The stages at 4096 hosts, to see where the time goes.
void BM_Stage(benchmark::State& state) {
  const SyntheticTopology& syn = topologyFor(4096);
  std::vector<std::string> warnings;
  Measurements m = cleanMeasurements(syn.topology, "bench", warnings);
  Hierarchy h = inferHierarchy(m, {});
  NetworkModel net = inferNetwork(m, h, {}, {}, warnings);
  RingParams rp;
  std::vector<int> ring = hierarchicalRing(net);
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0:
        benchmark::DoNotOptimize(cleanMeasurements(syn.topology, "bench", warnings));
        break;
      case 1:
        benchmark::DoNotOptimize(inferHierarchy(m, {}));
        break;
      case 2:
        benchmark::DoNotOptimize(inferNetwork(m, h, {}, {}, warnings));
        break;
      case 3:
        benchmark::DoNotOptimize(improveRing(net, ring, rp));
        break;
      case 4: {
        CostContext ctx;
        ctx.net = &net;
        ctx.order = ring;
        ctx.ring = rp;
        benchmark::DoNotOptimize(algorithmCosts(ctx, "allreduce"));
        break;
      }
    }
  }
  static const char* kNames[] = {"clean", "hierarchy", "network", "ring", "costs"};
  state.SetLabel(kNames[state.range(0)]);
}
BENCHMARK(BM_Stage)
    ->DenseRange(0, 4)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

// A sparse probe's topology (schema 2): pods x racks x 32 hosts as a link model, host links
// 1000 Mbit/s, rack uplinks oversubscribed 4:1, pod uplinks 2:1 (tests/sim's datacenter), groups
// given, ~8 measured pairs per host, no matrices. 1024 hosts: 4 pods x 8 racks; 4096: 8 x 16.
SyntheticSpec linkSpecFor(int hosts) {
  int pods = hosts == 1024 ? 4 : hosts == 4096 ? 8 : 0, racks = hosts == 1024 ? 8 : 16;
  if (pods == 0) std::fprintf(stderr, "no link spec for %d hosts\n", hosts), std::exit(2);
  SyntheticSpec s;
  double rack = 32 * 1000.0 / 4, pod = racks * rack / 2;
  s.levels = {{32, rack, 10}, {racks, pod, 20}};
  s.topGroups = pods;
  s.hostLatencyUs = 5;
  s.output = Output::kLinks;
  s.seed = 7;
  return s;
}

// planTopology from a link model, as `rankmap plan -c all` runs it (the topology hash included:
// without matrices it is small).
void BM_MakePlanFromLinks(benchmark::State& state) {
  SyntheticTopology syn = makeSynthetic(linkSpecFor(static_cast<int>(state.range(0))));
  PlanOptions o;
  o.source = "bench";
  o.collectives = {"allreduce", "allgather", "reducescatter", "broadcast"};
  for (auto _ : state) {
    PlanResult r = planTopology(syn.topology, o);
    benchmark::DoNotOptimize(r.plan.order.data());
  }
  state.counters["hosts"] = static_cast<double>(syn.topology.size());
}
BENCHMARK(BM_MakePlanFromLinks)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

long residentKiB() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// The resident high-water mark (VmHWM, KiB), or -1.
long peakKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

// Resets VmHWM to the current resident size (Linux >= 4.0), so that the peak measured next is
// the planner's, not the generator's.
bool resetPeak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// Peak memory of planning `hosts`: in a child process, so each size starts fresh.
int rssMode(int argc, char** argv) {
  std::printf("%8s %14s %16s %18s %14s\n", "hosts", "topology MiB", "plan peak MiB",
              "plan peak B/pair", "ratio to N^2");
  for (int i = 2; i < argc; ++i) {
    int hosts = std::atoi(argv[i]);
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      SyntheticTopology syn = makeSynthetic(specFor(hosts));
      // The generator's own high-water mark may exceed the planner's: reset it, then the
      // planner's peak is the high-water mark after planning minus the resident size before.
      // (Without the reset, ru_maxrss is the best available and may hide the planner's peak.)
      bool reset = resetPeak();
      long before = residentKiB();
      Plan p = makePlan(syn.topology, benchOptions());
      long high = reset ? peakKiB() : -1;
      if (high < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        high = ru.ru_maxrss;
      }
      double n2 = double(hosts) * hosts;
      double peak = std::max<long>(high - before, 0) / 1024.0;
      std::printf("%8d %14.1f %16.1f %18.1f %14.3g\n", hosts, before / 1024.0, peak,
                  peak * 1048576.0 / n2, peak * 1048576.0 / n2 / 8);
      std::fflush(stdout);
      std::_Exit(p.order.empty() ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  }
  return 0;
}

// Writes each size's plan (all four collectives) to stdout, one document after another:
// for checking that a change keeps the plans byte for byte.
int dumpMode(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    int hosts = std::atoi(argv[i]);
    SyntheticTopology syn = makeSynthetic(specFor(hosts));
    PlanOptions o = benchOptions();
    o.collectives = {"allreduce", "allgather", "reducescatter", "broadcast"};
    std::printf("%s\n", makePlan(syn.topology, o).dump().c_str());
  }
  return 0;
}

// Crossings of the plan's ring, per inferred level, against the minimum (one per group: every
// group contiguous), and the plan's ring time on the true network against the depth-first walk
// of the true groups (optimal on a tree). Rows: 3 pods x 5 racks x 6 hosts measured with
// bandwidth only, latency only and both (+-10% noise); then the benchmark's 64-1024 host
// topologies (+-10%, 5% missing pairs) with both signals and with bandwidth only.
int crossingsMode(int argc, char** argv) {
  int seeds = argc > 2 ? std::atoi(argv[2]) : 10;
  struct Case {
    std::string name;
    SyntheticSpec spec;
  };
  std::vector<Case> cases;
  for (auto [name, bw, lat] : {std::tuple{"3x5x6 bandwidth only", Signal::kModel, Signal::kFlat},
                               std::tuple{"3x5x6 latency only", Signal::kFlat, Signal::kModel},
                               std::tuple{"3x5x6 both", Signal::kModel, Signal::kModel}}) {
    SyntheticSpec s;
    s.levels = {{6, 400, 5}, {5, 200, 20}};
    s.topGroups = 3;
    s.noise = 0.10;
    s.bandwidth = bw;
    s.latency = lat;
    cases.push_back({name, s});
  }
  for (int hosts : {64, 256, 512, 1024}) {
    cases.push_back({std::to_string(hosts) + " both", specFor(hosts)});
    SyntheticSpec s = specFor(hosts);
    s.latency = Signal::kFlat;
    cases.push_back({std::to_string(hosts) + " bandwidth only", s});
  }
  std::printf("%-22s %6s %5s  %-36s %10s %12s\n", "topology", "hosts", "seeds",
              "crossings per level: mean (max) / min", "contiguous", "time / walk");
  for (const auto& c : cases) {
    size_t n = c.spec.totalHosts();
    int runs = n >= 1024 ? std::max(1, seeds / 5) : n >= 512 ? std::max(1, seeds / 2) : seeds;
    std::vector<double> sum(4, 0), worst(4, 0), least(4, 0);
    int contiguous = 0;
    double ratio = 0;
    size_t levels = 0;
    for (int seed = 1; seed <= runs; ++seed) {
      SyntheticSpec s = c.spec;
      s.seed = static_cast<uint64_t>(seed);
      SyntheticTopology syn = makeSynthetic(s);
      PlanResult r = planTopology(syn.topology, benchOptions());
      bool all = true;
      levels = std::max(levels, r.hierarchy.levels.size());
      for (size_t l = 0; l < r.hierarchy.levels.size() && l < 4; ++l) {
        const auto& g = r.hierarchy.levels[l].groupOf;
        size_t cross = 0;
        for (size_t i = 0; i < n; ++i) cross += g[r.order[i]] != g[r.order[(i + 1) % n]];
        sum[l] += cross;
        worst[l] = std::max(worst[l], double(cross));
        least[l] = r.hierarchy.levels[l].groups;
        all = all && cross == static_cast<size_t>(r.hierarchy.levels[l].groups);
      }
      contiguous += all;
      RingParams p;
      ratio += evaluateRing(syn.model, r.order, p).objectiveUs /
               evaluateRing(syn.model, hierarchicalRing(syn.model), p).objectiveUs;
    }
    std::string per;
    for (size_t l = 0; l < levels && l < 4; ++l) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%.1f (%.0f) / %.0f", l ? ", " : "", sum[l] / runs, worst[l],
                    least[l]);
      per += buf;
    }
    std::printf("%-22s %6zu %5d  %-36s %4d of %-3d %12.4f\n", c.name.c_str(), n, runs, per.c_str(),
                contiguous, runs, ratio / runs);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--crossings") == 0) return crossingsMode(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--rss") == 0) return rssMode(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--dump") == 0) return dumpMode(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
