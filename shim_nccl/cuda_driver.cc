#include "shim_nccl/cuda_driver.h"

#include <dlfcn.h>

#include "common/error.h"

namespace rankmap::shim_nccl {
namespace {

template <typename Fn>
void need(void* handle, const char* name, Fn*& out) {
  out = reinterpret_cast<Fn*>(dlsym(handle, name));
  if (out == nullptr) RANKMAP_THROW(CudaError, "libcuda.so.1 has no {}", name);
}

}  // namespace

std::shared_ptr<const CudaDriver> CudaDriver::load() {
  void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
  std::string how = "already loaded";
  if (h == nullptr) {
    h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    how = "loaded by the shim";
  }
  if (h == nullptr) {
    const char* err = dlerror();
    RANKMAP_THROW(CudaError, "cannot load libcuda.so.1: {}", err ? err : "unknown error");
  }
  std::shared_ptr<CudaDriver> d(new CudaDriver());
  need(h, "cuMemcpyAsync", d->memcpyAsync_);
  need(h, "cuMemAllocAsync", d->memAllocAsync_);
  need(h, "cuMemFreeAsync", d->memFreeAsync_);
  need(h, "cuStreamSynchronize", d->streamSynchronize_);
  need(h, "cuCtxGetCurrent", d->ctxGetCurrent_);
  need(h, "cuCtxSetCurrent", d->ctxSetCurrent_);
  need(h, "cuGetErrorName", d->getErrorName_);
  Dl_info info{};
  std::string path = "libcuda.so.1";
  if (dladdr(reinterpret_cast<void*>(d->memcpyAsync_), &info) != 0 && info.dli_fname)
    path = info.dli_fname;
  d->source_ = path + " (" + how + ")";
  return d;
}

void CudaDriver::check(int rc, const char* call) const {
  if (rc == 0) return;
  const char* name = nullptr;
  if (getErrorName_(rc, &name) != 0 || name == nullptr) name = "unknown CUresult";
  RANKMAP_THROW(CudaError, "{} failed: {} ({})", call, name, rc);
}

void CudaDriver::copyAsync(void* dst, const void* src, size_t bytes, abi::Stream stream) const {
  if (bytes == 0) return;
  check(memcpyAsync_(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes,
                     stream),
        "cuMemcpyAsync");
}

void* CudaDriver::allocAsync(size_t bytes, abi::Stream stream) const {
  CUdeviceptr p = 0;
  check(memAllocAsync_(&p, bytes, stream), "cuMemAllocAsync");
  return reinterpret_cast<void*>(p);
}

void CudaDriver::freeAsync(void* ptr, abi::Stream stream) const {
  if (ptr == nullptr) return;
  check(memFreeAsync_(reinterpret_cast<CUdeviceptr>(ptr), stream), "cuMemFreeAsync");
}

void CudaDriver::synchronize(abi::Stream stream) const {
  check(streamSynchronize_(stream), "cuStreamSynchronize");
}

void* CudaDriver::currentContext() const {
  void* ctx = nullptr;
  check(ctxGetCurrent_(&ctx), "cuCtxGetCurrent");
  return ctx;
}

void CudaDriver::setCurrentContext(void* ctx) const {
  check(ctxSetCurrent_(ctx), "cuCtxSetCurrent");
}

}  // namespace rankmap::shim_nccl
