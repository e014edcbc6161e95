// Placing a job's mesh (reorder/mesh.h): the heuristic against references, on networks and
// meshes drawn from a seed.
//
//   mesh_bench small [cases=200] [seed=1]
//       Random jobs of 4-12 hosts (racks of random sizes, 1 or 2 ranks per host, 2-3 mesh
//       dimensions with random traffic): placeMesh's predicted step against the exact search's
//       (exactMeshOrder), and the exact search's against the lower bound (which must never be
//       above it). Prints the ratios' distributions and every case above 1.05.
//   mesh_bench large [hosts=1024] [rack=32] [pod=8] [over=4] [podover=2]
//   [mesh=pp=4,dp=hosts/4,tp=rph]
//                    [rph=8] [traffic=...] [starts=8] [anneal=0] [temperature=0.05] [norm=0]
//                    [seed=1]
//       A synthetic link model (racks of `rack` hosts at 1:`over`, pods of `pod` racks at
//       1:`podover`, provider order shuffled) planned by `rankmap plan --mesh` (planTopology,
//       timed), against a baseline that does not start from the heuristic's layouts: local
//       search (MeshModel::improve, `passes` passes of `tries` partners per host, default 20 and
//       64) from `starts` random orders; simulated annealing (MeshModel::anneal, `anneal`
//       moves from `temperature` x the start's energy, the bound plus `norm` x the link times'
//       2-norm, default 0 moves = not run, then the local
//       search) from as many random orders; and the same search continued from the heuristic's
//       order; and the lower bound over every order (MeshModel::lowerBoundUs). Prints the
//       predicted steps, the world ring's order and the input order.
// Predicted times are the step model's (reorder/mesh.h), the planner's own model of the link
// model it was given: this compares searches, not the model with a network.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/config.h"
#include "reorder/mesh.h"
#include "reorder/planner.h"
#include "reorder/synthetic.h"

