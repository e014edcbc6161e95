// Open MPI's vocabulary of collective algorithms (coll_tuned, Open MPI 4.1): the collectives
// rankmap writes decision rules for, their ids in a coll_tuned rules file, and each one's
// algorithm ids and names as `coll_tuned_<collective>_algorithm` takes them (`ompi_info --param
// coll tuned --level 9` lists the same). The planner models these algorithms (reorder/
// cost_model.h), plan.json names its choice per size ("open_mpi"), and `rankmap run` writes the
// rules file (launch/ompi_rules.h).
//
// Contract: names and ids are Open MPI's, stable since 4.0 (5.0 keeps them); rankmap's own
// algorithm vocabulary is common/algorithm.h and the two never mix.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace rankmap {

struct OmpiAlgorithm {
  int id = 0;  // coll_tuned_<collective>_algorithm value; 0 ("ignore") is never an algorithm
  std::string_view name;
};

struct OmpiCollective {
  std::string_view name;  // as plan.json and coll_tuned spell it: "allreduce", "reduce_scatter"
  int collId = 0;         // Open MPI's COLLTYPE index, the collective's id in a rules file
  std::span<const OmpiAlgorithm> algorithms;
};

// allreduce, bcast, reduce, allgather, reduce_scatter: the collectives rankmap models.
std::span<const OmpiCollective> ompiCollectives();
const OmpiCollective* findOmpiCollective(std::string_view name);
// The algorithm of `collective` with this id or name; nullptr when it has none.
const OmpiAlgorithm* findOmpiAlgorithm(const OmpiCollective& collective, int id);
const OmpiAlgorithm* findOmpiAlgorithm(const OmpiCollective& collective, std::string_view name);
// "allreduce, bcast, reduce, allgather, reduce_scatter" and "1 basic_linear, 2 ..." for messages.
std::string_view ompiCollectiveList();
std::string ompiAlgorithmList(const OmpiCollective& collective);

}  // namespace rankmap
