#include "collectives/cuda/cuda_ops.h"

#include <cuda_runtime_api.h>

#include <unordered_map>
#include <vector>

#include "collectives/cuda/cuda_check.h"
#include "collectives/cuda/device.h"
#include "collectives/cuda/reduce.h"
#include "common/log.h"

namespace rankmap::coll::cuda {

struct CudaOps::Impl {
  int device = 0;
  cudaStream_t lanes[2] = {nullptr, nullptr};
  std::vector<cudaEvent_t> freeEvents;
  std::unordered_map<Marker, cudaEvent_t> marks;
  Marker nextMarker = 1;
  PinnedBuffer mirrors[kNumBuffers];
  DeviceBuffer scratch;

  cudaStream_t lane(Lane l) const { return lanes[static_cast<int>(l)]; }
  void makeCurrent() const { RANKMAP_CHECK_CUDA(cudaSetDevice(device)); }
};

CudaOps::CudaOps() : impl_(std::make_unique<Impl>()) {
  RANKMAP_CHECK_CUDA(cudaGetDevice(&impl_->device));
  for (auto& s : impl_->lanes)
    RANKMAP_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
}

CudaOps::~CudaOps() {
  try {
    drain();
  } catch (const std::exception& e) {
    RANKMAP_WARN(Cuda, "CudaOps: draining streams at destruction: {}", e.what());
  }
  for (auto& [m, ev] : impl_->marks) cudaEventDestroy(ev);
  for (auto ev : impl_->freeEvents) cudaEventDestroy(ev);
  for (auto s : impl_->lanes)
    if (s != nullptr) cudaStreamDestroy(s);
}

int CudaOps::device() const { return impl_->device; }

void CudaOps::copy(void* dst, const void* src, size_t bytes, Lane lane) {
  if (bytes == 0) return;
  impl_->makeCurrent();
  RANKMAP_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl_->lane(lane)));
}

void CudaOps::reduce(void* dst, const void* a, const void* b, size_t count, DataType type,
                     ReduceOp op, Lane lane) {
  impl_->makeCurrent();
  reduceDevice(dst, a, b, count, type, op, impl_->lane(lane));
}

void CudaOps::finalize(void* buf, size_t count, DataType type, ReduceOp op, int worldSize,
                       Lane lane) {
  impl_->makeCurrent();
  finalizeDevice(buf, count, type, op, worldSize, impl_->lane(lane));
}

DeviceOps::Marker CudaOps::mark(Lane lane) {
  impl_->makeCurrent();
  cudaEvent_t ev = nullptr;
  if (!impl_->freeEvents.empty()) {
    ev = impl_->freeEvents.back();
    impl_->freeEvents.pop_back();
  } else {
    RANKMAP_CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  }
  RANKMAP_CHECK_CUDA(cudaEventRecord(ev, impl_->lane(lane)));
  Marker m = impl_->nextMarker++;
  impl_->marks.emplace(m, ev);
  return m;
}

bool CudaOps::done(Marker marker) {
  auto it = impl_->marks.find(marker);
  if (it == impl_->marks.end()) return true;
  cudaError_t e = cudaEventQuery(it->second);
  if (e == cudaErrorNotReady) return false;
  RANKMAP_CHECK_CUDA(e);
  impl_->freeEvents.push_back(it->second);
  impl_->marks.erase(it);
  return true;
}

std::byte* CudaOps::staging(BufferId which, size_t bytes) {
  impl_->makeCurrent();
  return impl_->mirrors[static_cast<int>(which)].reserve(bytes);
}

void CudaOps::drain() {
  impl_->makeCurrent();
  for (auto s : impl_->lanes) RANKMAP_CHECK_CUDA(cudaStreamSynchronize(s));
  for (auto& [m, ev] : impl_->marks) impl_->freeEvents.push_back(ev);
  impl_->marks.clear();
}

void* CudaOps::deviceScratch(size_t bytes) {
  if (impl_->scratch.bytes() < bytes) {
    impl_->makeCurrent();
    impl_->scratch = DeviceBuffer();  // free first: device memory may be tight
    impl_->scratch = DeviceBuffer(bytes);
  }
  return impl_->scratch.data();
}

}  // namespace rankmap::coll::cuda
