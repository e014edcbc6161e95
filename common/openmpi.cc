#include "common/openmpi.h"

#include <array>

#include <fmt/format.h>

namespace rankmap {
namespace {

// Open MPI 4.1.4, ompi/mca/coll/tuned/coll_tuned_<collective>_decision.c (the enum each
// collective registers for coll_tuned_<collective>_algorithm) and the COLLTYPE indices of
// ompi/mca/coll/base/coll_base_functions.h.
constexpr std::array<OmpiAlgorithm, 6> kAllreduce = {{{1, "basic_linear"},
                                                      {2, "nonoverlapping"},
                                                      {3, "recursive_doubling"},
                                                      {4, "ring"},
                                                      {5, "segmented_ring"},
                                                      {6, "rabenseifner"}}};
constexpr std::array<OmpiAlgorithm, 9> kBcast = {{{1, "basic_linear"},
                                                  {2, "chain"},
                                                  {3, "pipeline"},
                                                  {4, "split_binary_tree"},
                                                  {5, "binary_tree"},
                                                  {6, "binomial"},
                                                  {7, "knomial"},
                                                  {8, "scatter_allgather"},
                                                  {9, "scatter_allgather_ring"}}};
constexpr std::array<OmpiAlgorithm, 7> kReduce = {{{1, "linear"},
                                                   {2, "chain"},
                                                   {3, "pipeline"},
                                                   {4, "binary"},
                                                   {5, "binomial"},
                                                   {6, "in-order_binary"},
                                                   {7, "rabenseifner"}}};
constexpr std::array<OmpiAlgorithm, 6> kAllgather = {{{1, "linear"},
                                                      {2, "bruck"},
                                                      {3, "recursive_doubling"},
                                                      {4, "ring"},
                                                      {5, "neighbor"},
                                                      {6, "two_proc"}}};
constexpr std::array<OmpiAlgorithm, 4> kReduceScatter = {
    {{1, "non-overlapping"}, {2, "recursive_halving"}, {3, "ring"}, {4, "butterfly"}}};

const std::array<OmpiCollective, 5> kCollectives = {{
    {"allreduce", 2, kAllreduce},
    {"bcast", 7, kBcast},
    {"reduce", 11, kReduce},
    {"allgather", 0, kAllgather},
    {"reduce_scatter", 12, kReduceScatter},
}};

}  // namespace

std::span<const OmpiCollective> ompiCollectives() { return kCollectives; }

const OmpiCollective* findOmpiCollective(std::string_view name) {
  for (const auto& c : kCollectives)
    if (c.name == name) return &c;
  return nullptr;
}

const OmpiAlgorithm* findOmpiAlgorithm(const OmpiCollective& collective, int id) {
  for (const auto& a : collective.algorithms)
    if (a.id == id) return &a;
  return nullptr;
}

const OmpiAlgorithm* findOmpiAlgorithm(const OmpiCollective& collective, std::string_view name) {
  for (const auto& a : collective.algorithms)
    if (a.name == name) return &a;
  return nullptr;
}

std::string_view ompiCollectiveList() {
  return "allreduce, bcast, reduce, allgather, reduce_scatter";
}

std::string ompiAlgorithmList(const OmpiCollective& collective) {
  std::string out;
  for (const auto& a : collective.algorithms)
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", a.id, a.name);
  return out;
}

}  // namespace rankmap
