// `rankmap export`: writes files other systems read, from a topology or a plan.
//   --slurm-topology: Slurm's topology.conf (tree plugin) from the inferred hierarchy: the one
//                     `rankmap plan` infers from --topology T, or --plan P's "groups"; with
//                     --format yaml Slurm 25.05's topology.yaml (tree and block) instead; with
//                     -o DIR (an existing directory) both, as DIR/topology.conf and
//                     DIR/topology.yaml.
//   --slurm-hostfile: a SLURM_HOSTFILE for `srun --distribution=arbitrary` in plan order.
//   --k8s-labels:     `kubectl label nodes` lines (one label per level, rankmap's and Topograph's
//                     keys) and `kubectl annotate nodes` lines (measured rates, from a topology
//                     with a link model); node names are the host names.
//   --kueue-topology: Kueue's Topology object for those label keys.
//   --k8s-placement JOB: a shell script that puts the Indexed Job JOB's pods on the plan's nodes
//                     in plan order (launch/kubernetes.h, k8sPlacementScript).
// Output goes to stdout, or atomically to -o FILE.
#include <cstdio>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/error.h"
#include "common/files.h"
#include "common/plan.h"
#include "common/topology.h"
#include "launch/kubernetes.h"
#include "launch/slurm.h"
#include "reorder/planner.h"

