#include "collectives/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>

#include "collectives/algorithms/algorithms.h"
#include "collectives/executor.h"
#include "common/build_config.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/plan_agreement.h"
#if RANKMAP_HAVE_CUDA
#include "collectives/cuda/cuda_ops.h"
#include "collectives/cuda/device.h"
#include "collectives/cuda/device_executor.h"
#endif

namespace rankmap::coll {
namespace {

constexpr size_t kCacheLimit = 64;
constexpr size_t kScratchAlign = 64;

// 8-bit signature of what a call is (collective, type, op, root) in every tag of its messages:
// ranks that disagree never match each other's messages.
uint64_t signature(Collective c, DataType t, ReduceOp op, int root) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (uint64_t v : {static_cast<uint64_t>(c), static_cast<uint64_t>(t), static_cast<uint64_t>(op),
                     static_cast<uint64_t>(static_cast<uint32_t>(root))}) {
    h ^= v;
    h *= 1099511628211ull;
  }
  return (h ^ (h >> 8) ^ (h >> 16) ^ (h >> 32)) & 0xFF;
}

[[noreturn]] void rethrowWithContext(const Error& e, const std::string& what) {
  std::string msg = what + ": " + e.what();
  switch (e.code()) {
    case ErrorCode::kInvalidInput:
      throw InvalidInput(msg);
    case ErrorCode::kIo:
      throw IoError(msg);
    case ErrorCode::kTimeout:
      throw TimeoutError(msg);
    case ErrorCode::kNotSupported:
      throw NotSupported(msg);
    case ErrorCode::kSystem: {
      auto* se = dynamic_cast<const SystemError*>(&e);
      throw SystemError(msg, se ? se->err() : 0);
    }
    case ErrorCode::kCuda:
      throw CudaError(msg);
    case ErrorCode::kPeer:
      throw PeerError(msg);
    case ErrorCode::kOk:
    case ErrorCode::kInternal:
      break;
  }
  throw InternalError(msg);
}

bool overlaps(const void* a, uint64_t abytes, const void* b, uint64_t bbytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bbytes && y < x + abytes;
}

}  // namespace

std::optional<Algorithm> parseAlgorithmOverride(std::string_view text, std::string_view source) {
  if (text.empty() || text == "auto") return std::nullopt;
  auto a = parseAlgorithm(text);
  if (!a || *a == Algorithm::kDissemination)
    RANKMAP_THROW(InvalidInput, "{}={:?}: expected auto, ring, tree, hier, rhd or trees", source,
                  std::string(text));
  return a;
}

CommOptions CommOptions::fromConfig(const Config& config) {
  CommOptions o;
  o.timeout = config.get(settings::kTimeout);
  if (o.timeout.count() <= 0) RANKMAP_THROW(InvalidInput, "RANKMAP_TIMEOUT must be positive");
  o.segmentBytes = config.get(settings::kSegmentSize);
  if (o.segmentBytes == 0) RANKMAP_THROW(InvalidInput, "RANKMAP_SEGMENT_SIZE must be positive");
  o.algorithm = parseAlgorithmOverride(config.get(settings::kAlgo), "RANKMAP_ALGO");
  o.live.enabled = config.get(settings::kLivePlan);
  o.live.voteEvery = static_cast<uint64_t>(config.get(settings::kPlanVoteEvery));  // >= 1
  o.live.margin = config.get(settings::kPlanSwitchMargin);
  if (!(o.live.margin >= 0 && o.live.margin < 1))
    RANKMAP_THROW(InvalidInput, "RANKMAP_PLAN_SWITCH_MARGIN={}: expected a fraction in [0, 1)",
                  o.live.margin);
  o.live.maxAge = config.get(settings::kPlanMaxAge);
  o.live.planFile = config.get(settings::kPlan);
  o.agent.agentUrl = config.get(settings::kAgent);
  o.agent.tokenFile = config.get(settings::kTokenFile);
  o.agent.reports = config.get(settings::kPassive);
  o.agent.plans = config.get(settings::kPlanFromAgent);
  o.agent.reportEvery = config.get(settings::kPassiveReport);
  if (o.agent.reportEvery.count() <= 0)
    RANKMAP_THROW(InvalidInput, "RANKMAP_PASSIVE_REPORT: expected a positive duration");
  o.agent.maxAge = o.live.maxAge;
  return o;
}

