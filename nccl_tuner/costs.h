// What the tuner adds to NCCL's cost table: the time of each algorithm on the measured network,
// from the plan's models (Plan::models, the planner's cost model in plan order).
//
// NCCL estimates every (algorithm, protocol) of a collective from what its topology detection
// sees: within a node, NVLink and PCI; between nodes, the NIC's line rate. In a cloud that misses
// what lies beyond the NIC: an oversubscribed rack uplink, the latency each switch tier adds,
// other tenants. The planner measured exactly that and modelled each algorithm on it in the
// plan's order (alpha + beta * bytes: alpha from the per-tier latencies of the hops on the
// critical path, beta from the share of the slowest link crossed). For an inter-node
// collective, every entry NCCL left usable becomes
//
//   NCCL's estimate + alpha(algorithm) + bytes * beta(algorithm) / efficiency(protocol)
//
// so NCCL's knowledge of the node (and of its own protocols' latencies) stays, and the choice
// between ring and tree, and among protocols, also weighs the network NCCL cannot see. NCCL's
// own estimate of the NIC's share is thereby counted twice; it is the same for every algorithm
// that crosses the NIC alike, and small beside a slow uplink, which is the case this is for.
//
// Mapping NCCL's algorithms to the plan's: ring -> ring, tree -> tree (the planner models NCCL's
// double binary tree), NVLS tree -> tree (its inter-node part is that tree), PAT -> rhd (log
// steps at doubling distances, as PAT's Bruck-like schedule). CollNet, NVLS and unknown
// algorithms, and any algorithm the plan has no model of, get the bound every algorithm pays:
// bytes * lowerBoundUsPerByte / efficiency, no latency term.
//
// Protocol efficiency on the wire (NCCL sends its protocol buffers as they are): LL 0.5 (a 4-byte
// flag with every 4 bytes of data), LL128 120/128 (an 8-byte flag per 128-byte line), Simple 1.
// Protocols unknown here count as 1.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "common/plan.h"

namespace rankmap::nccl_tuner {

// NCCL's cost table of one collective as getCollInfo receives it: numAlgo x numProto floats,
// row-major, in one block behind the float** (tuner_abi.h). Does not own the memory.
class CostTable {
 public:
  // Throws InvalidInput when `raw` is null or a dimension is outside [1, kMaxDim].
  CostTable(float** raw, int numAlgo, int numProto);
  static constexpr int kMaxDim = 64;

  int algorithms() const { return numAlgo_; }
  int protocols() const { return numProto_; }
  float& at(int algo, int proto) { return data_[static_cast<size_t>(algo * numProto_ + proto)]; }
  float at(int algo, int proto) const {
    return data_[static_cast<size_t>(algo * numProto_ + proto)];
  }
  // NCCL_ALGO_PROTO_IGNORE, or any negative value: an entry NCCL cannot use.
  bool usable(int algo, int proto) const { return at(algo, proto) >= 0; }

  std::vector<float> values() const { return {data_, data_ + size()}; }
  void assign(const std::vector<float>& values);  // values.size() == size()
  size_t size() const { return static_cast<size_t>(numAlgo_) * static_cast<size_t>(numProto_); }

 private:
  float* data_;
  int numAlgo_;
  int numProto_;
};

// The plan's name of NCCL's collective `func` ("allreduce", "allgather", "reducescatter",
// "broadcast"); empty for the ones the planner does not model (reduce, point to point).
std::string_view planCollective(int func);

// The plan's algorithm for NCCL's `algo` (see above); nullopt where only the bound applies.
std::optional<Algorithm> planAlgorithm(int algo);

// Wire efficiency of NCCL's protocol `proto` (see above).
double protocolEfficiency(int proto);

// The time the network adds to (algo, proto) for `bytes` under `model`, in microseconds.
double networkUs(const CollectiveModel& model, int algo, int proto, double bytes);

// Adds networkUs() to every usable entry of `table`; returns how many changed.
int addNetworkTime(CostTable& table, const CollectiveModel& model, double bytes);

}  // namespace rankmap::nccl_tuner
