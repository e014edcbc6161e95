#include "collectives/live_plan.h"

#include <cerrno>
#include <charconv>
#include <utility>

#include "common/log.h"
#include "common/plan_agreement.h"

namespace rankmap::coll {

PlanFileSource::PlanFileSource(std::string path, int rank, int worldSize,
                               std::chrono::milliseconds pollInterval,
                               std::chrono::milliseconds maxAge)
    : path_(std::move(path)),
      rank_(rank),
      worldSize_(worldSize),
      pollInterval_(pollInterval),
      maxAge_(maxAge) {}

const Plan* PlanFileSource::poll(std::chrono::steady_clock::time_point now) {
  if (lastPoll_ && now - *lastPoll_ < pollInterval_) return candidate_ ? &*candidate_ : nullptr;
  lastPoll_ = now;
  Identity id = fileIdentity(path_);
  if (seen_ && id == *seen_) return candidate_ ? &*candidate_ : nullptr;
  seen_ = id;
  candidate_.reset();
  if (!id.exists) {
    RANKMAP_DEBUG(Coll, "rank {}: plan file {} is gone: keeping the plan in use", rank_, path_);
    return nullptr;
  }
  PlanChecks checks;
  checks.maxAge = maxAge_;
  std::optional<Plan> plan;
  PlanVote v = localPlanVote(path_, rank_, worldSize_, checks, plan);
  if (v.status != PlanStatus::kOk) {
    ++rejected_;
    RANKMAP_WARN(Coll, "rank {}: plan file {} was replaced but is not adopted: {}", rank_, path_,
                 v.reason);
    return nullptr;
  }
  RANKMAP_DEBUG(Coll, "rank {}: plan file {} now holds {} (epoch {})", rank_, path_,
                shortPlanHash(plan->hash), plan->epoch);
  candidate_ = std::move(plan);
  return &*candidate_;
}

uint64_t planKey(const Plan* plan) {
  if (plan == nullptr) return 0;
  std::string_view h = plan->hash;
  if (auto colon = h.find(':'); colon != std::string_view::npos) h.remove_prefix(colon + 1);
  h = h.substr(0, 16);
  uint64_t key = 0;
  auto [p, ec] = std::from_chars(h.data(), h.data() + h.size(), key, 16);
  // A sealed plan always has hex here; anything else still gets a key no plan of hex has.
  if (ec != std::errc() || p != h.data() + h.size()) key = ~0ull;
  return key == 0 ? 1 : key;  // 0 is identity order
}

namespace {

std::optional<double> priceOf(const Plan& model, std::string_view collective,
                              std::optional<Algorithm> algo, uint64_t bytes) {
  if (!algo) return std::nullopt;
  auto c = model.models.find(std::string(collective));
  if (c == model.models.end()) return std::nullopt;
  auto a = c->second.algorithms.find(*algo);
  if (a == c->second.algorithms.end()) return std::nullopt;
  return a->second.alphaUs + a->second.betaUsPerByte * static_cast<double>(bytes);
}

}  // namespace

SwitchVerdict judgeSwitch(const Plan* current, const Plan& candidate, std::string_view collective,
                          uint64_t bytes, double margin) {
  const std::string to = shortPlanHash(candidate.hash);
  if (current != nullptr && current->hash == candidate.hash) return {false, "same plan"};
  // 2. Only the algorithm table differs: price both under the candidate's (newer) model.
  if (current != nullptr && current->order == candidate.order &&
      current->ranksPerHost == candidate.ranksPerHost && current->groups == candidate.groups &&
      current->trees == candidate.trees && current->chunkWeights == candidate.chunkWeights) {
    std::optional<Algorithm> curAlgo = current->algorithmFor(collective, bytes);
    std::optional<Algorithm> newAlgo = candidate.algorithmFor(collective, bytes);
    auto cur = priceOf(candidate, collective, curAlgo, bytes);
    auto next = priceOf(candidate, collective, newAlgo, bytes);
    if (cur && next) {
      const bool adopt = *next < *cur * (1 - margin);
      return {adopt, fmt::format("{} {} B: {} {:.1f} us vs {} {:.1f} us under {}'s model, margin "
                                 "{:.0f}%",
                                 collective, bytes, algorithmName(*newAlgo), *next,
                                 algorithmName(*curAlgo), *cur, to, margin * 100)};
    }
  }
  // 3. From identity order: the candidate's own prediction against the input order.
  if (current == nullptr && candidate.predicted.planUs > 0 &&
      candidate.predicted.inputOrderUs > 0) {
    const double planUs = candidate.predicted.planUs, inputUs = candidate.predicted.inputOrderUs;
    const bool adopt = planUs < inputUs * (1 - margin);
    return {adopt, fmt::format("{}: {:.1f} us vs {:.1f} us in identity order, margin {:.0f}%",
                               candidate.predicted.basis, planUs, inputUs, margin * 100)};
  }
  // 4. Not comparable: a newer topology wins.
  if (current == nullptr)
    return {true, fmt::format("{} carries no prediction against identity order", to)};
  const bool adopt = candidate.epoch > current->epoch;
  return {adopt, fmt::format("orders not comparable under one model: epoch {} {} epoch {}",
                             candidate.epoch, adopt ? ">" : "<=", current->epoch)};
}

}  // namespace rankmap::coll
