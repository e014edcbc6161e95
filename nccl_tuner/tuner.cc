#include "nccl_tuner/tuner.h"

#include <dlfcn.h>

#include <climits>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/plan_agreement.h"
#include "nccl_tuner/costs.h"
#include "shim_nccl/agreed_plan.h"

namespace rankmap::nccl_tuner {

TunerSettings tunerSettingsFromConfig(const Config& config) {
  TunerSettings s;
  s.enabled = config.get(settings::kNcclTuner);
  s.chain = config.get(settings::kNcclTunerChain);
  return s;
}

AgreedPlan askShim(int nranks) {
  using shim_nccl::AgreedPlanStatus;
  void* sym = dlsym(RTLD_DEFAULT, shim_nccl::kAgreedPlanSymbol);
  if (sym == nullptr) {
    // Loaded, but not into the global scope (dlopen'ed RTLD_LOCAL): found by its file name.
    if (void* h = dlopen("librankmap_nccl.so", RTLD_NOW | RTLD_NOLOAD)) {
      sym = dlsym(h, shim_nccl::kAgreedPlanSymbol);
      dlclose(h);  // balances the NOLOAD reference; the library stays loaded
    }
  }
  if (sym == nullptr)
    return {std::nullopt,
            "librankmap_nccl.so (the NCCL shim) is not loaded in this process, and without its "
            "plan agreement no rank can know that the others hold the same plan: preload it "
            "(LD_PRELOAD) with RANKMAP_PLAN",
            true};
  auto ask = reinterpret_cast<RankmapNcclAgreedPlanFn>(sym);
  std::string text(64 << 10, '\0');
  size_t length = 0;
  int status = ask(nranks, text.data(), text.size(), &length);
  if (status >= 0 && length > text.size()) {
    text.resize(length);
    status = ask(nranks, text.data(), text.size(), &length);
  }
  text.resize(std::min(length, text.size()));
  switch (static_cast<AgreedPlanStatus>(status)) {
    case AgreedPlanStatus::kApplied:
      try {
        return {Plan::parse(text, "the NCCL shim's agreed plan"), "", false};
      } catch (const std::exception& e) {
        return {std::nullopt, e.what(), true};
      }
    case AgreedPlanStatus::kNoAgreement:
      return {std::nullopt, text, false};
    case AgreedPlanStatus::kNoPlan:
    case AgreedPlanStatus::kIdentity:
      return {std::nullopt, text, true};
    default:
      return {
          std::nullopt,
          fmt::format("the NCCL shim answered {} for a communicator of {} ranks", status, nranks),
          true};
  }
}

abi::Result Tuner::create(const TunerInit& init, const TunerSettings& settings,
                          const AgreedPlanSource& agreed, std::unique_ptr<Tuner>* out) {
  std::unique_ptr<Tuner> t(new Tuner());
  t->what_ = fmt::format("communicator of {} ranks on {} nodes", init.nRanks, init.nNodes);

  if (!settings.chain.empty()) {
    try {
      t->chain_ = ChainPlugin::load(settings.chain, init.version);
    } catch (const std::exception& e) {
      RANKMAP_WARN(Shim, "NCCL tuner: {}; {}: tuning without it", e.what(), t->what_);
    }
  }
  if (t->chain_) {
    ChainPlugin::InitArgs a;
    a.nRanks = init.nRanks;
    a.nNodes = init.nNodes;
    a.logFunction = init.logFunction;
    a.commId = init.commId;
    a.nvlDomainInfo = init.nvlDomainInfo;
    a.constants = init.constants;
    abi::Result r = t->chain_->init(a, &t->chainContext_);
    if (r != abi::Result::kSuccess) {
      RANKMAP_ERROR(Shim,
                    "NCCL tuner: {}: the chained tuner {} ({}, v{}) failed its init with {}; NCCL "
                    "gets that result, as if it had loaded the plugin alone",
                    t->what_, t->chain_->name(), t->chain_->path(), t->chain_->version(),
                    static_cast<int>(r));
      return r;
    }
  }

  bool warn = false;
  if (!settings.enabled) {
    t->reason_ = "RANKMAP_NCCL_TUNER=0";
  } else if (init.nNodes < 2) {
    t->reason_ = "one node: the plan describes only the network between nodes";
  } else if (init.nRanks > static_cast<size_t>(INT_MAX)) {
    t->reason_ = "more ranks than a plan can hold";
  } else {
    AgreedPlan a = agreed(static_cast<int>(init.nRanks));
    if (!a.plan) {
      t->reason_ = a.reason;
      warn = a.warn;
    } else if (a.plan->hosts.size() != init.nNodes || a.plan->worldSize() != init.nRanks) {
      t->reason_ = fmt::format("plan {} is for {} ranks on {} hosts", shortPlanHash(a.plan->hash),
                               a.plan->worldSize(), a.plan->hosts.size());
    } else if (a.plan->models.empty()) {
      t->reason_ = fmt::format(
          "plan {} carries no cost models (it was made before plans had them): run rankmap "
          "plan again",
          shortPlanHash(a.plan->hash));
      warn = true;
    } else {
      t->models_ = a.plan->models;
      std::string colls;
      for (const auto& [name, m] : t->models_) colls += (colls.empty() ? "" : ", ") + name;
      t->reason_ = fmt::format(
          "adding the measured network's time from plan {} to NCCL's costs "
          "of {}",
          shortPlanHash(a.plan->hash), colls);
    }
  }
  const std::string chained = t->chain_
                                  ? fmt::format("; chained to {} ({}, v{})", t->chain_->name(),
                                                t->chain_->path(), t->chain_->version())
                                  : "";
  if (t->active()) {
    RANKMAP_INFO(Shim, "NCCL tuner: {}: {}{}", t->what_, t->reason_, chained);
  } else if (warn) {
    RANKMAP_WARN(Shim, "NCCL tuner: {}: NCCL's costs stay as they are: {}{}", t->what_, t->reason_,
                 chained);
  } else {
    RANKMAP_INFO(Shim, "NCCL tuner: {}: NCCL's costs stay as they are: {}{}", t->what_, t->reason_,
                 chained);
  }
  *out = std::move(t);
  return abi::Result::kSuccess;
}

Tuner::~Tuner() = default;

abi::Result Tuner::getCollInfo(abi::Func collType, size_t nBytes, int numPipeOps, float** table,
                               int numAlgo, int numProto, int regBuff, int* nChannels) {
  CostTable costs(table, numAlgo, numProto);
  counters_.calls.fetch_add(1, std::memory_order_relaxed);
  if (chain_) {
    abi::Result r = chain_->getCollInfo(chainContext_, collType, nBytes, numPipeOps, table, numAlgo,
                                        numProto, regBuff, nChannels);
    if (r != abi::Result::kSuccess) {
      counters_.chainErrors.fetch_add(1, std::memory_order_relaxed);
      if (!chainErrorLogged_.exchange(true))
        RANKMAP_WARN(Shim,
                     "NCCL tuner: {}: the chained tuner {} returned {} from getCollInfo; NCCL gets "
                     "that result (logged once per communicator)",
                     what_, chain_->name(), static_cast<int>(r));
      return r;
    }
  }
  if (models_.empty()) return abi::Result::kSuccess;
  auto it = models_.find(std::string(planCollective(collType)));
  if (it == models_.end()) return abi::Result::kSuccess;
  if (addNetworkTime(costs, it->second, static_cast<double>(nBytes)) > 0 &&
      counters_.adjusted.fetch_add(1, std::memory_order_relaxed) == 0)
    RANKMAP_DEBUG(Shim, "NCCL tuner: {}: first adjusted call: {} of {} bytes", what_, it->first,
                  nBytes);
  return abi::Result::kSuccess;
}

abi::Result Tuner::getChunkSize(abi::Func collType, size_t nBytes, int algo, int proto,
                                int nChannels, size_t* chunkSize) {
  if (!chain_) return abi::Result::kSuccess;
  return chain_->getChunkSize(chainContext_, collType, nBytes, algo, proto, nChannels, chunkSize);
}

abi::Result Tuner::finalize() {
  if (finalized_) return abi::Result::kSuccess;
  finalized_ = true;
  RANKMAP_DEBUG(Shim, "NCCL tuner: {}: {} calls, {} adjusted, {} failed in the chained tuner",
                what_, counters_.calls.load(), counters_.adjusted.load(),
                counters_.chainErrors.load());
  if (!chain_) return abi::Result::kSuccess;
  return chain_->finalize(chainContext_);
}

}  // namespace rankmap::nccl_tuner
