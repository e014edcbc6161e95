// Open MPI's mpirun (also mpiexec, orterun): reading its command line and rewriting it.
//
// The parser knows every mpirun 4.1 option and how many words it takes, so it finds the program
// and the options that decide placement: --hostfile/-hostfile/--machinefile, -H/--host/-host,
// -np/-n/-c, --mca rmaps. Options that place ranks in ways it does not model (--map-by, -N,
// --rankfile, MPMD `:` lists, unknown options...) make it refuse, naming the word: rankmap run
// then runs the command unchanged. Rules, from Open MPI 4.1's behaviour:
//   - `--mca rmaps seq`: rank i runs on hostfile line i (slots ignored); -np defaults to the lines.
//   - otherwise by slot: hosts in order of first appearance, each filled to its slots before the
//     next. Slots come from slots= (and its synonyms) in a hostfile or host:N in --host, summed
//     over repeated lines; --host without :N counts one slot per mention. A hostfile line without
//     slots= makes Open MPI count the host's cores, which rankmap run cannot see: refused.
//     -np above the slots (oversubscription) is refused.
// Rewrites: launch mode writes a hostfile in plan order (a host's line repeated once per rank)
// and runs with `--hostfile F --mca rmaps seq -np N` in place of the job's host and rmaps options;
// shim mode adds `-x LD_PRELOAD=<shim> -x RANKMAP_PLAN=<plan>` and changes nothing else. Either
// may add `--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_dynamic_rules_filename F`
// (launch/ompi_rules.h) unless the command line sets coll_tuned itself (--mca coll_tuned_*, -x
// OMPI_MCA_coll_tuned_*, or a `coll` list without tuned).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/launch.h"
#include "launch/option_table.h"

namespace rankmap::launch {

// One host line of an Open MPI hostfile or one item of a --host list.
struct HostEntry {
  std::string spelling;      // as written, including a user@ prefix
  std::optional<int> slots;  // nullopt when not given
  bool operator==(const HostEntry&) const = default;
};

// Parses Open MPI hostfile text: `host [slots=N] [max_slots=N]` per line, `#` comments.
// Throws NotSupported naming `source`, the line and the token it does not know.
std::vector<HostEntry> parseOmpiHostfile(std::string_view text, std::string_view source);
// Parses a --host value: "a,b:2,c". Throws NotSupported for forms it does not know (host:*).
std::vector<HostEntry> parseOmpiHostList(std::string_view list);

// True for mpirun, mpiexec, orterun (any directory, any version suffix such as mpirun.openmpi).
bool isMpirun(const std::string& argv0);

class MpirunCommand final : public LaunchCommand {
 public:
  using FileReader = std::function<std::string(const std::string& path)>;
  using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

  // Throws NotSupported naming the word or form it does not understand, InvalidInput for a
  // command line mpirun itself would reject (an -np that is not a number), IoError for an
  // unreadable hostfile. `read` and `env` default to the file system and the process environment.
  static std::unique_ptr<MpirunCommand> parse(const std::vector<std::string>& argv,
                                              FileReader read = {}, EnvLookup env = {});

  std::string launcherName() const override { return "mpirun"; }
  MpiFamily mpiFamily() const override { return MpiFamily::kOpenMpi; }
  std::string program() const override { return argv_.at(program_); }
  const std::vector<std::string>& argv() const override { return argv_; }
  const Job& job() const override { return job_; }
  Command launchInOrder(const std::vector<JobHost>& ordered, const std::string& dir) const override;
  Command withShim(const std::string& shimLib, const ShimEnv& env) const override;
  std::optional<std::string> collTunedOnCommandLine() const override { return collTunedBy_; }
  std::vector<std::string> withCollRules(std::vector<std::string> argv,
                                         const std::string& path) const override;
  // mpirun with the job's launch options (MCA parameters, exports, prefix, agent) on each of the
  // job's hosts once, running `/bin/sh -c 'test -r PATH'`; output options are left out.
  Command everyHostReads(const std::string& path, const std::string& dir) const override;

  // For tests and messages.
  bool sequential() const { return sequential_; }
  std::optional<int> np() const { return np_; }
  size_t programIndex() const { return program_; }

  // One option occurrence: argv_[index, index + words).
  using Item = OptionItem;

 private:
  MpirunCommand() = default;
  // argv with the items at `drop` removed and `insert` placed right after argv[0].
  std::vector<std::string> rebuild(const std::vector<size_t>& drop,
                                   const std::vector<std::string>& insert) const;

  std::vector<std::string> argv_;
  std::vector<Item> items_;
  size_t program_ = 0;
  std::optional<int> np_;
  bool sequential_ = false;
  std::vector<size_t> hostItems_;   // indices into items_: --hostfile, --host
  std::vector<size_t> rmapsItems_;  // --mca rmaps X
  std::vector<size_t> npItems_;
  Job job_;
  std::string ldPreload_;            // value of an -x LD_PRELOAD[=...] to keep in shim mode
  std::vector<size_t> shimItems_;    // -x LD_PRELOAD / -x RANKMAP_PLAN items replaced in shim mode
  std::vector<size_t> launchItems_;  // options a check on every host keeps (see everyHostReads)
  std::string collTunedBy_;          // the first option deciding coll_tuned; empty = none
};

}  // namespace rankmap::launch
