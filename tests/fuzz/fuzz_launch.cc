// Fuzz target for `rankmap run`'s launcher command lines and the hostfiles they name: the parsers
// and rewrites of launch/ (mpirun, srun, torchrun), Open MPI hostfiles and --host lists, Slurm
// hostlists, the --xgboost hosts file (read from a memfd), and rankmapd's hosts file
// (probe/hosts.h).
//
// Input: text in up to three sections separated by a line "%%":
//   1. the command line, one word per line (argv[0] picks the launcher: mpirun, srun, torchrun,
//      python -m torch.distributed.run);
//   2. the content of every file the command line names (an mpirun --hostfile);
//   3. the environment, NAME=VALUE per line (PET_*, SLURM_*, OMPI_MCA_*).
// A parser must accept or refuse with NotSupported/InvalidInput. What it accepts is then planned
// with a plan in the reverse of the job's host order, as rankmap run does (prepareRun,
// decideTorchrun), and rewritten for launch and shim mode. Findings: a crash, another exception,
// or a rewrite that changes the user's program or its arguments (the words from the program on
// must end every rewritten command unchanged).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/hosts_file.h"
#include "common/json.h"
#include "common/log.h"
#include "common/plan.h"
#include "launch/launch.h"
#include "launch/mpirun.h"
#include "launch/slurm.h"
#include "launch/torchrun.h"
#include "launch/xgboost.h"
#include "probe/hosts.h"
#include "reorder/planner.h"

namespace {

using namespace rankmap;
using namespace rankmap::launch;

// Hostlists of more hosts, and jobs of more ranks, are parsed but not run further (below).
#ifdef RANKMAP_FUZZ_REPLAY
constexpr size_t kFuzzMaxHosts = kMaxHostlistHosts;  // CI's replay runs every input in full
constexpr int kFuzzMaxRanks = kMaxJobRanks;
#else
constexpr size_t kFuzzMaxHosts = 64;
constexpr int kFuzzMaxRanks = 256;
#endif

[[noreturn]] void finding(const std::string& what, const std::vector<std::string>& argv) {
  std::fprintf(stderr, "fuzz_launch: %s\n  command: %s\n", what.c_str(), shellJoin(argv).c_str());
  std::abort();
}

std::vector<std::string> splitLines(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    size_t nl = s.find('\n');
    out.emplace_back(s.substr(0, nl));
    s.remove_prefix(nl == std::string_view::npos ? s.size() : nl + 1);
  }
  return out;
}

// The user's program and its arguments end `rewritten` unchanged.
void keepsProgram(const std::vector<std::string>& argv, size_t program,
                  const std::vector<std::string>& rewritten, const char* what) {
  size_t tail = argv.size() - std::min(program, argv.size());
  if (rewritten.size() < tail || !std::equal(argv.end() - static_cast<ptrdiff_t>(tail), argv.end(),
                                             rewritten.end() - static_cast<ptrdiff_t>(tail)))
    finding(std::string(what) + " changed the program words: " + shellJoin(rewritten), argv);
}

// A plan over the job's hosts in reverse order, with the job's ranks per host. None when a host
// is spelled in bytes that are not UTF-8: a plan is JSON, so no plan can name such a host.
std::optional<Plan> reversePlan(const Job& job) {
  std::vector<std::string> hosts;
  for (auto it = job.hosts.rbegin(); it != job.hosts.rend(); ++it) hosts.push_back(it->spelling);
  try {
    Json(hosts).dump();
  } catch (const Json::type_error&) {
    return std::nullopt;
  }
  try {
    return Plan::identity(hosts, job.uniformRanksPerHost().value_or(1));
  } catch (const InvalidInput&) {
    return std::nullopt;  // e.g. a host spelled twice: the plan side refuses it
  }
}

void launcherCommand(const LaunchCommand& cmd, size_t program) {
  const auto& argv = cmd.argv();
  const Job& job = cmd.job();
  // A rank count is a few bytes and a rank a line of a hostfile: a second of work per input
  // near kMaxJobRanks under the sanitizers (the size itself is launch_mpirun_test's).
  if (job.worldSize() > kFuzzMaxRanks) return;
  std::vector<JobHost> reversed(job.hosts.rbegin(), job.hosts.rend());
  for (const auto& order : {job.hosts, reversed}) {
    try {
      keepsProgram(argv, program, cmd.launchInOrder(order, "/run").argv, "launchInOrder");
    } catch (const InvalidInput&) {
    }
  }
  keepsProgram(argv, program,
               cmd.withShim("/lib/librankmap_mpi.so", {{"RANKMAP_PLAN", "/run/plan.json"}}).argv,
               "withShim");
  if (cmd.collTunedOnCommandLine())
    keepsProgram(argv, program, cmd.withCollRules(argv, "/run/rules.conf"), "withCollRules");
  cmd.everyHostReads("/run/rules.conf", "/run");
  auto plan = reversePlan(job);
  for (Mode mode : {Mode::kLaunch, Mode::kShim}) {
    RunOptions opts;
    opts.mode = mode;
    opts.dir = "/run";
    opts.shimLib = "/lib/librankmap_mpi.so";
    opts.planPath = "/run/plan.json";
    opts.rules = RulesMode::kOn;
    RunDecision d = prepareRun(cmd, plan, plan ? "" : "no plan", {"fuzz plan", true}, {}, opts);
    if (d.command.argv.empty()) finding("prepareRun gave an empty command", argv);
    if (d.applied) keepsProgram(argv, program, d.command.argv, "prepareRun");
  }
}

