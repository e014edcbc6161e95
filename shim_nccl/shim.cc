#include "shim_nccl/shim.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <future>
#include <thread>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

namespace rankmap::shim_nccl {

const char* abi::resultName(int result) {
  switch (result) {
    case kSuccess:
      return "ncclSuccess";
    case kUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case kSystemError:
      return "ncclSystemError";
    case kInternalError:
      return "ncclInternalError";
    case kInvalidArgument:
      return "ncclInvalidArgument";
    case kInvalidUsage:
      return "ncclInvalidUsage";
    case kRemoteError:
      return "ncclRemoteError";
    case kInProgress:
      return "ncclInProgress";
    default:
      return "unknown ncclResult_t";
  }
}

namespace {

// NCCL's group state is per thread, and so is ours.
struct GroupState {
  int depth = 0;
  std::vector<Shim::InitCall> inits;
  std::vector<Shim::Fixup> fixups;
};

GroupState& groupState() {
  thread_local GroupState g;
  return g;
}

bool ok(abi::Result r) { return r == abi::kSuccess || r == abi::kInProgress; }

// The first error of two results (ncclInProgress is not an error).
abi::Result firstError(abi::Result a, abi::Result b) { return ok(a) ? b : a; }

// A copy of an ncclConfig_t that outlives the call (for deferred inits): `size` bytes, bounded;
// nullptr when the struct does not look initialised (NCCL will then reject the original).
std::shared_ptr<std::vector<char>> copyConfig(const void* config) {
  if (config == nullptr) return nullptr;
  const auto* prefix = static_cast<const abi::ConfigPrefix*>(config);
  if (prefix->magic != abi::kConfigMagic || prefix->size < sizeof(abi::ConfigPrefix) ||
      prefix->size > 4096)
    return nullptr;
  auto copy = std::make_shared<std::vector<char>>(prefix->size);
  std::memcpy(copy->data(), config, prefix->size);
  return copy;
}

// An entry point that the shim exports but the loaded (older) NCCL lacks: the call fails with
// ncclInvalidUsage and a log line instead of jumping through a null pointer.
abi::Result missingEntry(const char* name) {
  RANKMAP_ERROR(Shim, "NCCL shim: the loaded NCCL has no {}", name);
  return abi::kInvalidUsage;
}

}  // namespace

ShimOptions shimOptionsFromConfig(const Config& config) {
  ShimOptions o;
  o.enabled = config.get(settings::kNcclShim);
  o.timeout = config.get(settings::kTimeout);
  o.planSource = config.get(settings::kPlan);
  o.planMaxAge = config.get(settings::kPlanMaxAge);
  o.recordProfile = !config.get(settings::kProfileOut).empty();
  if (o.enabled && !o.planSource.empty()) {
    o.planIdentity = fileIdentity(o.planSource);
    try {
      o.plan = Plan::load(o.planSource);
    } catch (const std::exception& e) {
      o.planError = e.what();
      RANKMAP_WARN(Shim, "NCCL shim: ignoring plan {}: {}; this rank votes for identity order",
                   o.planSource, e.what());
    }
  }
  return o;
}

abi::Result resultFor(const std::exception& e) noexcept {
  switch (toCode(e)) {
    case ErrorCode::kInvalidInput:
      return abi::kInvalidArgument;
    case ErrorCode::kNotSupported:
      return abi::kInvalidUsage;
    case ErrorCode::kCuda:
      return abi::kUnhandledCudaError;
    case ErrorCode::kIo:
    case ErrorCode::kTimeout:
    case ErrorCode::kSystem:
      return abi::kSystemError;
    case ErrorCode::kPeer:
      return abi::kRemoteError;
    default:
      return abi::kInternalError;
  }
}

Shim::Shim(RealResolver resolveReal, DriverLoader loadDriver, ShimOptions options)
    : resolveReal_(std::move(resolveReal)),
      loadDriver_(std::move(loadDriver)),
      options_(std::move(options)),
      planWatch_(options_.enabled ? options_.planSource : std::string(),
                 options_.enabled ? options_.plan : std::nullopt,
                 options_.enabled ? options_.planError : std::string(), options_.planIdentity),
      profile_(options_.recordProfile) {}

const RealNccl& Shim::real() {
  if (const RealNccl* r = real_.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(resolveMu_);
  if (!realStorage_) {
    realStorage_ = std::make_unique<RealNccl>(resolveReal_());
    RANKMAP_DEBUG(Shim, "NCCL shim: real NCCL from {}", realStorage_->source);
    real_.store(realStorage_.get(), std::memory_order_release);
  }
  return *realStorage_;
}

const CudaDriver& Shim::driver() {
  if (const CudaDriver* d = driverPtr_.load(std::memory_order_acquire)) return *d;
  std::lock_guard<std::mutex> lock(resolveMu_);
  if (!driver_) {
    driver_ = loadDriver_();
    RANKMAP_DEBUG(Shim, "NCCL shim: CUDA driver from {}", driver_->source());
    driverPtr_.store(driver_.get(), std::memory_order_release);
  }
  return *driver_;
}

std::shared_ptr<const Shim::CommState> Shim::find(abi::Comm comm) const {
  if (registered_.load(std::memory_order_acquire) == 0) return nullptr;
  std::shared_lock<std::shared_mutex> lock(commsMu_);
  auto it = comms_.find(comm);
  return it == comms_.end() ? nullptr : it->second;
}

void Shim::registerComm(abi::Comm comm, std::shared_ptr<const CommState> state) {
  std::unique_lock<std::shared_mutex> lock(commsMu_);
  comms_[comm] = std::move(state);
  registered_.store(comms_.size(), std::memory_order_release);
}

void Shim::registerChild(abi::Comm comm, const CommState& parent, std::vector<int> appToReal,
                         int appRank) {
  auto child = std::make_shared<CommState>();
  child->table = RankTable::fromPermutation(std::move(appToReal));
  child->appRank = appRank;
  child->plan = parent.plan;
  if (!child->table.isIdentity()) registerComm(comm, std::move(child));
}

void Shim::unregisterComm(abi::Comm comm) {
  if (registered_.load(std::memory_order_acquire) == 0) return;
  std::unique_lock<std::shared_mutex> lock(commsMu_);
  comms_.erase(comm);
  registered_.store(comms_.size(), std::memory_order_release);
}

// --- unique ids and init ------------------------------------------------------------------------

abi::Result Shim::getUniqueId(abi::UniqueId* id) {
  abi::Result r = real().getUniqueId(id);
  if (r != abi::kSuccess || id == nullptr || !options_.enabled) return r;
  // The creator's plan now: every rank must vote for this one (see plan_watch.h).
  const std::shared_ptr<const Plan> plan = planWatch_.snapshot().plan;
  if (!plan) return r;
  // Only an id whose tail is free can carry the agreement (encodeTail checks again).
  abi::UniqueId probe = *id;
  if (!encodeTail(probe, IdTail{0, 0, "127.0.0.1", 0})) {
    RANKMAP_WARN(Shim,
                 "NCCL shim: this NCCL uses the whole unique id; no plan agreement, "
                 "identity order");
    return r;
  }
  auto host = ncclRootHost(*id);
  if (!host) {
    RANKMAP_WARN(Shim,
                 "NCCL shim: cannot read NCCL's bootstrap address from the unique id; "
                 "identity order");
    return r;
  }
  try {
    IdTail tail = startAgreementServer(*host, plan->hash, options_.timeout);
    encodeTail(*id, tail);
    RANKMAP_DEBUG(Shim, "NCCL shim: unique id carries plan agreement at {}:{} for plan {}",
                  tail.host, tail.port, plan->hash);
  } catch (const std::exception& e) {
    RANKMAP_WARN(Shim, "NCCL shim: no plan agreement server on {}: {}; identity order", *host,
                 e.what());
  }
  return r;
}

PlanVote Shim::voteFor(const InitCall& call) const {
  PlanChecks checks;
  checks.maxAge = options_.planMaxAge;
  const PlanSnapshot& snap = call.plan;
  PlanVote v = planVote(snap.plan ? std::optional<Plan>(*snap.plan) : std::nullopt, call.appRank,
                        call.nranks, checks);
  if (!snap.plan && !snap.error.empty()) {
    v.status = PlanStatus::kInvalid;
    v.reason = snap.error;
  }
  return v;
}

abi::Result Shim::commInitRank(abi::Comm* comm, int nranks, abi::UniqueId id, int rank) {
  return init(
      {.kind = InitCall::Kind::Rank, .out = comm, .nranks = nranks, .appRank = rank, .ids = {id}});
}

abi::Result Shim::commInitRankConfig(abi::Comm* comm, int nranks, abi::UniqueId id, int rank,
                                     void* config) {
  return init({.kind = InitCall::Kind::RankConfig,
               .out = comm,
               .nranks = nranks,
               .appRank = rank,
               .ids = {id},
               .config = config});
}

abi::Result Shim::commInitRankScalable(abi::Comm* comm, int nranks, int rank, int nIds,
                                       abi::UniqueId* ids, void* config) {
  if (real().commInitRankScalable == nullptr) return missingEntry("ncclCommInitRankScalable");
  if (ids == nullptr || nIds < 1)
    return real().commInitRankScalable(comm, nranks, rank, nIds, ids, config);
  return init({.kind = InitCall::Kind::Scalable,
               .out = comm,
               .nranks = nranks,
               .appRank = rank,
               .ids = {ids, ids + nIds},
               .config = config});
}

abi::Result Shim::callRealInit(InitCall& c, int rank) {
  abi::Result r = abi::kInternalError;
  switch (c.kind) {
    case InitCall::Kind::Rank:
      r = real().commInitRank(c.out, c.nranks, c.ids[0], rank);
      break;
    case InitCall::Kind::RankConfig:
      r = real().commInitRankConfig(c.out, c.nranks, c.ids[0], rank, c.config);
      break;
    case InitCall::Kind::Scalable:
      r = real().commInitRankScalable(c.out, c.nranks, rank, static_cast<int>(c.ids.size()),
                                      c.ids.data(), c.config);
      break;
  }
  if (ok(r) && c.out != nullptr)
    profile_.made(*c.out, "ncclCommInitRank",
                  std::string_view(c.ids[0].internal, sizeof(c.ids[0].internal)));
  return r;
}

abi::Result Shim::init(InitCall call) {
  // Even when disabled (RANKMAP_NCCL_SHIM=0, no plan loaded) a rank answers an agreement it
  // finds: its vote for identity settles the matter at once instead of at the server's deadline.
  // This call's plan, fixed now: a file replaced later is for later calls (plan_watch.h).
  if (options_.enabled) call.plan = planWatch_.snapshot();
  std::optional<IdTail> tail = decodeTail(call.ids[0]);
  if (!tail) {
    if (call.plan.plan)
      RANKMAP_DEBUG(Shim,
                    "NCCL shim: unique id carries no plan agreement (its creator has no "
                    "plan or no shim); identity order");
    return callRealInit(call, call.appRank);
  }
  call.tail = *tail;
  GroupState& g = groupState();
  if (g.depth > 0) {
    // Deferred to the outermost ncclGroupEnd (see shim.h). NCCL itself does nothing with an init
    // inside a group before ncclGroupEnd, so the application cannot tell.
    call.configCopy = copyConfig(call.config);
    if (call.configCopy) call.config = call.configCopy->data();
    try {
      call.context = driver().currentContext();
      call.haveContext = true;
    } catch (const CudaError& e) {
      RANKMAP_DEBUG(Shim, "NCCL shim: deferred init without a CUDA context: {}", e.what());
    }
    if (call.out != nullptr) *call.out = nullptr;
    counters_.deferredInits.fetch_add(1, std::memory_order_relaxed);
    g.inits.push_back(std::move(call));
    return abi::kSuccess;
  }
  PlanVerdict v = agree(call.tail, voteFor(call));
  return finishInit(call, v);
}

void Shim::recordAgreement(const InitCall& call, const PlanVerdict& verdict) {
  std::lock_guard<std::mutex> lock(agreementsMu_);
  AgreementTally& t = agreements_[call.nranks];
  if (verdict.apply && call.plan.plan) {
    ++t.applied;
    t.lastApplied = call.plan.plan;
  } else {
    ++t.identity;
    t.lastIdentityReason = verdict.reason;
  }
}

Shim::AgreedPlan Shim::agreedPlan(int nranks) const {
  using S = AgreedPlanStatus;
  if (!options_.enabled) return {S::kNoPlan, nullptr, "the NCCL shim is off (RANKMAP_NCCL_SHIM=0)"};
  std::unique_lock<std::mutex> lock(agreementsMu_);
  auto it = agreements_.find(nranks);
  if (it == agreements_.end() || it->second.applied + it->second.identity == 0) {
    lock.unlock();
    PlanSnapshot snap = planWatch_.snapshot();
    if (!snap.plan)
      return {S::kNoPlan, nullptr,
              options_.planSource.empty()
                  ? std::string("the NCCL shim has no plan (RANKMAP_PLAN is not set)")
                  : fmt::format("the NCCL shim has no plan ({})", snap.error)};
    return {S::kNoAgreement, nullptr,
            fmt::format("no plan agreement for a communicator of {} ranks in this process (its "
                        "unique id carried none)",
                        nranks)};
  }
  const AgreementTally& t = it->second;
  if (t.identity > 0)
    return {
        S::kIdentity, nullptr,
        fmt::format("{} of {} plan agreement(s) for {} ranks ended in identity order (last: {})",
                    t.identity, t.identity + t.applied, nranks, t.lastIdentityReason)};
  return {S::kApplied, t.lastApplied, ""};
}

abi::Result Shim::finishInit(InitCall& call, const PlanVerdict& verdict) {
  recordAgreement(call, verdict);
  RankTable table = RankTable::identity(call.nranks);
  if (verdict.apply && call.plan.plan) {
    table = RankTable::fromPermutation(call.plan.plan->permutation);
  } else {
    counters_.identityComms.fetch_add(1, std::memory_order_relaxed);
    RANKMAP_WARN(Shim, "NCCL shim: rank {} of {}: identity order: {}", call.appRank, call.nranks,
                 verdict.reason);
  }
  const int realRank = table.toReal(call.appRank);
  abi::Result r = callRealInit(call, realRank);
  if (ok(r) && !table.isIdentity() && call.out != nullptr && *call.out != nullptr) {
    auto state = std::make_shared<CommState>();
    state->table = std::move(table);
    state->appRank = call.appRank;
    state->plan = call.plan.plan;
    registerComm(*call.out, std::move(state));
    counters_.permutedComms.fetch_add(1, std::memory_order_relaxed);
    RANKMAP_INFO(Shim, "NCCL comm {}: app rank {} -> NCCL rank {} of {} ({})",
                 static_cast<void*>(*call.out), call.appRank, realRank, call.nranks,
                 verdict.reason);
  }
  return r;
}

abi::Result Shim::runDeferredInits(std::vector<InitCall>& calls) {
  if (calls.empty()) return abi::kSuccess;
  // Vote for all of them at once: they may be ranks of one communicator.
  std::vector<std::future<PlanVerdict>> votes;
  votes.reserve(calls.size());
  for (auto& c : calls)
    votes.push_back(std::async(std::launch::async,
                               [this, &c] { return agree(c.tail, voteFor(c)); }));
  abi::Result result = abi::kSuccess;
  void* saved = nullptr;
  bool restore = false;
  for (size_t i = 0; i < calls.size(); ++i) {
    InitCall& c = calls[i];
    try {
      PlanVerdict v = votes[i].get();
      if (c.haveContext) {
        if (!restore) saved = driver().currentContext();
        restore = true;
        driver().setCurrentContext(c.context);
      }
      result = firstError(result, finishInit(c, v));
    } catch (const std::exception& e) {
      RANKMAP_ERROR(Shim, "NCCL shim: deferred init of rank {}: {}", c.appRank, e.what());
      result = firstError(result, resultFor(e));
    }
  }
  if (restore) driver().setCurrentContext(saved);
  calls.clear();
  return result;
}

// --- communicators ------------------------------------------------------------------------------

abi::Result Shim::gatherInts(abi::Comm comm, const CommState& st, const std::vector<int32_t>& mine,
                             std::vector<int32_t>& out) {
  const size_t n = static_cast<size_t>(st.table.size());
  const size_t k = mine.size();
  const size_t block = k * sizeof(int32_t);
  const abi::Stream stream = nullptr;
  std::vector<int32_t> byReal(n * k);
  char* scratch = static_cast<char*>(driver().allocAsync((n + 1) * block, stream));
  abi::Result r = abi::kSuccess;
  try {
    driver().copyAsync(scratch, mine.data(), block, stream);
    r = real().allGather(scratch, scratch + block, k, abi::kInt32, comm, stream);
    if (r == abi::kInProgress) r = waitNotInProgress(comm);
    if (r == abi::kSuccess) {
      driver().copyAsync(byReal.data(), scratch + block, n * block, stream);
      driver().synchronize(stream);
    }
  } catch (...) {
    driver().freeAsync(scratch, stream);
    throw;
  }
  driver().freeAsync(scratch, stream);
  if (r != abi::kSuccess) return r;
  out.assign(n * k, 0);
  for (size_t real = 0; real < n; ++real) {
    const size_t app = static_cast<size_t>(st.table.toApp(static_cast<int>(real)));
    std::copy_n(byReal.begin() + static_cast<long>(real * k), k,
                out.begin() + static_cast<long>(app * k));
  }
  return abi::kSuccess;
}

void Shim::warnNotInPlanOrder(abi::Comm comm, const char* what, std::atomic<uint64_t>& counter) {
  if (!options_.enabled) return;
  std::shared_ptr<const Plan> plan = planWatch_.snapshot().plan;
  if (!plan || RankTable::fromPermutation(plan->permutation).isIdentity()) return;
  counter.fetch_add(1, std::memory_order_relaxed);
  RANKMAP_WARN(Shim, "NCCL comm {}: {}'s child keeps NCCL's order, not plan {}'s",
               static_cast<void*>(comm), what, shortPlanHash(plan->hash));
}

abi::Result Shim::commSplit(abi::Comm comm, int color, int key, abi::Comm* newcomm, void* config) {
  abi::Result r = splitInPlanOrder(comm, color, key, newcomm, config);
  if (ok(r))  // NoColor: no child, but the parent's count of splits advances
    profile_.split(comm, "ncclCommSplit", color,
                   color != abi::kSplitNoColor && newcomm != nullptr ? *newcomm : nullptr);
  return r;
}

abi::Result Shim::splitInPlanOrder(abi::Comm comm, int color, int key, abi::Comm* newcomm,
                                   void* config) {
  auto st = find(comm);
  if (!st) return real().commSplit(comm, color, key, newcomm, config);
  const int n = st->table.size();
  // NCCL's order, with ties in `key` broken by app rank (NCCL breaks them by parent rank, which
  // is the permuted one): the child needs no table.
  auto inNcclOrder = [&](const char* why) {
    int realKey = key;
    if (color != abi::kSplitNoColor && key >= 0) {
      int64_t wide = static_cast<int64_t>(key) * n + st->appRank;
      if (wide <= INT_MAX) realKey = static_cast<int>(wide);
    }
    warnNotInPlanOrder(comm, why, counters_.unorderedSplits);
    return real().commSplit(comm, color, realKey, newcomm, config);
  };
  // The gather cannot run before ncclGroupEnd.
  if (groupState().depth > 0) return inNcclOrder("ncclCommSplit inside a group");
  const auto* prefix = static_cast<const abi::ConfigPrefix*>(config);
  const bool nonBlocking =
      prefix != nullptr && prefix->magic == abi::kConfigMagic && prefix->blocking == 0;
  // Every parent rank calls ncclCommSplit (NoColor ones too), so every one joins the gather.
  std::vector<int32_t> all;
  if (abi::Result r = gatherInts(comm, *st, {color, key, nonBlocking ? 1 : 0}, all);
      r != abi::kSuccess) {
    RANKMAP_ERROR(Shim, "NCCL comm {}: gathering the colours and keys of ncclCommSplit: {}",
                  static_cast<void*>(comm), abi::resultName(r));
    return r;
  }
  std::vector<int32_t> pairs(2 * static_cast<size_t>(n));
  bool anyNonBlocking = false;
  for (size_t a = 0; a < static_cast<size_t>(n); ++a) {
    pairs[2 * a] = all[3 * a];
    pairs[2 * a + 1] = all[3 * a + 1];
    anyNonBlocking = anyNonBlocking || all[3 * a + 2] != 0;
  }
  if (anyNonBlocking) return inNcclOrder("ncclCommSplit to a non-blocking communicator");
  // Key 0 for all: NCCL orders the child by parent rank, which is the plan's order.
  abi::Result r = real().commSplit(comm, color, 0, newcomm, config);
  if (!ok(r) || color == abi::kSplitNoColor || newcomm == nullptr) return r;
  if (*newcomm == nullptr) {
    // Only a non-blocking child inherited from the parent (config NULL) can get here.
    RANKMAP_ERROR(Shim,
                  "NCCL comm {}: ncclCommSplit returned {} without the child's handle: its ranks "
                  "are in plan order and cannot be translated (pass a config with blocking = 0 "
                  "to keep NCCL's order)",
                  static_cast<void*>(comm), abi::resultName(r));
    return r;
  }
  std::vector<int> members;  // app ranks of this colour
  for (int a = 0; a < n; ++a)
    if (pairs[2 * static_cast<size_t>(a)] == color) members.push_back(a);
  std::vector<int> appOrder = members, realOrder = members;
  std::sort(appOrder.begin(), appOrder.end(), [&](int x, int y) {
    const int32_t kx = pairs[2 * static_cast<size_t>(x) + 1];
    const int32_t ky = pairs[2 * static_cast<size_t>(y) + 1];
    return kx != ky ? kx < ky : x < y;
  });
  std::sort(realOrder.begin(), realOrder.end(),
            [&](int x, int y) { return st->table.toReal(x) < st->table.toReal(y); });
  std::vector<int> childAppToReal;
  int myChildApp = -1;
  for (int a : appOrder) {
    if (a == st->appRank) myChildApp = static_cast<int>(childAppToReal.size());
    childAppToReal.push_back(
        static_cast<int>(std::find(realOrder.begin(), realOrder.end(), a) - realOrder.begin()));
  }
  registerChild(*newcomm, *st, std::move(childAppToReal), myChildApp);
  return r;
}

abi::Result Shim::commShrink(abi::Comm comm, int* exclude, int excludeCount, abi::Comm* newcomm,
                             void* config, int flags) {
  if (real().commShrink == nullptr) return missingEntry("ncclCommShrink");
  abi::Result r = shrinkInPlanOrder(comm, exclude, excludeCount, newcomm, config, flags);
  if (ok(r)) profile_.shrunk(comm, "ncclCommShrink", newcomm != nullptr ? *newcomm : nullptr);
  return r;
}

abi::Result Shim::shrinkInPlanOrder(abi::Comm comm, int* exclude, int excludeCount,
                                    abi::Comm* newcomm, void* config, int flags) {
  auto st = find(comm);
  // A parent in NCCL's order (made without a plan agreement, or one that ended in identity):
  // NCCL's shrink keeps that order and offers no lever, so the child keeps it too. Said when
  // this rank holds a plan that would have reordered, so that it is not silent.
  if (!st)
    warnNotInPlanOrder(comm, "ncclCommShrink (of a communicator not in plan order)",
                       counters_.unorderedShrinks);
  if (!st || excludeCount <= 0 || exclude == nullptr)
    return real().commShrink(comm, exclude, excludeCount, newcomm, config, flags);
  // The parent's NCCL ranks are in its plan's order, and NCCL numbers the survivors
  // contiguously in parent order: the child's NCCL order is that plan's order restricted to
  // the survivors (a host's surviving ranks stay together, hosts in the plan's ring order).
  // The child keeps the parent's plan: the survivors have no channel to agree on a newer one
  // before NCCL's call, and NCCL's shrink takes no order anyway.
  const RankTable& t = st->table;
  std::vector<int> realExclude(exclude, exclude + excludeCount);
  for (int& r : realExclude) r = t.toReal(r);
  abi::Result r = real().commShrink(comm, realExclude.data(), excludeCount, newcomm, config, flags);
  if (!ok(r) || newcomm == nullptr || *newcomm == nullptr) return r;
  // NCCL numbers the survivors in parent (real) rank order; the application expects app order.
  std::vector<bool> gone(static_cast<size_t>(t.size()), false);
  for (int i = 0; i < excludeCount; ++i)
    if (exclude[i] >= 0 && exclude[i] < t.size()) gone[static_cast<size_t>(exclude[i])] = true;
  std::vector<int> survivorsReal;
  for (int real = 0; real < t.size(); ++real)
    if (!gone[static_cast<size_t>(t.toApp(real))]) survivorsReal.push_back(real);
  std::vector<int> childAppToReal;
  int myChildApp = -1;
  for (int a = 0; a < t.size(); ++a) {
    if (gone[static_cast<size_t>(a)]) continue;
    if (a == st->appRank) myChildApp = static_cast<int>(childAppToReal.size());
    auto pos = std::lower_bound(survivorsReal.begin(), survivorsReal.end(), t.toReal(a));
    childAppToReal.push_back(static_cast<int>(pos - survivorsReal.begin()));
  }
  registerChild(*newcomm, *st, std::move(childAppToReal), myChildApp);
  return r;
}

abi::Result Shim::commDestroy(abi::Comm comm) {
  unregisterComm(comm);
  profile_.destroyed(comm);
  return real().commDestroy(comm);
}

abi::Result Shim::commAbort(abi::Comm comm) {
  unregisterComm(comm);
  profile_.destroyed(comm);
  return real().commAbort(comm);
}

abi::Result Shim::commUserRank(abi::Comm comm, int* rank) {
  abi::Result r = real().commUserRank(comm, rank);
  if (r != abi::kSuccess || rank == nullptr) return r;
  if (auto st = find(comm)) *rank = st->table.toApp(*rank);
  return r;
}

// --- groups -------------------------------------------------------------------------------------

abi::Result Shim::groupStart() {
  abi::Result r = real().groupStart();
  if (r == abi::kSuccess) ++groupState().depth;
  return r;
}

abi::Result Shim::groupEnd() { return endGroup(false, nullptr); }

abi::Result Shim::groupSimulateEnd(void* simInfo) {
  if (real().groupSimulateEnd == nullptr) return missingEntry("ncclGroupSimulateEnd");
  return endGroup(true, simInfo);
}

abi::Result Shim::endGroup(bool simulate, void* simInfo) {
  GroupState& g = groupState();
  auto realEnd = [&] { return simulate ? real().groupSimulateEnd(simInfo) : real().groupEnd(); };
  if (g.depth == 0) return realEnd();  // unbalanced: NCCL reports it
  if (g.depth > 1) {
    --g.depth;  // an inner end closes its level whatever it returns, as in NCCL
    return realEnd();
  }
  std::vector<InitCall> inits = std::move(g.inits);
  std::vector<Fixup> fixups = std::move(g.fixups);
  g.inits.clear();
  g.fixups.clear();
  abi::Result initResult = runDeferredInits(inits);
  abi::Result r = realEnd();
  g.depth = 0;
  if (simulate) {
    // Nothing was launched: release the scratch buffers without copying.
    for (auto& f : fixups) f.copies.clear();
  }
  abi::Result fixResult = completeFixups(fixups, r);
  return firstError(initResult, fixResult);
}

// --- fix-ups ------------------------------------------------------------------------------------

abi::Result Shim::waitNotInProgress(abi::Comm comm) {
  const Deadline deadline = Deadline::after(options_.timeout);
  auto pause = std::chrono::microseconds(1);
  for (;;) {
    abi::Result state = abi::kSuccess;
    abi::Result r = real().commGetAsyncError(comm, &state);
    if (r != abi::kSuccess) return r;
    if (state != abi::kInProgress) return state;
    if (deadline.expired())
      RANKMAP_THROW(TimeoutError, "NCCL comm {} still in progress after {} ms",
                    static_cast<void*>(comm), options_.timeout.count());
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

void Shim::preCopies(const std::vector<BlockCopy>& copies, char* dst, const char* src,
                     abi::Stream stream) {
  for (const auto& c : copies) driver().copyAsync(dst + c.dst, src + c.src, c.bytes, stream);
  counters_.fixupCopies.fetch_add(copies.size(), std::memory_order_relaxed);
}

abi::Result Shim::after(abi::Result r, Fixup fixup) {
  GroupState& g = groupState();
  if (g.depth > 0 && ok(r)) {
    g.fixups.push_back(std::move(fixup));
    return r;
  }
  std::vector<Fixup> one;
  one.push_back(std::move(fixup));
  return completeFixups(one, r);
}

abi::Result Shim::completeFixups(std::vector<Fixup>& fixups, abi::Result r) {
  abi::Result result = r;
  for (auto& f : fixups) {
    bool copy = ok(r);
    try {
      if (copy && r == abi::kInProgress) {
        abi::Result state = waitNotInProgress(f.comm);
        if (state != abi::kSuccess) {
          copy = false;
          result = firstError(result, state);
        }
      }
      if (copy) preCopies(f.copies, f.dstBase, f.srcBase, f.stream);
      driver().freeAsync(f.scratch, f.stream);
    } catch (const std::exception& e) {
      RANKMAP_ERROR(Shim, "NCCL shim: block-order fix-up on comm {}: {}",
                    static_cast<void*>(f.comm), e.what());
      result = firstError(result, resultFor(e));
    }
  }
  fixups.clear();
  return result;
}

// --- collectives --------------------------------------------------------------------------------

int Shim::realRank(abi::Comm comm, int appRank) const {
  auto st = find(comm);
  return st ? st->table.toReal(appRank) : appRank;
}

template <typename RealCall>
abi::Result Shim::reorderBlocks(Reorder sides, const void* send, void* recv, size_t count,
                                abi::DataType dt, std::optional<int> root, abi::Comm comm,
                                abi::Stream stream, RealCall call) {
  auto st = find(comm);
  const int appRoot = root.value_or(-1);  // unrooted calls ignore it
  if (!st) return call(send, recv, appRoot);
  const int realRoot = st->table.toReal(appRoot);
  const size_t block = count * abi::dataTypeSize(dt);
  // Gather and Scatter have block-ordered buffers on the root only.
  if (block == 0 || (root && st->appRank != *root)) return call(send, recv, realRoot);
  const bool in = sides != Reorder::kOutput;
  const bool out = sides != Reorder::kInput;
  const size_t total = static_cast<size_t>(st->table.size()) * block;
  // Input blocks first, then output blocks.
  char* scratch =
      static_cast<char*>(driver().allocAsync((in ? total : 0) + (out ? total : 0), stream));
  char* realOut = in ? scratch + total : scratch;
  Fixup f{comm, stream, scratch, nullptr, nullptr, {}};
  if (out) {
    f.dstBase = static_cast<char*>(recv);
    f.srcBase = realOut;
    f.copies = realOrderToAppOrder(st->table, block);
  }
  if (in) {
    try {
      preCopies(appOrderToRealOrder(st->table, block), scratch, static_cast<const char*>(send),
                stream);
    } catch (...) {
      driver().freeAsync(scratch, stream);
      throw;
    }
  }
  abi::Result r = call(in ? scratch : send, out ? realOut : recv, realRoot);
  return after(r, std::move(f));
}

abi::Result Shim::counted(abi::Result r, abi::Comm comm, std::string_view collective, size_t count,
                          abi::DataType dt, bool perRank) {
  if (!profile_.on() || !ok(r)) return r;
  uint64_t bytes = static_cast<uint64_t>(count) * abi::dataTypeSize(dt);
  if (perRank) {
    int n = 0;
    if (auto st = find(comm))
      n = st->table.size();
    else if (real().commCount(comm, &n) != abi::kSuccess)
      n = 0;
    bytes *= static_cast<uint64_t>(std::max(n, 0));
  }
  profile_.traffic(comm, collective, bytes);
  return r;
}

abi::Result Shim::allReduce(const void* send, void* recv, size_t count, abi::DataType dt,
                            abi::RedOp op, abi::Comm comm, abi::Stream stream) {
  return counted(real().allReduce(send, recv, count, dt, op, comm, stream), comm, "allreduce",
                 count, dt);
}

abi::Result Shim::reduce(const void* send, void* recv, size_t count, abi::DataType dt,
                         abi::RedOp op, int root, abi::Comm comm, abi::Stream stream) {
  return real().reduce(send, recv, count, dt, op, realRank(comm, root), comm, stream);
}

abi::Result Shim::bcast(void* buf, size_t count, abi::DataType dt, int root, abi::Comm comm,
                        abi::Stream stream) {
  return counted(real().bcast(buf, count, dt, realRank(comm, root), comm, stream), comm,
                 "broadcast", count, dt);
}

abi::Result Shim::broadcast(const void* send, void* recv, size_t count, abi::DataType dt, int root,
                            abi::Comm comm, abi::Stream stream) {
  return counted(real().broadcast(send, recv, count, dt, realRank(comm, root), comm, stream), comm,
                 "broadcast", count, dt);
}

abi::Result Shim::send(const void* buf, size_t count, abi::DataType dt, int peer, abi::Comm comm,
                       abi::Stream stream) {
  return counted(real().send(buf, count, dt, realRank(comm, peer), comm, stream), comm, "sendrecv",
                 count, dt);
}

abi::Result Shim::recv(void* buf, size_t count, abi::DataType dt, int peer, abi::Comm comm,
                       abi::Stream stream) {
  return real().recv(buf, count, dt, realRank(comm, peer), comm, stream);
}

abi::Result Shim::allGather(const void* send, void* recv, size_t sendCount, abi::DataType dt,
                            abi::Comm comm, abi::Stream stream) {
  abi::Result r = reorderBlocks(Reorder::kOutput, send, recv, sendCount, dt, std::nullopt, comm,
                                stream, [&](const void* in, void* out, int) {
                                  return real().allGather(in, out, sendCount, dt, comm, stream);
                                });
  return counted(r, comm, "allgather", sendCount, dt, true);
}

abi::Result Shim::reduceScatter(const void* send, void* recv, size_t recvCount, abi::DataType dt,
                                abi::RedOp op, abi::Comm comm, abi::Stream stream) {
  abi::Result r =
      reorderBlocks(Reorder::kInput, send, recv, recvCount, dt, std::nullopt, comm, stream,
                    [&](const void* in, void* out, int) {
                      return real().reduceScatter(in, out, recvCount, dt, op, comm, stream);
                    });
  return counted(r, comm, "reducescatter", recvCount, dt, true);
}

abi::Result Shim::alltoAll(const void* send, void* recv, size_t count, abi::DataType dt,
                           abi::Comm comm, abi::Stream stream) {
  if (real().alltoAll == nullptr) return missingEntry("ncclAlltoAll");
  abi::Result r = reorderBlocks(Reorder::kBoth, send, recv, count, dt, std::nullopt, comm, stream,
                                [&](const void* in, void* out, int) {
                                  return real().alltoAll(in, out, count, dt, comm, stream);
                                });
  return counted(r, comm, "alltoall", count, dt, true);
}

abi::Result Shim::gather(const void* send, void* recv, size_t count, abi::DataType dt, int root,
                         abi::Comm comm, abi::Stream stream) {
  if (real().gather == nullptr) return missingEntry("ncclGather");
  return reorderBlocks(Reorder::kOutput, send, recv, count, dt, root, comm, stream,
                       [&](const void* in, void* out, int realRoot) {
                         return real().gather(in, out, count, dt, realRoot, comm, stream);
                       });
}

abi::Result Shim::scatter(const void* send, void* recv, size_t count, abi::DataType dt, int root,
                          abi::Comm comm, abi::Stream stream) {
  if (real().scatter == nullptr) return missingEntry("ncclScatter");
  return reorderBlocks(Reorder::kInput, send, recv, count, dt, root, comm, stream,
                       [&](const void* in, void* out, int realRoot) {
                         return real().scatter(in, out, count, dt, realRoot, comm, stream);
                       });
}

// --- the process-wide instance ------------------------------------------------------------------

Shim& globalShim() {
  static Shim* shim = [] {
    ShimOptions options;
    try {
      Config config = Config::load();
      log::configure(config);
      options = shimOptionsFromConfig(config);
    } catch (const std::exception& e) {
      RANKMAP_WARN(Shim, "NCCL shim: configuration: {}; passing NCCL calls through", e.what());
      options.enabled = false;
    }
    return new Shim([] { return resolveRealNccl(); }, [] { return CudaDriver::load(); },
                    std::move(options));
  }();
  return *shim;
}

}  // namespace rankmap::shim_nccl
