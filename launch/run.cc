#include "launch/run.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/job_profile.h"
#include "launch/elf.h"
#include "launch/launch.h"
#include "launch/launchers.h"
#include "launch/ompi_rules.h"
#include "launch/plan_source.h"
#include "launch/process.h"
#include "launch/run_dir.h"
#include "launch/stale_plan.h"
#include "launch/torchrun.h"
#include "launch/xgboost.h"
#include "reorder/mesh.h"

namespace rankmap::launch {
namespace {

// coll_tuned settings of the user's outside the command line: OMPI_MCA_* variables of this
// process (mpirun passes them to every rank) and the mca-params files Open MPI reads.
std::optional<std::string> userCollTunedOutside() {
  CollTunedSources src;
  src.env = processEnv;
  src.read = [](const std::string& path) -> std::optional<std::string> {
    try {
      return readFile(path, 1u << 20);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  for (char** e = environ; e && *e; ++e) src.environment.emplace_back(*e);
  return userCollTunedOutside(src);
}

// The MPI shim for the job (in shim mode): librankmap_mpich.so for a program of the MPICH ABI,
// librankmap_mpi.so for Open MPI's; which MPI the program links (its ELF dependencies), else the
// launcher's. The library: RANKMAP_MPICH_SHIM / RANKMAP_MPI_SHIM, else beside this binary (build
// tree or installed). Sets opts.shimLib ("" when not found) and opts.shimMissing.
void chooseShimLib(const Config& cfg, const LaunchCommand& cmd, RunOptions& opts) {
  MpiFamily family = MpiFamily::kUnknown;
  std::string because;
  const std::string program = cmd.program();
  if (!program.empty()) {
    if (auto path = findOnPath(program)) {
      ProgramMpi m = programMpi(*path);
      family = m.family;
      because = fmt::format("{} needs {}", program, m.library);
    }
  }
  if (family == MpiFamily::kUnknown) {
    family = cmd.mpiFamily();
    because = fmt::format("the launcher is {}'s", mpiFamilyName(family));
  }
  const bool mpich = family == MpiFamily::kMpich;
  const std::string file = mpich ? "librankmap_mpich.so" : "librankmap_mpi.so";
  const char* setting = mpich ? "RANKMAP_MPICH_SHIM" : "RANKMAP_MPI_SHIM";
  opts.shimMissing =
      fmt::format("{} not found (set {}){}", file, setting,
                  family == MpiFamily::kUnknown
                      ? ""
                      : fmt::format("; {} for {}: {}", file, mpiFamilyName(family), because));
  const auto& set = cfg.get(mpich ? settings::kMpichShimLib : settings::kMpiShimLib);
  if (!set.empty()) {
    opts.shimLib = set;
    return;
  }
  opts.shimLib = findOurLibrary("shim_mpi", file);
}

// Runs the job, with a StalePlanWatch beside it when its order was fixed at launch from a plan
// whose source can be asked again (an agent, a plan file).
int runWatched(const Config& cfg, const RunDecision& d, StalePlanSource source,
               const std::string& sourceName) {
  std::unique_ptr<StalePlanWatch> watch;
  if (d.applied && d.plan && source) {
    StalePlanOptions o;
    o.every = cfg.get(settings::kRunStaleCheck);
    o.requestTimeout = cfg.get(settings::kRunAgentTimeout);
    o.margin = cfg.get(settings::kRunStaleMargin);
    o.metricsDir = cfg.get(settings::kRunMetricsDir);
    o.sourceName = sourceName;
    if (o.every.count() > 0) {
      try {
        watch = std::make_unique<StalePlanWatch>(*d.plan, std::move(source), o,
                                                 [](const std::string& line) {
                                                   std::fprintf(stderr, "%s\n", line.c_str());
                                                   std::fflush(stderr);
                                                 });
      } catch (const std::exception& e) {
        // The watch is advice: the job runs without it.
        std::fprintf(stderr, "rankmap run: not watching the plan for staleness: %s\n", e.what());
      }
    }
  }
  int code = runAndWait(d.command.argv);
  if (watch) watch->stop();
  return code;
}

// The job's groups: from --mesh and --traffic, or from --profile (its notes in `notes`), read
// before anything runs. A plan file is applied as it is, so a mesh needs a plan made here: from
// --topology or the agent.
struct JobMesh {
  std::vector<MeshDim> dims;
  std::optional<JobProfile> profile;
  std::vector<std::string> notes;
};
JobMesh readMesh(const Config& cfg, const RunArgs& a) {
  if (!a.traffic.empty() && a.mesh.empty())
    RANKMAP_THROW(InvalidInput, "--traffic: expected together with --mesh");
  if (!a.profile.empty() && !a.mesh.empty())
    RANKMAP_THROW(InvalidInput,
                  "--profile: expected instead of --mesh and --traffic (the profile gives the "
                  "job's groups and their traffic)");
  const std::string option = a.profile.empty() ? "--mesh" : "--profile";
  if (a.mesh.empty() && a.profile.empty()) return {};
  if (a.xgboost > 0)
    RANKMAP_THROW(InvalidInput, "{}: expected without --xgboost (an XGBoost job runs one ring)",
                  option);
  bool fromFile = !a.plan.empty() ||
                  (a.topology.empty() && a.agent.empty() && !cfg.get(settings::kPlan).empty());
  if (fromFile)
    RANKMAP_THROW(InvalidInput,
                  "{}: a plan file (--plan or RANKMAP_PLAN) is applied as it is; expected "
                  "--topology or --agent to plan for the job's groups (or `rankmap plan --mesh` "
                  "to make the file)",
                  option);
  JobMesh m;
  if (!a.profile.empty()) {
    m.profile = JobProfile::load(a.profile);
    reorder::ProfileMesh pm = reorder::meshFromProfile(*m.profile, "--profile " + a.profile);
    m.dims = std::move(pm.dims);
    for (auto& n : pm.notes) m.notes.push_back("rankmap run: profile " + a.profile + ": " + n);
    return m;
  }
  m.dims = reorder::parseMesh(a.mesh, "--mesh");
  reorder::meshTraffic(m.dims, a.traffic, "--traffic");
  return m;
}

// A profile plans only the job it was recorded from: the same program and world size.
void checkProfileJob(const JobProfile& p, const std::string& path, const LaunchCommand& cmd) {
  std::string program = fileNameOf(cmd.program());
  size_t world = cmd.job().worldSize();
  if ((!program.empty() && program != p.program) || world != static_cast<size_t>(p.worldSize))
    RANKMAP_THROW(InvalidInput,
                  "--profile {}: recorded from program '{}' with {} ranks (fields program, "
                  "world_size); this job runs '{}' with {} ranks: a profile plans only the job "
                  "it was recorded from (record one with --record-profile)",
                  path, p.program, p.worldSize, program.empty() ? "?" : program, world);
}

// --record-profile FILE: every rank preloads the MPI shim, which records; absolute, since the
// ranks may start elsewhere.
std::string profileOutPath(const RunArgs& a) {
  if (a.recordProfile.empty()) return "";
  if (a.xgboost > 0)
    RANKMAP_THROW(InvalidInput, "--record-profile: expected an MPI job, not --xgboost");
  if (a.mode == "launch")
    RANKMAP_THROW(InvalidInput,
                  "--record-profile: expected --mode shim or auto (the MPI shim records the "
                  "profile inside the job)");
  if (a.recordProfile == a.profile)
    RANKMAP_THROW(InvalidInput,
                  "--record-profile {}: expected another file than --profile (the job reads one "
                  "and writes the other)",
                  a.recordProfile);
  std::error_code ec;
  auto path = std::filesystem::absolute(a.recordProfile, ec);
  if (ec)
    RANKMAP_THROW(InvalidInput, "--record-profile {}: the current folder cannot be read",
                  a.recordProfile);
  return path.string();
}

// --record-profile: a job that runs in shim mode records through the shim it preloads; one that
// runs unchanged (no plan) preloads the shim for the recording alone (identity order).
void recordProfile(const LaunchCommand& cmd, const RunOptions& opts, RunDecision& d) {
  if (opts.shimLib.empty()) {
    d.notes.push_back("rankmap run: the job's profile is not recorded: " + opts.shimMissing);
    return;
  }
  if (!d.applied) {
    Command c = cmd.withShim(opts.shimLib, {{"RANKMAP_PROFILE_OUT", opts.profileOut}});
    d.command.argv = std::move(c.argv);
    d.command.files.insert(d.command.files.end(), c.files.begin(), c.files.end());
  }
  d.notes.push_back(fmt::format(
      "rankmap run: recording the job's profile (its groups and their traffic) into {}: written "
      "by the launcher's first rank at MPI_Finalize; `rankmap run --profile {}` plans the next "
      "run for it",
      opts.profileOut, opts.profileOut));
}

}  // namespace

int runJob(const Config& cfg, const RunArgs& a) {
  if (a.command.empty()) RANKMAP_THROW(InvalidInput, "expected a command after `--`");
  if (!a.agent.empty() && (!a.plan.empty() || !a.topology.empty()))
    RANKMAP_THROW(InvalidInput, "--agent: expected alone (not with --plan or --topology)");
  Mode mode = parseMode(a.mode);
  const std::string profileOut = profileOutPath(a);
  if (!profileOut.empty()) mode = Mode::kShim;
  JobMesh jobMesh = readMesh(cfg, a);
  const std::vector<MeshDim>& mesh = jobMesh.dims;
  PlanChecks checks;
  checks.maxAge = cfg.get(settings::kPlanMaxAge);
  if (a.xgboost > 0) {  // frameworks: launch/xgboost.h
    XgboostOptions xo;
    xo.workers = a.xgboost;
    xo.rsh = splitWords(a.rsh);
    xo.trackerAddress = a.trackerAddr;
    xo.startTimeout = cfg.get(settings::kXgboostTimeout);
    xo.dryRun = a.dryRun;
    return runXgboostJob(xo, a.hostsFile, a.command,
                         a.plan.empty() ? cfg.get(settings::kPlan) : a.plan,
                         a.topology.empty() ? cfg.get(settings::kTopology) : a.topology, checks);
  }

  std::string why;
  const Launcher* launcher = findLauncher(a.command);
  std::unique_ptr<LaunchCommand> cmd;
  if (!launcher || launcher->parse) cmd = parseLaunchCommand(launcher, a.command, why);
  std::unique_ptr<RunDir> dir;
  RunDecision d;
  StalePlanSource staleSource;  // where to ask whether the job's plan went stale
  std::string staleName;
  if (launcher && !launcher->parse && (jobMesh.profile || !profileOut.empty()))
    RANKMAP_THROW(InvalidInput,
                  "{}: expected an MPI job (mpirun, mpiexec, srun): the MPI shim records the "
                  "profile, and {} is not one",
                  jobMesh.profile ? "--profile" : "--record-profile", launcher->name);
  if (cmd && jobMesh.profile) checkProfileJob(*jobMesh.profile, a.profile, *cmd);
  if (launcher && !launcher->parse) {  // torchrun, its own flow: launch/torchrun.h
    const std::string planFile = a.plan.empty() ? cfg.get(settings::kPlan) : a.plan;
    const FileIdentity planId = fileIdentity(planFile);
    d = prepareTorchrun(a.command, planFile,
                        a.topology.empty() ? cfg.get(settings::kTopology) : a.topology, checks,
                        mesh);
    if (!planFile.empty() && d.plan) {
      staleSource = fileStaleSource(planFile, planId, *d.plan);
      staleName = "plan file " + planFile;
    }
  } else if (!cmd) {
    if (a.strict || cfg.get(settings::kRunStrict))
      RANKMAP_THROW(InvalidInput, "{} (--strict or RANKMAP_RUN_STRICT: nothing was run)", why);
    d = unchanged(a.command, why + "; --strict (RANKMAP_RUN_STRICT=1) makes this an error");
  } else {
    PlanResult pr;
    std::string planPath =
        !a.plan.empty() ? a.plan
                        : (a.topology.empty() && a.agent.empty() ? cfg.get(settings::kPlan) : "");
    std::string topoPath =
        !a.topology.empty() ? a.topology : (a.agent.empty() ? cfg.get(settings::kTopology) : "");
    FileIdentity planId;
    std::string url, token;
    if (!planPath.empty()) {
      planId = fileIdentity(planPath);
      pr = planFromFile(planPath, topoPath);
    } else if (!topoPath.empty()) {
      pr = planFromTopology(topoPath, cmd->job(), mesh);
    } else {
      url = !a.agent.empty() ? a.agent : cfg.get(settings::kAgent);
      // The agent plans only for token holders (a plan it already made is served to anyone);
      // without a readable token file the request goes without one.
      if (std::string tf = cfg.get(settings::kTokenFile); !tf.empty()) {
        try {
          token = readSecretFile(tf, 1, "token file");
        } catch (const Error& e) {
          pr.error = e.what();
          pr.source.description = "agent " + url;
        }
      }
      if (pr.error.empty())
        pr = planFromAgent(url, cmd->job(), Deadline::after(cfg.get(settings::kRunAgentTimeout)),
                           token, mesh);
    }
    dropStalePlan(pr, checks);
    // A run directory that cannot be made or written is rankmap's problem, not the job's: the
    // job then runs unchanged.
    try {
      dir = std::make_unique<RunDir>(runDirBase(cfg.get(settings::kRunDir)));
      RunOptions opts;
      opts.mode = mode;
      opts.dir = dir->path();
      opts.planPath = pr.planPath;
      if (mode == Mode::kShim) chooseShimLib(cfg, *cmd, opts);
      opts.rules = parseRulesMode(cfg.get(settings::kMpiRules));
      opts.rulesPath = a.rulesOut;
      if (opts.rules != RulesMode::kOff) opts.userCollTuned = userCollTunedOutside();
      opts.engineRouting = cfg.get(settings::kMpiEngine);
      opts.profileOut = profileOut;
      d = prepareRun(*cmd, pr.plan, pr.error, pr.source, pr.known, opts);
      if (!profileOut.empty()) recordProfile(*cmd, opts, d);
      if (!a.dryRun) {
        dir->write(d.command.files);
        if (d.rules && d.rules->kept) writeFileAtomic(d.rules->path, d.rules->content);
        if (d.rules) dir->write(d.rules->check.files);
      }
    } catch (const InvalidInput&) {
      throw;  // a bad RANKMAP_MPI_RULES: the user's to fix, before anything runs
    } catch (const std::exception& e) {
      d = unchanged(a.command, fmt::format("cannot prepare the job's files: {}", e.what()));
    }
    // Where to ask, while the job runs, whether its plan went stale (advice: never in the way).
    try {
      if (d.plan && !pr.planPath.empty()) {
        staleSource = fileStaleSource(pr.planPath, planId, *d.plan);
        staleName = "plan file " + pr.planPath;
      } else if (d.plan && !url.empty()) {
        staleSource = agentStaleSource(url, token, *d.plan);
        staleName = "agent " + url;
      }
    } catch (const std::exception& e) {
      d.notes.push_back(
          fmt::format("rankmap run: not watching the plan for staleness: {}", e.what()));
    }
  }
  std::fprintf(stderr, "%s\n", d.message.c_str());
  if (d.rules && !d.rules->check.argv.empty() && !a.dryRun) {
    // Every rank reads the rules at MPI_Init: ranks that could not would run Open MPI's own
    // algorithms against the others' and hang or fail. So all of them, or none.
    auto limit = cfg.get(settings::kMpiRulesTimeout);
    if (!runQuietly(d.rules->check.argv, Deadline::after(limit))) {
      d.command.argv = d.rules->withoutRules;
      d.notes.insert(
          d.notes.begin(),
          fmt::format("rankmap run: Open MPI's coll_tuned rules not used: a host of the job "
                      "cannot read {} (or the check did not end within {} ms); the job runs "
                      "with Open MPI's own algorithms (put RANKMAP_RUN_DIR on a file system every "
                      "host sees, or set RANKMAP_MPI_RULES=1 when it is)",
                      d.rules->path, limit.count()));
    }
  }
  d.notes.insert(d.notes.end(), jobMesh.notes.begin(), jobMesh.notes.end());
  for (const auto& note : d.notes) std::fprintf(stderr, "%s\n", note.c_str());
  std::fflush(stderr);
  if (a.dryRun) {
    fmt::print("{}\n", shellJoin(d.command.argv));
    for (const auto& [path, content] : d.command.files)
      fmt::print("# {} (written for a real run):\n{}", path, content);
    if (d.rules && d.rules->kept)
      fmt::print("# {} (written for a real run, and kept):\n{}", d.rules->path, d.rules->content);
    if (d.rules && !d.rules->check.argv.empty()) {
      fmt::print("# before the job, the rules are used only if this exits 0 on every host:\n{}\n",
                 shellJoin(d.rules->check.argv));
      for (const auto& [path, content] : d.rules->check.files)
        fmt::print("# {} (written for a real run):\n{}", path, content);
    }
    return 0;
  }
  return runWatched(cfg, d, std::move(staleSource), staleName);
}

}  // namespace rankmap::launch
