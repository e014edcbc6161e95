// Slurm: srun steps in plan order, and Slurm's topology.conf from the inferred hierarchy.
//
// - `rankmap run -- srun ...` (SrunCommand): the step's tasks are placed by srun's default block
//   distribution over the step's nodes (-w/--nodelist, else the allocation's
//   SLURM_JOB_NODELIST, the first -N of it), K = tasks / nodes on each. The launch-mode rewrite
//   writes a SLURM_HOSTFILE with one line per task in plan order and runs
//   `env SLURM_HOSTFILE=F srun --distribution=arbitrary -n N ...` (the user's -w, -m and -n
//   replaced). Shim mode passes LD_PRELOAD and RANKMAP_PLAN through --export. Options it does not
//   know, other distributions, --exclude, --relative and uneven task counts make it refuse,
//   naming the word: rankmap run then runs the command unchanged.
// - `rankmap export --slurm-topology`: topology.conf for Slurm's topology/tree plugin, one
//   switch per group of each hierarchy level (innermost first: SwitchName=<level><i> Nodes=...,
//   then Switches=... for outer levels) and one root switch over the outermost level, so that
//   Slurm's scheduler packs jobs into racks; with -o DIR also topology.yaml (Slurm 25.05: the same
//   tree, and a block topology of the innermost groups).
// - `rankmap export --slurm-hostfile`: the SLURM_HOSTFILE for a plan.
// Slurm is not needed to build or test any of this: the files are plain text.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/plan.h"
#include "common/topology.h"
#include "launch/launch.h"

namespace rankmap::launch {

// Expands a Slurm hostlist ("node[01-03,7],gpu[1-2]-ib,login") in order, zero padding kept.
// Throws InvalidInput naming the expression for a malformed one, or one of more than
// kMaxHostlistHosts hosts (the work for any hostlist stays bounded: tests/fuzz found a few bytes
// that made a million names and minutes of work).
inline constexpr size_t kMaxHostlistHosts = 100000;
std::vector<std::string> expandHostlist(std::string_view expr);
// The number of hosts expandHostlist(expr) gives, counted without making them; throws as it does.
size_t hostlistSize(std::string_view expr);
// Compresses host names into a hostlist ("node[01-03,07],login"): names sharing a prefix and a
// numeric suffix width are grouped (in order of first appearance) with sorted ranges.
std::string compressHostlist(const std::vector<std::string>& hosts);

// SLURM_HOSTFILE text: each host of `plan.order` on `tasksPerHost` consecutive lines.
std::string slurmHostfile(const Plan& plan, int tasksPerHost);

// topology.conf text for `hosts` with `levels` (innermost first; may be empty: one switch over
// every host). Throws InvalidInput when a level's group is not a union of the inner level's
// groups (the levels do not nest).
std::string slurmTopologyConf(const std::vector<std::string>& hosts,
                              const std::vector<HierarchyLevel>& levels, std::string_view source);

// Names of the two topologies in topology.yaml; a partition picks one with Topology=NAME.
inline constexpr std::string_view kSlurmTreeTopology = "rankmap-tree";
inline constexpr std::string_view kSlurmBlockTopology = "rankmap-block";

// topology.yaml text (Slurm 25.05+, which reads it instead of topology.conf when both exist) with
// two topologies: kSlurmTreeTopology (topology/tree, the same switches as slurmTopologyConf,
// cluster_default) and kSlurmBlockTopology (topology/block: one block per innermost group, or
// one block of every host without levels; block_sizes = the smallest block's size). Hostlists are
// compressed as in topology.conf. Throws as slurmTopologyConf.
std::string slurmTopologyYaml(const std::vector<std::string>& hosts,
                              const std::vector<HierarchyLevel>& levels, std::string_view source);

// True for srun (any directory).
bool isSrun(const std::string& argv0);

class SrunCommand final : public LaunchCommand {
 public:
  using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
  // Throws NotSupported naming the word or form it does not understand, InvalidInput for a value
  // srun itself would reject. `env` defaults to the process environment.
  static std::unique_ptr<SrunCommand> parse(const std::vector<std::string>& argv,
                                            EnvLookup env = {});

  std::string launcherName() const override { return "srun"; }
  std::string orderedLaunchHow() const override {
    return "as SLURM_HOSTFILE with --distribution=arbitrary";
  }
  const std::vector<std::string>& argv() const override { return argv_; }
  const Job& job() const override { return job_; }
  Command launchInOrder(const std::vector<JobHost>& ordered, const std::string& dir) const override;
  Command withShim(const std::string& shimLib, const ShimEnv& env) const override;

  size_t programIndex() const { return program_; }

  struct Item {
    size_t index = 0;
    size_t words = 1;
    std::string name;  // long name without dashes
    std::optional<std::string> value;
  };

 private:
  SrunCommand() = default;
  std::vector<std::string> rebuild(const std::vector<std::string>& dropNames,
                                   const std::vector<std::string>& insert) const;
  std::vector<std::string> argv_;
  std::vector<Item> items_;
  size_t program_ = 0;
  Job job_;
};

}  // namespace rankmap::launch
