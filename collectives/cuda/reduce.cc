#include "collectives/cuda/reduce.h"

#include "collectives/cuda/cuda_check.h"
#include "collectives/cuda/reduce_kernels.h"

namespace rankmap::coll::cuda {

void reduceDevice(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                  cudaStream_t stream) {
  if (static_cast<int>(type) < 0 || static_cast<int>(type) >= kNumDataTypes)
    RANKMAP_THROW(InvalidInput, "reduceDevice: unknown data type {}", static_cast<int>(type));
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= kNumReduceOps)
    RANKMAP_THROW(InvalidInput, "reduceDevice: unknown operator {}", static_cast<int>(op));
  RANKMAP_CHECK_CUDA(kernels::launchReduce(dst, a, b, count, type, op, stream));
}

void finalizeDevice(void* buf, size_t count, DataType type, ReduceOp op, int worldSize,
                    cudaStream_t stream) {
  if (worldSize < 1) RANKMAP_THROW(InvalidInput, "finalizeDevice: world size {}", worldSize);
  RANKMAP_CHECK_CUDA(kernels::launchFinalize(buf, count, type, op, worldSize, stream));
}

}  // namespace rankmap::coll::cuda
