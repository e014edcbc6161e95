// DeviceOps: the asynchronous device operations the device executor (device_executor.h) is made
// of, as a narrow interface. CudaOps (cuda_ops.h) implements it with CUDA streams and events;
// the unit tests implement it over host memory with deliberately lazy completion, so that the
// executor's staging and ordering logic is tested on machines without a GPU.
//
// Contract: operations are ordered per lane, like work on one CUDA stream, and return at once.
// Two lanes let the two directions over PCIe overlap: kCompute carries host-to-device copies,
// device copies and reduction kernels; kToHost carries device-to-host copies. A marker stands for
// everything enqueued on its lane before it; done() polls it and never blocks. Used by one
// thread at a time (the collective's caller).
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/schedule/schedule.h"
#include "collectives/types.h"

namespace rankmap::coll::cuda {

class DeviceOps {
 public:
  enum class Lane : int { kCompute = 0, kToHost = 1 };
  using Marker = uint64_t;

  virtual ~DeviceOps() = default;

  // dst = src, any direction between device memory and this object's staging memory.
  virtual void copy(void* dst, const void* src, size_t bytes, Lane lane) = 0;
  // dst = a (op) b on device memory, as reduceDevice() (reduce.h).
  virtual void reduce(void* dst, const void* a, const void* b, size_t count, DataType type,
                      ReduceOp op, Lane lane) = 0;
  // buf /= worldSize for avg, as finalizeDevice().
  virtual void finalize(void* buf, size_t count, DataType type, ReduceOp op, int worldSize,
                        Lane lane) = 0;
  virtual Marker mark(Lane lane) = 0;
  // True once the work before `marker` is complete; the marker is then spent (not asked again).
  virtual bool done(Marker marker) = 0;
  // Host staging memory mirroring buffer `which` (at least `bytes`): page-locked for real
  // devices, owned by this object and reused by later collectives.
  virtual std::byte* staging(BufferId which, size_t bytes) = 0;
  // Blocks until every lane is idle (after a failure, before the caller's buffers go away).
  virtual void drain() = 0;
};

}  // namespace rankmap::coll::cuda
