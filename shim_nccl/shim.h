// Shim: the translation logic behind librankmap_nccl.so's exported NCCL functions.
//
// What it does, per communicator created from a unique id that carries a plan agreement
// (agreement.h) that all ranks accepted:
// - init: NCCL gets the plan's new rank (Plan::permutation; hosts permuted, a host's ranks kept
//   contiguous). NCCL chains its inter-node ring and builds its trees in the order of each node's
//   lowest rank and offers no other lever, so the rank is the lever.
// - everything the application sees stays in its own ranks: broadcast/reduce/gather/scatter
//   roots, send/recv peers, ncclCommUserRank, ncclCommShrink's excluded ranks are translated;
//   AllGather, Gather and AlltoAll results are copied from a scratch buffer into app block order;
//   ReduceScatter, Scatter and AlltoAll inputs are copied into real block order first. Copies and
//   scratch are stream-ordered on the caller's stream (cuda_driver.h); in-place calls work
//   because NCCL always reads or writes the scratch buffer, never the aliased user buffer twice.
// - inside ncclGroupStart/End the copies that read NCCL's output wait for the real ncclGroupEnd
//   (before it nothing is launched); inits that need the agreement are deferred to the outermost
//   ncclGroupEnd too, with the CUDA context that was current at the call, because one thread may
//   init several ranks of the same communicator in one group and could not vote for all of them
//   while blocked in the first.
// - non-blocking communicators: when a real call (or ncclGroupEnd) returns ncclInProgress, the
//   operation is not on the stream yet; the shim polls ncclCommGetAsyncError until it stops
//   reporting ncclInProgress before enqueuing the copies that read its output.
// - ncclCommSplit of a permuted communicator: every parent rank's (color, key) is gathered first
//   (one 8-byte AllGather over the parent, all parent ranks call the split); NCCL gets key 0 for
//   all, so that it orders each child by parent rank, i.e. in the parent's plan order restricted
//   to the child, and the child's table maps that to the application's order (key, then app
//   rank). Inside a group, where the gather cannot run before ncclGroupEnd, or when a rank asks
//   for a non-blocking child (whose handle NCCL may give only later, so that no table could be
//   attached), the child keeps NCCL's order by (key*n + app rank) (identity table; warned and
//   counted); the gathered flags make that choice the same on every rank.
// Communicators without an accepted plan are not registered at all: every call on them goes
// straight to NCCL after one atomic load.
//
// Contract: methods are the C ABI entries minus the border (entry.cc adds the re-entry guard and
// turns exceptions into ncclResult_t). Thread-safe like NCCL: any thread may use any
// communicator; group state is per thread, as in NCCL. Tests make one Shim per simulated rank.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/comm_profile.h"
#include "common/plan.h"
#include "shim_nccl/agreed_plan.h"
#include "shim_nccl/agreement.h"
#include "shim_nccl/cuda_driver.h"
#include "shim_nccl/nccl_abi.h"
#include "shim_nccl/plan_watch.h"
#include "shim_nccl/rank_table.h"
#include "shim_nccl/real_nccl.h"

namespace rankmap {
class Config;
}  // namespace rankmap

