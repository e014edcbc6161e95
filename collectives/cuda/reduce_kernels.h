// The launchers of reduce.cu, for reduce.cc only: same arguments as reduceDevice() and
// finalizeDevice(), errors as cudaError_t (cudaErrorInvalidValue for an unknown type or operator)
// because the device translation unit stays free of the fmt-based error helpers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "collectives/types.h"

namespace rankmap::coll::cuda::kernels {

cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count, DataType type,
                         ReduceOp op, cudaStream_t stream);
cudaError_t launchFinalize(void* buf, size_t count, DataType type, ReduceOp op, int worldSize,
                           cudaStream_t stream);

}  // namespace rankmap::coll::cuda::kernels
