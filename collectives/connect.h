// Making a Communicator for a process of a multi-process job: where this rank, the world size
// and the root come from, the transport, the plan.
//
// Launch information, first match wins:
// 1. RANKMAP_RANK / RANKMAP_WORLD_SIZE (standalone launch), with RANKMAP_ROOT;
// 2. under mpirun: OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI) or PMI_RANK /
//    PMI_SIZE (MPICH, Hydra), with RANKMAP_ROOT. Those launcher variables are not rankmap
//    settings and are read here only.
// The root bootstrap then connects the ranks (rank 0 listens on RANKMAP_ROOT), the ranks agree on
// the plan through it (common/plan_agreement.h), and the transport comes from RANKMAP_TRANSPORT
// and its settings (collectives/transport/transport.h).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/communicator.h"
#include "common/deadline.h"
#include "common/plan.h"
#include "common/plan_agreement.h"

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

// All of the above from the configuration: launch info, RANKMAP_PLAN, RANKMAP_ALGO,
// RANKMAP_TIMEOUT (also the bound of connecting).
std::unique_ptr<Communicator> connectFromEnvironment(const Config& config);

}  // namespace rankmap::coll
