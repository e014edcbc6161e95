// `rankmap plan`: topology.json in, plan.json out (reorder::planTopology), with a short summary.
//
// The plan goes to --out (atomically) or to stdout; the summary goes to stdout when the plan
// went to a file, else to stderr, so `rankmap plan ... > plan.json` stays a clean document.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/error.h"
#include "common/files.h"
#include "reorder/planner.h"
#include "reorder/report.h"

namespace rankmap::cli {
namespace {

struct PlanArgs {
  std::string topology;
  std::string hosts;
  std::string out;
  int ranksPerHost = 1;
  std::vector<std::string> collectives;
  std::string ringSize = "16MiB";
  bool useGroups = false;
  bool uniformShares = false;
};

// A file the user named that cannot be read is bad input (exit 2), not a failure of ours.
Topology loadTopology(const std::string& path) {
  try {
    return Topology::load(path);
  } catch (const IoError& e) {
    throw InvalidInput(e.what());
  }
}

int runPlan(const PlanArgs& a) {
  reorder::PlanOptions o;
  o.ranksPerHost = a.ranksPerHost;
  o.source = a.topology;
  o.useTopologyGroups = a.useGroups;
  o.chunkWeights = !a.uniformShares;
  if (!a.collectives.empty()) {
    o.collectives.clear();
    for (const auto& c : a.collectives) {
      if (c == "all")
        for (auto name : reorder::kCollectives) o.collectives.emplace_back(name);
      else
        o.collectives.push_back(c);
    }
  }
  auto size = parseSize(a.ringSize);
  if (!size || *size == 0)
    throw InvalidInput(
        fmt::format("--ring-size '{}': expected a size such as 16MiB or 4M", a.ringSize));
  o.ringBytes = *size;

  Topology t = loadTopology(a.topology);
  if (!a.hosts.empty()) {
    std::vector<reorder::HostEntry> hosts;
    try {
      hosts = reorder::readHostsFile(a.hosts);
    } catch (const IoError& e) {
      throw InvalidInput(e.what());
    }
    t = reorder::selectHosts(t, hosts, a.hosts, a.topology);
  }
  reorder::PlanResult r = reorder::planTopology(t, o);
  std::string summary = reorder::planSummary(r);
  if (a.out.empty()) {
    std::fputs(r.plan.dump().c_str(), stdout);
    std::fputs(summary.c_str(), stderr);
  } else {
    r.plan.save(a.out);
    std::fputs(summary.c_str(), stdout);
    fmt::print("  plan written to {}\n", a.out);
  }
  return 0;
}

}  // namespace

void registerPlanCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  (void)ctx;
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "plan", "Infer the rack hierarchy from a topology.json and write a plan.json");
  cmd->add_option("--topology,-t", args->topology, "topology.json measured by the probes")
      ->required();
  cmd->add_option("--hosts", args->hosts,
                  "Plan only these hosts, in this input order: one 'name [address]' per line");
  cmd->add_option("--ranks-per-host,-k", args->ranksPerHost, "Ranks on each host (kept contiguous)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--collective,-c", args->collectives,
                  "allreduce (default), allgather, reducescatter, broadcast or all; repeatable");
  cmd->add_option("--ring-size", args->ringSize,
                  "Message size the ring order and the predicted gain are for (default 16MiB)");
  cmd->add_flag("--use-groups", args->useGroups,
                "Use the topology's \"groups\" instead of inferring them");
  cmd->add_flag("--uniform-shares", args->uniformShares,
                "No chunk weights: hier with uniform shares (to compare with the weighted plan)");
  cmd->add_option("--out,-o", args->out, "Write the plan here (default: stdout)");
  cmd->callback([&run, args] { run = [args] { return runPlan(*args); }; });
}

}  // namespace rankmap::cli
