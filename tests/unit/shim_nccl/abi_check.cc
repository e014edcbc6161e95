// Compile-time proof that shim_nccl/nccl_abi.h matches the real <nccl.h> (built when the CUDA
// toolkit and NCCL's header are present; nothing to run).
#include <nccl.h>

#include <cstddef>

#include "shim_nccl/nccl_abi.h"

namespace abi = rankmap::shim_nccl::abi;

// Enumerators of two different enums, compared by value.
template <typename A, typename B>
constexpr bool eq(A a, B b) {
  return static_cast<long long>(a) == static_cast<long long>(b);
}

static_assert(sizeof(ncclUniqueId) == sizeof(abi::UniqueId));
static_assert(NCCL_UNIQUE_ID_BYTES == abi::kUniqueIdBytes);
static_assert(sizeof(ncclResult_t) == sizeof(abi::Result));
static_assert(sizeof(ncclDataType_t) == sizeof(abi::DataType));
static_assert(sizeof(ncclRedOp_t) == sizeof(abi::RedOp));
static_assert(sizeof(ncclComm_t) == sizeof(abi::Comm));
static_assert(sizeof(cudaStream_t) == sizeof(abi::Stream));

static_assert(eq(ncclSuccess, abi::kSuccess) &&
              eq(ncclUnhandledCudaError, abi::kUnhandledCudaError) &&
              eq(ncclSystemError, abi::kSystemError) &&
              eq(ncclInternalError, abi::kInternalError) &&
              eq(ncclInvalidArgument, abi::kInvalidArgument) &&
              eq(ncclInvalidUsage, abi::kInvalidUsage) && eq(ncclRemoteError, abi::kRemoteError) &&
              eq(ncclInProgress, abi::kInProgress));
static_assert(eq(ncclInt8, abi::kInt8) && eq(ncclUint8, abi::kUint8) &&
              eq(ncclInt32, abi::kInt32) && eq(ncclUint32, abi::kUint32) &&
              eq(ncclInt64, abi::kInt64) && eq(ncclUint64, abi::kUint64) &&
              eq(ncclFloat16, abi::kFloat16) && eq(ncclFloat32, abi::kFloat32) &&
              eq(ncclFloat64, abi::kFloat64) && eq(ncclBfloat16, abi::kBfloat16));
static_assert(eq(ncclSum, abi::kSum) && eq(ncclProd, abi::kProd) && eq(ncclMax, abi::kMax) &&
              eq(ncclMin, abi::kMin) && eq(ncclAvg, abi::kAvg) && eq(ncclNumOps, abi::kNumOps));
static_assert(NCCL_SPLIT_NOCOLOR == abi::kSplitNoColor);
static_assert(NCCL_CONFIG_UNDEF_INT == abi::kConfigUndefInt);

// The stable prefix of ncclConfig_t the shim reads and copies.
static_assert(offsetof(ncclConfig_t, size) == offsetof(abi::ConfigPrefix, size));
static_assert(offsetof(ncclConfig_t, magic) == offsetof(abi::ConfigPrefix, magic));
static_assert(offsetof(ncclConfig_t, version) == offsetof(abi::ConfigPrefix, version));
static_assert(offsetof(ncclConfig_t, blocking) == offsetof(abi::ConfigPrefix, blocking));
static_assert(sizeof(ncclConfig_t) >= sizeof(abi::ConfigPrefix));

// The magic NCCL_CONFIG_INITIALIZER writes.
constexpr ncclConfig_t kInit = NCCL_CONFIG_INITIALIZER;
static_assert(kInit.magic == abi::kConfigMagic);
