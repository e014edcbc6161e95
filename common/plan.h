// plan.json: the planner's output, applied at launch, by the shims and by the engine.
// Schema in docs/formats.md.
//
// Contract: a Plan from fromJson()/load() is valid: `order` is a permutation of `hosts`,
// `permutation` maps every old rank to a distinct new rank with a host's ranks contiguous and in
// the same local order, and `hash` matches the content. Consumers that find any of this broken
// fall back to identity order (see Plan::identity) with a warning; they never guess.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/algorithm.h"
#include "common/json.h"
#include "common/topology.h"

namespace rankmap {

// One message-size range of a collective: [minBytes, maxBytes).
struct AlgoRange {
  static constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();
  uint64_t minBytes = 0;
  uint64_t maxBytes = kUnbounded;          // "max_bytes": null in JSON
  Algorithm algorithm = Algorithm::kRing;  // a plan algorithm (isPlanAlgorithm)
  double predictedUs = 0;         // at the geometric middle of the range (or minBytes*2 if open)
  double predictedBusbwGBps = 0;  // nccl-tests busbw, GB/s
  double lowerBoundUs = 0;        // any algorithm's bound at predictedAtBytes (lowerBoundUsPerByte)
  bool operator==(const AlgoRange&) const = default;
};

// One message-size range of Open MPI's decision for a collective (coll_tuned rules for a
// communicator of the plan's world size, in plan order): [minBytes, maxBytes) of the message size
// as coll_tuned measures it (the whole buffer: count x type size for allreduce, bcast and
// reduce; all ranks' blocks together for allgather and reduce_scatter), the algorithm to run
// there and its parameters.
struct OmpiRange {
  uint64_t minBytes = 0;
  uint64_t maxBytes = AlgoRange::kUnbounded;  // "max_bytes": null in JSON
  int algorithm = 0;       // an id of common/openmpi.h; "algorithm" is its name in JSON
  uint32_t segsize = 0;    // bytes per segment; 0 = unsegmented
  int faninout = 0;        // chain or tree fan-out; 0 = Open MPI's default
  double predictedUs = 0;  // at the range's representative size (as AlgoRange::predictedUs)
  double engineUs = 0;     // the included engine under this plan at that size; 0 = not modelled
  bool operator==(const OmpiRange&) const = default;
};

// A weighted spanning tree over host positions in `order` (Blink-style packing).
struct PackedTree {
  double weight = 0;        // fraction of the data carried by this tree
  std::vector<int> parent;  // parent[i] = parent position of host position i; -1 for the root
  bool operator==(const PackedTree&) const = default;
};

// One algorithm's time on the measured network in the plan's order, from the planner's cost
// model (reorder/cost_model.h): alphaUs + betaUsPerByte * bytes. alpha holds the latency of the
// critical path (the per-tier latencies of the hops it crosses), beta the share of the slowest
// link it crosses (an oversubscribed uplink when it crosses one).
struct AlgoModel {
  double alphaUs = 0;
  double betaUsPerByte = 0;
  bool operator==(const AlgoModel&) const = default;
};

// The planner's model of one collective, for consumers that choose among algorithms themselves
// (the NCCL tuner, nccl_tuner/): every algorithm it could model, and the bound no algorithm
// beats (reorder/cost_model.h lowerBoundUsPerByte: host links and uplink cuts).
struct CollectiveModel {
  std::map<Algorithm, AlgoModel> algorithms;
  double lowerBoundUsPerByte = 0;
  bool operator==(const CollectiveModel&) const = default;
};

struct Prediction {
  std::string basis;               // e.g. "allreduce 16 MiB ring"
  double planUs = 0;               // predicted time with the plan
  double inputOrderUs = 0;         // predicted time with the input ("provider") order
  double speedup = 1;              // inputOrderUs / planUs
  double bottleneckMbps = 0;       // ring bottleneck share with the plan
  double inputBottleneckMbps = 0;  // ... and with the input order
  // The plan's ring as the included engine runs it, with the plan's ring weights (planUs is
  // the ring with equal blocks, as an MPI job runs it in the plan's order); 0 = the plan has no
  // ring weights ("ring_weights_us" absent in JSON).
  double ringWeightsUs = 0;
  // What the engine's ring takes in the plan: ringWeightsUs when set, else planUs.
  double engineRingUs() const { return ringWeightsUs > 0 ? ringWeightsUs : planUs; }
  bool operator==(const Prediction&) const = default;
};

// Where a declared placement (a prior: AWS network nodes, GCP physical hosts, Kubernetes node
// labels; reorder/prior.h) and the measured groups disagree, at the lowest declared level and
// the planner's innermost measured level. Hosts are split into parts: kDeclaredTogether, hosts
// declared behind one switch (`declared[0]`) that the measurements put in different groups (one
// part per measured group, `measured`); kDeclaredApart, hosts the measurements put in one group
// (`measured[0]`) declared behind different switches (one part per switch, `declared`).
struct PriorDisagreement {
  static constexpr std::string_view kDeclaredTogether = "declared_together";
  static constexpr std::string_view kDeclaredApart = "declared_apart";
  std::string kind;
  std::vector<std::string> declared;  // lowest-level switch IDs (the last ID of each host)
  std::vector<int> measured;          // group indices of the measured level (Plan::groups[0])
  std::vector<std::vector<std::string>> parts;  // host names of each part
  double betweenMbps = 0;  // median measured rate between hosts of different parts; 0 = none
  bool operator==(const PriorDisagreement&) const = default;
};

// The declared placement a plan was made with and how it compares with the measurements.
// Recorded only; the plan's groups are the measured ones whatever the prior says.
struct PlanPrior {
  std::string source;               // the file it was read from, as given
  std::string format;               // "native", "aws", "gcp", "k8s_labels"
  std::vector<std::string> levels;  // declared level names, top first
  size_t declared = 0;              // hosts the prior declares (some may not be in the plan)
  // Plan hosts the prior covers -> their group IDs, top first (levels.size() each).
  std::map<std::string, std::vector<std::string>> hosts;
  // The measured level compared with: a level of Plan::groups (its first, "rack"), "network"
  // when the measurements show no level (every host one group), "" when not compared (the plan
  // fell back to identity: too little was measured to have groups).
  std::string measuredLevel;
  double sameGroupMbps = 0;   // median measured rate between hosts of one measured group
  double crossGroupMbps = 0;  // ... of different measured groups; 0 = no such pair
  std::vector<PriorDisagreement> disagreements;
  bool operator==(const PlanPrior&) const = default;
};

// One dimension of a job's device mesh (`rankmap plan --mesh`, PyTorch's init_device_mesh
// convention: outermost first, the last varies fastest; rank r sits on host position
// r / ranks_per_host of the plan's order) and the traffic each of its groups moves per step.
struct MeshDim {
  std::string name;        // "dp", "pp", "tp", ...: unique within the mesh
  int size = 1;            // ranks per group
  std::string collective;  // kMeshCollectives
  uint64_t bytes = 0;      // the collective's buffer per step (sendrecv: each way per stage pair)
  double predictedUs = 0;  // this dimension's phases (all its groups at once), plan's order
  // Each group alone (its own traffic only), plan's order, groups in reorder::meshGroups order
  // (JSON "groups_us", optional: empty when not given).
  std::vector<double> groupsUs;
  bool operator==(const MeshDim&) const = default;
};
inline constexpr std::string_view kMeshCollectives[] = {"allreduce", "allgather", "reducescatter",
                                                        "broadcast", "sendrecv",  "alltoall"};
// Whether `c` is one of kMeshCollectives; kMeshCollectivesText names them for errors.
inline bool isMeshCollective(std::string_view c) {
  for (auto k : kMeshCollectives)
    if (k == c) return true;
  return false;
}
inline constexpr std::string_view kMeshCollectivesText =
    "allreduce, allgather, reducescatter, broadcast, sendrecv or alltoall";

// The job's groups the plan placed (reorder/mesh.h): predicted step times (the dimensions one
// after the other, each with all its groups' traffic on the links at once), in three orders.
struct PlanMesh {
  std::vector<MeshDim> dims;   // outermost first
  double stepUs = 0;           // the plan's order
  double worldRingStepUs = 0;  // the order a plan for the world ring alone would take
  double inputStepUs = 0;      // the input order
  bool operator==(const PlanMesh&) const = default;
};

struct Plan {
  // 1: the world ring's plan; 2: adds "mesh" (written only by plans with one; 1 is read).
  static constexpr int kSchemaVersion = 2;
  static constexpr int kMinSchemaVersion = 1;