namespace {

using namespace rankmap;
using namespace rankmap::reorder;

std::map<std::string, std::string> keyValues(int argc, char** argv, int first) {
  std::map<std::string, std::string> kv;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    size_t eq = a.find('=');
    if (eq == std::string::npos) {
      fmt::print(stderr, "mesh_bench: '{}': expected KEY=VALUE\n", a);
      std::exit(2);
    }
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return kv;
}

double num(const std::map<std::string, std::string>& kv, const std::string& k, double def) {
  auto it = kv.find(k);
  return it == kv.end() ? def : std::stod(it->second);
}
std::string str(const std::map<std::string, std::string>& kv, const std::string& k,
                const std::string& def) {
  auto it = kv.find(k);
  return it == kv.end() ? def : it->second;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

int small(const std::map<std::string, std::string>& kv) {
  int cases = static_cast<int>(num(kv, "cases", 200));
  std::mt19937_64 rng(static_cast<uint64_t>(num(kv, "seed", 1)));
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  const char* colls[] = {"allreduce", "allgather", "sendrecv", "alltoall", "broadcast"};
  const char* sizes[] = {"1MiB", "8MiB", "64MiB", "256MiB"};
  std::vector<double> ratios, boundRatios;
  int above = 0, broken = 0;
  for (int c = 0; c < cases; ++c) {
    // Hosts in racks: 2-4 racks of 1-6 hosts, at most 12 hosts.
    std::vector<int> label;
    int racks = pick(2, 4);
    for (int r = 0; r < racks && label.size() < 12; ++r)
      for (int k = pick(1, 6); k > 0 && label.size() < 12; --k) label.push_back(r);
    if (label.size() < 4) continue;
    std::shuffle(label.begin(), label.end(), rng);  // provider order
    Hierarchy h;
    h.n = label.size();
    Hierarchy::Level level;
    level.name = "rack";
    level.confidence = 1;
    std::vector<int> map(5, -1);
    int next = 0;
    for (int g : label) {
      if (map[g] < 0) map[g] = next++;
      level.groupOf.push_back(map[g]);
    }
    level.groups = next;
    h.levels.push_back(level);
    double host = 1000, uplink = host / pick(2, 8);
    NetworkModel net = modelFromHierarchy(h, std::vector<double>(h.n, host), {uplink}, 2, {10});
    int rph = pick(1, 2);
    size_t world = h.n * static_cast<size_t>(rph);
    // 2-3 dimensions: the world's divisors in random order.
    std::vector<int> dimSizes;
    size_t left = world;
    int ndims = pick(2, 3);
    for (int d = 0; d < ndims - 1; ++d) {
      std::vector<int> divisors;
      for (size_t k = 2; k < left; ++k)
        if (left % k == 0) divisors.push_back(static_cast<int>(k));
      if (divisors.empty()) break;
      int k = divisors[rng() % divisors.size()];
      dimSizes.push_back(k);
      left /= static_cast<size_t>(k);
    }
    dimSizes.push_back(static_cast<int>(left));
    std::vector<MeshDim> dims;
    std::string text;
    for (size_t d = 0; d < dimSizes.size(); ++d) {
      MeshDim m;
      m.name = fmt::format("d{}", d);
      m.size = dimSizes[d];
      m.collective = colls[rng() % 5];
      m.bytes = *parseSize(sizes[rng() % 4]);
      text += fmt::format("{}{}={}:{}:{}", d ? "," : "", m.name, m.size, m.collective, m.bytes);
      dims.push_back(m);
    }
    if (kv.count("only") && c != static_cast<int>(num(kv, "only", -1))) continue;
    RingParams rp;
    rp.ranksPerHost = rph;
    MeshModel model(net, dims, rp);
    std::vector<int> walk = hierarchicalRing(net);
    MeshPlacement p = placeMesh(model, walk, 0.01);
    auto exact = exactMeshOrder(model, 100000);
    if (!exact) continue;
    double ratio = p.times.stepUs / exact->times.stepUs;
    ratios.push_back(ratio);
    double bound = model.lowerBoundUs();
    boundRatios.push_back(exact->times.stepUs / bound);
    if (bound > exact->times.stepUs * (1 + 1e-9)) {
      ++broken;
      fmt::print("case {}: lower bound {:.6g} us above the exact search's {:.6g} us\n", c, bound,
                 exact->times.stepUs);
    }
    if (ratio > 1.05) {
      ++above;
      fmt::print(
          "case {}: racks {} rph {} mesh {}: heuristic {:.4g} us ({}) exact {:.4g} us: {:.3f}\n", c,
          fmt::join(label, ""), rph, text, p.times.stepUs, p.basis, exact->times.stepUs, ratio);
      if (kv.count("only"))
        fmt::print("  heuristic order {} dims {}\n  exact order {} dims {}\n",
                   fmt::join(p.order, ","), fmt::join(p.times.dimUs, ","),
                   fmt::join(exact->order, ","), fmt::join(exact->times.dimUs, ","));
    }
  }
  if (ratios.empty()) return 1;
  fmt::print(
      "small: {} cases, heuristic / exact: median {:.4f}, p90 {:.4f}, max {:.4f}; "
      "above 1.05: {}\n"
      "  exact / lower bound: median {:.4f}, p90 {:.4f}, max {:.4f}; bound above exact: {}\n",
      ratios.size(), percentile(ratios, 0.5), percentile(ratios, 0.9), percentile(ratios, 1.0),
      above, percentile(boundRatios, 0.5), percentile(boundRatios, 0.9),
      percentile(boundRatios, 1.0), broken);
  return above || broken ? 1 : 0;
}

int large(const std::map<std::string, std::string>& kv) {
  int hosts = static_cast<int>(num(kv, "hosts", 1024));
  int rack = static_cast<int>(num(kv, "rack", 32));
  int pod = static_cast<int>(num(kv, "pod", 8));
  double over = num(kv, "over", 4), podOver = num(kv, "podover", 2);
  int rph = static_cast<int>(num(kv, "rph", 8));
  int starts = static_cast<int>(num(kv, "starts", 8));
  uint64_t seed = static_cast<uint64_t>(num(kv, "seed", 1));
  SyntheticSpec s;
  s.hostMbps = 10000;
  double rackUp = s.hostMbps * rack / over;
  s.levels = {{rack, rackUp, 5}, {pod, rackUp * pod / podOver, 20}};
  s.topGroups = std::max(1, hosts / (rack * pod));
  s.output = Output::kLinks;
  s.seed = seed;
  SyntheticTopology t = makeSynthetic(s);
  PlanOptions o;
  o.source = "synthetic";
  o.ranksPerHost = rph;
  o.useTopologyGroups = true;
  o.openMpi = false;
  o.mesh = parseMesh(str(kv, "mesh", fmt::format("pp=4,dp={},tp={}", hosts / 4, rph)), "mesh");
  meshTraffic(o.mesh, str(kv, "traffic", ""), "traffic");
  auto t0 = std::chrono::steady_clock::now();
  PlanResult r = planTopology(t.topology, o);
  double planS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RingParams rp;
  rp.ranksPerHost = rph;
  MeshModel model(r.model, o.mesh, rp);
  double heuristic = model.stepUs(r.order);
  auto tb = std::chrono::steady_clock::now();
  double bound = model.lowerBoundUs();
  double boundS = std::chrono::duration<double>(std::chrono::steady_clock::now() - tb).count();
  // The baseline: local search from random orders.
  std::mt19937_64 rng(seed * 7919 + 1);
  double baseline = INFINITY;
  auto t1 = std::chrono::steady_clock::now();
  std::vector<int> start(r.model.n);
  std::iota(start.begin(), start.end(), 0);
  for (int k = 0; k < starts; ++k) {
    std::shuffle(start.begin(), start.end(), rng);
    std::vector<int> o2 =
        model.improve(start, static_cast<int>(num(kv, "passes", 20)),
                      static_cast<size_t>(num(kv, "tries", 64)), seed + static_cast<uint64_t>(k));
    baseline = std::min(baseline, model.stepUs(o2));
  }
  // ... and simulated annealing (MeshModel::anneal, `anneal` moves, then the local search) from
  // as many random orders: a baseline that needs neither the layouts nor a good start.
  size_t moves = static_cast<size_t>(num(kv, "anneal", 0));
  double annealed = INFINITY;
  for (int k = 0; moves > 0 && k < starts; ++k) {
    std::shuffle(start.begin(), start.end(), rng);
    std::vector<int> o2 = model.anneal(start, moves, num(kv, "temperature", 0.05),
                                       num(kv, "norm", 0), seed * 31 + static_cast<uint64_t>(k));
    o2 = model.improve(o2, static_cast<int>(num(kv, "passes", 20)),
                       static_cast<size_t>(num(kv, "tries", 64)), seed + static_cast<uint64_t>(k));
    annealed = std::min(annealed, model.stepUs(o2));
  }
  // ... and from the heuristic's own order, searched as long.
  double further = model.stepUs(model.improve(r.order, static_cast<int>(num(kv, "passes", 20)),
                                              static_cast<size_t>(num(kv, "tries", 64)), seed));
  double baseS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const PlanMesh& m = *r.plan.mesh;
  fmt::print(
      "large: {} hosts x {} ranks, racks of {} at 1:{}, pods of {} racks at 1:{}, mesh {}, seed "
      "{}\n"
      "  plan (rankmap plan --mesh): {:.2f} s, basis {}\n"
      "  predicted step: heuristic {:.4g} s; baseline ({:.1f} s): local search from {} random "
      "starts {:.4g} s, annealing from as many {:.4g} s, from the heuristic's order {:.4g} s; "
      "heuristic / best {:.4f}\n"
      "  lower bound over every order (MeshModel::lowerBoundUs, {:.2f} s): {:.4g} s; heuristic / "
      "bound {:.4f}\n"
      "  world ring's order {:.4g} s ({:.2f}x the heuristic), input order {:.4g} s ({:.2f}x)\n",
      r.model.n, rph, rack, over, pod, podOver, meshText(o.mesh), seed, planS, r.meshBasis,
      heuristic / 1e6, baseS, starts, baseline / 1e6, annealed / 1e6, further / 1e6,
      heuristic / std::min({baseline, further, annealed}), boundS, bound / 1e6, heuristic / bound,
      m.worldRingStepUs / 1e6, m.worldRingStepUs / heuristic, m.inputStepUs / 1e6,
      m.inputStepUs / heuristic);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "small") return small(keyValues(argc, argv, 2));
    if (mode == "large") return large(keyValues(argc, argv, 2));
  } catch (const std::exception& e) {
    fmt::print(stderr, "mesh_bench: {}\n", e.what());
    return 2;
  }
  fmt::print(stderr, "usage: mesh_bench small|large [KEY=VALUE...] (see the file comment)\n");
  return 2;
}
