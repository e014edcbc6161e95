// Device memory and device queries for collectives on GPU buffers (RAII owners, synchronous
// helpers for tests and benchmarks). Built when CUDA is found (RANKMAP_HAVE_CUDA); the header
// needs no CUDA header, so any C++ file of a CUDA build may include it.
//
// Contract: constructors and helpers throw CudaError naming the call; the query functions never
// throw (a machine without a driver or device simply has none). Buffers belong to the device
// that was current when they were made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rankmap::coll::cuda {

// Visible CUDA devices; 0 without a driver or device.
int deviceCount() noexcept;
// Why device buffers cannot be used in this process ("" when they can), e.g. "no CUDA device
// (cudaGetDeviceCount: cudaErrorNoDevice)". For skip messages and `rankmap bench --device cuda`.
std::string unavailableReason();
// True for device and managed memory, false for host memory (pinned or not) and null; never
// throws. The engine routes a collective to executeDevice() when its buffers are device memory.
bool isDevicePointer(const void* p) noexcept;

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // cudaMalloc; 0 bytes = empty
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  // Synchronous copies (cudaMemcpy) for setting up and checking buffers.
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void fill(uint8_t byte);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaHostAlloc, portable): the staging area between the network and
// the device. Grow-only: reserve() keeps the old memory when it is large enough.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // At least `bytes`; the contents are not preserved when it grows.
  std::byte* reserve(size_t bytes);
  std::byte* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  std::byte* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace rankmap::coll::cuda
