// PyTorch's torchrun (also `python -m torch.distributed.run`): reading one node's command line
// and rewriting it so that the job's node ranks follow a plan.
//
// torchrun runs once per node, so each node decides alone, from the same plan, where it stands:
// it finds itself among the plan's hosts by hostname or by one of its addresses (plan host names,
// or the addresses a topology gives them), and its position in `order` becomes its node rank.
// The lever depends on the rendezvous:
//   - static (torchrun's default): node rank = --node_rank, and the node with rank 0 hosts the
//     store at --master_addr. The rewrite sets --node_rank to the plan position and
//     --master_addr (or the host of a static --rdzv_endpoint) to the address of the plan's first
//     host. Gloo builds its ring by rank, so launch-time order is the only lever it has.
//   - c10d (and etcd): ranks follow the sorted node descriptors, whose first field is the node's
//     address: --local_addr where torchrun has it (newer torch; read from torchrun's source),
//     else socket.getfqdn(). Where torchrun has --local_addr, the rewrite passes an address that
//     sorts in plan order and still parses as this node's IPv4 address: the hexadecimal form
//     with leading zeros ("0x" + (N - position) zeros + hex), which inet_aton and getaddrinfo
//     accept. Where it does not (torch 1.13), the command runs unchanged with the reason.
// Anything not understood (an unknown option, --standalone, a plan that does not hold this node
// or another node count) gives the original command with the reason; nothing is guessed.
//
// Also: torch 1.13 on Python >= 3.11 fails at start with "AttributeError: 'NoneType' object has
// no attribute 'get'" whenever --redirects or --tee is 0 or 3 (its defaults are 0): Python 3.11's
// IntFlag iteration no longer yields the zero and composite members that torch's Std.from_str
// looks up. The rewrite adds `--redirects 1 --tee 1` (stdout to a log file and the console) when
// the user set neither, and warns when the user's own values will fail.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/plan.h"
#include "common/plan_agreement.h"
#include "common/topology.h"
#include "launch/launch.h"

namespace rankmap::launch {

// True for `torchrun` (any directory) and `python* -m torch.distributed.run`.
bool isTorchrun(const std::vector<std::string>& argv);

// What a torchrun command line says, as far as rank placement is concerned.
class TorchrunCommand {
 public:
  using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

  // Throws NotSupported naming the word it does not understand (an unknown option, a missing
  // value, no training script). `env` supplies torchrun's PET_<OPTION> defaults; empty = none.
  static TorchrunCommand parse(const std::vector<std::string>& argv, EnvLookup env = {});

  const std::vector<std::string>& argv() const { return argv_; }
  // The interpreter that runs torchrun: argv[0] for `python -m`, else the script's #! line
  // (read by the caller: see pythonOfTorchrunScript).
  size_t launcherWords() const { return launcherWords_; }
  size_t scriptIndex() const { return script_; }

  // Effective values: the command line, else PET_<NAME>, else torchrun's default.
  std::string rdzvBackend() const;
  std::optional<std::string> value(const std::string& option) const;
  bool userSet(const std::string& option) const;
  bool standalone() const { return standalone_; }
  // The fixed node count, or nullopt for a range "a:b" with a != b.
  std::optional<int> fixedNodes() const;
  // --nproc_per_node as a count of processes, or nullopt where it is none ("gpu", "auto").
  std::optional<int> procsPerNode() const;

  // argv with every occurrence of `drop` (canonical option names, e.g. "node_rank") removed and
  // `insert` placed right before the training script.
  std::vector<std::string> rewrite(const std::vector<std::string>& drop,
                                   const std::vector<std::string>& insert) const;

  struct Item {
    size_t index = 0;  // first word in argv
    size_t words = 1;  // 1 (flag or --opt=value) or 2 (--opt value)
    std::string name;  // canonical: leading dashes dropped, '-' -> '_'
    std::optional<std::string> value;
  };
  const std::vector<Item>& items() const { return items_; }

 private:
  TorchrunCommand() = default;
  std::vector<std::string> argv_;
  std::vector<Item> items_;
  size_t launcherWords_ = 1;
  size_t script_ = 0;
  bool standalone_ = false;
  EnvLookup env_;
};

// How this node names itself: its hostname and its IPv4 addresses (loopback excluded).
struct NodeIdentity {
  std::string hostname;
  std::vector<std::string> addresses;
};
// Reads gethostname() and getifaddrs(). Throws SystemError naming the call.
NodeIdentity localNodeIdentity();

// The plan host that is this node: a plan host equal to the hostname (or its first label), or
// one whose address (from `known`, a topology's hosts, or the plan name itself when it is an
// address) is one of the node's. nullopt when none or more than one match.
std::optional<std::string> findSelf(const NodeIdentity& self,
                                    const std::vector<std::string>& planHosts,
                                    const std::vector<Host>& known);

// The torch installation torchrun runs with, read without importing torch (fast).
struct TorchInstall {
  std::string torchVersion;  // e.g. "1.13.1"
  int pythonMajor = 0;
  int pythonMinor = 0;
  std::string localAddrOption;  // "--local_addr" or "--local-addr" where torchrun has it; else ""
  // torch < 2 on Python >= 3.11: --redirects/--tee values 0 and 3 crash at start.
  bool redirectsBug() const;
};
// The interpreter of a torchrun command: argv[0] for `python -m ...`, else the #! line of the
// torchrun script found on PATH; nullopt when it cannot be found.
std::optional<std::string> torchrunPython(const std::vector<std::string>& argv);
// Runs `python` on a short standard-library-only snippet; nullopt when it fails.
std::optional<TorchInstall> probeTorchInstall(const std::string& python);

// The --local_addr value for plan position `position` of `count` hosts with IPv4 `address`:
// "0x" + (count - position) zeros + the address in hex. Strings for positions 0..count-1 sort in
// position order whatever the addresses. Throws InvalidInput for an address that is not IPv4.
std::string sortableLocalAddr(size_t position, size_t count, const std::string& address);

// Decides what this node runs. Never throws for a bad plan or command line: those give the
// original command (plus the redirects fix where it applies) with the reason in the message.
RunDecision decideTorchrun(const std::vector<std::string>& argv, const std::optional<Plan>& plan,
                           const std::string& planError, const PlanSource& source,
                           const std::vector<Host>& known, const NodeIdentity& self,
                           const std::optional<TorchInstall>& install,
                           TorchrunCommand::EnvLookup env = {});

// rankmap run's entry for torchrun: the plan from `planPath` (with host addresses from
// `topologyPath`, may be empty), else planned from `topologyPath` for all its hosts; this node's
// identity; the torch installation; then decideTorchrun(). Never throws for a bad plan; a stale
// one (`checks`) runs the job unchanged.
// With `mesh` (planned from `topologyPath` only), each node runs --nproc-per-node ranks, which
// must then be a count.
RunDecision prepareTorchrun(const std::vector<std::string>& argv, const std::string& planPath,
                            const std::string& topologyPath, const PlanChecks& checks,
                            const std::vector<MeshDim>& mesh = {});

}  // namespace rankmap::launch
