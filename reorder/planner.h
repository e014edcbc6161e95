// The planner: topology.json in, plan.json out. The entry point other modules call.
//
//   Plan plan = reorder::makePlan(topology, options);
//
// Steps: clean the measurements (measurements.h), infer the hierarchy (hierarchy.h), infer the
// network model (network_model.h), order the ring (ring.h), model every algorithm and choose one
// per size range (cost_model.h) -- with a job's mesh (mesh.h), the order for all its groups
// comes between the ring and the algorithms -- model Open MPI's algorithms in the plan's order and
// choose its decision per size range (Plan::openMpi), predict the gain over the input order.
// Deterministic: the same topology and options give the same plan, byte for byte.
//
// A topology with a link model (topology.json "links", schema 2) skips the first three: the
// hierarchy is its groups, the network model its links (networkFromLinks); the matrices, when
// present, give only the latency. Such a plan never falls back for want of measured pairs
// (every pair is covered by the model) and says how many pairs were measured.
//
// Fallback (documented in docs/planner.md): a single host, a host with no measured pair at all,
// or fewer than kMinCoverage of the pairs measured give the identity plan (input order,
// confidence 0, no algorithm table) with a warning. Bad input that is not about missing data
// (asymmetry beyond tolerance, unknown hosts, groups that do not nest, bad options) throws
// InvalidInput naming the source.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/hosts_file.h"
#include "common/plan.h"
#include "common/topology.h"
#include "reorder/cost_model.h"
#include "reorder/hierarchy.h"
#include "reorder/mesh.h"
#include "reorder/network_model.h"
#include "reorder/prior.h"
#include "reorder/ring.h"

namespace rankmap::reorder {

inline constexpr double kMinCoverage = 0.5;

struct PlanOptions {
  int ranksPerHost = 1;
  std::vector<std::string> collectives = {"allreduce"};
  uint64_t ringBytes = 16ull << 20;  // design size of the ring order and of Plan::predicted
  double stepOverheadUs = 0;         // per hop on top of the measured latency
  // The rate all flows together can reach (NetworkModel::fabricMbps): +inf for a real network;
  // an emulated cloud on one machine is bounded by its CPUs.
  double fabricMbps = std::numeric_limits<double>::infinity();
  double fabricBurstBytes = 0;    // NetworkModel::fabricBurstBytes
  bool openMpi = true;            // model Open MPI's algorithms: Plan::openMpi
  double intraHostMbps = 100000;  // rank to rank on one host
  double intraHostLatencyUs = 1;
  size_t exactMaxHosts = kExactMaxHosts;  // exact ring search up to this many hosts
  double noise = kProbeNoise;       // relative noise of measured values: ring times closer than the
                                    // noise of what differs are equal (RingParams::noise)
  double minGain = 0.01;            // keep the input order unless the plan is this much
                                    // faster (or no slower and loading the links less)
  bool useTopologyGroups = false;   // take topology.json "groups" instead of inferring (always
                                    // with a link model: its links belong to those groups)
  bool hashTopology = true;         // set Plan::topologyHash (serialises the topology)
  bool chunkWeights = true;         // consider uneven hier shares (false: uniform, for
                                    // comparisons: `rankmap plan --uniform-shares`)
  std::string source = "topology";  // names the input in messages
  // A declared placement to compare with the measured groups and record in Plan::prior
  // (`rankmap plan --prior`); it changes nothing else in the plan (measured groups win).
  std::optional<DeclaredPlacement> prior;
  // The job's mesh with each dimension's traffic (reorder/mesh.h; empty = the world ring alone):
  // the order is chosen for every group's traffic at once (Plan::mesh), and the algorithms are
  // then chosen in that order. `meshSource` names it in messages.
  std::vector<MeshDim> mesh;
  std::string meshSource = "--mesh";
};

struct PlanResult {
  Plan plan;
  Hierarchy hierarchy;
  NetworkModel model;
  std::vector<int> order;  // topology host index by position
  RingCost planRing, inputRing;
  std::map<std::string, std::vector<AlgoCost>> algorithms;  // with the plan's weights and trees
  uint64_t designBytes = 0;                                 // PlanOptions::ringBytes
  std::map<std::string, std::vector<MpiAlgoCost>> mpiAlgorithms;  // per Open MPI collective
  std::vector<std::string> warnings;
  bool fallback = false;
  double coverage = 0;       // of pairs measured; 1 with a link model (complete by the model)
  bool linkModel = false;    // planned from topology.json "links"
  size_t measuredPairs = 0;  // with a link model: directed pairs measured; the others inferred
  std::vector<int> worldRingOrder;  // with a mesh: the order the world ring alone would take
  std::string meshBasis;            // with a mesh: which candidate order won (MeshPlacement)
};

// The plan with everything that went into it (for `rankmap plan`/`show` and tests).
PlanResult planTopology(const Topology& topology, const PlanOptions& options);
// The plan alone.
Plan makePlan(const Topology& topology, const PlanOptions& options);

// The topology restricted to `hosts`, in their order (that order becomes the input order): the
// matrices (when it has them), shared links, groups (emptied groups dropped), the link model
// (host links in the new order, the uplinks of the groups kept) and the measured pairs between
// kept hosts (in the new indices). Throws InvalidInput naming `hostsSource` and the line of a
// host the topology lacks.
Topology selectHosts(const Topology& topology, const std::vector<HostsEntry>& hosts,
                     std::string_view hostsSource, std::string_view topologySource);

}  // namespace rankmap::reorder
