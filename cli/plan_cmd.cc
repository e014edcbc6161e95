// `rankmap plan`: topology.json in, plan.json out (reorder::planTopology), with a short summary.
//
// The plan goes to --out (atomically) or to stdout; the summary goes to stdout when the plan
// went to a file, else to stderr, so `rankmap plan ... > plan.json` stays a clean document.
// --predictions FILE also writes every modelled algorithm's predicted time at --sizes in the
// plan's order (the engine's and Open MPI's), for calibration against measured runs.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hosts_file.h"
#include "common/job_profile.h"
#include "common/json.h"
#include "common/openmpi.h"
#include "reorder/mesh.h"
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
  double stepOverheadUs = 0;
  double fabricMbit = 0;  // 0 = unlimited
  double fabricBurstKib = 0;
  bool noOpenMpi = false;
  std::string predictions;
  std::string sizes = "64K,256K,1M,4M,16M,64M";
  std::string prior;        // empty = RANKMAP_PRIOR
  std::string priorLabels;  // empty = RANKMAP_PRIOR_LABELS
  std::string mesh;         // empty = the world ring alone
  std::string traffic;
  std::string profile;  // a job profile (common/job_profile.h) instead of mesh and traffic
};

// A file the user named that cannot be read is bad input (exit 2), not a failure of ours.
Topology loadTopology(const std::string& path) {
  try {
    return Topology::load(path);
  } catch (const IoError& e) {
    throw InvalidInput(e.what());
  }
}

}  // namespace

std::optional<reorder::DeclaredPlacement> readPrior(const std::string& file,
                                                    const std::string& labelKeys,
                                                    const std::string& source) {
  if (file.empty()) return std::nullopt;
  auto keys = reorder::parseLabelKeys(labelKeys, "prior label keys");
  try {
    return reorder::loadDeclaredPlacement(file, keys);
  } catch (const IoError& e) {
    throw InvalidInput(fmt::format("{}: {} (expected a readable declared-placement file)", source,
                                   e.what()));
  }
}

