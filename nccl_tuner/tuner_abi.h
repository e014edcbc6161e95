// NCCL's tuner plugin ABI, declared here without NCCL's headers (nccl_tuner.h and
// plugin/tuner/tuner_vN.h are not installed with NCCL; this is our own declaration of the
// layout, read from NVIDIA/nccl's headers and plugin loader, src/plugin/tuner.cc).
//
// How NCCL uses it: NCCL_TUNER_PLUGIN names a shared library; NCCL dlopens it and looks up the
// exported data symbols ncclTunerPlugin_v6, _v5, _v4, _v3, _v2, newest first, taking the first
// it finds (an older NCCL knows only the older names). It calls init once per communicator,
// getCollInfo before each collective with the cost table of that collective (time in
// microseconds per algorithm and protocol; it then takes the cheapest entry), and
// finalize/destroy when the communicator goes. Entries NCCL cannot use are
// NCCL_ALGO_PROTO_IGNORE (-1.0) and must stay so.
//
// The cost table is NCCL's `float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]` cast to
// float**: one contiguous row-major block, numAlgo rows of numProto floats, not an array of row
// pointers. CostTable (costs.h) is the only code that reinterprets it.
//
// Versions (first NCCL release that looks the symbol up):
//   v2  2.19  getCollInfo returns an algorithm and protocol; no cost table. Not exported here:
//             rankmap adjusts a cost table, which v2 does not have.
//   v3  2.22  the cost table; init(nRanks, nNodes, logger, &context); destroy.
//   v4  2.24  getCollInfo gains regBuff (whether the user buffers are registered).
//   v5  2.28  init(&context, commId, nRanks, nNodes, logger, nvlDomainInfo, constants); finalize.
//   v6  2.30  adds getChunkSize (optional; NULL = NCCL's chunk size).
// NCCL_NUM_ALGORITHMS was 6 before 2.23 (no PAT) and is 7 since; NCCL_NUM_PROTOCOLS has been 3
// throughout. NCCL passes both with every call, and nothing here assumes them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim_nccl/nccl_abi.h"

namespace rankmap::nccl_tuner::abi {

using Result = shim_nccl::abi::Result;  // ncclResult_t

// ncclFunc_t: the collective of a getCollInfo call (values since 2.19).
enum Func : int {
  kBroadcast = 0,
  kReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kAllReduce = 4,
};

// NCCL_ALGO_*: rows of the cost table.
enum Algo : int {
  kTree = 0,
  kRing = 1,
  kCollNetDirect = 2,
  kCollNetChain = 3,
  kNvls = 4,
  kNvlsTree = 5,
  kPat = 6,  // since 2.23
};

// NCCL_PROTO_*: columns of the cost table.
enum Proto : int {
  kLL = 0,
  kLL128 = 1,
  kSimple = 2,
};

inline constexpr float kIgnore = -1.0f;  // NCCL_ALGO_PROTO_IGNORE

// ncclDebugLogger_t: NCCL's logging function (level, subsystem flags, file, line, printf format).
// The first parameter is the C enum ncclDebugLogLevel, passed as an int.
using Logger = void (*)(int level, unsigned long flags, const char* file, int line, const char* fmt,
                        ...);

// v5/v6 init arguments that the tuner only passes on to a chained plugin: pointers to NCCL's
// ncclNvlDomainInfo_v5_t and ncclTunerConstants_v5_t (NCCL's latency and bandwidth constants,
// which a plugin may rewrite). Opaque here: rankmap reads neither.
struct NvlDomainInfo;
struct TunerConstants;

// ncclTuner_v3_t.
struct TunerV3 {
  const char* name;
  Result (*init)(size_t nRanks, size_t nNodes, Logger logFunction, void** context);
  Result (*getCollInfo)(void* context, Func collType, size_t nBytes, int numPipeOps,
                        float** collCostTable, int numAlgo, int numProto, int* nChannels);
  Result (*destroy)(void* context);
};

// ncclTuner_v4_t.
struct TunerV4 {
  const char* name;
  Result (*init)(size_t nRanks, size_t nNodes, Logger logFunction, void** context);
  Result (*getCollInfo)(void* context, Func collType, size_t nBytes, int numPipeOps,
                        float** collCostTable, int numAlgo, int numProto, int regBuff,
                        int* nChannels);
  Result (*destroy)(void* context);
};

// ncclTuner_v5_t.
struct TunerV5 {
  const char* name;
  Result (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, Logger logFunction,
                 NvlDomainInfo* nvlDomainInfo, TunerConstants* constants);
  Result (*getCollInfo)(void* context, Func collType, size_t nBytes, int numPipeOps,
                        float** collCostTable, int numAlgo, int numProto, int regBuff,
                        int* nChannels);
  Result (*finalize)(void* context);
};

// ncclTuner_v6_t: v5 and getChunkSize, last.
struct TunerV6 {
  const char* name;
  Result (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes, Logger logFunction,
                 NvlDomainInfo* nvlDomainInfo, TunerConstants* constants);
  Result (*getCollInfo)(void* context, Func collType, size_t nBytes, int numPipeOps,
                        float** collCostTable, int numAlgo, int numProto, int regBuff,
                        int* nChannels);
  Result (*finalize)(void* context);
  Result (*getChunkSize)(void* context, Func collType, size_t nBytes, int algo, int proto,
                         int nChannels, size_t* chunkSize);
};

inline constexpr int kOldestVersion = 3;
inline constexpr int kNewestVersion = 6;
// The exported symbol of `version` (kOldestVersion..kNewestVersion), "" for any other.
constexpr const char* symbolName(int version) {
  switch (version) {
    case 3:
      return "ncclTunerPlugin_v3";
    case 4:
      return "ncclTunerPlugin_v4";
    case 5:
      return "ncclTunerPlugin_v5";
    case 6:
      return "ncclTunerPlugin_v6";
    default:
      return "";
  }
}

}  // namespace rankmap::nccl_tuner::abi