void torchrun(const std::vector<std::string>& argv, const TorchrunCommand::EnvLookup& env) {
  TorchrunCommand cmd = TorchrunCommand::parse(argv, env);
  cmd.rdzvBackend();
  cmd.fixedNodes();
  size_t script = cmd.scriptIndex();
  keepsProgram(argv, script, cmd.rewrite({"node_rank", "master_addr"}, {"--node_rank", "1"}),
               "rewrite");
  int nodes = cmd.fixedNodes().value_or(2);
  if (nodes < 1 || nodes > 64) return;
  std::vector<std::string> hosts;
  for (int i = nodes - 1; i >= 0; --i) hosts.push_back("node" + std::to_string(i));
  Plan plan = Plan::identity(hosts, 1);
  NodeIdentity self{"node0", {"10.0.0.1"}};
  for (const char* option : {"--local_addr", ""}) {
    TorchInstall install{"2.3.0", 3, 11, option};
    RunDecision d = decideTorchrun(argv, plan, "", {"fuzz plan", true}, {}, self, install, env);
    if (d.command.argv.empty()) finding("decideTorchrun gave an empty command", argv);
    if (d.applied) keepsProgram(argv, script, d.command.argv, "decideTorchrun");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (log::setLevel(log::Level::Off), true);
  (void)quiet;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string sections[3];
  for (int i = 0; i < 3 && !in.empty(); ++i) {
    size_t sep = in.find("\n%%\n");
    sections[i] = std::string(in.substr(0, sep));
    in.remove_prefix(sep == std::string_view::npos ? in.size() : sep + 4);
  }
  std::vector<std::string> argv = splitLines(sections[0]);
  const std::string& file = sections[1];
  std::map<std::string, std::string> envMap;
  for (const auto& line : splitLines(sections[2])) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) envMap[line.substr(0, eq)] = line.substr(eq + 1);
  }
  // A hostlist of more than kFuzzMaxHosts hosts is not run further: a few bytes name up to
  // kMaxHostlistHosts hosts, a second of work each under the sanitizers, and the fuzzer then
  // spends its time making names instead of exploring the parsers (the work at the limit is
  // bounded by slurm_test's HostlistsHoldAtMostMaxHosts and replayed from the corpus in CI).
  for (const auto& [name, value] : envMap) {
    try {
      if (hostlistSize(value) > kFuzzMaxHosts) return 0;
    } catch (const InvalidInput&) {
    }
  }
  auto env = [&envMap](const std::string& name) -> std::optional<std::string> {
    auto it = envMap.find(name);
    if (it == envMap.end()) return std::nullopt;
    return it->second;
  };

  // The file and the environment on their own, through the parsers that read such text.
  try {
    parseOmpiHostfile(file, "hostfile");
  } catch (const NotSupported&) {
  } catch (const InvalidInput&) {
  }
  try {
    probe::validateHosts(probe::parseHosts(file, "hosts file"), "hosts file");
  } catch (const InvalidInput&) {
  }
  if (int fd = ::memfd_create("hosts", MFD_CLOEXEC); fd >= 0) {
    if (::write(fd, file.data(), file.size()) == static_cast<ssize_t>(file.size())) {
      try {
        for (const auto& h :
             readHostsFile("/proc/self/fd/" + std::to_string(fd), HostAddress::kOptional))
          if (h.name.empty() || h.name.find_first_of(" \t\n#") != std::string::npos ||
              h.address.find_first_of(" \t\n#") != std::string::npos)
            finding("the hosts file gave the host '" + h.name + " " + h.address + "'", argv);
      } catch (const InvalidInput&) {
      }
    }
    ::close(fd);
  }
  for (const auto& [name, value] : envMap) {
    try {
      parseOmpiHostList(value);
    } catch (const NotSupported&) {
    } catch (const InvalidInput&) {
    }
    try {
      auto hosts = expandHostlist(value);
      if (!hosts.empty() && compressHostlist(hosts).empty())
        finding("empty compressed hostlist", argv);
    } catch (const InvalidInput&) {
    }
  }

  if (argv.empty()) return 0;
  try {
    if (isMpirun(argv[0])) {
      auto cmd = MpirunCommand::parse(
          argv, [&file](const std::string&) { return file; }, env);
      launcherCommand(*cmd, cmd->programIndex());
    } else if (isSrun(argv[0])) {
      auto cmd = SrunCommand::parse(argv, env);
      launcherCommand(*cmd, cmd->programIndex());
    } else if (isTorchrun(argv)) {
      torchrun(argv, env);
    }
  } catch (const NotSupported&) {
  } catch (const InvalidInput&) {
  }
  return 0;
}
