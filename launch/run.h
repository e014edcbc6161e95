// `rankmap run`: a job run with its ranks in plan order, whichever launcher or framework starts it
// (launch.h for mpirun, Hydra and srun; torchrun.h; xgboost.h). cli/run_cmd.cc only reads the
// command line into RunArgs.
//
// It prints one line on stderr saying what it did and why (and one more for each thing the user
// should know: their coll_tuned settings win, the rules could not be handed over, the engine is
// predicted faster). Whatever goes wrong with the plan or the command line (no plan, a plan for
// other hosts, options it does not understand), it runs the original command unchanged and says
// so, unless `strict` (or RANKMAP_RUN_STRICT) makes an unreadable command line an error: it never
// blocks a job. Its exit status is the job's.
#pragma once

#include <string>
#include <vector>

#include "common/config.h"

namespace rankmap::launch {

struct RunArgs {
  std::string plan;
  std::string topology;
  std::string agent;
  std::string mode = "auto";
  bool dryRun = false;
  std::vector<std::string> command;
  // --xgboost N (xgboost.h): rankmap run is the tracker and starts the workers.
  int xgboost = 0;
  std::string hostsFile;
  std::string rsh = "ssh";
  std::string trackerAddr;
  std::string rulesOut;  // keep Open MPI's coll_tuned rules in this file
  bool strict = false;   // --strict (RANKMAP_RUN_STRICT): an unreadable command line is an error
  // --mesh, --traffic (reorder/mesh.h): plan for the job's groups (with --topology or --agent).
  std::string mesh;
  std::string traffic;
  // --profile: plan for the groups and traffic a run of this job recorded (common/job_profile.h);
  // --record-profile: this run records them (the MPI shim, RANKMAP_PROFILE_OUT).
  std::string profile;
  std::string recordProfile;
};

// Runs the job `a` describes under the settings `cfg`; returns its exit status (0 for --dry-run).
// Throws InvalidInput for bad arguments or settings, before anything runs.
int runJob(const Config& cfg, const RunArgs& a);

}  // namespace rankmap::launch
