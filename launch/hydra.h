// MPICH's launcher, Hydra (mpiexec.hydra; `mpiexec`/`mpirun` where MPICH owns those names; also
// Intel MPI's and MVAPICH's mpiexec): reading its command line and rewriting it.
//
// The parser knows MPICH 4.0's mpiexec.hydra options and their word counts, so it finds the
// program and the options that decide placement: -f/-hostfile/-machinefile FILE, -hosts/-host
// LIST, -ppn N, -n/-np N. Hydra's placement, modelled exactly: the host entries in order (a
// hostfile line or a list item `host[:N]`, N processes, 1 when not given; -ppn N gives every entry
// N), one round gives each entry its N ranks, and rounds repeat until -n ranks are placed (-n
// defaults to one round). Entries of one host that follow each other are one block; a host whose
// ranks are not one block makes the job non-contiguous. Options that place ranks in ways it does
// not model (-configfile, -rmk, -order-nodes, -skip-launch-node, -map-by...), MPMD `:` lists,
// unknown options, and neither hosts option nor HYDRA_HOST_FILE make it refuse, naming the word:
// rankmap run then runs the command unchanged.
// Rewrites: launch mode writes a hostfile in Hydra's syntax in plan order (`host:K`, one line per
// host) and runs with `-f F -n N` in place of the job's host, -ppn and -n options; shim mode adds
// `-genv LD_PRELOAD <shim>[:previous] -genv RANKMAP_PLAN <plan>` and changes nothing else.
// Open MPI's coll_tuned rules never apply to an MPICH job (collTunedOnCommandLine() is nullopt).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/launch.h"
#include "launch/mpirun.h"
#include "launch/option_table.h"

namespace rankmap::launch {

// Parses Hydra hostfile text: `host[:N]` per line, `#` comments. Throws NotSupported naming
// `source`, the line and the token it does not know.
std::vector<HostEntry> parseHydraHostfile(std::string_view text, std::string_view source);
// Parses a -hosts value: "a,b:2,c".
std::vector<HostEntry> parseHydraHostList(std::string_view list);

class HydraCommand final : public LaunchCommand {
 public:
  using FileReader = std::function<std::string(const std::string& path)>;
  using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

  // Throws NotSupported naming the word or form it does not understand, InvalidInput for a
  // command line Hydra itself would reject (an -n that is not a number), IoError for an
  // unreadable hostfile. `read` and `env` default to the file system and the process environment.
  static std::unique_ptr<HydraCommand> parse(const std::vector<std::string>& argv,
                                             FileReader read = {}, EnvLookup env = {});

  std::string launcherName() const override { return "mpiexec (MPICH Hydra)"; }
  MpiFamily mpiFamily() const override { return MpiFamily::kMpich; }
  std::string program() const override { return argv_.at(program_); }
  std::string orderedLaunchHow() const override { return "in Hydra's host:K lines"; }
  const std::vector<std::string>& argv() const override { return argv_; }
  const Job& job() const override { return job_; }
  Command launchInOrder(const std::vector<JobHost>& ordered, const std::string& dir) const override;
  Command withShim(const std::string& shimLib, const ShimEnv& env) const override;

  std::optional<int> np() const { return np_; }
  size_t programIndex() const { return program_; }

  using Item = OptionItem;

 private:
  HydraCommand() = default;
  std::vector<std::string> rebuild(const std::vector<size_t>& drop,
                                   const std::vector<std::string>& insert) const;

  std::vector<std::string> argv_;
  std::vector<Item> items_;
  size_t program_ = 0;
  std::optional<int> np_;
  std::vector<size_t> placementItems_;  // -f, -hosts, -ppn, -n: replaced in launch mode
  std::vector<size_t> shimItems_;       // -genv/-env LD_PRELOAD and RANKMAP_PLAN
  std::string ldPreload_;               // the LD_PRELOAD the ranks would get, kept in shim mode
  Job job_;
};

}  // namespace rankmap::launch
