// The one vocabulary of collective algorithms: the names plan.json, RANKMAP_ALGO, `rankmap bench
// --algo`, the planner's cost model and the engine's selection all use.
//
// Contract: names are stable (they are in plan.json files on disk); the numeric values are not
// an ABI. `dissemination` is the engine's barrier and never appears in a plan.
#pragma once

#include <optional>
#include <string_view>

#include <fmt/format.h>

namespace rankmap {

enum class Algorithm : int {
  kRing = 0,   // "ring": reduce-scatter + allgather around the ring order
  kTree = 1,   // "tree": double binary tree
  kHier = 2,   // "hier": reduce-scatter in groups, allreduce across, allgather in groups
  kRhd = 3,    // "rhd": recursive halving-doubling
  kTrees = 4,  // "trees": packed spanning trees (Blink)
  kDissemination = 5,  // "dissemination": the barrier's only algorithm
};

// "ring", "tree", "hier", "rhd", "trees", "dissemination".
std::string_view algorithmName(Algorithm a);
// Any of the names above; nullopt for anything else.
std::optional<Algorithm> parseAlgorithm(std::string_view name);
// The algorithms a plan may name (every one but the barrier's).
bool isPlanAlgorithm(Algorithm a);
// "ring, tree, hier, rhd, trees": for error messages that list what a plan may hold.
std::string_view planAlgorithmList();

}  // namespace rankmap

// Algorithms print as their names in logs, reports and errors.
template <>
struct fmt::formatter<rankmap::Algorithm> : fmt::formatter<std::string_view> {
  template <typename Ctx>
  auto format(rankmap::Algorithm a, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(rankmap::algorithmName(a), ctx);
  }
};
