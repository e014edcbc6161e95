// Live re-planning: a communicator adopts a newer plan while the job runs.
//
// Data flow. A PlanSource (one per communicator; today the plan file, PlanFileSource) tells the
// communicator's thread the newest valid plan it has seen. Every RANKMAP_PLAN_VOTE_EVERY-th
// collective call, before the user's collective, every rank contributes (hash prefix, epoch) of
// its candidate (the source's plan, or the plan in use when the source has nothing else) to a
// 32-byte allreduce (max of each value and of its complement, so min and max in one call) run
// through the same communicator. The ranks switch only when min == max for both (every rank
// offers the same plan) and it differs from the plan in use, and then only when judgeSwitch()
// (a pure function of the two plans, a collective and its size, and the margin)
// says so, for the largest call since the previous vote. All its inputs are identical on every rank, so every rank decides alike, at the same
// call index, between two collectives: order, groups, trees, weights and the algorithm table
// change together and the schedule cache is dropped; the transport is not touched (it connects
// ranks by their real rank). Ranks that offer different candidates keep the plan in use and
// count a disagreed vote; the vote is a bounded collective like any other (RANKMAP_TIMEOUT).
//
// Contract: RANKMAP_LIVE_PLAN, RANKMAP_PLAN_VOTE_EVERY and whether a plan file is given must be
// the same on every rank (like RANKMAP_TRANSPORT): a rank that votes while another runs its
// collective fails both at the deadline, naming the peer, instead of computing garbage.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/algorithm.h"
#include "common/files.h"
#include "common/plan.h"

namespace rankmap::coll {

// What the communicator needs to re-plan. Read from the configuration by CommOptions.
struct LivePlanOptions {
  bool enabled = true;       // RANKMAP_LIVE_PLAN; off = no source, no vote, no cost
  uint64_t voteEvery = 100;  // RANKMAP_PLAN_VOTE_EVERY: vote before calls K, 2K, ...
  double margin = 0.10;      // RANKMAP_PLAN_SWITCH_MARGIN: the gain a switch must predict
  std::string planFile;      // the plan file to watch (RANKMAP_PLAN or --plan); empty = none
  std::chrono::milliseconds pollInterval{1000};  // at most one stat() per this interval
  std::chrono::milliseconds maxAge{0};           // RANKMAP_PLAN_MAX_AGE; 0 = no limit
};

// A candidate's ring priced against the order in use, on the candidate's own topology version:
// what Plan::predicted gives when the plan was made with the order in use as its input order
// (Plan::hosts). The agent route gets it by asking the agent a second time, with the job's hosts
// in the order in use (collectives/agent_link.h): that plan's prediction prices the order in use
// (inputOrderUs) on the same version as the candidate's own prediction prices the candidate's
// ring (planUs).
struct OrderPricing {
  int64_t epoch = 0;                 // Plan::epoch (topology version) the prices came from
  std::vector<std::string> against;  // the order in use (Plan::order) the prices are against
  std::string basis;                 // Prediction::basis, e.g. "allreduce 16 MiB ring"
  double candidateUs = 0;            // the candidate's order
  double againstUs = 0;              // the order in use
  bool operator==(const OrderPricing&) const = default;
};

// Where a communicator learns of newer plans. poll() is called by the communicator's thread at
// vote time only and must not block beyond a bounded local read.
class PlanSource {
 public:
  virtual ~PlanSource() = default;
  // The newest valid plan for this job seen so far, or null (none, or the last one was bad).
  virtual const Plan* poll(std::chrono::steady_clock::time_point now) = 0;
  // Replacements that were not adopted as candidates: unreadable, corrupt, wrong world size,
  // stale.
  virtual uint64_t rejected() const = 0;
  // The pricing of the plan the last poll() returned against the order in use, when the source
  // has one (OrderPricing above); valid until the next poll().
  virtual const OrderPricing* pricing() const { return nullptr; }
};

// The plan file (RANKMAP_PLAN / --plan), replaced atomically (rename) by whoever re-plans.
// poll() stat()s the file at most once per poll interval and reads it at the first poll and
// whenever its identity (inode, size, mtime in ns) changed, with the loader and checks of the
// creation-time agreement (common/plan_agreement.h localPlanVote: world size, age). A file
// that fails them is a warning and a rejected() count and leaves no candidate; a vanished file
// leaves no candidate either (the plan in use stays). Reading at the first poll, rather than
// taking the identity at construction, means a file replaced while the ranks were still being
// created is seen by every rank alike (a rank that took the new file as its start would offer
// the old plan forever against the others).
class PlanFileSource : public PlanSource {
 public:
  PlanFileSource(std::string path, int rank, int worldSize, std::chrono::milliseconds pollInterval,
                 std::chrono::milliseconds maxAge);
  const Plan* poll(std::chrono::steady_clock::time_point now) override;
  uint64_t rejected() const override { return rejected_; }