namespace rankmap::cli {
namespace {

// What the schedulers' files are made from: a topology's or a plan's hosts and hierarchy.
struct Hierarchy {
  std::vector<std::string> hosts;
  std::vector<HierarchyLevel> levels;
  std::optional<TopologyLinks> links;  // a topology's link model, if it has one
  std::string time;                    // the measurement's time, if known
  std::string source;                  // "topology T" or "plan P"
};

Hierarchy loadHierarchy(const std::string& topologyPath, const std::string& planPath,
                        std::string_view flag) {
  Hierarchy h;
  if (!topologyPath.empty()) {
    Topology t = Topology::load(topologyPath);
    // The hierarchy `rankmap plan` finds in this topology (the planner's own inference, with
    // plan's defaults): export never states one switch where plan finds racks.
    reorder::PlanOptions options;
    options.hashTopology = false;
    options.source = topologyPath;
    const Plan p = reorder::makePlan(t, options);
    h.hosts = p.hosts;
    h.levels = p.groups;
    h.links = t.links;
    h.time = t.time;
    h.source = "topology " + topologyPath;
  } else if (!planPath.empty()) {
    Plan p = Plan::load(planPath);
    h.hosts = p.hosts;
    h.levels = p.groups;
    h.source = "plan " + planPath;
  } else {
    RANKMAP_THROW(InvalidInput,
                  "{}: expected --topology T or --plan P (or RANKMAP_TOPOLOGY / RANKMAP_PLAN)",
                  flag);
  }
  return h;
}

}  // namespace

void registerExportCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  auto* cmd = app.add_subcommand(
      "export", "Write files for other systems (Slurm, Kubernetes, Kueue) from a topology or plan");
  struct Opts {
    bool slurmTopology = false;
    bool slurmHostfile = false;
    bool k8sLabels = false;
    bool kueueTopology = false;
    std::string format = "conf";
    std::string kueueName = "rankmap";
    std::string kueueApi = std::string(launch::kKueueApiVersion);
    std::string topology;
    std::string plan;
    std::string output;
    int tasksPerNode = 0;
    std::string k8sPlacement;
    std::string nspace;
    std::string gate = std::string(launch::kPlacementGate);
    int waitSeconds = 600;
    bool follow = false;
  };
  auto o = std::make_shared<Opts>();
  auto* what = cmd->add_option_group("what", "What to write (one of)");
  what->add_flag("--slurm-topology", o->slurmTopology,
                 "Slurm topology.conf (topology/tree) from the inferred hierarchy");
  what->add_flag("--slurm-hostfile", o->slurmHostfile,
                 "SLURM_HOSTFILE for srun --distribution=arbitrary, in plan order");
  what->add_flag("--k8s-labels", o->k8sLabels,
                 "kubectl label/annotate lines: one label per inferred level (rankmap.io/level-N, "
                 "fabric.topograph.run/tier-N) and the measured rates");
  what->add_flag("--kueue-topology", o->kueueTopology,
                 "Kueue Topology object (YAML) for the --k8s-labels levels");
  what->add_option("--k8s-placement", o->k8sPlacement,
                   "JOB: a shell script that puts the Indexed Job JOB's pods on the plan's nodes "
                   "in plan order (its pod template holds the scheduling gate --gate)");
  what->require_option(1);
  cmd->add_option("--topology", o->topology, "topology.json (default RANKMAP_TOPOLOGY)");
  cmd->add_option("--plan", o->plan, "plan.json (default RANKMAP_PLAN)");
  cmd->add_option("--tasks-per-node", o->tasksPerNode,
                  "--slurm-hostfile: tasks per host (default the plan's ranks_per_host); "
                  "--k8s-placement: pods per node (default 1)");
  cmd->add_option("--namespace", o->nspace,
                  "--k8s-placement: the Job's namespace (default kubectl's current one)");
  cmd->add_option("--gate", o->gate,
                  "--k8s-placement: the scheduling gate in the Job's pod template (default " +
                      std::string(launch::kPlacementGate) + ")");
  cmd->add_option("--wait", o->waitSeconds,
                  "--k8s-placement: seconds to wait for every pod before leaving them to the "
                  "scheduler (default 600)");
  cmd->add_flag("--follow", o->follow,
                "--k8s-placement: after placing, place the pods the Job controller makes anew "
                "until the Job ends");
  cmd->add_option("--format", o->format,
                  "--slurm-topology: conf (topology.conf) or yaml (topology.yaml, Slurm 25.05)")
      ->check(CLI::IsMember({"conf", "yaml"}));
  cmd->add_option("--kueue-name", o->kueueName, "--kueue-topology: the object's name");
  cmd->add_option("--kueue-api", o->kueueApi,
                  "--kueue-topology: apiVersion (kueue.x-k8s.io/v1beta2, v1beta1 or v1alpha1)");
  cmd->add_option("-o,--output", o->output,
                  "Write here (atomically) instead of stdout; for --slurm-topology an existing "
                  "directory gets both topology.conf and topology.yaml");
  cmd->callback([&ctx, &run, o, cmd] {
    run = [&ctx, o, cmd] {
      for (const char* only : {"--namespace", "--gate", "--wait", "--follow"})
        if (cmd->count(only) > 0 && o->k8sPlacement.empty())
          RANKMAP_THROW(InvalidInput, "{}: expected only with --k8s-placement JOB", only);
      std::string topologyPath = o->topology, planPath = o->plan;
      if (!o->topology.empty() && !o->plan.empty())
        RANKMAP_THROW(InvalidInput, "--topology and --plan: expected one of them");
      if (topologyPath.empty() && planPath.empty()) {
        // Settings fill in only what the command line left out, plan first for a hostfile.
        if (o->slurmHostfile || !o->k8sPlacement.empty() ||
            ctx.config.get(settings::kTopology).empty())
          planPath = ctx.config.get(settings::kPlan);
        else
          topologyPath = ctx.config.get(settings::kTopology);
      }
      if (o->format != "conf" && !o->slurmTopology)
        RANKMAP_THROW(InvalidInput, "--format {}: expected only with --slurm-topology", o->format);
      std::string text;
      if (o->slurmTopology) {
        Hierarchy h = loadHierarchy(topologyPath, planPath, "--slurm-topology");
        if (!o->output.empty() && std::filesystem::is_directory(o->output)) {
          // Render both before writing either: a hierarchy that does not nest writes nothing.
          std::string conf = launch::slurmTopologyConf(h.hosts, h.levels, h.source);
          std::string yaml = launch::slurmTopologyYaml(h.hosts, h.levels, h.source);
          writeFileAtomic(o->output + "/topology.conf", conf);
          writeFileAtomic(o->output + "/topology.yaml", yaml);
          return 0;
        }
        text = o->format == "yaml" ? launch::slurmTopologyYaml(h.hosts, h.levels, h.source)
                                   : launch::slurmTopologyConf(h.hosts, h.levels, h.source);
      } else if (o->k8sLabels) {
        Hierarchy h = loadHierarchy(topologyPath, planPath, "--k8s-labels");
        text = launch::k8sLabelCommands(
            launch::k8sNodeMarks(h.hosts, h.levels, h.links ? &*h.links : nullptr, h.time,
                                 h.source),
            h.source);
      } else if (o->kueueTopology) {
        Hierarchy h = loadHierarchy(topologyPath, planPath, "--kueue-topology");
        text = launch::kueueTopologyYaml(h.levels, o->kueueName, o->kueueApi, h.source);
      } else if (!o->k8sPlacement.empty()) {
        if (planPath.empty())
          RANKMAP_THROW(InvalidInput,
                        "--k8s-placement: expected --plan P (or RANKMAP_PLAN): the pods follow a "
                        "plan's order");
        Plan p = Plan::load(planPath);
        launch::PodPlacement placement;
        placement.job = o->k8sPlacement;
        placement.nspace = o->nspace;
        placement.gate = o->gate;
        placement.podsPerHost = o->tasksPerNode > 0 ? o->tasksPerNode : 1;
        placement.waitSeconds = o->waitSeconds;
        placement.follow = o->follow;
        text = launch::k8sPlacementScript(p, placement, "plan " + planPath);
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
