// Helpers shared by the NCCL tuner tests: plans with measured networks, NCCL-shaped cost tables,
// and the tuner test double's record.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/plan.h"
#include "nccl_tuner/tuner_abi.h"
#include "reorder/planner.h"
#include "reorder/synthetic.h"

namespace rankmap::testing {

namespace tabi = rankmap::nccl_tuner::abi;

// `racks` racks of `perRack` hosts (named in rack order), host links 10 Gbit/s with 5 us each,
// rack uplinks of `uplinkMbps` adding `uplinkLatencyUs` each: a sparse probe's link model.
inline Topology racksTopology(double uplinkMbps, double uplinkLatencyUs, int racks = 2,
                              int perRack = 4) {
  reorder::SyntheticSpec spec;
  spec.levels = {{perRack, uplinkMbps, uplinkLatencyUs}};
  spec.topGroups = racks;
  spec.hostMbps = 10000;
  spec.hostLatencyUs = 5;
  spec.shuffle = false;
  spec.output = reorder::Output::kLinks;
  return reorder::makeSynthetic(spec).topology;
}

// The planner's plan for `t`, modelling every collective it knows.
inline Plan modelPlan(const Topology& t, int ranksPerHost = 1) {
  reorder::PlanOptions o;
  o.ranksPerHost = ranksPerHost;
  o.collectives.assign(std::begin(reorder::kCollectives), std::end(reorder::kCollectives));
  o.useTopologyGroups = true;
  return reorder::makePlan(t, o);
}

// A cost table shaped as NCCL hands it over: `algos` rows (7 since NCCL 2.23, 6 before) of 3
// protocols, in microseconds, with NCCL_ALGO_PROTO_IGNORE where a cloud NCCL could not run the
// entry (CollNet, NVLS; PAT, which NCCL runs for allgather and reducescatter only, with Simple,
// when `pat`). Values are what NCCL's own model might say for a few MiB on a fast NIC: tree
// slightly cheaper than ring, LL128 slightly cheaper than Simple.
struct Table {
  int algos = 7;
  int protos = 3;
  std::vector<float> v;
  explicit Table(int numAlgo = 7, bool pat = false)
      : algos(numAlgo), v(static_cast<size_t>(numAlgo) * 3, -1.0f) {
    at(tabi::kTree, tabi::kLL) = 300;
    at(tabi::kTree, tabi::kLL128) = 48;
    at(tabi::kTree, tabi::kSimple) = 49;
    at(tabi::kRing, tabi::kLL) = 310;
    at(tabi::kRing, tabi::kLL128) = 49.5f;
    at(tabi::kRing, tabi::kSimple) = 50;
    if (pat && numAlgo > tabi::kPat) at(tabi::kPat, tabi::kSimple) = 60;
  }
  float& at(int a, int p) { return v[static_cast<size_t>(a * protos + p)]; }
  float at(int a, int p) const { return v[static_cast<size_t>(a * protos + p)]; }
  float** raw() { return reinterpret_cast<float**>(v.data()); }
  // The entry NCCL would pick: the cheapest usable one.
  std::pair<int, int> cheapest() const {
    std::pair<int, int> best{-1, -1};
    for (int a = 0; a < algos; ++a)
      for (int p = 0; p < protos; ++p)
        if (at(a, p) >= 0 && (best.first < 0 || at(a, p) < at(best.first, best.second)))
          best = {a, p};
    return best;
  }
};

// Wire efficiency of NCCL's protocols, written out here independently of nccl_tuner/costs.cc.
inline double efficiency(int proto) {
  return proto == tabi::kLL ? 0.5 : proto == tabi::kLL128 ? 120.0 / 128.0 : 1.0;
}

// What the tuner should add to (algo, proto) for `bytes` of `collective` under `plan`.
inline double expectedAdd(const Plan& plan, const std::string& collective, int algo, int proto,
                          double bytes) {
  const CollectiveModel& m = plan.models.at(collective);
  auto model = [&](Algorithm a) {
    auto it = m.algorithms.find(a);
    return it == m.algorithms.end() ? AlgoModel{0, m.lowerBoundUsPerByte} : it->second;
  };
  AlgoModel am{0, m.lowerBoundUsPerByte};
  if (algo == tabi::kRing) am = model(Algorithm::kRing);
  if (algo == tabi::kTree || algo == tabi::kNvlsTree) am = model(Algorithm::kTree);
  if (algo == tabi::kPat) am = model(Algorithm::kRhd);
  return am.alphaUs + bytes * am.betaUsPerByte / efficiency(proto);
}

// The test double plugin's record of calls (tuner_test_double.cc), through its exports.
inline std::string doubleLog(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return "(not loaded)";
  auto log = reinterpret_cast<const char* (*)()>(dlsym(h, "tunerDoubleLog"));
  std::string out = log != nullptr ? log() : "(no tunerDoubleLog)";
  dlclose(h);
  return out;
}
inline void resetDoubleLog(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return;
  if (auto reset = reinterpret_cast<void (*)()>(dlsym(h, "tunerDoubleReset"))) reset();
  dlclose(h);
}

}  // namespace rankmap::testing
