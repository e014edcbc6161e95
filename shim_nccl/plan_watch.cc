#include "shim_nccl/plan_watch.h"

#include <utility>

#include "common/log.h"
#include "common/plan_agreement.h"

namespace rankmap::shim_nccl {

PlanWatch::PlanWatch(std::string path, std::optional<Plan> initial, std::string initialError,
                     FileIdentity seen)
    : path_(std::move(path)), seen_(seen) {
  if (initial) current_.plan = std::make_shared<const Plan>(std::move(*initial));
  current_.error = std::move(initialError);
}

PlanSnapshot PlanWatch::snapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  if (path_.empty()) return current_;
  FileIdentity id = fileIdentity(path_);
  if (id == seen_) return current_;
  seen_ = id;
  if (!id.exists) {
    RANKMAP_WARN(Shim, "NCCL shim: plan file {} is gone; new communicators keep {}", path_,
                 current_.plan ? shortPlanHash(current_.plan->hash) : std::string("no plan"));
    return current_;
  }
  try {
    auto plan = std::make_shared<const Plan>(Plan::load(path_));
    if (!current_.plan || current_.plan->hash != plan->hash) {
      RANKMAP_INFO(Shim, "NCCL shim: plan file {} now holds {} (epoch {}); new communicators get it",
                   path_, shortPlanHash(plan->hash), plan->epoch);
      reloads_.fetch_add(1, std::memory_order_relaxed);
    }
    current_.plan = std::move(plan);
    current_.error.clear();
  } catch (const std::exception& e) {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    if (current_.plan) {
      RANKMAP_WARN(Shim, "NCCL shim: plan file {} was replaced by one that is not a plan ({}); "
                   "new communicators keep {}",
                   path_, e.what(), shortPlanHash(current_.plan->hash));
    } else {
      current_.error = e.what();
      RANKMAP_WARN(Shim, "NCCL shim: ignoring plan {}: {}; this rank votes for identity order",
                   path_, e.what());
    }
  }
  return current_;
}

}  // namespace rankmap::shim_nccl