namespace {
// Per-host-position weights of `plan` as per-rank weights: a host's weight shared equally by
// its ranks.
std::vector<double> perRank(const Plan& plan, const std::vector<double>& byPosition) {
  std::vector<double> w;
  if (byPosition.empty()) return w;
  const int rph = plan.ranksPerHost;
  for (size_t r = 0; r < plan.worldSize(); ++r)
    w.push_back(byPosition.at(static_cast<size_t>(plan.newRank(static_cast<int>(r)) / rph)) / rph);
  return w;
}
}  // namespace

std::vector<double> rankWeightsFromPlan(const Plan& plan) {
  return perRank(plan, plan.chunkWeights);
}

std::vector<double> rankRingWeightsFromPlan(const Plan& plan) {
  return perRank(plan, plan.ringWeights);
}

std::vector<RankTree> rankTreesFromPlan(const Plan& plan) {
  std::vector<RankTree> out;
  const int rph = plan.ranksPerHost;
  const std::vector<int> order = plan.inversePermutation();  // position -> rank
  auto rankAt = [&](int host, int local) {
    return order.at(static_cast<size_t>(host * rph + local));
  };
  for (const auto& t : plan.trees) {
    RankTree rt;
    rt.weight = t.weight;
    rt.parent.assign(plan.worldSize(), -1);
    for (size_t q = 0; q < t.parent.size(); ++q) {
      const int host = static_cast<int>(q);
      const int up = t.parent[q];
      rt.parent[static_cast<size_t>(rankAt(host, 0))] = up < 0 ? -1 : rankAt(up, 0);
      for (int l = 1; l < rph; ++l)
        rt.parent[static_cast<size_t>(rankAt(host, l))] = rankAt(host, l - 1);
    }
    out.push_back(std::move(rt));
  }
  return out;
}

std::vector<std::vector<int>> rankGroupsFromPlan(const Plan& plan) {
  std::vector<std::vector<int>> groups;
  const int rph = plan.ranksPerHost;
  auto ranksOfHost = [&](const std::string& host, std::vector<int>& out) {
    auto it = std::find(plan.hosts.begin(), plan.hosts.end(), host);
    if (it == plan.hosts.end()) return;
    int h = static_cast<int>(it - plan.hosts.begin());
    for (int l = 0; l < rph; ++l) out.push_back(h * rph + l);
  };
  if (!plan.groups.empty()) {
    for (const auto& hostGroup : plan.groups.front().groups) {
      std::vector<int> g;
      for (const auto& host : hostGroup) ranksOfHost(host, g);
      if (!g.empty()) groups.push_back(std::move(g));
    }
  } else if (rph > 1) {
    for (const auto& host : plan.hosts) {
      std::vector<int> g;
      ranksOfHost(host, g);
      groups.push_back(std::move(g));
    }
  }
  auto pos = [&](int r) { return plan.permutation.at(static_cast<size_t>(r)); };
  for (auto& g : groups)
    std::sort(g.begin(), g.end(), [&](int a, int b) { return pos(a) < pos(b); });
  std::sort(groups.begin(), groups.end(),
            [&](const auto& a, const auto& b) { return pos(a.front()) < pos(b.front()); });
  return groups;
}

void Communicator::FreeAligned::operator()(std::byte* p) const {
  ::operator delete[](p, std::align_val_t(kScratchAlign));
}

Communicator::Communicator(transport::Context& ctx, CommOptions options, std::optional<Plan> plan)
    : ctx_(&ctx), rank_(ctx.rank()), size_(ctx.size()), options_(std::move(options)) {
  init(std::move(plan));
}

Communicator::Communicator(std::shared_ptr<transport::Device> device,
                           std::unique_ptr<transport::Context> ctx, CommOptions options,
                           PlanDecision plan)
    : device_(std::move(device)),
      owned_(std::move(ctx)),
      ctx_(owned_.get()),
      rank_(ctx_ ? ctx_->rank() : 0),
      size_(ctx_ ? ctx_->size() : 0),
      options_(std::move(options)) {
  RANKMAP_ASSERT(ctx_ != nullptr);
  if (!plan.refused.empty()) {
    stats_.planRejected = true;
    ++stats_.fallbacks;
  }
  init(std::move(plan.plan));
}

