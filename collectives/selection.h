// Algorithm selection: a pure function of the request, what the communicator can do, the plan
// and the overrides (UCC's scheme: candidates in order of preference; one that declines with a
// reason is skipped and the next is tried).
//
// Preference: the override (RANKMAP_ALGO / --algo), then plan.json's algorithm for the
// collective and message size, then the built-in default, then ring. Barrier always runs
// dissemination (not counted as a fallback).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/types.h"

namespace rankmap {
struct Plan;
}  // namespace rankmap

namespace rankmap::coll {

struct Request {
  Collective collective = Collective::kAllreduce;
  uint64_t count = 0;  // as in AlgoParams: per rank for allgather and reducescatter
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int worldSize = 1;
  // Message size as nccl-tests reports it and plan.json ranges use it: the vector for
  // allreduce, broadcast and reduce; the whole gathered / scattered buffer (count * n) for
  // allgather and reducescatter.
  uint64_t bytes() const;
};

struct Capabilities {
  int worldSize = 1;
  // Rank groups (racks) from the plan, each in ring order; empty when the plan has none.
  std::vector<std::vector<int>> groups;
  // Packed spanning trees over ranks from the plan; empty when the plan has none.
  std::vector<RankTree> trees;
};

struct Overrides {
  std::optional<Algorithm> algorithm;  // nullopt = auto
};

struct Selection {
  Algorithm algorithm = Algorithm::kRing;
  std::string source;                 // "override", "plan", "default" or "fallback"
  std::vector<std::string> declined;  // "rhd: needs a power-of-two world size, not 6"
  // True when the override's or the plan's choice declined and another algorithm runs.
  bool fellBack = false;
};

// The built-in choice without a plan: latency-bound sizes take rhd (allreduce, and allgather /
// reducescatter on powers of two) or tree (broadcast, reduce); larger ones the ring.
Algorithm defaultAlgorithm(const Request& request, const Capabilities& caps);

// `plan` may be null. Never throws for a supported collective: ring accepts every data
// collective.
Selection choose(const Request& request, const Capabilities& caps, const Plan* plan,
                 const Overrides& overrides);

// Messages of at most this many bytes count as latency-bound for defaultAlgorithm().
inline constexpr uint64_t kSmallMessageBytes = 64u << 10;

}  // namespace rankmap::coll
