// Making a Communicator for a process of a multi-process job: where this rank, the world size
// and the root come from, the transport, the plan.
//
// Launch information, first match wins:
// 1. RANKMAP_RANK / RANKMAP_WORLD_SIZE (standalone launch), with RANKMAP_ROOT;
// 2. under mpirun: OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI) or PMI_RANK /
//    PMI_SIZE (MPICH, Hydra), with RANKMAP_ROOT. Those launcher variables are not rankmap
//    settings and are read here only.
// The root bootstrap then connects the ranks (rank 0 listens on RANKMAP_ROOT), and the transport
// comes from RANKMAP_TRANSPORT and its settings (collectives/transport/transport.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "collectives/communicator.h"
#include "common/deadline.h"
#include "common/plan.h"

namespace rankmap {
class Config;
}  // namespace rankmap

namespace rankmap::coll {

struct LaunchInfo {
  int rank = -1;
  int size = -1;
  std::string root;    // host:port of rank 0's bootstrap listener
  std::string source;  // "RANKMAP_RANK", "Open MPI", "PMI"
};

// Throws InvalidInput naming what is missing ("RANKMAP_ROOT is not set ...").
LaunchInfo launchInfoFromEnvironment(const Config& config);

// Loads plan.json from `path`; on any error logs a warning naming the file and returns nullopt
// (the engine then runs in identity order: a broken plan never stops a job). Empty path: nullopt.
std::optional<Plan> loadPlanOrWarn(const std::string& path);

// Connects rank `rank` of `size` through the root bootstrap at `root` (rank 0 binds it) over
// the transport the config selects, within `deadline`, and wraps it with `plan` and `options`.
// Throws TimeoutError naming the root when it cannot be reached in time.
std::unique_ptr<Communicator> connectCommunicator(int rank, int size, const std::string& root,
                                                  const Config& config, CommOptions options,
                                                  std::optional<Plan> plan, Deadline deadline);

// All of the above from the configuration: launch info, RANKMAP_PLAN, RANKMAP_ALGO,
// RANKMAP_TIMEOUT (also the bound of connecting).
std::unique_ptr<Communicator> connectFromEnvironment(const Config& config);

}  // namespace rankmap::coll
