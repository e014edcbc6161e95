#include "collectives/cuda/device_executor.h"

#include <algorithm>
#include <list>
#include <map>
#include <queue>
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

}  // namespace

void executeDevice(const Schedule& s, transport::Context& ctx, const ExecBuffers& device,
                   DataType type, ReduceOp op, uint64_t tagBase, Deadline deadline,
                   DeviceOps& ops) {
  const size_t n = s.steps.size();
  if (n == 0) return;
  static char zeroByte = 0;
  std::byte* dev[kNumBuffers] = {static_cast<std::byte*>(device.input),
                                 static_cast<std::byte*>(device.output),
                                 static_cast<std::byte*>(device.scratch)};
  std::byte* host[kNumBuffers] = {nullptr, nullptr, nullptr};
  for (int b = 0; b < kNumBuffers; ++b)
    if (s.bufferBytes[b] > 0) host[b] = ops.staging(static_cast<BufferId>(b), s.bufferBytes[b]);
  auto dptr = [&](const Region& r) -> void* {
    std::byte* base = dev[static_cast<int>(r.buffer)];
    RANKMAP_ASSERT(base != nullptr);
    return base + r.offset;
  };
  auto hptr = [&](const Region& r) -> void* {
    if (r.bytes == 0) return &zeroByte;  // zero-byte messages (barrier) need some address
    std::byte* base = host[static_cast<int>(r.buffer)];
    RANKMAP_ASSERT(base != nullptr);
    return base + r.offset;
  };
  const size_t es = s.elementSize;
  IntervalSet valid[kNumBuffers];
  auto validate = [&](const Region& r) {
    valid[static_cast<int>(r.buffer)].add(r.offset, r.end());
  };
  auto invalidate = [&](const Region& r) {
    valid[static_cast<int>(r.buffer)].remove(r.offset, r.end());
  };

  ReadySteps ready(s);

  std::vector<Live> live(n);
  std::list<uint32_t> inFlight;  // in step order: the oldest first
  std::vector<bool> finished(n, false);
  size_t done = 0;
  auto complete = [&](uint32_t i) {
    ++done;
    finished[i] = true;
    live[i].req.reset();
    ready.complete(i);
  };
  auto toDevice = [&](uint32_t i) {
    live[i].phase = Phase::kDevice;
    live[i].marker = ops.mark(Lane::kCompute);
  };

  // Starts step i; returns true if it is still in flight.
  auto start = [&](uint32_t i) -> bool {
    const Step& st = s.steps[i];
    Live& l = live[i];
    switch (st.kind) {
      case StepKind::kSend:
        if (st.src.bytes == 0 ||
            valid[static_cast<int>(st.src.buffer)].contains(st.src.offset, st.src.end())) {
          l.phase = Phase::kNet;
          l.req = ctx.isend(st.peer, messageTag(tagBase, st.msg), hptr(st.src), st.src.bytes);
        } else {
          ops.copy(hptr(st.src), dptr(st.src), st.src.bytes, Lane::kToHost);
          l.phase = Phase::kToHost;
          l.marker = ops.mark(Lane::kToHost);
        }
        return true;
      case StepKind::kRecv:
        invalidate(st.dst);
        l.phase = Phase::kNet;
        l.req = ctx.irecv(st.peer, messageTag(tagBase, st.msg), hptr(st.dst), st.dst.bytes);
        return true;
      case StepKind::kRecvReduce:
        invalidate(st.tmp);
        invalidate(st.dst);
        l.phase = Phase::kNet;
        l.req = ctx.irecv(st.peer, messageTag(tagBase, st.msg), hptr(st.tmp), st.tmp.bytes);
        return true;
      case StepKind::kCopy:
        invalidate(st.dst);
        ops.copy(dptr(st.dst), dptr(st.src), st.dst.bytes, Lane::kCompute);
        toDevice(i);
        return true;
      case StepKind::kFinalize:
        invalidate(st.dst);
        ops.finalize(dptr(st.dst), st.dst.bytes / es, type, op, s.worldSize, Lane::kCompute);
        toDevice(i);
        return true;
      case StepKind::kNop:
        return false;
    }
    return false;
  };

  // Moves step i along; returns true if it made progress.
  auto advance = [&](uint32_t i) -> bool {
    const Step& st = s.steps[i];
    Live& l = live[i];
    switch (l.phase) {
      case Phase::kToHost:
        if (!ops.done(l.marker)) return false;
        validate(st.src);
        l.phase = Phase::kNet;
        l.req = ctx.isend(st.peer, messageTag(tagBase, st.msg), hptr(st.src), st.src.bytes);
        return true;
      case Phase::kNet:
        if (!l.req->test()) return false;
        l.req.reset();
        if (st.kind == StepKind::kRecv && st.dst.bytes > 0) {
          ops.copy(dptr(st.dst), hptr(st.dst), st.dst.bytes, Lane::kCompute);
          validate(st.dst);  // the mirror holds what the device will hold
          toDevice(i);
          return true;
        }
        if (st.kind == StepKind::kRecvReduce && st.tmp.bytes > 0) {
          ops.copy(dptr(st.tmp), hptr(st.tmp), st.tmp.bytes, Lane::kCompute);
          ops.reduce(dptr(st.dst), dptr(st.src), dptr(st.tmp), st.dst.bytes / es, type, op,
                     Lane::kCompute);
          validate(st.tmp);
          invalidate(st.dst);  // after: the slot may be dst itself (recvReduceIntoSlot)
          toDevice(i);
          return true;
        }
        complete(i);
        return true;
      case Phase::kDevice:
        if (!ops.done(l.marker)) return false;
        complete(i);
        return true;
    }
    return false;
  };

  try {
    int idle = 0;
    while (true) {
      while (!ready.empty()) {
        uint32_t i = ready.pop();
        if (start(i)) {
          inFlight.push_back(i);
        } else {
          complete(i);
        }
      }
      if (done == n) break;
      if (inFlight.empty())
        RANKMAP_THROW(InternalError, "device schedule stuck after {} of {} steps (rank {})", done,
                      n, s.rank);
      bool progressed = false;
      for (auto it = inFlight.begin(); it != inFlight.end();) {
        const uint32_t i = *it;
        progressed |= advance(i);
        it = finished[i] ? inFlight.erase(it) : std::next(it);
      }
      if (progressed) {
        idle = 0;
        continue;
      }
      // Nothing moved: the network or the device is busy. Spin briefly, then back off.
      if (deadline.expired())
        RANKMAP_THROW(TimeoutError, "rank {}: device schedule step {} not done by the deadline",
                      s.rank, s.describe(inFlight.front()));
      if (++idle < 256) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  } catch (...) {
    try {
      ops.drain();
    } catch (const std::exception& e) {
      RANKMAP_WARN(Cuda, "draining device work after a failed collective: {}", e.what());
    }
    throw;
  }
}

}  // namespace rankmap::coll::cuda
