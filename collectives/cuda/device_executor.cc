#include "collectives/cuda/device_executor.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll::cuda {
namespace {

using Lane = DeviceOps::Lane;

// Byte ranges of one buffer whose host mirror equals the device memory.
class IntervalSet {
 public:
  void add(uint64_t b, uint64_t e) {
    if (b >= e) return;
    auto it = m_.upper_bound(b);
    if (it != m_.begin()) {
      auto p = std::prev(it);
      if (p->second >= b) {
        b = p->first;
        e = std::max(e, p->second);
        it = m_.erase(p);
      }
    }
    while (it != m_.end() && it->first <= e) {
      e = std::max(e, it->second);
      it = m_.erase(it);
    }
    m_[b] = e;
  }
  void remove(uint64_t b, uint64_t e) {
    if (b >= e) return;
    auto it = m_.upper_bound(b);
    if (it != m_.begin()) --it;
    while (it != m_.end() && it->first < e) {
      const uint64_t s = it->first;
      const uint64_t t = it->second;
      if (t <= b) {
        ++it;
        continue;
      }
      it = m_.erase(it);
      if (s < b) m_[s] = b;
      if (t > e) {
        m_[e] = t;
        break;
      }
    }
  }
  bool contains(uint64_t b, uint64_t e) const {
    if (b >= e) return true;
    auto it = m_.upper_bound(b);
    if (it == m_.begin()) return false;
    --it;
    return it->first <= b && it->second >= e;
  }

 private:
  std::map<uint64_t, uint64_t> m_;
};

// Where a step is: waiting for a device-to-host copy, on the network, or on the device.
enum class Phase : uint8_t { kToHost, kNet, kDevice };

struct Live {
  Phase phase = Phase::kNet;
  DeviceOps::Marker marker = 0;
  transport::RequestPtr req;
};

// Steps on device memory staged through host mirrors (see device_executor.h). Every step moves
// through its phases in poll(); nothing blocks, so wait() spins briefly, then backs off.
class DeviceSteps final : public StepBackend {
 public:
  DeviceSteps(const Schedule& s, transport::Context& ctx, const ExecBuffers& device, DataType type,
              ReduceOp op, uint64_t tagBase, DeviceOps& ops)
      : s_(s),
        ctx_(ctx),
        dev_{static_cast<std::byte*>(device.input), static_cast<std::byte*>(device.output),
             static_cast<std::byte*>(device.scratch)},
        type_(type),
        op_(op),
        tagBase_(tagBase),
        ops_(ops),
        live_(s.steps.size()) {
    for (int b = 0; b < kNumBuffers; ++b)
      if (s.bufferBytes[b] > 0) host_[b] = ops.staging(static_cast<BufferId>(b), s.bufferBytes[b]);
  }

  bool start(uint32_t i) override {
    const Step& st = s_.steps[i];
    Live& l = live_[i];
    switch (st.kind) {
      case StepKind::kSend:
        if (st.src.bytes == 0 || valid(st.src)) {
          send(i);
        } else {
          ops_.copy(hptr(st.src), dptr(st.src), st.src.bytes, Lane::kToHost);
          l.phase = Phase::kToHost;
          l.marker = ops_.mark(Lane::kToHost);
        }
        return true;
      case StepKind::kRecv:
        invalidate(st.dst);
        l.phase = Phase::kNet;
        l.req = ctx_.irecv(st.peer, messageTag(tagBase_, st.msg), hptr(st.dst), st.dst.bytes);
        return true;
      case StepKind::kRecvReduce:
        invalidate(st.tmp);
        invalidate(st.dst);
        l.phase = Phase::kNet;
        l.req = ctx_.irecv(st.peer, messageTag(tagBase_, st.msg), hptr(st.tmp), st.tmp.bytes);
        return true;
      case StepKind::kCopy:
        invalidate(st.dst);
        ops_.copy(dptr(st.dst), dptr(st.src), st.dst.bytes, Lane::kCompute);
        toDevice(i);
        return true;
      case StepKind::kFinalize:
        invalidate(st.dst);
        ops_.finalize(dptr(st.dst), st.dst.bytes / s_.elementSize, type_, op_, s_.worldSize,
                      Lane::kCompute);
        toDevice(i);
        return true;
      case StepKind::kNop:
        return false;
    }
    return false;
  }

  StepProgress poll(uint32_t i) override {
    const StepProgress p = advance(i);
    if (p != StepProgress::kIdle) idle_ = 0;
    if (p == StepProgress::kDone) live_[i].req.reset();
    return p;
  }

