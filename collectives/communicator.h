// Communicator: the engine's C++ API. It wraps one rank's transport Context, the plan (rank
// order, groups, algorithm per message size) and the options, and runs collectives on it.
//
// Contract:
// - Collective calls are blocking and must be made by every rank in the same order with
//   matching arguments (count, type, op, root); one thread at a time per communicator.
// - Each call is bounded by options.timeout: a dead or missing peer becomes TimeoutError or
//   PeerError naming it, never a hang. A count mismatch between ranks is caught as a message
//   length mismatch (InvalidInput naming the peer) when lengths differ, and a type, op or root
//   mismatch as a deadline error naming the peer (those are part of the message tags, so
//   mismatched calls never exchange data).
// - After a failure during communication, the communicator is broken: every later call throws
//   PeerError quoting the first failure, and the buffers of the failed call must stay valid
//   until the communicator (and its context) is destroyed, because transfers may still be in
//   flight. Argument errors (null buffer, bad root) throw InvalidInput and break nothing.
//   A communicator that owns its context closes it at once on such a failure (NCCL's abort):
//   in-flight transfers stop, the buffers are free again, and peers waiting on this rank get
//   PeerError now instead of a timeout later, so one failure reaches every rank quickly.
// - A plan for another world size is ignored (identity order, a warning, counted in
//   stats().fallbacks), and so is a plan the ranks did not agree on (connect.h agreePlan); so is
//   each call whose preferred algorithm declines (logged once per collective and algorithm).
// - With options.live.enabled and a plan file (or, with options.agent.plans, the local agent),
//   the communicator adopts a newer plan between two collectives when every rank sees the same
//   one (collectives/live_plan.h): a vote before every options.live.voteEvery-th call;
//   order(), groups(), trees(), weights() and plan() then change together on every rank at the
//   same call.
// - With options.agent.reports, every message step is metered (passive(): bytes and busy time
//   per peer) and, when the starting plan names the hosts and a token file is given, reported
//   to the local agent from a thread of the communicator's own (collectives/agent_link.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/agent_link.h"
#include "collectives/live_plan.h"
#include "collectives/passive.h"
#include "collectives/reduce/reduction.h"
#include "collectives/schedule/schedule.h"
#include "collectives/selection.h"
#include "collectives/transport/transport.h"
#include "collectives/types.h"
#include "common/plan.h"

namespace rankmap {
class Config;
}  // namespace rankmap

namespace rankmap::coll::cuda {
class CudaOps;
}  // namespace rankmap::coll::cuda

namespace rankmap::coll {

struct CommOptions {
  std::chrono::milliseconds timeout{300000};     // per collective call
  uint64_t segmentBytes = kDefaultSegmentBytes;  // the largest segment (segmentFor)
  int numSlots = 8;                              // scratch slots for receives to reduce (>= 2)
  std::optional<Algorithm> algorithm;            // override; nullopt = auto
  KernelIsa isa = KernelIsa::kAuto;
  LivePlanOptions live;  // adopting replaced plans while the job runs (live.planFile set)
  // Passive measurement (agent.reports: RANKMAP_PASSIVE) and the link to the local agent for
  // its reports and, with agent.plans and live.enabled, newer plans (collectives/agent_link.h).
  AgentLinkOptions agent;

