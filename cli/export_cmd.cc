// `rankmap export`: writes files other systems read, from a topology or a plan.
//   --slurm-topology: Slurm's topology.conf (tree plugin) from the inferred hierarchy, taken from
//                     --topology T (its "groups") or --plan P (the plan's "groups").
//   --slurm-hostfile: a SLURM_HOSTFILE for `srun --distribution=arbitrary` in plan order.
// Output goes to stdout, or atomically to -o FILE.
#include <cstdio>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/error.h"
#include "common/files.h"
#include "common/plan.h"
#include "common/topology.h"
#include "launch/slurm.h"

namespace rankmap::cli {

void registerExportCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  auto* cmd =
      app.add_subcommand("export", "Write files for other systems (Slurm) from a topology or plan");
  struct Opts {
    bool slurmTopology = false;
    bool slurmHostfile = false;
    std::string topology;
    std::string plan;
    std::string output;
    int tasksPerNode = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* what = cmd->add_option_group("what", "What to write (one of)");
  what->add_flag("--slurm-topology", o->slurmTopology,
                 "Slurm topology.conf (topology/tree) from the inferred hierarchy");
  what->add_flag("--slurm-hostfile", o->slurmHostfile,
                 "SLURM_HOSTFILE for srun --distribution=arbitrary, in plan order");
  what->require_option(1);
  cmd->add_option("--topology", o->topology, "topology.json (default RANKMAP_TOPOLOGY)");
  cmd->add_option("--plan", o->plan, "plan.json (default RANKMAP_PLAN)");
  cmd->add_option("--tasks-per-node", o->tasksPerNode,
                  "--slurm-hostfile: tasks per host (default the plan's ranks_per_host)");
  cmd->add_option("-o,--output", o->output, "Write here (atomically) instead of stdout");
  cmd->callback([&ctx, &run, o] {
    run = [&ctx, o] {
      std::string topologyPath = o->topology, planPath = o->plan;
      if (!o->topology.empty() && !o->plan.empty())
        RANKMAP_THROW(InvalidInput, "--topology and --plan: expected one of them");
      if (topologyPath.empty() && planPath.empty()) {
        // Settings fill in only what the command line left out, plan first for a hostfile.
        if (o->slurmHostfile || ctx.config.get(settings::kTopology).empty())
          planPath = ctx.config.get(settings::kPlan);
        else
          topologyPath = ctx.config.get(settings::kTopology);
      }
      std::string text;
      if (o->slurmTopology) {
        if (!topologyPath.empty()) {
          Topology t = Topology::load(topologyPath);
          std::vector<std::string> hosts;
          for (const auto& h : t.hosts) hosts.push_back(h.name);
          text = launch::slurmTopologyConf(hosts, t.groups, "topology " + topologyPath);
        } else if (!planPath.empty()) {
          Plan p = Plan::load(planPath);
          text = launch::slurmTopologyConf(p.hosts, p.groups, "plan " + planPath);
        } else {
          RANKMAP_THROW(InvalidInput,
                        "--slurm-topology: expected --topology T or --plan P "
                        "(or RANKMAP_TOPOLOGY / RANKMAP_PLAN)");
        }
      } else {
        if (planPath.empty())
          RANKMAP_THROW(InvalidInput, "--slurm-hostfile: expected --plan P (or RANKMAP_PLAN)");
        Plan p = Plan::load(planPath);
        text = launch::slurmHostfile(p, o->tasksPerNode > 0 ? o->tasksPerNode : p.ranksPerHost);
      }
      if (o->output.empty())
        fmt::print("{}", text);
      else
        writeFileAtomic(o->output, text);
      return 0;
    };
  });
}

}  // namespace rankmap::cli
