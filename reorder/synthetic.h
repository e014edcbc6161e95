// Synthetic topologies with a known hierarchy, for tests, benchmarks and fixtures.
//
// A tree network: hosts in racks, racks in pods, ... (levels innermost first). Each level has a
// fan-out (children per group), an uplink capacity and the one-way latency added by crossing
// it. "Measurements" are what the probes would see on that network: the single-flow rate of a
// pair is the narrowest link on its path, its latency the sum of the link latencies, each
// multiplied by an independent uniform factor in [1 - noise, 1 + noise] per direction. A
// fraction of the unordered pairs is missing entirely. Host names (h0000, ...) are assigned
// through a seeded hidden permutation, so the input order tells nothing about the groups (as on
// the emucloud testbed).
//
// Output::kLinks writes what a sparse probe would (topology.json schema 2): the true network as
// a link model ("links": every host link and uplink at its true capacity, both directions, and
// the true latencies), the true groups, and a seeded sample of measuredPerHost pairs per host as
// "measured", without the N x N matrices, so it scales to 4096 hosts and beyond in
// milliseconds. Output::kBoth writes the matrices (drawn exactly as for kMatrices) too, and
// samples measured pairs among those with a bandwidth value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/topology.h"
#include "reorder/hierarchy.h"
#include "reorder/network_model.h"

namespace rankmap::reorder {

struct SyntheticLevel {
  int fanout = 4;           // hosts per rack (level 0), racks per pod (level 1), ...
  double uplinkMbps = 250;  // this level's groups' uplink, each direction
  double latencyUs = 10;    // one-way latency added by crossing this level's uplink
};

enum class Signal { kModel, kFlat, kAbsent };  // as the network implies; the same for all; none
enum class Output { kMatrices, kLinks, kBoth };  // measured matrices; link model; both

struct SyntheticSpec {
  // Innermost first: {{32, 250, 5}, {16, 500, 20}} with topGroups 8 is 8 pods of 16 racks of
  // 32 hosts (4096 hosts); racks have 250 Mbit/s uplinks, pods 500.
  std::vector<SyntheticLevel> levels = {{4, 250, 10}};
  int topGroups = 2;                     // groups of the outermost level under the root
  double hostMbps = 1000;                // host link rate
  double hostLatencyUs = 2;              // one-way latency of a host link
  std::vector<double> hostMbpsOverride;  // per true host (before the hidden permutation)
  double noise = 0.0;                    // relative, uniform
  double missing = 0.0;                  // fraction of unordered pairs with no measurement
  Signal bandwidth = Signal::kModel;
  Signal latency = Signal::kModel;
  bool sharedLinks = false;  // emit one shared link per group with its uplink capacity
  bool shuffle = true;       // hidden permutation of hosts
  uint64_t seed = 1;
  Output output = Output::kMatrices;
  int measuredPerHost = 8;  // kLinks, kBoth: pairs sampled per sending host as "measured"

  size_t totalHosts() const;
};

struct SyntheticTopology {
  Topology topology;
  Hierarchy truth;     // levels innermost first, in topology host indices
  NetworkModel model;  // the true network (host rates, uplinks, link latencies)
};

// Throws InvalidInput on a spec that makes no network (no hosts, fan-out < 1).
SyntheticTopology makeSynthetic(const SyntheticSpec& spec);

}  // namespace rankmap::reorder