  // RANKMAP_TIMEOUT, RANKMAP_SEGMENT_SIZE, RANKMAP_ALGO (auto, ring, tree, hier, rhd, trees),
  // RANKMAP_LIVE_PLAN, RANKMAP_PLAN_VOTE_EVERY, RANKMAP_PLAN_SWITCH_MARGIN, RANKMAP_PLAN_MAX_AGE,
  // RANKMAP_PLAN (live.planFile), RANKMAP_PLAN_FROM_AGENT, RANKMAP_PASSIVE,
  // RANKMAP_PASSIVE_REPORT, RANKMAP_AGENT and RANKMAP_TOKEN_FILE; throws InvalidInput naming
  // the setting on a bad value.
  static CommOptions fromConfig(const Config& config);
};

// Parses an algorithm override as RANKMAP_ALGO / --algo take it; "auto" = nullopt.
// Throws InvalidInput naming `source` on anything else.
std::optional<Algorithm> parseAlgorithmOverride(std::string_view text, std::string_view source);

// What the ranks agreed on (collectives/connect.h agreePlan): the plan to apply, or none.
// `refused` says why no plan is applied although some rank offered one (a disagreement, a stale,
// corrupt or missing plan on some rank); it is empty when the plan applies or no rank had one.
struct PlanDecision {
  std::optional<Plan> plan;
  std::string refused;
};

class Communicator {
 public:
  struct Stats {
    uint64_t collectives = 0;   // calls started
    uint64_t fallbacks = 0;     // plan rejections + calls whose preferred algorithm declined
    bool planRejected = false;  // the plan was refused: wrong size, or the ranks' agreement
    // Live re-planning (collectives/live_plan.h); all zero when it is off or has no plan file.
    uint64_t planVotes = 0;           // votes run (each one 32-byte allreduce)
    uint64_t planVoteNs = 0;          // time spent in them, ns: the feature's overhead
    uint64_t planVotesDisagreed = 0;  // votes where ranks offered different plans: none adopted
    uint64_t planSwitchesDeclined = 0;  // agreed votes on a new plan that judgeSwitch kept out
    uint64_t planSwitches = 0;          // plans adopted
    uint64_t planFilesRejected = 0;     // replaced plan files not offered (corrupt, size, age)
    uint64_t lastSwitchCall = 0;        // the call index before which the last switch happened
    // 1 when the ranks' live settings (on, vote interval, margin, a plan source) differed at
    // creation and live re-planning was turned off on every rank (agreeLiveSettings).
    uint64_t liveSettingsDisagreed = 0;
  };

