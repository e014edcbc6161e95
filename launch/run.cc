#include "launch/run.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/job_profile.h"
#include "common/topology.h"
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

// A profile plans only the job it was recorded from: the same program and world size (each
// checked where the command line tells it: `world` 0 = unknown).
void checkProfileJob(const JobProfile& p, const std::string& path, const std::string& program,
                     size_t world) {
  if ((!program.empty() && program != p.program) ||
      (world != 0 && world != static_cast<size_t>(p.worldSize)))
    RANKMAP_THROW(InvalidInput,
                  "--profile {}: recorded from program '{}' with {} ranks (fields program, "
                  "world_size); this job runs '{}' with {} ranks: a profile plans only the job "
                  "it was recorded from (record one with --record-profile)",
                  path, p.program, p.worldSize, program.empty() ? "?" : program,
                  world != 0 ? std::to_string(world) : std::string("?"));
}
void checkProfileJob(const JobProfile& p, const std::string& path, const LaunchCommand& cmd) {
  checkProfileJob(p, path, fileNameOf(cmd.program()), cmd.job().worldSize());
}
// torchrun: the training script (not with -m or --no-python, whose program the command line
// does not name as Python sees it) and nodes x nproc_per_node where both are numbers. A command
// line torchrun's reader does not understand is run unchanged anyway: nothing to check.
void checkTorchrunProfile(const JobProfile& p, const std::string& path,
                          const std::vector<std::string>& argv) {
  std::optional<TorchrunCommand> t;
  try {
    t = TorchrunCommand::parse(argv, processEnv);
  } catch (const NotSupported&) {
    return;
  }
  std::string program;
  if (!t->userSet("module") && !t->userSet("no_python"))
    program = fileNameOf(argv[t->scriptIndex()]);
  size_t world = 0;
  if (auto nodes = t->fixedNodes(), perNode = t->procsPerNode(); nodes && perNode)
    world = static_cast<size_t>(*nodes) * static_cast<size_t>(*perNode);
  checkProfileJob(p, path, program, world);
}

// --record-profile FILE: every rank of an MPI job preloads the MPI shim, which records; a
// torchrun job's workers load the Python hook (torchProfile). Absolute, since the ranks may
// start elsewhere.
std::string profileOutPath(const RunArgs& a, bool torchrun) {
  if (a.recordProfile.empty()) return "";
  if (a.xgboost > 0)
    RANKMAP_THROW(InvalidInput, "--record-profile: expected an MPI or torchrun job, not --xgboost");
  if (a.mode == "launch" && !torchrun)
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

// --record-profile with torchrun: the workers load launch/python/sitecustomize.py (this folder
// first on PYTHONPATH), whose rank 0 writes every rank's record to `records` in the run's folder
// at exit; finishTorchProfile merges them when the job has ended. The settings go on the command
// line through env(1), so that --dry-run shows them. Returns the records' path ("" when the hook
// is missing: said in the notes, the job runs without it).
std::string torchProfile(const Config& cfg, const std::string& profileOut, const RunDir& dir,
                         RunDecision& d) {
  const std::string hook = findOurLibrary("launch", "python/sitecustomize.py");
  if (hook.empty()) {
    d.notes.push_back(
        "rankmap run: the job's profile is not recorded: the Python hook python/sitecustomize.py "
        "was not found beside the rankmap binary (build tree or installed package)");
    return "";
  }
  const std::string records = dir.path() + "/profile-records.json";
  std::string pythonPath = std::filesystem::path(hook).parent_path().string();
  if (const char* old = std::getenv("PYTHONPATH"); old && *old)
    pythonPath += ":" + std::string(old);
  std::vector<std::string> argv = {
      "env", "PYTHONPATH=" + pythonPath, "RANKMAP_PROFILE_RECORDS=" + records,
      fmt::format("RANKMAP_TIMEOUT={}ms", cfg.get(settings::kTimeout).count())};
  argv.insert(argv.end(), d.command.argv.begin(), d.command.argv.end());
  d.command.argv = std::move(argv);
  d.notes.push_back(fmt::format(
      "rankmap run: recording the job's profile (its groups and their traffic) into {}: written "
      "on the node of rank 0 when the job ends; `rankmap run --profile {}` plans the next run "
      "for it",
      profileOut, profileOut));
  return records;
}

// After a torchrun job: the records rank 0 wrote on this node, merged into the profile. Never
// changes the job's exit status; says what happened.
void finishTorchProfile(const std::string& records, const std::string& profileOut) {
  std::error_code ec;
  if (!std::filesystem::exists(records, ec)) {
    std::fprintf(stderr,
                 "rankmap run: no job profile on this node: rank 0 writes it on its own node "
                 "(here, if rank 0 ran here, it did not record: see its output)\n");
    return;
  }
  try {
    JobProfile p =
        JobProfile::fromRecords(readFile(records, 1u << 30), "the job's profile records", utcNow());
    writeFileAtomic(profileOut, p.dump());
    std::fprintf(stderr,
                 "rankmap run: job profile of %s (%d ranks, %zu group set(s)) written to %s\n",
                 p.program.c_str(), p.worldSize,
                 static_cast<size_t>(std::count_if(p.sets.begin(), p.sets.end(),
                                                   [](const ProfileSet& x) { return x.call > 0; })),
                 profileOut.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rankmap run: job profile not written to %s: %s\n", profileOut.c_str(),
                 e.what());
  }
  ::unlink(records.c_str());
}

}  // namespace