void Communicator::DeleteDeviceOps::operator()(cuda::CudaOps* p) const {
#if RANKMAP_HAVE_CUDA
  delete p;
#else
  (void)p;  // never made without CUDA
#endif
}

namespace {

// Whether `p` is device memory. Without a visible device (checked once per process) every
// pointer is host memory, so host-only machines make no CUDA call per collective.
bool onDevice(const void* p) {
#if RANKMAP_HAVE_CUDA
  static const bool devices = cuda::deviceCount() > 0;
  return devices && p != nullptr && cuda::isDevicePointer(p);
#else
  (void)p;
  return false;
#endif
}

}  // namespace

Communicator::~Communicator() {
  // A broken communicator whose context we do not own may still have transfers in flight into
  // scratch: the context keeps it until it is destroyed, so they never write into freed memory
  // (and it is not leaked, as it was before LeakSanitizer ran the failure tests).
  if (broken() && !owned_ && ctx_ != nullptr && deviceOps_) {
    // Its pinned mirrors may be written by transfers still in flight, as scratch below.
    try {
      ctx_->keepUntilDestroyed(std::shared_ptr<cuda::CudaOps>(deviceOps_.release(), DeleteDeviceOps{}));
    } catch (...) {
    }
  }
  if (broken() && !owned_ && ctx_ != nullptr && scratch_) {
    try {
      auto held = std::make_shared<decltype(scratch_)>(std::move(scratch_));
      try {
        ctx_->keepUntilDestroyed(held);
      } catch (...) {
        scratch_ = std::move(*held);
        throw;
      }
    } catch (...) {
      (void)scratch_.release();  // no memory to hand it over: leak it rather than free it in use
    }
  }
}

void Communicator::init(std::optional<Plan> plan) {
  if (options_.segmentBytes == 0) RANKMAP_THROW(InvalidInput, "segment size 0");
  if (options_.numSlots < 2)
    RANKMAP_THROW(InvalidInput, "{} scratch slots (at least 2)", options_.numSlots);
  const int n = size();
  caps_.worldSize = n;
  if (options_.agent.reports) meter_ = std::make_unique<PassiveMeter>(n);
  if (plan && plan->worldSize() == static_cast<size_t>(n)) {
    AgentLinkOptions lo = options_.agent;
    lo.plans = lo.plans && options_.live.enabled;
    link_ = AgentLink::make(lo, rank(), n, *plan);
  }
  if (options_.live.enabled && (!options_.live.planFile.empty() || options_.agent.plans)) {
    if (options_.live.voteEvery < 1)
      RANKMAP_THROW(InvalidInput, "vote every {} calls (at least 1)", options_.live.voteEvery);
    // The agent route replaces the file's: one source per communicator. A rank whose link did
    // not start has no source, and agreeLiveSettings() then turns it off everywhere.
    if (options_.agent.plans) {
      if (link_ && link_->fetchesPlans()) planSource_ = std::make_unique<AgentPlanSource>(*link_);
    } else {
      planSource_ = std::make_unique<PlanFileSource>(options_.live.planFile, rank(), n,
                                                     options_.live.pollInterval,
                                                     options_.live.maxAge);
    }
  }
  agreeLiveSettings();
  applyPlan(std::nullopt);
  if (plan) {
    if (plan->worldSize() != static_cast<size_t>(n)) {
      RANKMAP_WARN(Coll,
                   "rank {}: plan {} is for {} ranks ({} hosts x {}), this job has {}: using the "
                   "identity order and default algorithms",
                   rank(), plan->hash, plan->worldSize(), plan->hosts.size(), plan->ranksPerHost,
                   n);
      stats_.planRejected = true;
      ++stats_.fallbacks;
    } else {
      applyPlan(std::move(plan));
      RANKMAP_DEBUG(Coll,
                    "rank {}: plan {} applied: position {}, {} groups, {} chunk weights, {} "
                    "packed trees",
                    rank(), plan_->hash, plan_->newRank(rank()), caps_.groups.size(),
                    weights_.size(), caps_.trees.size());
    }
  }
}

