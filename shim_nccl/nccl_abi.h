// The part of NCCL's C ABI that the shim and its test double use, declared without nccl.h.
//
// Why not include <nccl.h>: it includes <cuda_runtime.h>, and librankmap_nccl.so must build on
// machines without the CUDA toolkit (the CPU CI). NCCL's C ABI is stable across 2.x: the enum
// values below and the first fields of ncclConfig_t (size, magic, version, blocking) have not
// moved since 2.14, and ncclUniqueId has been 128 bytes since 1.x. When nccl.h is available,
// tests/unit/shim_nccl/abi_check.cc compares every value and layout here with the real header.
//
// The types live in a namespace so that a file may include both this header and <nccl.h> (the
// ABI check does). The shim's exported functions are defined in entry.cc with these types; C
// linkage makes them the same symbols as NCCL's.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

struct ncclComm;
struct CUstream_st;

namespace rankmap::shim_nccl::abi {

using Comm = ncclComm*;       // ncclComm_t
using Stream = CUstream_st*;  // cudaStream_t (and CUstream: the same handle)

enum Result : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

// ncclDataType_t; sizes from dataTypeSize().
enum DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
  kNumTypes = 12,
};

// ncclRedOp_t: values >= kNumOps are user-created operators (ncclRedOpCreatePreMulSum); the shim
// passes every operator through unchanged.
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4, kNumOps = 5 };

inline constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};

inline constexpr int kConfigUndefInt = INT_MIN;
inline constexpr int kSplitNoColor = -1;
inline constexpr unsigned kConfigMagic = 0xcafebeef;

// The stable prefix of ncclConfig_t. The shim reads `blocking` and copies `size` bytes when it
// has to keep a config beyond the call (deferred init in a group); it never writes a config.
struct ConfigPrefix {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;  // 0 = non-blocking communicator; kConfigUndefInt or 1 = blocking
};

// Bytes of one element; 0 for an unknown type.
constexpr size_t dataTypeSize(int type) {
  switch (type) {
    case kInt8:
    case kUint8:
    case kFloat8e4m3:
    case kFloat8e5m2:
      return 1;
    case kFloat16:
    case kBfloat16:
      return 2;
    case kInt32:
    case kUint32:
    case kFloat32:
      return 4;
    case kInt64:
    case kUint64:
    case kFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* resultName(int result);

}  // namespace rankmap::shim_nccl::abi
