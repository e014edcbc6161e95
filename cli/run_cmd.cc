// `rankmap run [--plan P | --topology T | --agent URL] [--mode launch|shim|auto] [--dry-run]
//  -- LAUNCHER ARGS...`: the command line of `rankmap run`, read into launch::RunArgs; the run
// itself is launch::runJob (launch/run.h).
#include <memory>

#include "cli/command.h"
#include "launch/run.h"

namespace rankmap::cli {

void registerRunCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  auto* cmd = app.add_subcommand(
      "run", "Run a job (mpirun, torchrun, srun, or XGBoost workers) with its ranks in plan order");
  auto a = std::make_shared<launch::RunArgs>();
  cmd->add_option("--plan", a->plan, "plan.json to apply (default RANKMAP_PLAN)");
  cmd->add_option("--topology", a->topology,
                  "topology.json: plan for the job's hosts from it; with --plan, only host "
                  "addresses are taken from it (default RANKMAP_TOPOLOGY)");
  cmd->add_option("--agent", a->agent,
                  "URL of the rankmapd to ask for a plan (default RANKMAP_AGENT)");
  cmd->add_option("--mode", a->mode,
                  "launch: rewrite the hostfile in plan order; shim: preload librankmap_mpi.so; "
                  "auto: launch (default)");
  cmd->add_flag("--dry-run", a->dryRun, "Print the command (and files) instead of running it");
  cmd->add_flag("--strict", a->strict,
                "A launcher command line rankmap run cannot read is an error (exit 2) instead of "
                "a warning with the command run unchanged (RANKMAP_RUN_STRICT)");
  cmd->add_option(
      "--xgboost", a->xgboost,
      "Run an XGBoost job of N workers: rankmap run is its tracker, ranks in plan order");
  cmd->add_option("--hosts", a->hostsFile,
                  "--xgboost: hosts file, `name [address]` per line (rankmap's), launcher order; "
                  "the addresses reach hosts no topology names (default the plan's hosts)");
  cmd->add_option("--rsh", a->rsh,
                  "--xgboost: remote start command, called as RSH HOST COMMAND "
                  "(default ssh)");
  cmd->add_option("--tracker-addr", a->trackerAddr,
                  "--xgboost: tracker address (default the "
                  "local address that reaches the first host)");
  cmd->add_option("--rules-out", a->rulesOut,
                  "mpirun: write Open MPI's coll_tuned rules from the plan to this file and keep "
                  "it (it must be readable at this path on every host); default: a private file "
                  "removed after the job");
  cmd->add_option("--mesh", a->mesh, std::string(kMeshHelp) + " (with --topology or --agent)");
  cmd->add_option("--traffic", a->traffic, kTrafficHelp);
  cmd->add_option("--profile", a->profile,
                  std::string(kProfileHelp) + "; the job must be the one it was recorded from");
  cmd->add_option("--record-profile", a->recordProfile,
                  "Record this run's groups and their traffic into this file (MPI jobs: every "
                  "rank preloads the MPI shim, the launcher's first rank writes it at "
                  "MPI_Finalize; torchrun jobs: the workers load rankmap's Python hook, and "
                  "rankmap run on rank 0's node writes it when the job ends)");
  cmd->add_option("command", a->command, "The launcher command line, after --")->required();
  cmd->callback([&ctx, &run, a] { run = [&ctx, a] { return launch::runJob(ctx.config, *a); }; });
}

}  // namespace rankmap::cli
