// One communicator's tuner: what librankmap_nccl_tuner.so's init creates for NCCL's context.
//
// Every rank of a communicator must tune alike (ranks that choose different algorithms or
// protocols for one collective hang), so whether the tuner adjusts anything is decided once, at
// init, from what is equal on every rank:
//  - the plan that every plan agreement of nRanks ranks in this process applied, as the NCCL
//    shim answers (shim_nccl/agreed_plan.h): the agreement is what makes every rank hold the same
//    plan. No shim, no plan, or an agreement that ended in identity order: nothing to say;
//  - the communicator spans the plan's hosts (nNodes == the plan's hosts; nRanks == its world,
//    which the agreement checked). One node: nothing to say (the plan knows only the network);
//  - the plan carries the planner's models (Plan::models);
//  - RANKMAP_NCCL_TUNER (a setting, the same on every rank like the plan's path).
// Then, before each collective, getCollInfo calls the chained plugin first (chain.h) and returns
// its error as it is (NCCL handles it as if it had loaded that plugin alone), and adds the
// network's time (costs.h) to the table of an inter-node collective the plan models.
//
// Where it has nothing to say the table stays as NCCL (and the chained plugin) left it. A
// missing or unusable chained plugin is a warning and this tuner works alone, as NCCL itself does
// when the library NCCL_TUNER_PLUGIN names is missing.
//
// Thread safety: NCCL calls one communicator's functions one at a time; counters are atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/plan.h"
#include "nccl_tuner/chain.h"
#include "nccl_tuner/tuner_abi.h"

namespace rankmap {
class Config;
}  // namespace rankmap

namespace rankmap::nccl_tuner {

struct TunerSettings {
  bool enabled = true;  // RANKMAP_NCCL_TUNER
  std::string chain;    // RANKMAP_NCCL_TUNER_CHAIN; empty = none
};
TunerSettings tunerSettingsFromConfig(const Config& config);

// The plan the agreements of a communicator size applied, or why there is none (`warn`: a reason
// the user should hear about, such as no shim or no plan, rather than a communicator the plan is
// not about).
struct AgreedPlan {
  std::optional<Plan> plan;
  std::string reason;
  bool warn = false;
};
using AgreedPlanSource = std::function<AgreedPlan(int nranks)>;

// The NCCL shim's answer in this process: rankmap_nccl_agreed_plan found with
// dlsym(RTLD_DEFAULT) (the preloaded shim), else in an already loaded librankmap_nccl.so.
AgreedPlan askShim(int nranks);

// NCCL's init arguments, whatever the version it called.
struct TunerInit {
  int version = abi::kNewestVersion;  // the struct NCCL called through
  size_t nRanks = 0;
  size_t nNodes = 0;
  abi::Logger logFunction = nullptr;
  uint64_t commId = 0;                          // v5+
  abi::NvlDomainInfo* nvlDomainInfo = nullptr;  // v5+
  abi::TunerConstants* constants = nullptr;     // v5+
};

struct TunerCounters {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> adjusted{0};     // calls whose table this tuner changed
  std::atomic<uint64_t> chainErrors{0};  // calls the chained plugin failed
};

class Tuner {
 public:
  // The result NCCL's init gets: the chained plugin's init result when it fails (then no tuner
  // is made), else success with the tuner in *out.
  static abi::Result create(const TunerInit& init, const TunerSettings& settings,
                            const AgreedPlanSource& agreed, std::unique_ptr<Tuner>* out);
  ~Tuner();
  Tuner(const Tuner&) = delete;
  Tuner& operator=(const Tuner&) = delete;

  // Throws InvalidInput for a table of impossible shape (then nothing was called).
  abi::Result getCollInfo(abi::Func collType, size_t nBytes, int numPipeOps, float** table,
                          int numAlgo, int numProto, int regBuff, int* nChannels);
  abi::Result getChunkSize(abi::Func collType, size_t nBytes, int algo, int proto, int nChannels,
                           size_t* chunkSize);
  // The chained plugin's finalize result; call once.
  abi::Result finalize();

  // Whether this communicator's costs are adjusted, and why not.
  bool active() const { return !models_.empty(); }
  const std::string& reason() const { return reason_; }
  const ChainPlugin* chain() const { return chain_.get(); }
  const TunerCounters& counters() const { return counters_; }

 private:
  Tuner() = default;

  std::string what_;                               // "communicator of 8 ranks on 4 nodes", for logs
  std::map<std::string, CollectiveModel> models_;  // empty = nothing to say
  std::string reason_;
  std::shared_ptr<const ChainPlugin> chain_;
  void* chainContext_ = nullptr;
  bool finalized_ = false;
  std::atomic<bool> chainErrorLogged_{false};
  TunerCounters counters_;
};

}  // namespace rankmap::nccl_tuner
