// Applying a plan at launch time: the launcher-independent part of `rankmap run`.
//
// A launcher module (launch/mpirun.h today; torchrun, XGBoost and Slurm later) reads its
// command line into a LaunchCommand: the job's hosts in the launcher's rank order (a Job) and two
// rewrites, one that starts the ranks in a given host order (launch mode) and one that preloads a
// shim with a plan (shim mode). prepareRun() ties a command and a plan together and decides, as a
// pure function, what to run and the one line that says why. Everything here is I/O free except
// where a function says it reads a file; the process is started by launch/process.h and its
// files go in a launch/run_dir.h directory.
//
// Contract: when anything is not understood or does not match (an option the parser does not
// know, a plan for other hosts or another world size), the decision is the original command,
// unchanged, with a message naming the reason. Nothing is ever guessed.
#pragma once

#include <chrono>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/plan.h"
#include "common/topology.h"
#include "launch/mpi_family.h"

namespace rankmap::launch {

// One host of a job, as the launcher's command line spells it (a name or an address), and the
// number of ranks the launcher starts there.
struct JobHost {
  std::string spelling;
  int ranks = 0;
  bool operator==(const JobHost&) const = default;
};

// The job's hosts in the launcher's rank order: ranks [0, hosts[0].ranks) on hosts[0], and so
// on. `contiguous` is false when the launcher interleaves a host's ranks with other hosts' (for
// example a sequential hostfile that lists a host twice, apart); the hosts then appear once, in
// order of first appearance, with their total rank count.
struct Job {
  std::vector<JobHost> hosts;
  bool contiguous = true;

  int worldSize() const;
  // The common rank count per host, or nullopt when hosts run different numbers of ranks.
  std::optional<int> uniformRanksPerHost() const;
};

// What to run: the command line and the files it needs (written before it starts, removed after
// it ends).
struct Command {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> files;  // path -> content
};

// What every rank of a shim-mode job gets set besides LD_PRELOAD, in order: RANKMAP_PLAN,
// RANKMAP_PROFILE_OUT.
using ShimEnv = std::vector<std::pair<std::string, std::string>>;

// A launcher command line that rankmap run can read and rewrite.
class LaunchCommand {
 public:
  virtual ~LaunchCommand() = default;
  virtual std::string launcherName() const = 0;
  virtual const std::vector<std::string>& argv() const = 0;
  // The job as the launcher would place it.
  virtual const Job& job() const = 0;
  // Launch mode: a command that starts the same ranks with the hosts in `ordered` order (the same
  // hosts and counts as job(), permuted). Files go into `dir`.
  virtual Command launchInOrder(const std::vector<JobHost>& ordered,
                                const std::string& dir) const = 0;
  // Shim mode: the original placement, every rank preloading `shimLib` with `env` set.
  virtual Command withShim(const std::string& shimLib, const ShimEnv& env) const = 0;

  // The MPI whose launcher this is (Open MPI's mpirun, MPICH's Hydra), or kUnknown (srun, which
  // starts either): the shim rankmap run preloads must match the program's MPI, and when the
  // program does not tell, the launcher's.
  virtual MpiFamily mpiFamily() const { return MpiFamily::kUnknown; }
  // How launchInOrder() keeps the order, for the message ("with --mca rmaps seq").
  virtual std::string orderedLaunchHow() const { return "with --mca rmaps seq"; }
  // The program the launcher starts, as written on the command line ("" when not known).
  virtual std::string program() const { return ""; }