  std::vector<std::string> hosts;  // input order (rank order the launcher would use)
  std::vector<std::string> order;  // host names in new rank order
  std::vector<int> permutation;    // old rank -> new rank, size hosts.size() * ranksPerHost
  int ranksPerHost = 1;
  std::vector<HierarchyLevel> groups;
  double confidence = 0;                                      // 0..1; 0 = identity fallback
  std::map<std::string, std::vector<AlgoRange>> collectives;  // "allreduce" -> ranges
  std::vector<double> chunkWeights;  // per position in `order`; empty = uniform
  // Why the weights are uneven: kWeightsByHostRates or kWeightsByUplinks; empty when there are
  // none (and in plans written before it existed).
  std::string chunkWeightsBasis;
  static constexpr std::string_view kWeightsByHostRates = "host_rates";
  static constexpr std::string_view kWeightsByUplinks = "uplinks";
  // The ring allreduce's block sizes, per position in `order`: position p reduces (and holds
  // between the reduce-scatter and the allgather) ringWeights[p] of the vector, so the flow
  // from position p to p + 1 carries 2 - w[p] - w[p+1] of it (collectives/algorithms/ring.cc).
  // Uneven where a host link is slower than the others' (reorder/planner.cc, ringOffloadWeights):
  // that host's flows then carry about the vector once instead of 2 (n-1)/n. Empty = equal
  // blocks (and in plans written before it existed: "ring_weights" absent in JSON).
  std::vector<double> ringWeights;
  std::vector<PackedTree> trees;     // optional
  // Open MPI's decision per collective ("allreduce", "bcast", ...: common/openmpi.h) for the
  // world in plan order; empty when the planner did not model Open MPI.
  std::map<std::string, std::vector<OmpiRange>> openMpi;
  Prediction predicted;
  // Per collective of `collectives`: the cost model the ranges were chosen from. Empty in
  // identity plans and in plans written before it existed ("models" absent in JSON).
  std::map<std::string, CollectiveModel> models;
  std::string topologyHash;  // contentHash() of the source topology; may be empty
  int64_t epoch = 0;         // topology version the plan was made from
  std::string topologyTime;  // the topology's measurement time (RFC 3339 UTC); may be
                             // empty; the plan's age (common/plan_agreement.h) counts from it
  std::string hash;          // "sha256:<hex>" over the canonical content without "hash"
  // The declared placement compared with the measurements (`rankmap plan --prior`); absent in
  // plans made without one ("prior" absent in JSON).
  std::optional<PlanPrior> prior;
  // The job's mesh the order was chosen for (`rankmap plan --mesh`); absent in plans for the
  // world ring alone ("mesh" absent in JSON, schema_version 1).
  std::optional<PlanMesh> mesh;

  size_t worldSize() const { return hosts.size() * static_cast<size_t>(ranksPerHost); }
  // Identity plan: order = hosts, permutation = identity, confidence 0.
  static Plan identity(std::vector<std::string> hosts, int ranksPerHost = 1);
  // Builds `permutation` from `order` (hosts permuted, ranks within a host kept contiguous).
  void derivePermutation();
  // Sets `hash` from the content.
  void seal();
  std::string computeHash() const;
  // old rank -> new rank and back.
  int newRank(int oldRank) const { return permutation.at(static_cast<size_t>(oldRank)); }
  std::vector<int> inversePermutation() const;
  // Algorithm for `bytes` of `collective`; nullopt when the plan has no entry.
  std::optional<Algorithm> algorithmFor(std::string_view collective, uint64_t bytes) const;

  static Plan fromJson(const Json& doc, std::string_view source);
  static Plan parse(std::string_view text, std::string_view source);
  static Plan load(const std::string& path);
  Json toJson() const;  // includes "hash"
  std::string dump() const;
  void save(const std::string& path) const;  // atomic

  bool operator==(const Plan&) const = default;
};

}  // namespace rankmap