  // Non-owning: `ctx` must outlive the communicator.
  Communicator(transport::Context& ctx, CommOptions options,
               std::optional<Plan> plan = std::nullopt);
  // Owning; `device` (may be null) is kept alive until the context is gone. A refused plan
  // counts in stats() (planRejected, fallbacks).
  Communicator(std::shared_ptr<transport::Device> device, std::unique_ptr<transport::Context> ctx,
               CommOptions options, PlanDecision plan = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "loopback", "tcp", "rdma"; "closed" once an owned context was closed after a failure.
  std::string backend() const { return ctx_ ? ctx_->backend() : "closed"; }

  // Buffers are host memory or, in a CUDA build, device memory (cudaMalloc or managed): a call
  // whose buffers are on a device runs on the device executor (collectives/cuda/
  // device_executor.h), staged through pinned host memory, on the device current when the
  // communicator first saw device buffers. A call that mixes host and device buffers is
  // InvalidInput. Device calls are not counted by the passive meter.
  // out = reduction over ranks of in (count elements). in == out is in place.
  void allreduce(const void* in, void* out, uint64_t count, DataType type, ReduceOp op);
  // out (size * count) = every rank's in (count), ordered by rank. In place: in == out + rank
  // * count elements.
  void allgather(const void* in, void* out, uint64_t count, DataType type);
  // out (count) = block `rank` of the reduction of in (size * count). In place: out == in +
  // rank * count elements.
  void reduceScatter(const void* in, void* out, uint64_t count, DataType type, ReduceOp op);
  // out = root's in, on every rank (root included). in is read on the root only.
  void broadcast(const void* in, void* out, uint64_t count, DataType type, int root);
  // root's out = reduction of in; out is not touched on other ranks (may be null there).
  void reduce(const void* in, void* out, uint64_t count, DataType type, ReduceOp op, int root);
  void barrier();

  const Stats& stats() const { return stats_; }
  uint64_t fallbacks() const { return stats_.fallbacks; }
  // The selection of the last call (algorithm, why, what declined).
  const Selection& lastSelection() const { return lastSelection_; }
  // Ring order in use: order()[position] = rank.
  const std::vector<int>& order() const { return order_; }
  const std::vector<std::vector<int>>& groups() const { return caps_.groups; }
  // hier's chunk weights per rank (empty = uniform) and the packed trees, from the plan.
  const std::vector<double>& weights() const { return weights_; }
  // The ring allreduce's weights per rank (empty = equal blocks), from the plan.
  const std::vector<double>& ringWeights() const { return ringWeights_; }
  const std::vector<RankTree>& trees() const { return caps_.trees; }
  const CommOptions& options() const { return options_; }
  // The plan in use; nullopt = identity order and default algorithms.
  const std::optional<Plan>& plan() const { return plan_; }
  bool broken() const { return !failure_.empty(); }
  // The passive meter (null with RANKMAP_PASSIVE=0) and the agent link (null when it does not
  // run: no token file, no plan naming the hosts, or both reports and plans off).
  const PassiveMeter* passive() const { return meter_.get(); }
  const AgentLink* agentLink() const { return link_.get(); }

 private:
  void init(std::optional<Plan> plan);
  // Sets order, groups, trees and weights from `plan` (null = identity) and drops the schedules.
  void applyPlan(std::optional<Plan> plan);
  // Before a user's call: the vote when one is due, and the switch.
  void maybeVote();
  // At creation, on every rank: an allgather of (live re-planning on with a source, vote
  // interval, margin). Where any rank differs, live re-planning is turned off on every rank
  // (no source, no vote), with a warning on rank 0 naming the ranks and their values and
  // stats().liveSettingsDisagreed: a rank that votes while another runs its collective would
  // otherwise fail both at the deadline.
  void agreeLiveSettings();
  // `internal` names a call the communicator makes itself ("plan vote", ...): it is not counted,
  // does not vote and does not change lastSelection(); empty = the user's call.
  void run(Collective coll, const void* in, void* out, uint64_t count, DataType type, ReduceOp op,
           int root, std::string_view internal = {});
  const Schedule& scheduleFor(Algorithm algo, Collective coll, uint64_t count, size_t es, int root,
                              bool inPlace);
  void* scratch(uint64_t bytes);
  // Runs `sched` on device buffers through deviceOps_, made at the first call.
  void runOnDevice(const Schedule& sched, const void* in, void* out, DataType type, ReduceOp op,
                   uint64_t tagBase);
  void abortContext() noexcept;

  // Scratch memory is declared before the owned context: members are destroyed in reverse
  // order, so the context (and anything still in flight into scratch) goes first.
  struct FreeAligned {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, FreeAligned> scratch_;
  uint64_t scratchBytes_ = 0;
  // The device side (CUDA builds): streams, pinned mirrors and device scratch, made at the first
  // call with device buffers; like scratch_, destroyed after the context.
  struct DeleteDeviceOps {
    void operator()(cuda::CudaOps* p) const;
  };
  std::unique_ptr<cuda::CudaOps, DeleteDeviceOps> deviceOps_;
  std::shared_ptr<transport::Device> device_;
  std::unique_ptr<transport::Context> owned_;
  transport::Context* ctx_;  // null once an owned context was closed after a failure
  int rank_;
  int size_;
  CommOptions options_;
  std::optional<Plan> plan_;
  std::vector<int> order_;
  Capabilities caps_;
  std::vector<double> weights_;
  std::vector<double> ringWeights_;
  Stats stats_;
  Selection lastSelection_;
  uint64_t seq_ = 0;
  std::string failure_;
  std::set<std::pair<int, int>> warnedDeclines_;
  std::unique_ptr<PassiveMeter> meter_;
  std::unique_ptr<AgentLink> link_;         // before planSource_, which may read it
  std::unique_ptr<PlanSource> planSource_;  // null = no live re-planning (no vote)
  std::string lastDeclined_;                // the candidate judgeSwitch last kept out (logged once)
  // The largest user call (collective, bytes) since the last vote: what judgeSwitch prices.
  std::optional<std::pair<Collective, uint64_t>> heaviest_;
  using CacheKey = std::tuple<int, int, uint64_t, size_t, int, bool>;
  std::map<CacheKey, Schedule> cache_;
};

// hier's weights per rank from plan.chunk_weights (per host position of plan.order): a host's
// weight shared equally by its ranks. Empty when the plan has none.
std::vector<double> rankWeightsFromPlan(const Plan& plan);
// The same for plan.ring_weights (the ring allreduce's blocks).
std::vector<double> rankRingWeightsFromPlan(const Plan& plan);

// The plan's packed trees (over host positions) as trees over ranks: a host's first rank in
// plan order stands for the host in the tree, and its other ranks hang below it in a chain.
std::vector<RankTree> rankTreesFromPlan(const Plan& plan);

// Rank groups for hier from a plan: the innermost level of plan.groups (hosts -> their ranks), or
// one group per host when the plan has no groups but several ranks per host; each group in ring
// order (new rank) and groups ordered by their first member. Empty when neither applies.
std::vector<std::vector<int>> rankGroupsFromPlan(const Plan& plan);

}  // namespace rankmap::coll
