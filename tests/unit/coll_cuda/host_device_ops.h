// HostDeviceOps: a DeviceOps (collectives/cuda/device_ops.h) over host memory for testing the
// device executor without a GPU. "Device" pointers are host pointers; reductions are the CPU
// kernels (rankmap::coll::Reduction), which the CUDA kernels match bit for bit.
//
// Completion is deliberately lazy: enqueued work runs only while markers of its lane are polled,
// one operation per poll, and staging memory starts as garbage. An executor that sends a staged
// region before its device-to-host copy is done, or reduces before the host-to-device copy,
// therefore produces wrong data instead of passing by luck.
#pragma once

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "collectives/cuda/device_ops.h"
#include "collectives/reduce/reduction.h"

namespace rankmap::coll::testing {

class HostDeviceOps final : public cuda::DeviceOps {
 public:
  void copy(void* dst, const void* src, size_t bytes, Lane lane) override {
    if (lane == Lane::kToHost) ++toHost_;
    enqueue(lane, [=] { std::memcpy(dst, src, bytes); });
  }
  void reduce(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op,
              Lane lane) override {
    enqueue(lane, [=] { Reduction(type, op).apply(dst, a, b, count); });
  }
  void finalize(void* buf, size_t count, DataType type, ReduceOp op, int worldSize,
                Lane lane) override {
    enqueue(lane, [=] { Reduction(type, op).finalize(buf, count, worldSize); });
  }
  Marker mark(Lane lane) override {
    Marker m = next_++;
    lanes_[static_cast<int>(lane)].push_back({nullptr, m});
    laneOf_[m] = static_cast<int>(lane);
    return m;
  }
  bool done(Marker m) override {
    auto it = laneOf_.find(m);
    if (it == laneOf_.end()) return true;
    auto& q = lanes_[it->second];
    // One step of progress per poll: run the oldest entry of the lane.
    if (!q.empty()) {
      Entry e = std::move(q.front());
      q.pop_front();
      if (e.fn) e.fn();
    }
    for (const auto& e : q)
      if (e.marker == m) return false;
    laneOf_.erase(it);
    return true;
  }
  std::byte* staging(BufferId which, size_t bytes) override {
    auto& v = staging_[static_cast<int>(which)];
    if (v.size() < bytes) v.assign(bytes, std::byte{0xcd});
    return v.data();
  }
  void drain() override {
    for (auto& q : lanes_)
      while (!q.empty()) {
        Entry e = std::move(q.front());
        q.pop_front();
        if (e.fn) e.fn();
      }
    laneOf_.clear();
  }
  // Device-to-host copies enqueued so far (sends from an already-valid mirror skip them).
  size_t copiesToHost() const { return toHost_; }

 private:
  struct Entry {
    std::function<void()> fn;
    Marker marker = 0;
  };
  void enqueue(Lane lane, std::function<void()> fn) {
    lanes_[static_cast<int>(lane)].push_back({std::move(fn), 0});
  }
  std::deque<Entry> lanes_[2];
  std::map<Marker, int> laneOf_;
  Marker next_ = 1;
  std::vector<std::byte> staging_[kNumBuffers];
  size_t toHost_ = 0;
};

}  // namespace rankmap::coll::testing
