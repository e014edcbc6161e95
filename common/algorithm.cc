#include "common/algorithm.h"

#include <array>
#include <utility>

namespace rankmap {
namespace {

constexpr std::array<std::pair<std::string_view, Algorithm>, 6> kNames = {{
    {"ring", Algorithm::kRing},
    {"tree", Algorithm::kTree},
    {"hier", Algorithm::kHier},
    {"rhd", Algorithm::kRhd},
    {"trees", Algorithm::kTrees},
    {"dissemination", Algorithm::kDissemination},
}};

}  // namespace

std::string_view algorithmName(Algorithm a) {
  for (const auto& [n, v] : kNames)
    if (v == a) return n;
  return "?";
}

std::optional<Algorithm> parseAlgorithm(std::string_view name) {
  for (const auto& [n, v] : kNames)
    if (n == name) return v;
  return std::nullopt;
}

bool isPlanAlgorithm(Algorithm a) { return a != Algorithm::kDissemination; }

std::string_view planAlgorithmList() { return "ring, tree, hier, rhd, trees"; }

}  // namespace rankmap
