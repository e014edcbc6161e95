// CudaDriver: the few CUDA calls the shim needs (stream-ordered copies and scratch memory for the
// block-order fix-ups, the current context for deferred inits), resolved with dlopen.
//
// Why the driver API (libcuda.so.1) rather than the runtime (libcudart): the shim must build
// without CUDA and never link it, so both would be resolved at run time anyway; but the runtime
// is not reliably there to find. NCCL itself links libcudart statically, and so do programs built
// with nvcc's default (-cudart static): their cudaMemcpyAsync is not an exported symbol of any
// loaded library. Every CUDA program, however its runtime was linked, has loaded the driver
// libcuda.so.1, which exports a stable C ABI. Streams are the same handles in both APIs
// (cudaStream_t is CUstream), and device pointers are plain addresses under unified addressing
// (every 64-bit platform), so cuMemcpyAsync copies between any two of them on the caller's
// stream, in order with the NCCL kernels there.
//
// Scratch memory is stream-ordered (cuMemAllocAsync/cuMemFreeAsync, CUDA 11.2+): allocated and
// freed on the caller's stream, it is never reused while an earlier operation still reads it,
// and the driver's pool makes repeated allocations cheap.
//
// Tests substitute cuda_driver_test_double (a libcuda.so.1 over host memory) simply by linking
// it: the dlopen(RTLD_NOLOAD) below finds whichever libcuda.so.1 the process has loaded.
//
// Contract: immutable after construction and shared by all threads; each call throws CudaError
// naming the driver call and its error name. This is a dlopen border (function pointers).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "shim_nccl/nccl_abi.h"

namespace rankmap::shim_nccl {

class CudaDriver {
 public:
  // Resolves libcuda.so.1 (already loaded, else loaded now). Throws CudaError naming the library
  // or the missing symbol.
  static std::shared_ptr<const CudaDriver> load();

  void copyAsync(void* dst, const void* src, size_t bytes, abi::Stream stream) const;
  void* allocAsync(size_t bytes, abi::Stream stream) const;
  void freeAsync(void* ptr, abi::Stream stream) const;
  // Blocks until the work on `stream` is done (cuStreamSynchronize; null = the legacy stream).
  void synchronize(abi::Stream stream) const;
  // The calling thread's current CUDA context (an opaque CUcontext; null if none).
  void* currentContext() const;
  void setCurrentContext(void* ctx) const;

  const std::string& source() const { return source_; }

 private:
  CudaDriver() = default;
  void check(int rc, const char* call) const;

  using CUresult = int;
  using CUdeviceptr = unsigned long long;
  CUresult (*memcpyAsync_)(CUdeviceptr, CUdeviceptr, size_t, abi::Stream) = nullptr;
  CUresult (*memAllocAsync_)(CUdeviceptr*, size_t, abi::Stream) = nullptr;
  CUresult (*memFreeAsync_)(CUdeviceptr, abi::Stream) = nullptr;
  CUresult (*streamSynchronize_)(abi::Stream) = nullptr;
  CUresult (*ctxGetCurrent_)(void**) = nullptr;
  CUresult (*ctxSetCurrent_)(void*) = nullptr;
  CUresult (*getErrorName_)(CUresult, const char**) = nullptr;
  std::string source_;
};

}  // namespace rankmap::shim_nccl
