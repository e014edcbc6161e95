#include "collectives/executor.h"

#include <cstring>
#include <functional>
#include <queue>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll {
namespace {

// How many in-flight steps a sweep tests before blocking on the oldest one.
constexpr int kPollWindow = 8;

}  // namespace

void execute(const Schedule& s, transport::Context& ctx, const ExecBuffers& buffers,
             const Reduction* reduction, uint64_t tagBase, Deadline deadline) {
  const size_t n = s.steps.size();
  if (n == 0) return;
  static char zeroByte = 0;
  std::byte* base[kNumBuffers] = {static_cast<std::byte*>(buffers.input),
                                  static_cast<std::byte*>(buffers.output),
                                  static_cast<std::byte*>(buffers.scratch)};
  auto ptr = [&](const Region& r) -> void* {
    if (r.bytes == 0) return &zeroByte;  // zero-byte messages (barrier) need some address
    std::byte* b = base[static_cast<int>(r.buffer)];
    RANKMAP_ASSERT(b != nullptr);
    return b + r.offset;
  };
  const size_t es = s.elementSize;

  ReadySteps ready(s);
  std::vector<transport::RequestPtr> reqs(n);
  std::set<uint32_t> inFlight;
  size_t done = 0;

  auto complete = [&](uint32_t i) {
    ++done;
    ready.complete(i);
  };
  auto start = [&](uint32_t i) {
    const Step& st = s.steps[i];
    switch (st.kind) {
      case StepKind::kSend:
        reqs[i] = ctx.isend(st.peer, messageTag(tagBase, st.msg), ptr(st.src), st.src.bytes);
        inFlight.insert(i);
        return;
      case StepKind::kRecv:
        reqs[i] = ctx.irecv(st.peer, messageTag(tagBase, st.msg), ptr(st.dst), st.dst.bytes);
        inFlight.insert(i);
        return;
      case StepKind::kRecvReduce:
        reqs[i] = ctx.irecv(st.peer, messageTag(tagBase, st.msg), ptr(st.tmp), st.tmp.bytes);
        inFlight.insert(i);
        return;
      case StepKind::kCopy:
        std::memcpy(ptr(st.dst), ptr(st.src), st.dst.bytes);
        break;
      case StepKind::kFinalize:
        RANKMAP_ASSERT(reduction != nullptr);
        reduction->finalize(ptr(st.dst), st.dst.bytes / es, s.worldSize);
        break;
      case StepKind::kNop:
        break;
    }
    complete(i);
  };
  auto finish = [&](uint32_t i) {
    const Step& st = s.steps[i];
    if (st.kind == StepKind::kRecvReduce) {
      RANKMAP_ASSERT(reduction != nullptr);
      reduction->apply(ptr(st.dst), ptr(st.src), ptr(st.tmp), st.dst.bytes / es);
    }
    reqs[i].reset();
    inFlight.erase(i);
    complete(i);
  };

  while (true) {
    while (!ready.empty()) {
      uint32_t i = ready.pop();
      start(i);
    }
    if (done == n) break;
    if (inFlight.empty())
      RANKMAP_THROW(InternalError, "schedule stuck after {} of {} steps (rank {})", done, n,
                    s.rank);
    bool progressed = false;
    int tested = 0;
    for (auto it = inFlight.begin(); it != inFlight.end() && tested < kPollWindow; ++tested) {
      uint32_t i = *it++;
      if (reqs[i]->test()) {
        finish(i);
        progressed = true;
      }
    }
    if (!progressed) {
      uint32_t i = *inFlight.begin();
      RANKMAP_TRACE(Coll, "rank {}: waiting on {}", s.rank, s.describe(i));
      reqs[i]->wait(deadline);
      finish(i);
    }
  }
}

}  // namespace rankmap::coll