 private:
  using Identity = FileIdentity;  // common/files.h, shared with the NCCL shim's plan watch

  std::string path_;
  int rank_;
  int worldSize_;
  std::chrono::milliseconds pollInterval_;
  std::chrono::milliseconds maxAge_;
  std::optional<Identity> seen_;  // none before the first poll
  std::optional<std::chrono::steady_clock::time_point> lastPoll_;
  std::optional<Plan> candidate_;
  uint64_t rejected_ = 0;
};

// The vote's key for a plan: the first 64 bits of its hash (0 for no plan, identity order).
uint64_t planKey(const Plan* plan);

// What a pricing adds to the vote's key (0 for none): ranks whose agents priced a candidate
// differently (or not at all) do not agree, so judgeSwitch's inputs are the same on every rank
// that switches.
uint64_t pricingKey(const OrderPricing* pricing);

struct SwitchVerdict {
  bool adopt = false;
  std::string reason;  // one line, for the log
};

// Rule 4 of judgeSwitch: both plans have groups, the same group sets at every level (as sets
// of hosts) and ranks per host, choose the same algorithm for (collective, bytes) (`forced`, the
// communicator's RANKMAP_ALGO override, when set: then the plans' tables do not matter), neither
// a tree nor packed trees (laid out from the measured rates), for hier every host's share of the
// chunk weights (for the ring, of the ring weights) differs by at most `margin` (relative; only
// hier reads the chunk weights, only the ring the ring weights), and `current`'s
// order keeps every one of `candidate`'s groups contiguous around the ring. Pure.
bool sameStructure(const Plan& current, const Plan& candidate, std::string_view collective,
                   uint64_t bytes, double margin, std::optional<Algorithm> forced = std::nullopt);

// The hysteresis: whether the ranks, all offering `candidate`, leave `current` (null = identity
// order, default algorithms) for it, judged on a `collective` call of `bytes` (the communicator
// passes the largest call since the previous vote). Pure.
// 1. Same plan (hash): keep.
// 2. Same order, groups, trees, chunk and ring weights (only the algorithm table differs): keep
// when
//    `forced` (the user's RANKMAP_ALGO: the table is not used); else, when the candidate's model
//    (Plan::models) prices both plans' algorithms for (collective, bytes), adopt iff candidate
//    time < current time x (1 - margin).
// 3. No current plan and the candidate predicts its order against the input order (identity,
//    Plan::predicted planUs and inputOrderUs): adopt iff planUs < inputOrderUs x (1 - margin).
// 4. Same structure (sameStructure below): keep. A new topology version whose groups, algorithm
//    and chunk shares match the plan in use, with the order in use still running through every
//    group contiguously, only reorders hosts within what the model cannot tell apart (noise:
//    re-probes that met the job's own traffic publish such versions); switching would gain
//    nothing the model can see.
// 4b. Another order than the plan in use's, priced against it: adopt iff the candidate's ring is
//    faster than the order in use's by the margin, both priced on the candidate's measurements:
//    by the candidate itself when its input order (Plan::hosts) is the order in use, else by
//    `pricing` (OrderPricing above) when it is against the order in use and from the candidate's
//    topology version (epoch). A new topology version measured under the job's own traffic and a
//    tenant's (docs/performance.md, "Live re-planning") can offer an order no faster than the one
//    in use on its own measurements: it is kept out here, not adopted by rule 5 for being newer.
// 5. Otherwise (another order that nothing priced): adopt iff the
//    candidate was made from a newer topology (epoch greater than the current plan's; any epoch
//    when there is no current plan). Two plans of one measurement never flap; the agent's own
//    hysteresis decides when a new topology version (and so a new epoch) is worth publishing.
SwitchVerdict judgeSwitch(const Plan* current, const Plan& candidate, std::string_view collective,
                          uint64_t bytes, double margin,
                          std::optional<Algorithm> forced = std::nullopt,
                          const OrderPricing* pricing = nullptr);

}  // namespace rankmap::coll
