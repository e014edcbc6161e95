#include "collectives/live_plan.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

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

uint64_t pricingKey(const OrderPricing* pricing) {
  if (pricing == nullptr) return 0;
  // splitmix64 over the two prices' bits: the same numbers give the same key on every rank.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  uint64_t a = 0, b = 0;
  std::memcpy(&a, &pricing->candidateUs, sizeof(a));
  std::memcpy(&b, &pricing->againstUs, sizeof(b));
  const uint64_t key = mix(a ^ mix(b));
  return key == 0 ? 1 : key;
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

// The groups of every level as sorted sets of sorted host lists: equal when the two plans
// found the same hierarchy, whatever the groups' order or names.
std::vector<std::vector<std::vector<std::string>>> groupSets(const Plan& p) {
  std::vector<std::vector<std::vector<std::string>>> levels;
  for (const HierarchyLevel& level : p.groups) {
    std::vector<std::vector<std::string>> gs = level.groups;
    for (auto& g : gs) std::sort(g.begin(), g.end());
    std::sort(gs.begin(), gs.end());
    levels.push_back(std::move(gs));
  }
  return levels;
}

// Whether every group of `level` is one contiguous run of the ring `order` (cyclically).
bool contiguousIn(const std::vector<std::string>& order, const HierarchyLevel& level) {
  std::map<std::string, size_t> groupOf;
  for (size_t g = 0; g < level.groups.size(); ++g)
    for (const auto& h : level.groups[g]) groupOf[h] = g;
  size_t boundaries = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    auto a = groupOf.find(order[i]), b = groupOf.find(order[(i + 1) % order.size()]);
    if (a == groupOf.end() || b == groupOf.end()) return false;
    boundaries += a->second != b->second;
  }
  // A ring through k contiguous groups crosses k group boundaries (none for one group).
  return boundaries == (level.groups.size() > 1 ? level.groups.size() : 0);
}

// Each host's share of `weights` (per position of p.order; uniform when empty).
std::map<std::string, double> hostShares(const Plan& p, const std::vector<double>& weights) {
  std::map<std::string, double> share;
  double sum = 0;
  for (size_t i = 0; i < p.order.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights.at(i);
    share[p.order[i]] += w;
    sum += w;
  }
  for (auto& [h, w] : share) w = sum > 0 ? w / sum : 0;
  return share;
}

}  // namespace

bool sameStructure(const Plan& current, const Plan& candidate, std::string_view collective,
                   uint64_t bytes, double margin, std::optional<Algorithm> forced) {
  if (current.ranksPerHost != candidate.ranksPerHost || current.groups.empty() ||
      groupSets(current) != groupSets(candidate))
    return false;
  std::optional<Algorithm> curAlgo = forced ? forced : current.algorithmFor(collective, bytes);
  std::optional<Algorithm> newAlgo = forced ? forced : candidate.algorithmFor(collective, bytes);
  // Trees are laid out from the measured rates: another tree is another schedule.
  if (curAlgo != newAlgo || !curAlgo || *curAlgo == Algorithm::kTree ||
      *curAlgo == Algorithm::kTrees)
    return false;
  for (const HierarchyLevel& level : candidate.groups)
    if (!contiguousIn(current.order, level)) return false;
  // Only hier reads the chunk weights, only the ring the ring weights.
  if (*curAlgo != Algorithm::kHier && *curAlgo != Algorithm::kRing) return true;
  const bool hier = *curAlgo == Algorithm::kHier;
  const auto cur = hostShares(current, hier ? current.chunkWeights : current.ringWeights);
  const auto next = hostShares(candidate, hier ? candidate.chunkWeights : candidate.ringWeights);
  for (const auto& [host, w] : next) {
    auto it = cur.find(host);
    if (it == cur.end() || std::abs(it->second - w) > margin * std::max(it->second, w))
      return false;
  }
  return true;
}

SwitchVerdict judgeSwitch(const Plan* current, const Plan& candidate, std::string_view collective,
                          uint64_t bytes, double margin, std::optional<Algorithm> forced,
                          const OrderPricing* pricing) {
  const std::string to = shortPlanHash(candidate.hash);
  if (current != nullptr && current->hash == candidate.hash) return {false, "same plan"};
  // 2. Only the algorithm table differs: price both under the candidate's (newer) model.
  if (current != nullptr && current->order == candidate.order &&
      current->ranksPerHost == candidate.ranksPerHost && current->groups == candidate.groups &&
      current->trees == candidate.trees && current->chunkWeights == candidate.chunkWeights &&
      current->ringWeights == candidate.ringWeights) {
    if (forced)
      return {false, fmt::format("{} differs only in its algorithm table and {} is forced", to,
                                 algorithmName(*forced))};
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
    const double planUs = candidate.predicted.engineRingUs();
    const double inputUs = candidate.predicted.inputOrderUs;
    const bool adopt = planUs < inputUs * (1 - margin);
    return {adopt, fmt::format("{}: {:.1f} us vs {:.1f} us in identity order, margin {:.0f}%",
                               candidate.predicted.basis, planUs, inputUs, margin * 100)};
  }
  // 4. The same hierarchy, algorithm and shares: the orders differ only within what the
  //    model cannot tell apart (measurement noise, e.g. probes that met the job's own traffic).
  if (current != nullptr && sameStructure(*current, candidate, collective, bytes, margin, forced))
    return {false, fmt::format("{} has the same groups, {} and chunk shares (within {:.0f}%) "
                               "and the order in use keeps its groups contiguous",
                               to, collective, margin * 100)};
  // 4b. Another order, priced against the one in use on the candidate's measurements.
  if (current != nullptr && current->order != candidate.order &&
      current->ranksPerHost == candidate.ranksPerHost) {
    std::optional<OrderPricing> price;
    if (candidate.hosts == current->order && candidate.predicted.planUs > 0 &&
        candidate.predicted.inputOrderUs > 0)
      price = OrderPricing{candidate.epoch, current->order, candidate.predicted.basis,
                           candidate.predicted.engineRingUs(), candidate.predicted.inputOrderUs};
    else if (pricing != nullptr && pricing->against == current->order && candidate.epoch > 0 &&
             pricing->epoch == candidate.epoch && pricing->candidateUs > 0 &&
             pricing->againstUs > 0)
      price = *pricing;
    if (price) {
      const bool adopt = price->candidateUs < price->againstUs * (1 - margin);
      return {adopt, fmt::format("{}: {:.1f} us vs {:.1f} us in the order in use under {}'s "
                                 "measurements, margin {:.0f}%",
                                 price->basis, price->candidateUs, price->againstUs, to,
                                 margin * 100)};
    }
  }
  // 5. Not comparable: a newer topology wins.
  if (current == nullptr)
    return {true, fmt::format("{} carries no prediction against identity order", to)};
  const bool adopt = candidate.epoch > current->epoch;
  return {adopt, fmt::format("orders not comparable under one model: epoch {} {} epoch {}",
                             candidate.epoch, adopt ? ">" : "<=", current->epoch)};
}

}  // namespace rankmap::coll
