// CudaOps: DeviceOps on a CUDA device: two non-blocking streams (lanes), a pool of timing-free
// events for markers, pinned host mirrors per buffer and a device scratch buffer, all grown on
// demand and reused by every collective of the owner (one per communicator).
//
// Contract: made on, and used with, the device current at construction (it makes that device
// current on the calling thread for each operation). Not thread-safe: one collective at a time,
// like the communicator that owns it. The destructor drains the streams.
#pragma once

#include <cstddef>
#include <memory>

#include "collectives/cuda/device_ops.h"

namespace rankmap::coll::cuda {

class CudaOps final : public DeviceOps {
 public:
  // Throws CudaError when no device is usable.
  CudaOps();
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  void copy(void* dst, const void* src, size_t bytes, Lane lane) override;
  void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
              Lane lane) override;
  void finalize(void* buf, size_t count, DataType type, ReduceOp op, int worldSize,
                Lane lane) override;
  Marker mark(Lane lane) override;
  bool done(Marker marker) override;
  std::byte* staging(BufferId which, size_t bytes) override;
  void drain() override;

  // Device scratch for schedules (ExecBuffers::scratch), at least `bytes`; grow-only.
  void* deviceScratch(size_t bytes);
  int device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rankmap::coll::cuda
