#include "collectives/cuda/device.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "collectives/cuda/cuda_check.h"
#include "common/log.h"

namespace rankmap::coll::cuda {

int deviceCount() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

std::string unavailableReason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("no usable CUDA device (cudaGetDeviceCount: {}: {})", cudaGetErrorName(e),
                       cudaGetErrorString(e));
  }
  if (n == 0) return "no CUDA device";
  return "";
}

bool isDevicePointer(const void* p) noexcept {
  if (p == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) RANKMAP_CHECK_CUDA(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr && cudaFree(ptr_) != cudaSuccess)
    RANKMAP_WARN(Cuda, "cudaFree of a {}-byte device buffer failed", bytes_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    DeviceBuffer old(std::move(*this));
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_)
    RANKMAP_THROW(InvalidInput, "upload of {} bytes at {} into a {}-byte buffer", bytes, offset,
                  bytes_);
  if (bytes > 0)
    RANKMAP_CHECK_CUDA(
        cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_)
    RANKMAP_THROW(InvalidInput, "download of {} bytes at {} from a {}-byte buffer", bytes, offset,
                  bytes_);
  if (bytes > 0)
    RANKMAP_CHECK_CUDA(
        cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::fill(uint8_t byte) {
  if (bytes_ > 0) RANKMAP_CHECK_CUDA(cudaMemset(ptr_, byte, bytes_));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr && cudaFreeHost(ptr_) != cudaSuccess)
    RANKMAP_WARN(Cuda, "cudaFreeHost of {} pinned bytes failed", bytes_);
}

std::byte* PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_ && ptr_ != nullptr) return ptr_;
  if (ptr_ != nullptr) {
    RANKMAP_CHECK_CUDA(cudaFreeHost(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* p = nullptr;
  RANKMAP_CHECK_CUDA(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable));
  ptr_ = static_cast<std::byte*>(p);
  bytes_ = bytes;
  return ptr_;
}

}  // namespace rankmap::coll::cuda