void Communicator::applyPlan(std::optional<Plan> plan) {
  const int n = size();
  order_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order_[static_cast<size_t>(i)] = i;
  caps_.groups.clear();
  caps_.trees.clear();
  weights_.clear();
  ringWeights_.clear();
  plan_.reset();
  if (plan) {
    order_ = plan->inversePermutation();
    caps_.groups = rankGroupsFromPlan(*plan);
    caps_.trees = rankTreesFromPlan(*plan);
    weights_ = rankWeightsFromPlan(*plan);
    ringWeights_ = rankRingWeightsFromPlan(*plan);
    plan_ = std::move(plan);
  }
  // Schedules hold the old order; declines are logged again under the new plan.
  cache_.clear();
  warnedDeclines_.clear();
}

void Communicator::agreeLiveSettings() {
  const int n = size();
  const bool on = planSource_ != nullptr;
  uint64_t marginBits = 0;
  static_assert(sizeof(marginBits) == sizeof(options_.live.margin));
  if (on) std::memcpy(&marginBits, &options_.live.margin, sizeof(marginBits));
  // 1 = the plan file, 2 = the agent.
  const uint64_t source = on ? (options_.agent.plans ? 2u : 1u) : 0u;
  const uint64_t mine[3] = {source, on ? options_.live.voteEvery : 0, marginBits};
  std::vector<uint64_t> all(3 * static_cast<size_t>(n));
  run(Collective::kAllgather, mine, all.data(), 3, DataType::kUint64, ReduceOp::kSum, 0,
      "live settings exchange");
  auto describe = [&](int r) {
    const uint64_t* v = &all[3 * static_cast<size_t>(r)];
    if (v[0] == 0)
      return std::string("off (RANKMAP_LIVE_PLAN=0, no plan to watch or no link to the agent)");
    double m = 0;
    std::memcpy(&m, &v[2], sizeof(m));
    return fmt::format("on ({}), vote every {} calls, margin {:g}",
                       v[0] == 2 ? "plans from the agent" : "plan file", v[1], m);
  };
  std::map<std::string, std::vector<int>> ranksBy;
  for (int r = 0; r < n; ++r) ranksBy[describe(r)].push_back(r);
  if (ranksBy.size() <= 1) return;
  planSource_.reset();
  stats_.liveSettingsDisagreed = 1;
  std::vector<std::string> parts;
  for (const auto& [what, ranks] : ranksBy)
    parts.push_back(fmt::format("rank{} {}: {}", ranks.size() > 1 ? "s" : "",
                                fmt::join(ranks, ","), what));
  if (rank() == 0)
    RANKMAP_WARN(Coll,
                 "live re-planning off on every rank: the ranks' RANKMAP_LIVE_PLAN, "
                 "RANKMAP_PLAN_VOTE_EVERY, RANKMAP_PLAN_SWITCH_MARGIN or plan file differ ({})",
                 fmt::join(parts, "; "));
  else
    RANKMAP_DEBUG(Coll, "rank {}: live re-planning off: the ranks' live settings differ ({})",
                  rank(), fmt::join(parts, "; "));
}