  StepProgress wait(uint32_t i, Deadline deadline) override {
    // Nothing moved: the network or the device is busy. Spin briefly, then back off.
    if (deadline.expired())
      RANKMAP_THROW(TimeoutError, "rank {}: device schedule step {} not done by the deadline",
                    s_.rank, s_.describe(i));
    if (++idle_ < 256) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return StepProgress::kIdle;
  }

  // Steps change phase only when polled, so every sweep polls all of them.
  size_t pollWindow() const override { return SIZE_MAX; }

  void abandon() noexcept override {
    try {
      ops_.drain();
    } catch (const std::exception& e) {
      RANKMAP_WARN(Cuda, "draining device work after a failed collective: {}", e.what());
    }
  }

 private:
  void* dptr(const Region& r) const {
    std::byte* base = dev_[static_cast<int>(r.buffer)];
    RANKMAP_ASSERT(base != nullptr);
    return base + r.offset;
  }
  void* hptr(const Region& r) const {
    static char zeroByte = 0;
    if (r.bytes == 0) return &zeroByte;  // zero-byte messages (barrier) need some address
    std::byte* base = host_[static_cast<int>(r.buffer)];
    RANKMAP_ASSERT(base != nullptr);
    return base + r.offset;
  }
  bool valid(const Region& r) const {
    return valid_[static_cast<int>(r.buffer)].contains(r.offset, r.end());
  }
  void validate(const Region& r) { valid_[static_cast<int>(r.buffer)].add(r.offset, r.end()); }
  void invalidate(const Region& r) { valid_[static_cast<int>(r.buffer)].remove(r.offset, r.end()); }
  void send(uint32_t i) {
    const Step& st = s_.steps[i];
    live_[i].phase = Phase::kNet;
    live_[i].req = ctx_.isend(st.peer, messageTag(tagBase_, st.msg), hptr(st.src), st.src.bytes);
  }
  void toDevice(uint32_t i) {
    live_[i].phase = Phase::kDevice;
    live_[i].marker = ops_.mark(Lane::kCompute);
  }

  StepProgress advance(uint32_t i) {
    const Step& st = s_.steps[i];
    Live& l = live_[i];
    switch (l.phase) {
      case Phase::kToHost:
        if (!ops_.done(l.marker)) return StepProgress::kIdle;
        validate(st.src);
        send(i);
        return StepProgress::kMoved;
      case Phase::kNet:
        if (!l.req->test()) return StepProgress::kIdle;
        l.req.reset();
        if (st.kind == StepKind::kRecv && st.dst.bytes > 0) {
          ops_.copy(dptr(st.dst), hptr(st.dst), st.dst.bytes, Lane::kCompute);
          validate(st.dst);  // the mirror holds what the device will hold
          toDevice(i);
          return StepProgress::kMoved;
        }
        if (st.kind == StepKind::kRecvReduce && st.tmp.bytes > 0) {
          ops_.copy(dptr(st.tmp), hptr(st.tmp), st.tmp.bytes, Lane::kCompute);
          ops_.reduce(dptr(st.dst), dptr(st.src), dptr(st.tmp), st.dst.bytes / s_.elementSize,
                      type_, op_, Lane::kCompute);
          validate(st.tmp);
          invalidate(st.dst);  // after: the slot may be dst itself (recvReduceIntoSlot)
          toDevice(i);
          return StepProgress::kMoved;
        }
        return StepProgress::kDone;
      case Phase::kDevice:
        return ops_.done(l.marker) ? StepProgress::kDone : StepProgress::kIdle;
    }
    return StepProgress::kIdle;
  }

  const Schedule& s_;
  transport::Context& ctx_;
  std::byte* dev_[kNumBuffers];
  std::byte* host_[kNumBuffers] = {nullptr, nullptr, nullptr};
  IntervalSet valid_[kNumBuffers];
  DataType type_;
  ReduceOp op_;
  uint64_t tagBase_;
  DeviceOps& ops_;
  std::vector<Live> live_;
  int idle_ = 0;
};

}  // namespace

void executeDevice(const Schedule& s, transport::Context& ctx, const ExecBuffers& device,
                   DataType type, ReduceOp op, uint64_t tagBase, Deadline deadline,
                   DeviceOps& ops) {
  if (s.steps.empty()) return;
  DeviceSteps backend(s, ctx, device, type, op, tagBase, ops);
  runSchedule(s, backend, deadline);
}

}  // namespace rankmap::coll::cuda
