// The C ABI border of librankmap_nccl_tuner.so: the tuner plugin structs NCCL looks up,
// ncclTunerPlugin_v3 to _v6 (tuner_abi.h), each a thin adapter onto one Tuner per communicator.
//
// Every function catches everything and returns an ncclResult_t: ncclInvalidArgument for
// arguments NCCL should never pass, ncclInternalError for anything else. A RANKMAP_* setting
// that cannot be read is not a failed init (that would fail the user's communicator, and the
// NCCL shim passes calls through in the same case): it is an error in the log naming the
// setting, and the tuner leaves NCCL's table as it is, with no chained plugin (it cannot know
// which one was meant). Never exit(), never abort(), never print to stdout inside
// someone else's process. The chained plugin's results are passed on unchanged (tuner.h).
#include <memory>
#include <mutex>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "nccl_tuner/tuner.h"
#include "nccl_tuner/tuner_abi.h"

namespace rankmap::nccl_tuner {
namespace {

constexpr char kName[] = "rankmap";

template <typename F>
abi::Result guarded(const char* name, F&& f) noexcept {
  try {
    return f();
  } catch (const InvalidInput& e) {
    RANKMAP_ERROR(Shim, "NCCL tuner {}: {} (returning ncclInvalidArgument)", name, e.what());
    return abi::Result::kInvalidArgument;
  } catch (const std::exception& e) {
    RANKMAP_ERROR(Shim, "NCCL tuner {}: {} (returning ncclInternalError)", name, e.what());
    return abi::Result::kInternalError;
  } catch (...) {
    RANKMAP_ERROR(Shim, "NCCL tuner {}: unknown exception (returning ncclInternalError)", name);
    return abi::Result::kInternalError;
  }
}

abi::Result init(const TunerInit& args, void** context) noexcept {
  return guarded("init", [&] {
    if (context == nullptr) RANKMAP_THROW(InvalidInput, "no context pointer");
    *context = nullptr;
    TunerSettings settings;
    try {
      Config config = Config::load();
      // Once per process, as the shim does; the settings themselves are read at every init.
      static std::once_flag logConfigured;
      std::call_once(logConfigured, [&] { log::configure(config); });
      settings = tunerSettingsFromConfig(config);
    } catch (const InvalidInput& e) {
      RANKMAP_ERROR(Shim, "NCCL tuner init: {}; leaving NCCL's tuning as it is", e.what());
      settings = {.enabled = false, .chain = ""};
    }
    std::unique_ptr<Tuner> tuner;
    abi::Result r = Tuner::create(args, settings, askShim, &tuner);
    if (r == abi::Result::kSuccess) *context = tuner.release();
    return r;
  });
}

Tuner& tunerOf(void* context) {
  if (context == nullptr) RANKMAP_THROW(InvalidInput, "no tuner context (init did not succeed)");
  return *static_cast<Tuner*>(context);
}

abi::Result initV3(size_t nRanks, size_t nNodes, abi::Logger log, void** context) {
  return init({.version = 3, .nRanks = nRanks, .nNodes = nNodes, .logFunction = log}, context);
}

abi::Result initV4(size_t nRanks, size_t nNodes, abi::Logger log, void** context) {
  return init({.version = 4, .nRanks = nRanks, .nNodes = nNodes, .logFunction = log}, context);
}

abi::Result initV5(void** context, uint64_t commId, size_t nRanks, size_t nNodes, abi::Logger log,
                   abi::NvlDomainInfo* nvl, abi::TunerConstants* constants) {
  return init({5, nRanks, nNodes, log, commId, nvl, constants}, context);
}

abi::Result initV6(void** context, uint64_t commId, size_t nRanks, size_t nNodes, abi::Logger log,
                   abi::NvlDomainInfo* nvl, abi::TunerConstants* constants) {
  return init({6, nRanks, nNodes, log, commId, nvl, constants}, context);
}

abi::Result getCollInfo(void* context, abi::Func collType, size_t nBytes, int numPipeOps,
                        float** table, int numAlgo, int numProto, int regBuff, int* nChannels) {
  return guarded("getCollInfo", [&] {
    return tunerOf(context).getCollInfo(collType, nBytes, numPipeOps, table, numAlgo, numProto,
                                        regBuff, nChannels);
  });
}

abi::Result getCollInfoV3(void* context, abi::Func collType, size_t nBytes, int numPipeOps,
                          float** table, int numAlgo, int numProto, int* nChannels) {
  return getCollInfo(context, collType, nBytes, numPipeOps, table, numAlgo, numProto, 0, nChannels);
}

abi::Result finalize(void* context) {
  return guarded("finalize", [&] {
    std::unique_ptr<Tuner> tuner(&tunerOf(context));
    return tuner->finalize();
  });
}

abi::Result getChunkSize(void* context, abi::Func collType, size_t nBytes, int algo, int proto,
                         int nChannels, size_t* chunkSize) {
  return guarded("getChunkSize", [&] {
    if (chunkSize == nullptr) RANKMAP_THROW(InvalidInput, "no chunk size pointer");
    return tunerOf(context).getChunkSize(collType, nBytes, algo, proto, nChannels, chunkSize);
  });
}

}  // namespace
}  // namespace rankmap::nccl_tuner

namespace abi = rankmap::nccl_tuner::abi;
namespace t = rankmap::nccl_tuner;

#define RANKMAP_TUNER_EXPORT __attribute__((visibility("default")))

extern "C" {
RANKMAP_TUNER_EXPORT extern const abi::TunerV3 ncclTunerPlugin_v3;
RANKMAP_TUNER_EXPORT extern const abi::TunerV4 ncclTunerPlugin_v4;
RANKMAP_TUNER_EXPORT extern const abi::TunerV5 ncclTunerPlugin_v5;
RANKMAP_TUNER_EXPORT extern const abi::TunerV6 ncclTunerPlugin_v6;
}

const abi::TunerV3 ncclTunerPlugin_v3 = {t::kName, t::initV3, t::getCollInfoV3, t::finalize};
const abi::TunerV4 ncclTunerPlugin_v4 = {t::kName, t::initV4, t::getCollInfo, t::finalize};
const abi::TunerV5 ncclTunerPlugin_v5 = {t::kName, t::initV5, t::getCollInfo, t::finalize};
const abi::TunerV6 ncclTunerPlugin_v6 = {t::kName, t::initV6, t::getCollInfo, t::finalize,
                                         t::getChunkSize};