  // Open MPI's coll_tuned rules (launch/ompi_rules.h). Launchers of Open MPI jobs return the
  // user's own setting on the command line that decides coll_tuned's choice ("--mca
  // coll_tuned_allreduce_algorithm 4"), or "" when there is none; others return nullopt, and
  // rankmap run never adds rules to them.
  virtual std::optional<std::string> collTunedOnCommandLine() const { return std::nullopt; }
  // `argv` (this command, rewritten) with the options that hand Open MPI the rules in `path`.
  virtual std::vector<std::string> withCollRules(std::vector<std::string> argv,
                                                 const std::string& path) const {
    (void)path;
    return argv;
  }
  // A command that exits 0 only when every host of the job can read `path` (files in `dir`).
  virtual Command everyHostReads(const std::string& path, const std::string& dir) const {
    (void)path;
    (void)dir;
    return {};
  }
};

// The bound on running a launcher's `--version` to learn its MPI (launch/mpi_family.h).
inline constexpr std::chrono::seconds kLauncherVersionTimeout{5};

enum class Mode { kLaunch, kShim, kAuto };
Mode parseMode(const std::string& text);  // throws InvalidInput naming --mode
const char* modeName(Mode m);

// Where the plan came from, for the message ("plan.json", "topology t.json", "agent URL").
struct PlanSource {
  std::string description;
  // True when the plan was made for this job on request (agent, topology): its ranks per host may
  // then be adapted to the job's; a plan file must match the job as it is.
  bool madeForJob = false;
};

// RANKMAP_MPI_RULES: whether Open MPI gets the plan's coll_tuned rules. kAuto adds them when
// every host of the job can read the file (checked before the job starts); kOn without the check.
enum class RulesMode { kOff, kAuto, kOn };
RulesMode parseRulesMode(const std::string& text);  // 0/off, auto, 1/on; throws InvalidInput

struct RunOptions {
  Mode mode = Mode::kAuto;
  std::string dir;      // where files go (hostfile, adapted plan, rules)
  std::string shimLib;  // shim mode: librankmap_mpi.so or librankmap_mpich.so
  // Shim mode: the reason when shimLib is empty, naming the shim wanted and its setting.
  std::string shimMissing = "librankmap_mpi.so not found (set RANKMAP_MPI_SHIM)";
  std::string planPath;  // the plan's file when it is one and usable as is; may be empty
  RulesMode rules = RulesMode::kOff;
  std::string rulesPath;  // where the rules go when they are to be kept; empty = dir
  // The user's coll_tuned settings outside the command line (ompi_rules.h userCollTunedOutside).
  std::optional<std::string> userCollTuned;
  bool engineRouting = false;  // RANKMAP_MPI_ENGINE is on: the engine's advice is moot
  std::string profileOut;      // shim mode: every rank records the job's profile into this file
};

// Open MPI's coll_tuned rules in a decision: `path` holds `content` (among command.files unless
// `kept`, which rankmap run writes itself and leaves in place). When `check` has a command, it
// must exit 0 before the job starts; otherwise `withoutRules` runs instead.
struct RulesDecision {
  std::string path;
  std::string content;
  bool kept = false;
  Command check;
  std::vector<std::string> withoutRules;
};

// The decision: `command` is what to run; `applied` says whether a plan changed it; `message` is
// the one line for stderr (and `notes`, one line each, for what else the user should know);
// `plan` is the plan as applied (possibly adapted to the job).
struct RunDecision {
  bool applied = false;
  Command command;
  std::string message;
  std::vector<std::string> notes;
  std::optional<RulesDecision> rules;
  std::optional<Plan> plan;
};

// Maps each job host (as spelled) to the plan host it is: by name, or by address through
// `known` (a topology's hosts; may be empty). Throws InvalidInput naming the first job host that
// is not in the plan, a plan host the job does not use, or two spellings of one host.
std::vector<std::string> matchHosts(const std::vector<JobHost>& hosts,
                                    const std::vector<std::string>& planHosts,
                                    const std::vector<Host>& known);

// `plan` re-expressed for a job whose launcher order is `hostsInJobOrder` with `ranksPerHost`
// ranks each: same ring order, new permutation, resealed (so a new hash). Open MPI's decision
// (Plan::openMpi) is dropped when the ranks per host change: it was modelled for another world.
Plan adaptPlan(const Plan& plan, const std::vector<std::string>& hostsInJobOrder, int ranksPerHost);

// Decides what to run. Never throws for a bad plan or job: those give the original command with
// the reason in the message.
RunDecision prepareRun(const LaunchCommand& cmd, const std::optional<Plan>& plan,
                       const std::string& planError, const PlanSource& source,
                       const std::vector<Host>& known, const RunOptions& opts);

// The original command, unchanged, with "running the original command unchanged: <why>".
RunDecision unchanged(const std::vector<std::string>& argv, const std::string& why);

// Shell-quoted command line for --dry-run and messages.
std::string shellJoin(const std::vector<std::string>& argv);

// Pieces shared by the launcher modules.

// A sequential hostfile that starts ranks on `ordered` in that order: one line per rank, a host's
// spelling repeated for its ranks (the form of Open MPI's rmaps seq and of SLURM_HOSTFILE with
// the arbitrary distribution). Throws InvalidInput "<what>: <ranks> vs <worldSize>" when the
// hosts hold another number of ranks than `worldSize`.
std::string sequentialHostfile(const std::vector<JobHost>& ordered, int worldSize,
                               const std::string& what);

// A launcher's command line with words removed and `insert` placed right after its name
// (argv[0], kept): `drop` lists spans of words (first word's index, word count), in any order,
// overlapping or not; words outside every span keep their order.
struct WordSpan {
  size_t index = 0;
  size_t words = 1;
};
std::vector<std::string> rebuildCommandLine(const std::vector<std::string>& argv,
                                            const std::vector<WordSpan>& drop,
                                            const std::vector<std::string>& insert);

// rankmap run reorders jobs of at most this many ranks; a launcher command line naming more (a
// rank count is a few bytes: tests/fuzz made hostfiles of 8 million lines and int overflows) is
// run as it is, with the reason (NotSupported).
inline constexpr int kMaxJobRanks = 1 << 20;
// A launcher's count (-np, slots=, host:N): a positive decimal integer of at most 9 digits.
// Throws InvalidInput "<what>: expected a positive integer, got <text>", and NotSupported when
// it is over kMaxJobRanks.
int parsePositiveInt(std::string_view text, std::string_view what);
// a + b ranks (both non-negative); throws NotSupported naming `what` when over kMaxJobRanks.
int addRanks(int a, int b, std::string_view what);

// The lines of a launcher's hostfile as words: `#` starts a comment, blanks (space, tab, CR)
// separate words, lines without words are skipped. Calls fn(lineNo, words) for each other line,
// lineNo counting from 1; the words view `text`.
void forEachHostfileLine(
    std::string_view text,
    const std::function<void(size_t lineNo, const std::vector<std::string_view>& words)>& fn);

// Line `lineNo` of a launcher's hostfile `source` reads `name address`: rankmap's own hosts file
// (rankmapd, rankmap probe), which the launcher cannot read. Throws NotSupported saying so, with
// the launcher's format (`hostfile`, e.g. "Open MPI's hostfile (`host slots=N` per line)") and
// the line it would take for this host (`example`).
[[noreturn]] void refuseRankmapHostsLine(std::string_view source, size_t lineNo,
                                         std::string_view name, std::string_view address,
                                         std::string_view hostfile, std::string_view launcher,
                                         std::string_view example);

// A long option word, "--name" or "--name=value": the name without the dashes and, when the
// word has an '=', the value after the first one. The word must start with "--".
struct LongOption {
  std::string name;
  std::optional<std::string> value;
};
LongOption splitLongOption(const std::string& word);

// The process environment, as the launcher parsers read it when no lookup is given: the value of
// `name`, or nullopt when it is unset.
std::optional<std::string> processEnv(const std::string& name);

}  // namespace rankmap::launch