namespace rankmap::shim_nccl {

struct ShimOptions {
  bool enabled = true;                        // RANKMAP_NCCL_SHIM
  std::optional<Plan> plan;                   // the plan read at start, or none (identity)
  std::string planSource;                     // RANKMAP_PLAN: watched for replacements
  std::string planError;                      // why the plan at planSource was not loaded
  FileIdentity planIdentity;                  // planSource's identity before that read
  std::chrono::milliseconds planMaxAge{0};    // RANKMAP_PLAN_MAX_AGE (0 = no limit)
  std::chrono::milliseconds timeout{300000};  // RANKMAP_TIMEOUT: agreement and in-progress waits
  bool recordProfile = false;                 // RANKMAP_PROFILE_OUT is set (comm_profile.h)
};

// Reads RANKMAP_NCCL_SHIM, RANKMAP_PLAN, RANKMAP_PLAN_MAX_AGE, RANKMAP_TIMEOUT and
// RANKMAP_PROFILE_OUT. A plan that
// cannot be loaded is logged as a warning and dropped: this rank then votes for identity (until
// the file is replaced by a valid plan: plan_watch.h).
ShimOptions shimOptionsFromConfig(const Config& config);

// What the shim did, for tests and the log.
struct ShimCounters {
  std::atomic<uint64_t> permutedComms{0};
  std::atomic<uint64_t> identityComms{0};  // inits that voted and got identity
  std::atomic<uint64_t> fixupCopies{0};
  std::atomic<uint64_t> deferredInits{0};
  // ncclCommShrink on a communicator not in plan order while this rank holds a plan: the child
  // keeps NCCL's order (warned).
  std::atomic<uint64_t> unorderedShrinks{0};
  // ncclCommSplit children not in plan order: a split inside a group or to a non-blocking child
  // (warned).
  std::atomic<uint64_t> unorderedSplits{0};
};

class Shim {
 public:
  using RealResolver = std::function<RealNccl()>;
  using DriverLoader = std::function<std::shared_ptr<const CudaDriver>()>;

  Shim(RealResolver resolveReal, DriverLoader loadDriver, ShimOptions options);
  Shim(const Shim&) = delete;
  Shim& operator=(const Shim&) = delete;

  // The real NCCL, resolved on first use (retried until it works). Throws NotSupported.
  const RealNccl& real();
  const ShimOptions& options() const { return options_; }
  const ShimCounters& counters() const { return counters_; }
  // Where new communicators get their plan (reloads and rejected replacements are counted there).
  const PlanWatch& planWatch() const { return planWatch_; }
  // This process's NCCL communicators and their traffic while a profile is recorded
  // (common/comm_profile.h).
  const CommProfile& profile() const { return profile_; }

  abi::Result getUniqueId(abi::UniqueId* id);
  abi::Result commInitRank(abi::Comm* comm, int nranks, abi::UniqueId id, int rank);
  abi::Result commInitRankConfig(abi::Comm* comm, int nranks, abi::UniqueId id, int rank,
                                 void* config);
  abi::Result commInitRankScalable(abi::Comm* comm, int nranks, int rank, int nIds,
                                   abi::UniqueId* ids, void* config);
  abi::Result commSplit(abi::Comm comm, int color, int key, abi::Comm* newcomm, void* config);
  abi::Result commShrink(abi::Comm comm, int* exclude, int excludeCount, abi::Comm* newcomm,
                         void* config, int flags);
  abi::Result commDestroy(abi::Comm comm);
  abi::Result commAbort(abi::Comm comm);
  abi::Result commUserRank(abi::Comm comm, int* rank);

  abi::Result groupStart();
  abi::Result groupEnd();
  abi::Result groupSimulateEnd(void* simInfo);

  // Interposed only to count it for a profile; nothing to translate.
  abi::Result allReduce(const void* send, void* recv, size_t count, abi::DataType dt, abi::RedOp op,
                        abi::Comm comm, abi::Stream stream);
  abi::Result reduce(const void* send, void* recv, size_t count, abi::DataType dt, abi::RedOp op,
                     int root, abi::Comm comm, abi::Stream stream);
  abi::Result bcast(void* buf, size_t count, abi::DataType dt, int root, abi::Comm comm,
                    abi::Stream stream);
  abi::Result broadcast(const void* send, void* recv, size_t count, abi::DataType dt, int root,
                        abi::Comm comm, abi::Stream stream);
  abi::Result reduceScatter(const void* send, void* recv, size_t recvCount, abi::DataType dt,
                            abi::RedOp op, abi::Comm comm, abi::Stream stream);
  abi::Result allGather(const void* send, void* recv, size_t sendCount, abi::DataType dt,
                        abi::Comm comm, abi::Stream stream);
  abi::Result alltoAll(const void* send, void* recv, size_t count, abi::DataType dt, abi::Comm comm,
                       abi::Stream stream);
  abi::Result gather(const void* send, void* recv, size_t count, abi::DataType dt, int root,
                     abi::Comm comm, abi::Stream stream);
  abi::Result scatter(const void* send, void* recv, size_t count, abi::DataType dt, int root,
                      abi::Comm comm, abi::Stream stream);
  abi::Result send(const void* buf, size_t count, abi::DataType dt, int peer, abi::Comm comm,
                   abi::Stream stream);
  abi::Result recv(void* buf, size_t count, abi::DataType dt, int peer, abi::Comm comm,
                   abi::Stream stream);