int runJob(const Config& cfg, const RunArgs& a) {
  if (a.command.empty()) RANKMAP_THROW(InvalidInput, "expected a command after `--`");
  if (!a.agent.empty() && (!a.plan.empty() || !a.topology.empty()))
    RANKMAP_THROW(InvalidInput, "--agent: expected alone (not with --plan or --topology)");
  Mode mode = parseMode(a.mode);
  const Launcher* launcher = findLauncher(a.command);
  const bool torchrun = launcher && !launcher->parse;
  const std::string profileOut = profileOutPath(a, torchrun);
  if (!profileOut.empty() && !torchrun) mode = Mode::kShim;
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
  std::unique_ptr<LaunchCommand> cmd;
  if (!launcher || launcher->parse) cmd = parseLaunchCommand(launcher, a.command, why);
  std::unique_ptr<RunDir> dir;
  RunDecision d;
  StalePlanSource staleSource;  // where to ask whether the job's plan went stale
  std::string staleName;
  std::string torchRecords;  // where a torchrun job's rank 0 writes the profile's records
  if (cmd && jobMesh.profile) checkProfileJob(*jobMesh.profile, a.profile, *cmd);
  if (torchrun && jobMesh.profile) checkTorchrunProfile(*jobMesh.profile, a.profile, a.command);
  if (torchrun) {  // torchrun, its own flow: launch/torchrun.h
    const std::string planFile = a.plan.empty() ? cfg.get(settings::kPlan) : a.plan;
    const FileIdentity planId = fileIdentity(planFile);
    d = prepareTorchrun(a.command, planFile,
                        a.topology.empty() ? cfg.get(settings::kTopology) : a.topology, checks,
                        mesh);
    if (!planFile.empty() && d.plan) {
      staleSource = fileStaleSource(planFile, planId, *d.plan);
      staleName = "plan file " + planFile;
    }
    if (!profileOut.empty()) {
      try {
        dir = std::make_unique<RunDir>(runDirBase(cfg.get(settings::kRunDir)));
        torchRecords = torchProfile(cfg, profileOut, *dir, d);
      } catch (const std::exception& e) {  // rankmap's problem, not the job's
        d.notes.push_back(
            fmt::format("rankmap run: the job's profile is not recorded: {}", e.what()));
      }
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
  int code = runWatched(cfg, d, std::move(staleSource), staleName);
  if (!torchRecords.empty()) finishTorchProfile(torchRecords, profileOut);
  return code;
}

}  // namespace rankmap::launch
