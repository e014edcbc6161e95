// `rankmap show FILE`: a plan.json or topology.json for people; `--svg OUT` draws the
// bandwidth and latency heatmaps sorted by group with the rings over them.
//
// A plan made with a declared placement (`rankmap plan --prior`) also lists where the
// declaration and the measurements disagree; a topology shown with --prior is compared on the fly.
//
// A plan alone has no measurements, so drawing one needs --topology; with it, the text also
// gives the host link rates behind the chunk weights and packed trees. A topology is planned on
// the fly (same options as `rankmap plan`'s defaults) to sort and draw it.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/error.h"
#include "common/files.h"
#include "common/plan.h"
#include "common/topology.h"
#include "reorder/planner.h"
#include "reorder/report.h"
#include "reorder/svg.h"

namespace rankmap::cli {
namespace {

struct ShowArgs {
  std::string file;
  std::string topology;
  std::string svg;
  int ranksPerHost = 1;
  std::string prior;  // with a topology: compare this declared placement
  std::string priorLabels;
  bool json = false;  // reorder::planReport / topologyReport instead of the text
};

Json readUserJson(const std::string& path) {
  try {
    return readJsonFile(path);
  } catch (const IoError& e) {
    throw InvalidInput(e.what());
  }
}

// The planner's network model of `t`: host link rates, and the uplink rate of each host's
// innermost group (Mbit/s by host name).
// The topology given with a plan must be one it can have been made from: every plan host in it
// (a plan made with --hosts covers part of its topology). The same hosts measured another time
// are named in a warning: the rates shown are not the ones the plan was made with.
void checkPlanTopology(const Plan& plan, const Topology& t, const ShowArgs& a) {
  std::set<std::string> names;
  for (const auto& h : t.hosts) names.insert(h.name);
  std::vector<std::string> missing;
  for (const auto& h : plan.hosts)
    if (!names.count(h)) missing.push_back(h);
  if (!missing.empty())
    throw InvalidInput(fmt::format(
        "--topology {}: not the topology {} was made from: {} of its {} hosts are not in it ({}{})",
        a.topology, a.file, missing.size(), plan.hosts.size(),
        fmt::join(missing.begin(), missing.begin() + std::min<size_t>(missing.size(), 5), ", "),
        missing.size() > 5 ? ", ..." : ""));
  if (!plan.topologyHash.empty() && plan.hosts.size() == t.hosts.size() &&
      plan.topologyHash != t.contentHash())
    RANKMAP_WARN(Cli, "--topology {}: the same hosts as {}, measured another time (the plan's "
                 "topology {}, this one {}): the rates below are this topology's",
                 a.topology, a.file, plan.topologyHash.substr(0, 19), t.contentHash().substr(0, 19));
}

struct Rates {
  std::map<std::string, double> host, uplink;
};
Rates linkRates(const Topology& t, const ShowArgs& a) {
  reorder::PlanOptions o;
  o.source = a.topology;
  o.hashTopology = false;
  reorder::PlanResult r = reorder::planTopology(t, o);
  Rates rates;
  const reorder::NetworkModel& m = r.model;
  for (size_t h = 0; h < m.hostMbps.size() && h < t.size(); ++h) {
    rates.host[t.hosts[h].name] = m.hostMbps[h];
    if (m.levels > 0)
      rates.uplink[t.hosts[h].name] =
          m.uplinkMbps[static_cast<size_t>(m.switchAt(static_cast<int>(h), 0))];
  }
  return rates;
}

// Writes --svg and says so: after the text on stdout, or on stderr beside --json (whose stdout is
// one JSON document).
void writeSvg(const ShowArgs& a, const std::string& svg) {
  writeFileAtomic(a.svg, svg);
  if (a.json)
    fmt::print(stderr, "svg written to {}\n", a.svg);
  else
    fmt::print("\nsvg written to {}\n", a.svg);
}

int runShow(const ShowArgs& a) {
  Json doc = readUserJson(a.file);
  bool isPlan = doc.is_object() && doc.contains("order") && doc.contains("permutation");
  // A topology has its matrices, or a link model standing in for them (schema 2).
  bool isTopology = doc.is_object() && (doc.contains("bandwidth_mbps") || doc.contains("links"));
  if (!isPlan && !isTopology)
    throw InvalidInput(
        fmt::format("{}: expected a plan.json (with /order) or a topology.json "
                    "(with /bandwidth_mbps or /links)",
                    a.file));
  if (isPlan) {
    // The plan's own prior (Plan::prior) is what it was made with; another needs the groups
    // measured anew.
    if (!a.prior.empty())
      throw InvalidInput(fmt::format(
          "--prior {}: a plan shows the prior it was made with; to compare another, show the "
          "topology.json with --prior (or make the plan with rankmap plan --prior)",
          a.prior));
    Plan plan = Plan::fromJson(doc, a.file);
    if (!a.svg.empty() && a.topology.empty())
      throw InvalidInput(
          fmt::format("--svg {}: a plan holds no measurements; pass the "
                      "topology.json it was made from with --topology",
                      a.svg));
    // With its topology, the host link rates that made the chunk weights and the trees.
    std::optional<Topology> t;
    Rates rates;
    if (!a.topology.empty()) {
      t = Topology::fromJson(readUserJson(a.topology), a.topology);
      checkPlanTopology(plan, *t, a);
      if (!plan.chunkWeights.empty() || !plan.trees.empty()) rates = linkRates(*t, a);
    }
    if (a.json)
      fmt::print("{}\n", reorder::planReport(plan).dump(1));
    else
      std::fputs(reorder::describePlan(plan, rates.host, rates.uplink).c_str(), stdout);
    if (!a.svg.empty()) writeSvg(a, reorder::renderSvg(*t, plan));
    return 0;
  }
  Topology t = Topology::fromJson(doc, a.file);
  reorder::PlanOptions o;
  o.source = a.file;
  o.ranksPerHost = a.ranksPerHost;
  o.prior = readPrior(a.prior, a.priorLabels);
  reorder::PlanResult r = reorder::planTopology(t, o);
  if (a.json)
    fmt::print("{}\n", reorder::topologyReport(t, r).dump(1));
  else
    std::fputs(reorder::describeTopology(t, r).c_str(), stdout);
  if (!a.svg.empty()) writeSvg(a, reorder::renderSvg(t, r.plan));
  return 0;
}

}  // namespace

void registerShowCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  (void)ctx;
  auto args = std::make_shared<ShowArgs>();
  auto* cmd = app.add_subcommand(
      "show",
      "Print a plan.json (groups, ring, algorithms, gain) or a topology.json (groups, "
      "matrix summary); --svg draws the heatmaps");
  cmd->add_option("file", args->file, "plan.json or topology.json")->required();
  cmd->add_option("--topology,-t", args->topology,
                  "The topology.json a plan was made from (needed for --svg with a plan; gives "
                  "the host rates behind its chunk weights and trees)");
  cmd->add_option("--svg", args->svg, "Draw bandwidth and latency heatmaps to this SVG file");
  cmd->add_option("--ranks-per-host,-k", args->ranksPerHost,
                  "Ranks per host when planning a topology")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--prior", args->prior,
                  "With a topology.json: a declared placement to compare with its measured groups "
                  "(as rankmap plan --prior); a plan shows the prior it was made with");
  cmd->add_option("--prior-labels", args->priorLabels,
                  "Node label keys of --prior, top level first, comma-separated");
  cmd->add_flag("--json", args->json,
                "Print the same numbers as one JSON object (bytes, microseconds, bytes/s)");
  cmd->callback([&run, args] { run = [args] { return runShow(*args); }; });
}

}  // namespace rankmap::cli