  // The plan that plan agreements for a communicator of `nranks` ranks in this process applied
  // (the latest one's, when the file was replaced between communicators), for
  // librankmap_nccl_tuner.so (agreed_plan.h): its tuning must be the same on every rank, and the
  // agreement is what guarantees that they all hold this plan. `plan` is null, with the reason,
  // when no agreement of that size ran, or when one of them ended in identity order.
  struct AgreedPlan {
    AgreedPlanStatus status = AgreedPlanStatus::kNoPlan;
    std::shared_ptr<const Plan> plan;  // with kApplied
    std::string reason;
  };
  AgreedPlan agreedPlan(int nranks) const;

  // Per registered (permuted) communicator: its table and the plan it was made with, fixed for
  // its life (a shrunk child keeps its parent's).
  struct CommState {
    RankTable table;
    int appRank = -1;
    std::shared_ptr<const Plan> plan;
  };

  // One init call, kept whole so that it can be deferred to the end of a group.
  struct InitCall {
    enum class Kind { Rank, RankConfig, Scalable } kind = Kind::Rank;
    abi::Comm* out = nullptr;
    int nranks = 0;
    int appRank = -1;
    std::vector<abi::UniqueId> ids = {};  // one, or nIds for Scalable
    void* config = nullptr;               // the application's (or our copy's) ncclConfig_t
    std::shared_ptr<std::vector<char>> configCopy = {};
    void* context = nullptr;  // CUDA context current at the call (deferred inits)
    bool haveContext = false;
    IdTail tail = {};
    PlanSnapshot plan = {};  // taken when the application made the call
  };

  // Copies that run after NCCL's output is on the stream, then free the scratch buffer.
  struct Fixup {
    abi::Comm comm = nullptr;
    abi::Stream stream = nullptr;
    void* scratch = nullptr;
    char* dstBase = nullptr;
    const char* srcBase = nullptr;
    std::vector<BlockCopy> copies;
  };

 private:
  std::shared_ptr<const CommState> find(abi::Comm comm) const;
  void registerComm(abi::Comm comm, std::shared_ptr<const CommState> state);
  // A child communicator of `parent` (split, shrink) with app rank `appRank` and `appToReal`
  // (app rank -> NCCL rank): registered with the parent's plan unless that order is NCCL's own.
  void registerChild(abi::Comm comm, const CommState& parent, std::vector<int> appToReal,
                     int appRank);
  void unregisterComm(abi::Comm comm);
  const CudaDriver& driver();

  abi::Result init(InitCall call);
  abi::Result finishInit(InitCall& call, const PlanVerdict& verdict);
  abi::Result callRealInit(InitCall& call, int rank);
  PlanVote voteFor(const InitCall& call) const;
  abi::Result runDeferredInits(std::vector<InitCall>& calls);

