// Plan agreement: the one rule by which the ranks of a job decide whether to apply a plan.
//
// Every consumer that reorders ranks (the MPI shim, the NCCL shim, the collective engine) must
// have every rank apply the same plan or none: two ranks in different orders build different
// rings, and a collective then hangs or computes garbage. So each rank loads its plan into a
// PlanVote, the votes travel over whatever channel the consumer has (MPI_Allgather in the MPI
// shim, a vote server riding on the NCCL unique id, the engine's bootstrap allgather), and
// judgePlan() turns them into one verdict. judgePlan() is a pure function of the votes, so every
// rank that sees the same votes reaches the same verdict.
//
// The rule: apply only when every rank 0..n-1 voted once for a world of n, every rank holds a
// usable plan (loaded, valid, for n ranks, not older than RANKMAP_PLAN_MAX_AGE), all hashes are
// equal and, where every rank reported a hostname that is a plan host, rank r runs on the host
// the plan expects. Anything else is identity order for every rank, with the reason in one line.
//
// No I/O here besides reading the plan file in localPlanVote(); nothing blocks.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/plan.h"

namespace rankmap {

// Why a rank has, or has no, plan to offer.
enum class PlanStatus : int {
  kOk = 0,
  kNone = 1,     // no plan was given
  kInvalid = 2,  // unreadable, corrupt, or not for this world size
  kStale = 3,    // older than the allowed age
};

// What one rank holds, as exchanged before a plan is applied.
struct PlanVote {
  int rank = -1;      // this rank in the group that agrees
  int worldSize = 0;  // the group's size as this rank sees it
  PlanStatus status = PlanStatus::kNone;
  std::string hash;    // the plan's hash when kOk
  std::string reason;  // why not, when not kOk
  std::string host;    // short hostname; empty = not reported (then hosts are not checked)
  bool checkHosts = false;  // this rank asks for the host check (RANKMAP_MPI_CHECK_HOSTS)

  bool operator==(const PlanVote&) const = default;

  // A compact, versioned byte string for the wire. decode() throws InvalidInput naming `source`
  // and the field on anything malformed (lengths are bounded: at most kMaxEncodedBytes).
  std::string encode() const;
  static PlanVote decode(std::string_view bytes, std::string_view source);
  static constexpr size_t kMaxEncodedBytes = 4096;
};

struct PlanVerdict {
  bool apply = false;
  std::string reason;  // one line: why identity, or which plan is applied
};

// What a consumer checks locally before it votes.
struct PlanChecks {
  std::chrono::milliseconds maxAge{0};  // 0 = plans never go stale
  std::chrono::system_clock::time_point now = std::chrono::system_clock::now();
};

// The age of `plan` at `now`: now minus the time its topology was measured; nullopt when the
// plan carries no topology_time (fixtures, hand-made plans), which then never goes stale.
std::optional<std::chrono::milliseconds> planAge(const Plan& plan,
                                                 std::chrono::system_clock::time_point now);

// Why `plan` is stale under `checks`, or nullopt when it is not.
std::optional<std::string> staleReason(const Plan& plan, const PlanChecks& checks);

// This rank's vote: loads the plan at `path` (empty = kNone) and checks it against the world
// size and its age. Never throws: a failure becomes the vote's status and reason. `plan` holds
// the loaded plan exactly when the status is kOk.
PlanVote localPlanVote(const std::string& path, int rank, int worldSize, const PlanChecks& checks,
                       std::optional<Plan>& plan);
// The same for a plan already in memory (nullopt = kNone).
PlanVote planVote(const std::optional<Plan>& plan, int rank, int worldSize,
                  const PlanChecks& checks);

// The verdict from every rank's vote, in any order. `plan` is this rank's plan (or null when it
// has none or does not know it, as the NCCL vote server): the verdict then checks that it
// matches the agreed hash and, when every vote reports a host that the plan names, the hosts.
PlanVerdict judgePlan(const std::vector<PlanVote>& votes, const Plan* plan);

// One step of judgePlan() for a server that receives votes one at a time: the identity verdict
// that `v` forces, given the first vote and the ranks seen before it; nullopt while consistent.
// `expectHash` is the hash every vote must hold (empty = the first vote's).
std::optional<PlanVerdict> checkPlanVote(const PlanVote& first, const std::set<int>& seen,
                                         const PlanVote& v, std::string_view expectHash = {});

// "sha256:0123456789ab": the first 19 characters of a hash, for log lines.
std::string shortPlanHash(std::string_view hash);
// "vm3" for "vm3.rack1.example": hostnames as ranks report them.
std::string shortHostName(std::string_view host);

}  // namespace rankmap
