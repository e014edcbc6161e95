#include "nccl_tuner/costs.h"

#include <algorithm>

#include "common/error.h"
#include "nccl_tuner/tuner_abi.h"

namespace rankmap::nccl_tuner {

CostTable::CostTable(float** raw, int numAlgo, int numProto)
    : data_(reinterpret_cast<float*>(raw)), numAlgo_(numAlgo), numProto_(numProto) {
  if (raw == nullptr) RANKMAP_THROW(InvalidInput, "no cost table");
  if (numAlgo < 1 || numAlgo > kMaxDim || numProto < 1 || numProto > kMaxDim)
    RANKMAP_THROW(InvalidInput,
                  "expected a cost table of 1..{} algorithms and protocols, got {} x {}", kMaxDim,
                  numAlgo, numProto);
}

void CostTable::assign(const std::vector<float>& values) {
  if (values.size() != size())
    RANKMAP_THROW(InternalError, "NCCL tuner: {} values for a table of {}", values.size(), size());
  std::copy(values.begin(), values.end(), data_);
}

std::string_view planCollective(int func) {
  switch (func) {
    case abi::kAllReduce:
      return "allreduce";
    case abi::kAllGather:
      return "allgather";
    case abi::kReduceScatter:
      return "reducescatter";
    case abi::kBroadcast:
      return "broadcast";
    default:
      return {};
  }
}

std::optional<Algorithm> planAlgorithm(int algo) {
  switch (algo) {
    case abi::kRing:
      return Algorithm::kRing;
    case abi::kTree:
    case abi::kNvlsTree:
      return Algorithm::kTree;
    case abi::kPat:
      return Algorithm::kRhd;
    default:
      return std::nullopt;
  }
}

double protocolEfficiency(int proto) {
  switch (proto) {
    case abi::kLL:
      return 0.5;
    case abi::kLL128:
      return 120.0 / 128.0;
    default:
      return 1.0;
  }
}

double networkUs(const CollectiveModel& model, int algo, int proto, double bytes) {
  AlgoModel m{0, model.lowerBoundUsPerByte};
  if (auto a = planAlgorithm(algo)) {
    auto it = model.algorithms.find(*a);
    if (it != model.algorithms.end()) m = it->second;
  }
  return m.alphaUs + bytes * m.betaUsPerByte / protocolEfficiency(proto);
}

int addNetworkTime(CostTable& table, const CollectiveModel& model, double bytes) {
  int changed = 0;
  for (int a = 0; a < table.algorithms(); ++a)
    for (int p = 0; p < table.protocols(); ++p) {
      if (!table.usable(a, p)) continue;
      const double add = networkUs(model, a, p, bytes);
      if (add <= 0) continue;
      table.at(a, p) = static_cast<float>(table.at(a, p) + add);
      ++changed;
    }
  return changed;
}

}  // namespace rankmap::nccl_tuner
