// cuda_driver_test_double: a TEST DOUBLE of the CUDA driver, built from our sources as
// libcuda.so.1, serving the few driver calls the NCCL shim resolves (shim_nccl/cuda_driver.h) over
// host memory: cuMemcpyAsync is memcpy at once, cuMemAllocAsync/cuMemFreeAsync are malloc/free
// (tracked, so that leaks and double frees are visible), cuCtxGetCurrent/SetCurrent keep a
// per-thread value. It is what makes "device memory is host memory" true for nccl_test_double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rankmap::testing::cuda_double {

struct Copy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  void* stream = nullptr;
};

__attribute__((visibility("default"))) std::vector<Copy> copies();
__attribute__((visibility("default"))) void resetCopies();
// Allocations made with cuMemAllocAsync and not yet freed.
__attribute__((visibility("default"))) size_t liveAllocations();
// Frees of unknown pointers seen (double frees, foreign pointers).
__attribute__((visibility("default"))) size_t badFrees();
// Makes the next n cuMemAllocAsync calls fail with CUDA_ERROR_OUT_OF_MEMORY.
__attribute__((visibility("default"))) void failAllocations(int n);

}  // namespace rankmap::testing::cuda_double
