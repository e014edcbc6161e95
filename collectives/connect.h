// Making a Communicator for a process of a multi-process job: the rendezvous (where this rank,
// the world size and rank 0's listen address come from), the transport, the plan.
//
// The rendezvous, first match wins (chooseRendezvous, a pure function of the environment):
// 1. RANKMAP_ROOT=host:port (the override): rank 0 listens there. Rank and world size from
//    RANKMAP_RANK / RANKMAP_WORLD_SIZE, else from the launcher: OMPI_COMM_WORLD_RANK/SIZE (Open
//    MPI), PMI_RANK/PMI_SIZE (MPICH, Hydra), RANK/WORLD_SIZE (torchrun).
//    RANKMAP_RANK without RANKMAP_ROOT is an error (a standalone launch names its root).
// 2. Under Open MPI's mpirun (OMPI_COMM_WORLD_RANK): the MPI library, loaded at run time
//    (RANKMAP_MPI_LIBRARY, default libmpi.so.40; the engine does not link MPI). MPI_Init, rank 0
//    binds an ephemeral port and MPI_Bcast sends its address, then the root bootstrap as in 1;
//    MPI_Finalize when the communicator is gone, also on errors. Rank 0 listens on
//    RANKMAP_SOCKET_IFNAME's address, else 127.0.0.1 when Open MPI put every rank on its host
//    (OMPI_COMM_WORLD_LOCAL_SIZE == OMPI_COMM_WORLD_SIZE), else its first non-loopback IPv4
//    address. Under MPICH/Hydra (PMI_RANK) without RANKMAP_ROOT: an error, MPICH's ABI is not
//    handled (collectives/bootstrap/mpi_library.h).
//    Why a broadcast and then the root bootstrap rather than the callback bootstrap over
//    MPI_Allgather: every later exchange (plan agreement, transport addresses) then keeps its
//    deadline and names the rank that failed, only MPI_Init/MPI_Bcast/MPI_Finalize are
//    uninterruptible, and the TCP transport listens on the address that reached rank 0.
// 3. torchrun / env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_RANK is logged): rank
//    0 listens on MASTER_ADDR:MASTER_PORT+1. MASTER_PORT itself belongs to PyTorch's store:
//    torchrun's agent binds it (TORCHELASTIC_USE_AGENT_STORE=True) and init_process_group
//    ("env://") binds it in a plain launch, so the next port is the rule that works in both.
//    Under torchrun --standalone (or any c10d rendezvous) MASTER_PORT is an ephemeral port the
//    agent found free, so MASTER_PORT+1 may be in use (rank 0 then fails to bind, naming it):
//    give such launches RANKMAP_ROOT.
// The launcher variables are not rankmap settings and are read here only (launcherEnvironment).
// Each rank logs the rendezvous it used (rank 0 at info, the others at debug); nothing goes to
// stdout. The root bootstrap then connects the ranks, the ranks agree on the plan through it
// (common/plan_agreement.h), and the transport comes from RANKMAP_TRANSPORT and its settings
// (collectives/transport/transport.h).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/bootstrap/mpi_library.h"
#include "collectives/communicator.h"
#include "common/deadline.h"
#include "common/plan.h"
#include "common/plan_agreement.h"

namespace rankmap {
class Config;
}  // namespace rankmap

