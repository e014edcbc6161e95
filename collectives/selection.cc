#include "collectives/selection.h"

#include <fmt/format.h>

#include "collectives/algorithms/algorithms.h"
#include "common/plan.h"

namespace rankmap::coll {

uint64_t Request::bytes() const {
  uint64_t b = count * elementSize(type);
  if (collective == Collective::kAllgather || collective == Collective::kReduceScatter)
    b *= static_cast<uint64_t>(worldSize);
  return b;
}

namespace {

std::optional<std::string> decline(Algorithm a, const Request& r, const Capabilities& caps) {
  AlgoParams p;
  p.collective = r.collective;
  p.worldSize = caps.worldSize;
  p.groups = caps.groups;
  p.trees = caps.trees;
  return declineReason(a, p);
}

}  // namespace

Algorithm defaultAlgorithm(const Request& r, const Capabilities& caps) {
  const bool small = r.bytes() <= kSmallMessageBytes;
  switch (r.collective) {
    case Collective::kAllreduce:
      return small && caps.worldSize > 2 ? Algorithm::kRhd : Algorithm::kRing;
    case Collective::kAllgather:
    case Collective::kReduceScatter:
      return small && isPowerOfTwo(caps.worldSize) ? Algorithm::kRhd : Algorithm::kRing;
    case Collective::kBroadcast:
    case Collective::kReduce:
      return small ? Algorithm::kTree : Algorithm::kRing;
    case Collective::kBarrier:
      return Algorithm::kDissemination;
  }
  return Algorithm::kRing;
}

Selection choose(const Request& r, const Capabilities& caps, const Plan* plan,
                 const Overrides& overrides) {
  Selection sel;
  if (r.collective == Collective::kBarrier) {
    sel.algorithm = Algorithm::kDissemination;
    sel.source = "default";
    return sel;
  }
  struct Candidate {
    Algorithm algo;
    const char* source;
  };
  std::vector<Candidate> candidates;
  bool preferred = false;
  if (overrides.algorithm) {
    candidates.push_back({*overrides.algorithm, "override"});
    preferred = true;
  } else if (plan) {
    if (auto a = plan->algorithmFor(collectiveName(r.collective), r.bytes())) {
      candidates.push_back({*a, "plan"});
      preferred = true;
    }
  }
  candidates.push_back({defaultAlgorithm(r, caps), "default"});
  candidates.push_back({Algorithm::kRing, "fallback"});
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    if (auto why = decline(c.algo, r, caps)) {
      sel.declined.push_back(fmt::format("{}: {}", algorithmName(c.algo), *why));
      continue;
    }
    sel.algorithm = c.algo;
    sel.source = c.source;
    sel.fellBack = preferred && i > 0;
    return sel;
  }
  // Unreachable for data collectives: ring accepts them all.
  sel.algorithm = Algorithm::kRing;
  sel.source = "fallback";
  sel.fellBack = true;
  return sel;
}

}  // namespace rankmap::coll
