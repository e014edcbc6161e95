// How the ranks of a job agree on a plan before librankmap_mpi.so reorders MPI_COMM_WORLD.
//
// Every rank loads its plan (RANKMAP_PLAN) into a RankView; the views of all ranks are exchanged
// (shim_mpi/shim.cc does the allgather) and decide() turns them into one decision. decide() is a
// pure function of the gathered views and the plan, so every rank reaches the same decision and
// the collective calls that follow are made by all ranks or by none. No MPI in this file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/plan.h"

namespace rankmap::shim_mpi {

// Why a rank has no plan to offer.
enum class PlanStatus : char { kOk = 0, kNone = 1, kInvalid = 2 };

// What one rank holds, as exchanged at start-up.
struct RankView {
  PlanStatus status = PlanStatus::kNone;
  std::string hash;    // the plan's hash when kOk
  std::string reason;  // why not, when not kOk
  std::string host;    // short hostname (up to the first '.')
  bool checkHosts = true;  // RANKMAP_MPI_CHECK_HOSTS on this rank
};

struct Decision {
  bool reorder = false;
  std::string message;  // one line for rank 0 to log
};

// The decision from every rank's view (indexed by MPI_COMM_WORLD rank) and `plan`, this rank's
// plan (the same on every rank whenever the hashes agree). Reorders only when every rank holds
// a plan, all hashes agree, the plan is for this world size and, when every rank's hostname is a
// plan host (and no rank disabled the check), old rank r runs on hosts[r / ranksPerHost].
Decision decide(const std::vector<RankView>& views, const std::optional<Plan>& plan);

// This rank's view: loads the plan named by RANKMAP_PLAN in `cfg` and checks it against the
// world size. Never throws: failures become the view's status and reason. `host` is the short
// hostname to report.
RankView loadLocalView(const Config& cfg, int worldSize, const std::string& host,
                       std::optional<Plan>& plan);

std::string shortHostName(const std::string& host);

}  // namespace rankmap::shim_mpi