namespace rankmap::coll {

enum class RendezvousKind {
  kRoot,  // the root bootstrap at `root`: rank 0 binds it, the others connect to it
  kMpi,   // Open MPI's library: rank 0's address comes by MPI_Bcast, then the root bootstrap
};

struct Rendezvous {
  RendezvousKind kind = RendezvousKind::kRoot;
  int rank = -1;
  int size = -1;
  int localRank = -1;      // the launcher's local rank when it gives one (logged only)
  std::string source;      // where rank and size come from: "RANKMAP_RANK", "Open MPI", ...
  std::string root;        // host:port of rank 0's listener (kMpi: set once it is broadcast)
  std::string rootSource;  // "RANKMAP_ROOT", "MASTER_ADDR:MASTER_PORT+1", "MPI_Bcast"
  bool sameHost = false;   // kMpi: the launcher put every rank on one host
  std::string mpiLibrary;  // kMpi: what to dlopen
  // One line for logs and bench headers: "Open MPI's library libmpi.so.40, root 10.0.0.1:4242".
  std::string describe() const;
};

// The launcher variables chooseRendezvous reads, by name, as this process has them (unset ones
// absent). Not rankmap settings: not in the registry, read with getenv here only.
using LauncherEnvironment = std::map<std::string, std::string>;
LauncherEnvironment launcherEnvironment();

// The rankmap settings that take part: RANKMAP_ROOT, RANKMAP_RANK, RANKMAP_WORLD_SIZE,
// RANKMAP_MPI_LIBRARY.
struct RendezvousSettings {
  std::string root;
  int64_t rank = -1;
  int64_t size = -1;
  std::string mpiLibrary = "libmpi.so.40";
  static RendezvousSettings fromConfig(const Config& config);
};

// The rendezvous by the precedence in this file's opening comment. Pure: no I/O. Throws
// InvalidInput naming the variable that is missing or malformed and what to set instead.
Rendezvous chooseRendezvous(const LauncherEnvironment& env, const RendezvousSettings& settings);
// chooseRendezvous over this process's environment and `config`.
Rendezvous rendezvousFromEnvironment(const Config& config);

// A communicator with what keeps it usable: the MPI library when the rendezvous loaded it
// (declared first, so MPI_Finalize runs after the communicator is closed).
struct Connection {
  Rendezvous rendezvous;  // as used: kMpi's root filled in
  std::unique_ptr<bootstrap::MpiLibrary> mpi;
  std::unique_ptr<Communicator> comm;
};

// This rank's plan as it enters the agreement: the plan and this rank's vote on it.
struct LocalPlan {
  std::optional<Plan> plan;  // set exactly when vote.status is PlanStatus::kOk
  PlanVote vote;
};

// Loads plan.json from `path` (empty = no plan) for rank `rank` of `size` and checks it against
// the world size and RANKMAP_PLAN_MAX_AGE from `config`. Never throws: a broken plan becomes a
// vote for identity order (a broken plan never stops a job).
LocalPlan loadLocalPlan(const std::string& path, int rank, int size, const Config& config);
// The same for a plan already loaded (an explicit --plan).
LocalPlan localPlanFrom(std::optional<Plan> plan, int rank, int size, const Config& config);

// The plan agreement (common/plan_agreement.h) over `bootstrap`: every rank's vote is
// allgathered and judged alike on every rank, so either every rank applies the plan or none
// does. Collective: every rank of the bootstrap calls it once, at the same point. Rank 0 logs a
// refusal as a warning. Throws what the bootstrap throws (TimeoutError at `deadline`).
PlanDecision agreePlan(bootstrap::Bootstrap& bootstrap, LocalPlan mine, Deadline deadline);

// Over a bootstrap: agrees on the plan (agreePlan), connects the transport the config selects
// within `deadline`, and wraps the context with the agreed plan and `options`. Collective.
std::unique_ptr<Communicator> connectCommunicator(bootstrap::Bootstrap& bootstrap,
                                                  const Config& config, CommOptions options,
                                                  LocalPlan plan, Deadline deadline);
// The same through the root bootstrap at `root` (rank 0 binds it). Throws TimeoutError naming
// the root when it cannot be reached in time.
std::unique_ptr<Communicator> connectCommunicator(int rank, int size, const std::string& root,
                                                  const Config& config, CommOptions options,
                                                  LocalPlan plan, Deadline deadline);

// Runs `rendezvous` (kMpi: loads the MPI library, MPI_Init, broadcasts rank 0's address) and
// connects over the root bootstrap as above. Collective. MPI_Bcast cannot be interrupted: a rank
// that never calls it leaves the others waiting until the launcher ends the job; rank 0
// broadcasts its failure to listen so that the others fail with it instead of waiting.
Connection connectByRendezvous(const Rendezvous& rendezvous, const Config& config,
                               CommOptions options, LocalPlan plan, Deadline deadline);

// All of the above from the configuration: the rendezvous, RANKMAP_PLAN, RANKMAP_ALGO,
// RANKMAP_TIMEOUT (also the bound of connecting).
Connection connectFromEnvironment(const Config& config);

}  // namespace rankmap::coll
