// Open MPI's decision from the plan: a coll_tuned dynamic rules file (Open MPI 4.1) written from
// Plan::openMpi, the algorithm per collective and message size that the planner's model of Open
// MPI's algorithms predicts fastest in plan order (reorder/cost_model.h).
//
// Format (Open MPI 4.1's "classic" reader, ompi/mca/coll/tuned/coll_tuned_dynamic_file.c; 5.0
// reads it alike): whitespace-separated integers, '#' to the end of a line is a comment.
//
//   <number of collectives>
//   per collective: <COLLTYPE id> <number of communicator sizes>
//     per communicator size (ascending): <size> <number of message rules>
//       per message rule (ascending, the first at 0): <min bytes> <algorithm> <fan-in/out>
//       <segsize>
//
// coll_tuned takes, for a communicator, the last communicator rule whose size is at most the
// communicator's, and for a call the last message rule whose size is at most the call's. Each
// collective gets three communicator rules: size 0 and size W + 1 with algorithm 0 ("ignore":
// Open MPI's own fixed decision), and size W (the plan's world) with the plan's ranges, so
// communicators of any other size keep Open MPI's decision.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/plan.h"

namespace rankmap::launch {

// The rules file for `plan` (comments name each collective, range and algorithm); empty when the
// plan holds no Open MPI decision (made without it, or for a single rank).
std::string collTunedRules(const Plan& plan);

// The options that hand Open MPI a rules file, for mpirun's command line.
std::vector<std::string> collTunedOptions(const std::string& rulesPath);

// Open MPI's coll_tuned parameters a user may set outside the command line: `OMPI_MCA_*`
// variables, and `name = value` lines of mca-params files (OMPI_MCA_mca_base_param_files, else
// $HOME/.openmpi/mca-params.conf and the system's openmpi-mca-params.conf). Returns a description
// of the first setting that decides coll_tuned's choice ("coll_tuned_allreduce_algorithm in
// /root/.openmpi/mca-params.conf", "OMPI_MCA_coll=^tuned in the environment"), or nullopt.
// `read` returns a file's text or nullopt when it cannot be read.
struct CollTunedSources {
  std::function<std::optional<std::string>(const std::string&)> env;
  std::function<std::optional<std::string>(const std::string&)> read;
  std::vector<std::string> environment;  // "NAME=VALUE" entries to scan for OMPI_MCA_coll*
};
std::optional<std::string> userCollTunedOutside(const CollTunedSources& sources);

// Whether setting MCA parameter `name` to `value` decides coll_tuned's choice: any coll_tuned_*
// parameter, and a `coll` component list that leaves tuned out ("^tuned", "basic,libnbc").
bool decidesCollTuned(std::string_view name, std::string_view value);

// The advice of `rankmap run` where the plan predicts the included engine kEngineAdviceRatio
// faster than every Open MPI algorithm of a collective the engine serves through the MPI shim
// (allreduce, bcast, allgather): one line naming the collective, from which size, and by how much;
// nullopt when it never is.
std::optional<std::string> engineAdvice(const Plan& plan);

}  // namespace rankmap::launch