  // After a real call that may need `fixup`: defers it inside a group, else completes it.
  abi::Result after(abi::Result r, Fixup fixup);
  abi::Result completeFixups(std::vector<Fixup>& fixups, abi::Result r);
  // Polls ncclCommGetAsyncError while it reports ncclInProgress; returns the final state.
  abi::Result waitNotInProgress(abi::Comm comm);
  void preCopies(const std::vector<BlockCopy>& copies, char* dst, const char* src,
                 abi::Stream stream);
  // Every rank's `mine` (the same number of int32 on every rank) on `st`'s communicator, in app
  // rank order (rank a's values at [a*k, a*k+k)): one AllGather over `comm` through
  // stream-ordered scratch on the legacy stream, then a synchronisation. Returns NCCL's result;
  // `out` is filled on success.
  abi::Result gatherInts(abi::Comm comm, const CommState& st, const std::vector<int32_t>& mine,
                         std::vector<int32_t>& out);
  // Warns (and counts in `counter`) that a child of `comm` keeps NCCL's order, when this rank
  // holds a plan that would have reordered it.
  void warnNotInPlanOrder(abi::Comm comm, const char* what, std::atomic<uint64_t>& counter);
  // The rank NCCL knows as `appRank` on `comm` (itself on an unregistered communicator).
  int realRank(abi::Comm comm, int appRank) const;

  // Which of a collective's buffers NCCL must see in real block order.
  enum class Reorder { kInput, kOutput, kBoth };
  // The translation shared by AllGather, ReduceScatter, AlltoAll, Gather and Scatter, whose real
  // call is `call(input, output, realRoot)`; `root` is empty for the unrooted ones. On a
  // registered communicator, for a non-empty block and (if rooted) on the root, each reordered
  // buffer is replaced by stream-ordered scratch of n blocks: the input is copied into real order
  // before the call, the output back into app order by after(), which also frees the scratch.
  // Otherwise the call gets the caller's buffers and the translated root.
  template <typename RealCall>
  abi::Result reorderBlocks(Reorder sides, const void* send, void* recv, size_t count,
                            abi::DataType dt, std::optional<int> root, abi::Comm comm,
                            abi::Stream stream, RealCall call);

  // The real split and shrink, whose children commSplit and commShrink then record.
  abi::Result splitInPlanOrder(abi::Comm comm, int color, int key, abi::Comm* newcomm,
                               void* config);
  abi::Result shrinkInPlanOrder(abi::Comm comm, int* exclude, int excludeCount, abi::Comm* newcomm,
                                void* config, int flags);
  // Counts a call that went to NCCL (`r`) for the profile: `count` elements of `dt`, times the
  // communicator's size when `perRank` (the n-block buffers of allgather and the like).
  abi::Result counted(abi::Result r, abi::Comm comm, std::string_view collective, size_t count,
                      abi::DataType dt, bool perRank = false);

  abi::Result endGroup(bool simulate, void* simInfo);
  // Counts one agreement's verdict for agreedPlan(); before the real init, inside which NCCL
  // initialises its tuner plugin.
  void recordAgreement(const InitCall& call, const PlanVerdict& verdict);

  RealResolver resolveReal_;
  DriverLoader loadDriver_;
  const ShimOptions options_;
  ShimCounters counters_;
  mutable PlanWatch planWatch_;
  CommProfile profile_;

  std::mutex resolveMu_;
  std::atomic<const RealNccl*> real_{nullptr};
  std::unique_ptr<RealNccl> realStorage_;
  std::shared_ptr<const CudaDriver> driver_;
  std::atomic<const CudaDriver*> driverPtr_{nullptr};

  struct AgreementTally {
    int applied = 0;
    int identity = 0;
    std::string lastIdentityReason;
    std::shared_ptr<const Plan> lastApplied;
  };
  mutable std::mutex agreementsMu_;
  std::unordered_map<int, AgreementTally> agreements_;  // by nranks

  mutable std::shared_mutex commsMu_;
  std::unordered_map<abi::Comm, std::shared_ptr<const CommState>> comms_;
  std::atomic<size_t> registered_{0};  // fast path: no lookup while zero
};

// The process-wide shim behind the exported functions: configured from Config::load() on first
// use and never destroyed (it may be used during exit by late NCCL calls).
Shim& globalShim();

// Maps an exception from the shim to the NCCL result the application sees.
abi::Result resultFor(const std::exception& e) noexcept;

}  // namespace rankmap::shim_nccl
