#include "collectives/executor.h"

#include <cstring>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll {

void runSchedule(const Schedule& s, StepBackend& backend, Deadline deadline) {
  const size_t n = s.steps.size();
  if (n == 0) return;
  ReadySteps ready(s);
  std::set<uint32_t> inFlight;  // in step order: the oldest first
  size_t done = 0;
  auto complete = [&](uint32_t i) {
    ++done;
    ready.complete(i);
  };
  const size_t window = backend.pollWindow();
  try {
    while (true) {
      while (!ready.empty()) {
        const uint32_t i = ready.pop();
        if (backend.start(i)) {
          inFlight.insert(i);
        } else {
          complete(i);
        }
      }
      if (done == n) break;
      if (inFlight.empty())
        RANKMAP_THROW(InternalError, "schedule stuck after {} of {} steps (rank {})", done, n,
                      s.rank);
      bool progressed = false;
      size_t polled = 0;
      for (auto it = inFlight.begin(); it != inFlight.end() && polled < window; ++polled) {
        const uint32_t i = *it;
        const StepProgress p = backend.poll(i);
        progressed |= p != StepProgress::kIdle;
        if (p == StepProgress::kDone) {
          it = inFlight.erase(it);
          complete(i);
        } else {
          ++it;
        }
      }
      if (progressed) continue;
      const uint32_t oldest = *inFlight.begin();
      RANKMAP_TRACE(Coll, "rank {}: waiting on {}", s.rank, s.describe(oldest));
      if (backend.wait(oldest, deadline) == StepProgress::kDone) {
        inFlight.erase(inFlight.begin());
        complete(oldest);
      }
    }
  } catch (...) {
    backend.abandon();
    throw;
  }
}

namespace {

// Steps on host memory: message steps are one transport request each; copies and finalize run
// at once; a receive-reduce reduces on the caller's thread when its message has landed.
class HostSteps final : public StepBackend {
 public:
  HostSteps(const Schedule& s, transport::Context& ctx, const ExecBuffers& buffers,
            const Reduction* reduction, uint64_t tagBase, PassiveMeter* meter)
      : s_(s),
        ctx_(ctx),
        base_{static_cast<std::byte*>(buffers.input), static_cast<std::byte*>(buffers.output),
              static_cast<std::byte*>(buffers.scratch)},
        reduction_(reduction),
        tagBase_(tagBase),
        meter_(meter),
        reqs_(s.steps.size()) {}

  bool start(uint32_t i) override {
    const Step& st = s_.steps[i];
    if (meter_ && isMessage(st.kind))
      meter_->started(st.peer, st.kind == StepKind::kSend, PassiveMeter::nowNs());
    switch (st.kind) {
      case StepKind::kSend:
        reqs_[i] = ctx_.isend(st.peer, messageTag(tagBase_, st.msg), ptr(st.src), st.src.bytes);
        return true;
      case StepKind::kRecv:
        reqs_[i] = ctx_.irecv(st.peer, messageTag(tagBase_, st.msg), ptr(st.dst), st.dst.bytes);
        return true;
      case StepKind::kRecvReduce:
        reqs_[i] = ctx_.irecv(st.peer, messageTag(tagBase_, st.msg), ptr(st.tmp), st.tmp.bytes);
        return true;
      case StepKind::kCopy:
        std::memcpy(ptr(st.dst), ptr(st.src), st.dst.bytes);
        return false;
      case StepKind::kFinalize:
        RANKMAP_ASSERT(reduction_ != nullptr);
        reduction_->finalize(ptr(st.dst), st.dst.bytes / s_.elementSize, s_.worldSize);
        return false;
      case StepKind::kNop:
        return false;
    }
    return false;
  }

  StepProgress poll(uint32_t i) override {
    if (!reqs_[i]->test()) return StepProgress::kIdle;
    finish(i);
    return StepProgress::kDone;
  }

  StepProgress wait(uint32_t i, Deadline deadline) override {
    reqs_[i]->wait(deadline);
    finish(i);
    return StepProgress::kDone;
  }

  size_t pollWindow() const override { return kPollWindow; }

  void abandon() noexcept override {
    if (meter_) meter_->abandon(PassiveMeter::nowNs());
  }

 private:
  static bool isMessage(StepKind k) {
    return k == StepKind::kSend || k == StepKind::kRecv || k == StepKind::kRecvReduce;
  }

  // How many in-flight steps a sweep tests before blocking on the oldest one.
  static constexpr size_t kPollWindow = 8;

  void* ptr(const Region& r) {
    static char zeroByte = 0;
    if (r.bytes == 0) return &zeroByte;  // zero-byte messages (barrier) need some address
    std::byte* b = base_[static_cast<int>(r.buffer)];
    RANKMAP_ASSERT(b != nullptr);
    return b + r.offset;
  }

  void finish(uint32_t i) {
    const Step& st = s_.steps[i];
    if (meter_) {
      const bool send = st.kind == StepKind::kSend;
      meter_->finished(st.peer, send,
                       send ? st.src.bytes : (st.kind == StepKind::kRecv ? st.dst : st.tmp).bytes,
                       PassiveMeter::nowNs());
    }
    if (st.kind == StepKind::kRecvReduce) {
      RANKMAP_ASSERT(reduction_ != nullptr);
      reduction_->apply(ptr(st.dst), ptr(st.src), ptr(st.tmp), st.dst.bytes / s_.elementSize);
    }
    reqs_[i].reset();
  }

  const Schedule& s_;
  transport::Context& ctx_;
  std::byte* base_[kNumBuffers];
  const Reduction* reduction_;
  uint64_t tagBase_;
  PassiveMeter* meter_;
  std::vector<transport::RequestPtr> reqs_;
};

}  // namespace

void execute(const Schedule& s, transport::Context& ctx, const ExecBuffers& buffers,
             const Reduction* reduction, uint64_t tagBase, Deadline deadline,
             PassiveMeter* meter) {
  if (s.steps.empty()) return;
  HostSteps backend(s, ctx, buffers, reduction, tagBase, meter);
  runSchedule(s, backend, deadline);
}

}  // namespace rankmap::coll