namespace {

// "ring", "segmented_ring seg=131072", "chain seg=32768 fanout=4": a key per modelled line.
std::string mpiKey(const OmpiCollective& coll, const reorder::MpiAlgoCost& c) {
  const OmpiAlgorithm* a = findOmpiAlgorithm(coll, c.algorithm);
  std::string key = a ? std::string(a->name) : std::to_string(c.algorithm);
  // Nonoverlapping's lines are pairs of the collective's reduce and bcast: one key, the best.
  if (c.algorithm == 2 && (coll.name == "allreduce")) return key;
  if (c.algorithm == 1 && (coll.name == "reduce_scatter")) return key;
  if (c.segsize) key += fmt::format(" seg={}", c.segsize);
  if (c.faninout) key += fmt::format(" fanout={}", c.faninout);
  return key;
}

// {"ranks", "order", "sizes", "engine": {collective: {algorithm: {size: us}}}, "open_mpi": ...}:
// the lowest line per key at each size.
void writePredictions(const std::string& path, const std::string& sizesText,
                      const reorder::PlanResult& r) {
  std::vector<uint64_t> sizes;
  for (size_t pos = 0; pos <= sizesText.size();) {
    size_t comma = sizesText.find(',', pos);
    if (comma == std::string::npos) comma = sizesText.size();
    std::string item = sizesText.substr(pos, comma - pos);
    auto v = parseSize(item);
    if (!v || *v == 0)
      throw InvalidInput(fmt::format("--sizes '{}': expected sizes such as 64K,1M", sizesText));
    sizes.push_back(*v);
    pos = comma + 1;
  }
  Json doc;
  doc["ranks"] = r.plan.worldSize();
  doc["order"] = r.plan.order;
  doc["sizes"] = sizes;
  Json engine = Json::object(), mpi = Json::object();
  for (const auto& [coll, costs] : r.algorithms) {
    Json c = Json::object();
    for (const auto& a : costs)
      if (a.available)
        for (uint64_t s : sizes)
          c[std::string(algorithmName(a.algo))][std::to_string(s)] = a.timeUs(double(s));
    engine[coll] = std::move(c);
  }
  for (const auto& [coll, costs] : r.mpiAlgorithms) {
    const OmpiCollective* oc = findOmpiCollective(coll);
    Json c = Json::object();
    for (const auto& a : costs) {
      if (!a.available) continue;
      std::string key = mpiKey(*oc, a);
      for (uint64_t s : sizes) {
        std::string sk = std::to_string(s);
        double t = a.timeUs(double(s));
        if (!c.contains(key) || !c[key].contains(sk) || c[key][sk].get<double>() > t)
          c[key][sk] = t;
      }
    }
    mpi[coll] = std::move(c);
  }
  doc["engine"] = std::move(engine);
  doc["open_mpi"] = std::move(mpi);
  writeFileAtomic(path, doc.dump(1) + "\n");
}

int runPlan(const PlanArgs& a, const Config& config) {
  reorder::PlanOptions o;
  const SettingInfo& prior = settingInfo(settings::kPrior.id);
  o.prior = readPrior(a.prior.empty() ? config.get(settings::kPrior) : a.prior,
                      a.priorLabels.empty() ? config.get(settings::kPriorLabels) : a.priorLabels,
                      a.prior.empty() ? fmt::format("{} ({})", prior.name,
                                                    config.originText(settings::kPrior.id))
                                      : std::string("--prior"));
  o.ranksPerHost = a.ranksPerHost;
  o.source = a.topology;
  o.useTopologyGroups = a.useGroups;
  o.chunkWeights = !a.uniformShares;
  o.stepOverheadUs = a.stepOverheadUs;
  if (a.fabricMbit > 0) o.fabricMbps = a.fabricMbit;
  o.fabricBurstBytes = a.fabricBurstKib * 1024;
  o.openMpi = !a.noOpenMpi;
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
  if (!a.traffic.empty() && a.mesh.empty())
    throw InvalidInput("--traffic: expected together with --mesh (the traffic of its dimensions)");
  if (!a.profile.empty() && !a.mesh.empty())
    throw InvalidInput(
        "--profile: expected instead of --mesh and --traffic (the profile gives the job's groups "
        "and their traffic)");
  if (!a.mesh.empty()) {
    o.mesh = reorder::parseMesh(a.mesh, "--mesh");
    reorder::meshTraffic(o.mesh, a.traffic, "--traffic");
  }
  if (!a.profile.empty()) {
    reorder::ProfileMesh pm =
        reorder::meshFromProfile(JobProfile::load(a.profile), "--profile " + a.profile);
    o.mesh = std::move(pm.dims);
    for (const auto& n : pm.notes)
      std::fprintf(stderr, "rankmap plan: profile %s: %s\n", a.profile.c_str(), n.c_str());
  }

  Topology t = loadTopology(a.topology);
  if (!a.hosts.empty()) {
    std::vector<HostsEntry> hosts;
    try {
      hosts = readHostsFile(a.hosts, HostAddress::kOptional);
    } catch (const IoError& e) {
      throw InvalidInput(e.what());
    }
    t = reorder::selectHosts(t, hosts, a.hosts, a.topology);
  }
  reorder::PlanResult r = reorder::planTopology(t, o);
  if (!a.predictions.empty()) writePredictions(a.predictions, a.sizes, r);
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
  cmd->add_option("--step-overhead-us", args->stepOverheadUs,
                  "Software cost of each message step in microseconds, on top of the measured "
                  "latency (default 0)")
      ->check(CLI::Range(0.0, 1e7));
  cmd->add_option("--fabric-mbit", args->fabricMbit,
                  "Aggregate rate of all flows together, Mbit/s: the CPUs of an emulated cloud on "
                  "one machine (default unlimited)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--fabric-burst-kib", args->fabricBurstKib,
                  "KiB all flows of one step move together before --fabric-mbit binds (Open MPI's "
                  "models; default 0)")
      ->check(CLI::Range(0.0, 1e7));
  cmd->add_flag("--no-open-mpi", args->noOpenMpi,
                "Do not model Open MPI's algorithms (no \"open_mpi\" decision in the plan)");
  cmd->add_option("--predictions", args->predictions,
                  "Also write every modelled algorithm's predicted time (us) at --sizes, in the "
                  "plan's order, to this JSON file");
  cmd->add_option("--sizes", args->sizes,
                  "Message sizes for --predictions (default 64K,256K,1M,4M,16M,64M)");
  cmd->add_option("--mesh", args->mesh, kMeshHelp);
  cmd->add_option("--traffic", args->traffic, kTrafficHelp);
  cmd->add_option("--profile", args->profile, kProfileHelp);
  cmd->add_option("--out,-o", args->out, "Write the plan here (default: stdout)");
  cmd->add_option("--prior", args->prior,
                  "Declared placement to compare with the measured groups and record in the plan: "
                  "AWS DescribeInstanceTopology output, GCP instances, `kubectl get nodes -o json` "
                  "or native JSON (docs/formats.md); default RANKMAP_PRIOR");
  cmd->add_option("--prior-labels", args->priorLabels,
                  "Node label keys holding the declared placement, top level first, comma-"
                  "separated (for `kubectl get nodes -o json`); default RANKMAP_PRIOR_LABELS, "
                  "else the known AWS, GCP and Topograph labels");
  cmd->callback([&run, &ctx, args] { run = [args, &ctx] { return runPlan(*args, ctx.config); }; });
}

}  // namespace rankmap::cli