void Communicator::maybeVote() {
  if (!planSource_) return;
  const uint64_t call = stats_.collectives;  // the same on every rank
  if (call == 0 || call % options_.live.voteEvery != 0) return;
  // The plans are compared on the largest call since the last vote (this one included), the
  // same on every rank: the job's bulk transfer, not whichever small call the vote lands on.
  const auto [coll, bytes] = *heaviest_;
  heaviest_.reset();
  const auto t0 = std::chrono::steady_clock::now();
  const Plan* current = plan_ ? &*plan_ : nullptr;
  const Plan* offered = planSource_->poll(t0);
  stats_.planFilesRejected = planSource_->rejected();
  if (offered == nullptr) offered = current;
  // A pricing of the offered plan against the order in use (the agent route) is part of what
  // the ranks must agree on: judgeSwitch reads it.
  const OrderPricing* pricing =
      offered != nullptr && offered != current && planKey(offered) != planKey(current)
          ? planSource_->pricing()
          : nullptr;
  const uint64_t key = planKey(offered) ^ pricingKey(pricing);
  const uint64_t epoch = offered ? static_cast<uint64_t>(offered->epoch) : 0;
  // Max of each value and of its complement: max and min over the ranks in one allreduce.
  uint64_t v[4] = {key, ~key, epoch, ~epoch};
  run(Collective::kAllreduce, v, v, 4, DataType::kUint64, ReduceOp::kMax, 0, "plan vote");
  ++stats_.planVotes;
  const auto voteEnd = [&] {
    stats_.planVoteNs += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  };
  if (v[0] != ~v[1] || v[2] != ~v[3]) {
    ++stats_.planVotesDisagreed;
    RANKMAP_DEBUG(Coll, "rank {}: plan vote before call #{}: ranks offer different plans, keeping {}",
                  rank(), call, current ? shortPlanHash(current->hash) : "identity order");
    voteEnd();
    return;
  }
  if (pricing == nullptr && key == planKey(current)) {
    voteEnd();
    return;
  }
  // Every rank offers `offered`, which is not the plan in use, and judges it alike.
  SwitchVerdict verdict =
      judgeSwitch(current, *offered, collectiveName(coll), bytes, options_.live.margin,
                  options_.algorithm, pricing);
  if (!verdict.adopt) {
    ++stats_.planSwitchesDeclined;
    if (lastDeclined_ != offered->hash) {
      lastDeclined_ = offered->hash;
      if (rank() == 0)
        RANKMAP_INFO(Coll, "plan vote before call #{}: keeping {}, not adopting {}: {}", call,
                     current ? shortPlanHash(current->hash) : "identity order",
                     shortPlanHash(offered->hash), verdict.reason);
    }
    voteEnd();
    return;
  }
  if (rank() == 0)
    RANKMAP_INFO(Coll, "plan switch before call #{}: {} -> {} (epoch {}): {}", call,
                 current ? shortPlanHash(current->hash) : "identity order",
                 shortPlanHash(offered->hash), offered->epoch, verdict.reason);
  applyPlan(*offered);
  ++stats_.planSwitches;
  stats_.lastSwitchCall = call;
  voteEnd();
}

void Communicator::abortContext() noexcept {
  if (!owned_) return;
  try {
    owned_.reset();  // fails what is in flight here and, on the peers, what needs this rank
  } catch (...) {
  }
  ctx_ = nullptr;
}

void* Communicator::scratch(uint64_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes > scratchBytes_) {
    scratch_.reset(
        static_cast<std::byte*>(::operator new[](bytes, std::align_val_t(kScratchAlign))));
    scratchBytes_ = bytes;
  }
  return scratch_.get();
}

const Schedule& Communicator::scheduleFor(Algorithm algo, Collective coll, uint64_t count,
                                          size_t es, int root, bool inPlace) {
  CacheKey key{static_cast<int>(algo), static_cast<int>(coll), count, es, root, inPlace};
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  AlgoParams p;
  p.collective = coll;
  p.rank = rank();
  p.worldSize = size();
  p.count = count;
  p.elementSize = es;
  p.root = root;
  p.inPlace = inPlace;
  const bool wholeBuffer = coll == Collective::kAllgather || coll == Collective::kReduceScatter;
  p.segmentBytes = segmentFor(count * es * (wholeBuffer ? static_cast<uint64_t>(size()) : 1u),
                              options_.segmentBytes);
  p.numSlots = options_.numSlots;
  p.order = order_;
  p.groups = caps_.groups;
  p.weights = weights_;
  p.ringWeights = ringWeights_;
  p.trees = caps_.trees;
  if (cache_.size() >= kCacheLimit) cache_.clear();
  return cache_.emplace(key, buildSchedule(algo, p)).first->second;
}

