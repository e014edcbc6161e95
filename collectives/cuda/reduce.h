// Reduction kernels on device memory: the GPU twin of rankmap::coll::Reduction
// (collectives/reduce/reduction.h), for every type and operator the engine supports (int8,
// uint8, int32, uint32, int64, uint64, fp16, bf16, fp32, fp64; sum, prod, min, max, avg).
//
// Semantics are the engine's, bit for bit (tests/gpu/reduce_test.cc compares every type and
// operator with the CPU kernels): integers wrap on sum and prod; fp16 and bf16 are widened to
// fp32, combined and rounded back to nearest even with the same conversion code as
// collectives/reduce/half.h (so NaN payloads match too); min(a, b) = a < b ? a : b and
// max(a, b) = a > b ? a : b; avg combines as sum and finalizeDevice() divides once at the end
// (integers toward zero, in 64 bits; floating point by a true division, fp16/bf16 in fp32).
//
// Contract: every function only enqueues work on `stream` and returns; pointers are device (or
// managed, or mapped pinned) memory; dst may be exactly a or exactly b, any other overlap is a
// caller bug. Launch failures throw CudaError. Memory-bound by design: 16-byte loads and stores
// per thread when the three pointers are equally aligned, several loads in flight per thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "collectives/types.h"

namespace rankmap::coll::cuda {

// dst[i] = a[i] (op) b[i], i < count. avg combines as sum.
void reduceDevice(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
                  cudaStream_t stream);

// dst[i] = dst[i] (op) src[i]: the two-operand form.
inline void reduceDevice(void* dst, const void* src, size_t count, DataType type, ReduceOp op,
                         cudaStream_t stream) {
  reduceDevice(dst, dst, src, count, type, op, stream);
}

// For avg: buf[i] /= worldSize. Nothing for other operators or worldSize 1.
void finalizeDevice(void* buf, size_t count, DataType type, ReduceOp op, int worldSize,
                    cudaStream_t stream);

}  // namespace rankmap::coll::cuda