void Communicator::run(Collective coll, const void* in, void* out, uint64_t count, DataType type,
                       ReduceOp op, int root, std::string_view internalName) {
  const bool internal = !internalName.empty();
  const int n = size();
  const int me = rank();
  const uint64_t seq = seq_;
  std::string what =
      fmt::format("rank {}: {} #{}", me, internal ? internalName : collectiveName(coll), seq);
  if (!failure_.empty())
    RANKMAP_THROW(PeerError, "{}: communicator broken by an earlier failure: {}", what, failure_);
  // Argument checks, identical on every rank so they never desynchronise the sequence.
  const bool reducing = coll == Collective::kAllreduce || coll == Collective::kReduceScatter ||
                        coll == Collective::kReduce;
  if (static_cast<int>(type) < 0 || static_cast<int>(type) >= kNumDataTypes)
    RANKMAP_THROW(InvalidInput, "{}: unknown data type {}", what, static_cast<int>(type));
  if (reducing && (static_cast<int>(op) < 0 || static_cast<int>(op) >= kNumReduceOps))
    RANKMAP_THROW(InvalidInput, "{}: unknown reduction operator {}", what, static_cast<int>(op));
  if ((coll == Collective::kBroadcast || coll == Collective::kReduce) && (root < 0 || root >= n))
    RANKMAP_THROW(InvalidInput, "{}: root {} outside a world of {}", what, root, n);
  const size_t es = elementSize(type);
  if (count > (UINT64_MAX / es) / static_cast<uint64_t>(n))
    RANKMAP_THROW(InvalidInput, "{}: {} elements overflow", what, count);
  const uint64_t bytes = count * es;
  const uint64_t all = bytes * static_cast<uint64_t>(n);
  uint64_t inBytes = bytes, outBytes = bytes;
  bool needIn = true, needOut = true, inPlace = false;
  switch (coll) {
    case Collective::kAllreduce:
      inPlace = in == out;
      break;
    case Collective::kAllgather:
      outBytes = all;
      inPlace = in == static_cast<const std::byte*>(out) + bytes * static_cast<uint64_t>(me);
      break;
    case Collective::kReduceScatter:
      inBytes = all;
      inPlace = out == static_cast<const std::byte*>(in) + bytes * static_cast<uint64_t>(me);
      break;
    case Collective::kBroadcast:
      needIn = me == root;
      inPlace = needIn && in == out;
      break;
    case Collective::kReduce:
      needOut = me == root;
      inPlace = needOut && in == out;
      break;
    case Collective::kBarrier:
      needIn = needOut = false;
      count = 0;
      break;
  }
  bool device = false;
  if (count > 0) {
    if (needIn && in == nullptr) RANKMAP_THROW(InvalidInput, "{}: null input buffer", what);
    if (needOut && out == nullptr) RANKMAP_THROW(InvalidInput, "{}: null output buffer", what);
    const bool inDevice = needIn && onDevice(in), outDevice = needOut && onDevice(out);
    if (needIn && needOut && inDevice != outDevice)
      RANKMAP_THROW(InvalidInput,
                    "{}: the input is {} memory and the output {} memory; both must be on the "
                    "host or both on a device",
                    what, inDevice ? "device" : "host", outDevice ? "device" : "host");
    device = inDevice || outDevice;
    if (needIn && needOut && !inPlace && overlaps(in, inBytes, out, outBytes))
      RANKMAP_THROW(InvalidInput,
                    "{}: input and output overlap without being in place (see the API for the "
                    "in-place layout)",
                    what);
  }

  Request req;
  req.collective = coll;
  req.count = count;
  req.type = type;
  req.op = op;
  req.root = root;
  req.worldSize = n;
  if (!internal) {
    if (!heaviest_ || req.bytes() > heaviest_->second) heaviest_.emplace(coll, req.bytes());
    maybeVote();
  }
  Selection selection =
      choose(req, caps_, plan_ ? &*plan_ : nullptr, Overrides{options_.algorithm});
  const Algorithm algo = selection.algorithm;
  if (!internal) lastSelection_ = selection;
  if (selection.fellBack && !internal) {
    ++stats_.fallbacks;
    if (warnedDeclines_.insert({static_cast<int>(coll), static_cast<int>(algo)}).second)
      RANKMAP_WARN(Coll, "{}: falling back to {} ({})", what, algorithmName(algo),
                   fmt::join(selection.declined, "; "));
  }
  const Schedule& sched = scheduleFor(algo, coll, count, es, root, inPlace);
  ++seq_;
  if (!internal) ++stats_.collectives;
  RANKMAP_DEBUG(Coll, "{}: {} x {} {} root {}: {} ({}), {} steps", what, count, dataTypeName(type),
                reducing ? reduceOpName(op) : "-", root, algorithmName(algo), selection.source,
                sched.steps.size());

  const uint64_t tagBase = ((seq & 0xFFFFFFull) << 40) | (signature(coll, type, op, root) << 32);
  const int64_t started = meter_ && !device ? PassiveMeter::nowNs() : 0;
  try {
    if (device) {
      runOnDevice(sched, in, out, type, op, tagBase);
    } else {
      std::optional<Reduction> reduction;
      if (reducing) reduction.emplace(type, op, options_.isa);
      ExecBuffers buffers;
      buffers.input = const_cast<void*>(in);  // written only in place (see ExecBuffers)
      buffers.output = out;
      buffers.scratch = scratch(sched.scratchBytes());
      execute(sched, *ctx_, buffers, reduction ? &*reduction : nullptr, tagBase,
              Deadline::after(options_.timeout), meter_.get());
    }
  } catch (const Error& e) {
    failure_ = fmt::format("{} ({}): {}", what, algorithmName(algo), e.what());
    RANKMAP_ERROR(Coll, "{}", failure_);
    abortContext();
    rethrowWithContext(
        e, fmt::format("{} ({} {} x {})", what, algorithmName(algo), count, dataTypeName(type)));
  } catch (const std::exception& e) {
    failure_ = fmt::format("{} ({}): {}", what, algorithmName(algo), e.what());
    abortContext();
    throw;
  }
  if (meter_ && !device)
    meter_->addCollective(static_cast<uint64_t>(PassiveMeter::nowNs() - started));
  if (link_ && !internal) {
    const int64_t now = PassiveMeter::nowNs();
    if (link_->due(now))
      link_->offer(meter_ ? meter_->totals() : std::vector<PeerTraffic>{},
                   meter_ ? meter_->collectiveNs() : 0, plan_ ? &*plan_ : nullptr, now);
  }
}

void Communicator::runOnDevice(const Schedule& sched, const void* in, void* out, DataType type,
                               ReduceOp op, uint64_t tagBase) {
#if RANKMAP_HAVE_CUDA
  if (!deviceOps_) deviceOps_.reset(new cuda::CudaOps());
  ExecBuffers buffers;
  buffers.input = const_cast<void*>(in);  // written only in place (see ExecBuffers)
  buffers.output = out;
  buffers.scratch = sched.scratchBytes() > 0 ? deviceOps_->deviceScratch(sched.scratchBytes())
                                             : nullptr;
  cuda::executeDevice(sched, *ctx_, buffers, type, op, tagBase, Deadline::after(options_.timeout),
                      *deviceOps_);
#else
  (void)sched, (void)in, (void)out, (void)type, (void)op, (void)tagBase;
  RANKMAP_THROW(InvalidInput, "device buffers in a build without CUDA");
#endif
}

void Communicator::allreduce(const void* in, void* out, uint64_t count, DataType type,
                             ReduceOp op) {
  run(Collective::kAllreduce, in, out, count, type, op, 0);
}
void Communicator::allgather(const void* in, void* out, uint64_t count, DataType type) {
  run(Collective::kAllgather, in, out, count, type, ReduceOp::kSum, 0);
}
void Communicator::reduceScatter(const void* in, void* out, uint64_t count, DataType type,
                                 ReduceOp op) {
  run(Collective::kReduceScatter, in, out, count, type, op, 0);
}
void Communicator::broadcast(const void* in, void* out, uint64_t count, DataType type, int root) {
  run(Collective::kBroadcast, in, out, count, type, ReduceOp::kSum, root);
}
void Communicator::reduce(const void* in, void* out, uint64_t count, DataType type, ReduceOp op,
                          int root) {
  run(Collective::kReduce, in, out, count, type, op, root);
}
void Communicator::barrier() {
  run(Collective::kBarrier, nullptr, nullptr, 0, DataType::kUint8, ReduceOp::kSum, 0);
}

}  // namespace rankmap::coll
