#include "collectives/schedule/schedule.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.h"

namespace rankmap::coll {
namespace {

constexpr int idx(BufferId b) { return static_cast<int>(b); }

const char* bufferShortName(BufferId b) {
  switch (b) {
    case BufferId::kInput: return "in";
    case BufferId::kOutput: return "out";
    case BufferId::kScratch: return "scratch";
  }
  return "?";
}

}  // namespace

std::string_view stepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kSend: return "send";
    case StepKind::kRecv: return "recv";
    case StepKind::kRecvReduce: return "recv-reduce";
    case StepKind::kCopy: return "copy";
    case StepKind::kFinalize: return "finalize";
    case StepKind::kNop: return "nop";
  }
  return "?";
}

std::string regionText(const Region& r) {
  return fmt::format("{}[{},{})", bufferShortName(r.buffer), r.offset, r.end());
}

size_t Schedule::count(StepKind kind) const {
  return static_cast<size_t>(
      std::count_if(steps.begin(), steps.end(), [&](const Step& s) { return s.kind == kind; }));
}

std::string Schedule::describe(size_t i) const {
  const Step& s = steps.at(i);
  std::string text = fmt::format("#{} {}", i, stepKindName(s.kind));
  switch (s.kind) {
    case StepKind::kSend:
      text += fmt::format(" to {} msg {} {}", s.peer, s.msg, regionText(s.src));
      break;
    case StepKind::kRecv:
      text += fmt::format(" from {} msg {} {}", s.peer, s.msg, regionText(s.dst));
      break;
    case StepKind::kRecvReduce:
      text += fmt::format(" from {} msg {} {} = {} op {}", s.peer, s.msg, regionText(s.dst),
                          regionText(s.src), regionText(s.tmp));
      break;
    case StepKind::kCopy:
      text += fmt::format(" {} = {}", regionText(s.dst), regionText(s.src));
      break;
    case StepKind::kFinalize:
      text += fmt::format(" {}", regionText(s.dst));
      break;
    case StepKind::kNop:
      break;
  }
  auto d = depsOf(i);
  if (!d.empty()) text += fmt::format(" after {}", fmt::join(d, ","));
  return text;
}

std::string Schedule::dump() const {
  std::string out = fmt::format("schedule rank {} of {}, element {} B, in {} out {} scratch {}\n",
                                rank, worldSize, elementSize, bufferBytes[0], bufferBytes[1],
                                bufferBytes[2]);
  for (size_t i = 0; i < steps.size(); ++i) out += describe(i) + "\n";
  return out;
}

ScheduleBuilder::ScheduleBuilder(const BuilderOptions& options) : opts_(options) {
  RANKMAP_ASSERT(opts_.elementSize > 0);
  RANKMAP_ASSERT(opts_.worldSize >= 1 && opts_.rank >= 0 && opts_.rank < opts_.worldSize);
  RANKMAP_ASSERT(opts_.numSlots >= 1);
  segElems_ = std::max<uint64_t>(1, opts_.segmentBytes / opts_.elementSize);
  slotBytes_ = segElems_ * opts_.elementSize;
  sched_.rank = opts_.rank;
  sched_.worldSize = opts_.worldSize;
  sched_.elementSize = opts_.elementSize;
  for (auto& m : spans_) m.emplace(0, Span{UINT64_MAX, -1, {}});
  sendCount_.assign(static_cast<size_t>(opts_.worldSize), 0);
  recvCount_.assign(static_cast<size_t>(opts_.worldSize), 0);
}

Region ScheduleBuilder::input(uint64_t elemOffset, uint64_t elems) const {
  return Region{BufferId::kInput, elemOffset * opts_.elementSize, elems * opts_.elementSize};
}

Region ScheduleBuilder::output(uint64_t elemOffset, uint64_t elems) const {
  return Region{BufferId::kOutput, elemOffset * opts_.elementSize, elems * opts_.elementSize};
}

void ScheduleBuilder::checkBounds(const Region& r) const {
  uint64_t limit = r.buffer == BufferId::kInput    ? opts_.inputBytes
                   : r.buffer == BufferId::kOutput ? opts_.outputBytes
                                                   : UINT64_MAX;
  if (r.end() > limit || r.end() < r.offset)
    RANKMAP_THROW(InternalError, "schedule region {} outside its buffer of {} bytes",
                  regionText(r), limit);
}

Region ScheduleBuilder::canonical(Region r) const {
  checkBounds(r);
  // Scratch never aliases: slots and arenas pass through unchanged.
  if (opts_.alias.kind == Alias::Kind::kInputInOutput && r.buffer == BufferId::kInput)
    return Region{BufferId::kOutput, r.offset + opts_.alias.offset, r.bytes};
  if (opts_.alias.kind == Alias::Kind::kOutputInInput && r.buffer == BufferId::kOutput)
    return Region{BufferId::kInput, r.offset + opts_.alias.offset, r.bytes};
  return r;
}

Region ScheduleBuilder::nextSlot(uint64_t bytes) {
  RANKMAP_ASSERT(bytes <= slotBytes_);
  maxSlotUse_ = std::max(maxSlotUse_, bytes);
  Region r{BufferId::kScratch, static_cast<uint64_t>(nextSlot_) * slotBytes_, bytes};
  nextSlot_ = (nextSlot_ + 1) % opts_.numSlots;
  return r;
}

Region ScheduleBuilder::arena(uint64_t bytes) {
  // Arenas sit after the slots; their offsets are fixed up in finish() once the slot area size
  // is known. Until then they live at an offset past any slot.
  Region r{BufferId::kScratch, static_cast<uint64_t>(opts_.numSlots) * slotBytes_ + arenaBytes_,
           bytes};
  arenaBytes_ += (bytes + 63) & ~uint64_t{63};
  return r;
}

void ScheduleBuilder::splitAt(SpanMap& m, uint64_t x) {
  auto it = m.upper_bound(x);
  RANKMAP_ASSERT(it != m.begin());
  --it;
  if (it->first == x || it->second.end <= x) return;
  Span tail{it->second.end, it->second.writer, it->second.readers};
  it->second.end = x;
  m.emplace_hint(std::next(it), x, std::move(tail));
}

void ScheduleBuilder::collect(const Region& r, bool write, std::vector<uint32_t>& deps) {
  if (r.bytes == 0) return;
  auto& m = spans_[idx(r.buffer)];
  for (auto it = std::prev(m.upper_bound(r.offset)); it != m.end() && it->first < r.end(); ++it) {
    if (it->second.writer >= 0) deps.push_back(static_cast<uint32_t>(it->second.writer));
    if (write) deps.insert(deps.end(), it->second.readers.begin(), it->second.readers.end());
  }
}

void ScheduleBuilder::mark(const Region& r, bool write, uint32_t step) {
  if (r.bytes == 0) return;
  auto& m = spans_[idx(r.buffer)];
  splitAt(m, r.offset);
  splitAt(m, r.end());
  auto first = m.find(r.offset);
  RANKMAP_ASSERT(first != m.end());
  if (write) {
    auto last = m.lower_bound(r.end());
    m.erase(first, last);
    m.emplace(r.offset, Span{r.end(), static_cast<int64_t>(step), {}});
  } else {
    for (auto it = first; it != m.end() && it->first < r.end(); ++it)
      it->second.readers.push_back(step);
  }
}

void ScheduleBuilder::add(Step step, std::initializer_list<Region> reads,
                          std::initializer_list<Region> writes) {
  auto index = static_cast<uint32_t>(sched_.steps.size());
  std::vector<uint32_t> deps;
  for (const auto& r : reads) collect(r, false, deps);
  for (const auto& r : writes) collect(r, true, deps);
  if (fenceStep_) deps.push_back(*fenceStep_);
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  step.depBegin = static_cast<uint32_t>(sched_.deps.size());
  sched_.deps.insert(sched_.deps.end(), deps.begin(), deps.end());
  step.depEnd = static_cast<uint32_t>(sched_.deps.size());
  for (const auto& r : reads) mark(r, false, index);
  for (const auto& r : writes) mark(r, true, index);
  sched_.steps.push_back(step);
  sinceFence_.push_back(index);
}

Step ScheduleBuilder::message(StepKind kind, int peer) {
  RANKMAP_ASSERT(peer >= 0 && peer < opts_.worldSize && peer != opts_.rank);
  auto& counts = kind == StepKind::kSend ? sendCount_ : recvCount_;
  Step s;
  s.kind = kind;
  s.peer = peer;
  s.msg = counts[static_cast<size_t>(peer)]++;
  return s;
}

void ScheduleBuilder::send(int peer, Region src) {
  Step s = message(StepKind::kSend, peer);
  s.src = canonical(src);
  add(s, {s.src}, {});
}

void ScheduleBuilder::recv(int peer, Region dst) {
  Step s = message(StepKind::kRecv, peer);
  s.dst = canonical(dst);
  add(s, {}, {s.dst});
}

void ScheduleBuilder::recvReduce(int peer, Region dst, Region src) {
  RANKMAP_ASSERT(dst.bytes == src.bytes);
  if (dst.bytes == 0) return;  // no message, so no message number taken
  Step s = message(StepKind::kRecvReduce, peer);
  s.dst = canonical(dst);
  s.src = canonical(src);
  s.tmp = nextSlot(dst.bytes);
  // The slot is written by the receive, then read; dst is written after src is read.
  add(s, {s.src}, {s.tmp, s.dst});
}

Region ScheduleBuilder::recvReduceIntoSlot(int peer, Region src) {
  RANKMAP_ASSERT(src.bytes > 0);
  Step s = message(StepKind::kRecvReduce, peer);
  s.src = canonical(src);
  s.tmp = nextSlot(src.bytes);
  s.dst = s.tmp;
  add(s, {s.src}, {s.tmp});
  return s.tmp;
}

void ScheduleBuilder::copy(Region dst, Region src) {
  RANKMAP_ASSERT(dst.bytes == src.bytes);
  if (dst.bytes == 0) return;
  Step s;
  s.kind = StepKind::kCopy;
  s.dst = canonical(dst);
  s.src = canonical(src);
  if (s.dst == s.src) return;  // in place: nothing to move
  add(s, {s.src}, {s.dst});
}

void ScheduleBuilder::finalize(Region dst) {
  if (dst.bytes == 0) return;
  Step s;
  s.kind = StepKind::kFinalize;
  s.dst = canonical(dst);
  add(s, {s.dst}, {s.dst});
}

void ScheduleBuilder::fence() {
  if (sinceFence_.empty()) return;
  auto index = static_cast<uint32_t>(sched_.steps.size());
  Step s;
  s.kind = StepKind::kNop;
  s.depBegin = static_cast<uint32_t>(sched_.deps.size());
  sched_.deps.insert(sched_.deps.end(), sinceFence_.begin(), sinceFence_.end());
  s.depEnd = static_cast<uint32_t>(sched_.deps.size());
  sched_.steps.push_back(s);
  sinceFence_.clear();
  fenceStep_ = index;
}

Schedule ScheduleBuilder::finish() {
  // Slots were laid out with a stride of a whole segment; shrink the stride to the largest slot
  // actually used (small messages need small scratch) and move the arenas down behind them. The
  // map keeps distinct slots distinct and offsets within a slot unchanged, so the dependencies
  // derived on the provisional layout still hold.
  const uint64_t slotArea = static_cast<uint64_t>(opts_.numSlots) * slotBytes_;
  const uint64_t stride = (maxSlotUse_ + 63) & ~uint64_t{63};
  auto fix = [&](Region& r) {
    if (r.buffer != BufferId::kScratch || r.bytes == 0) return;
    if (r.offset < slotArea)
      r.offset = (r.offset / slotBytes_) * stride + r.offset % slotBytes_;
    else
      r.offset = r.offset - slotArea + static_cast<uint64_t>(opts_.numSlots) * stride;
  };
  for (auto& s : sched_.steps) {
    fix(s.dst);
    fix(s.src);
    fix(s.tmp);
  }
  sched_.bufferBytes[idx(BufferId::kInput)] = opts_.inputBytes;
  sched_.bufferBytes[idx(BufferId::kOutput)] = opts_.outputBytes;
  sched_.bufferBytes[idx(BufferId::kScratch)] =
      static_cast<uint64_t>(opts_.numSlots) * stride + arenaBytes_;
  validateSchedule(sched_);
  return std::move(sched_);
}

uint64_t segmentFor(uint64_t messageBytes, uint64_t maxSegment) {
  constexpr uint64_t kFloor = 256u << 10;
  constexpr uint64_t kSegmentsPerMessage = 64;
  return std::min(maxSegment, std::max(kFloor, messageBytes / kSegmentsPerMessage));
}

ReadySteps::ReadySteps(const Schedule& s)
    : pending_(s.steps.size(), 0), revBegin_(s.steps.size() + 1, 0), rev_(s.deps.size()) {
  const size_t n = s.steps.size();
  for (size_t i = 0; i < n; ++i) {
    pending_[i] = s.steps[i].depEnd - s.steps[i].depBegin;
    for (auto d : s.depsOf(i)) ++revBegin_[d + 1];
  }
  for (size_t i = 0; i < n; ++i) revBegin_[i + 1] += revBegin_[i];
  std::vector<uint32_t> fill(revBegin_.begin(), revBegin_.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (auto d : s.depsOf(i)) rev_[fill[d]++] = static_cast<uint32_t>(i);
  for (size_t i = 0; i < n; ++i)
    if (pending_[i] == 0) ready_.push(static_cast<uint32_t>(i));
}

uint32_t ReadySteps::pop() {
  RANKMAP_ASSERT(!ready_.empty());
  uint32_t i = ready_.top();
  ready_.pop();
  return i;
}

void ReadySteps::complete(uint32_t i) {
  for (uint32_t k = revBegin_[i]; k < revBegin_[i + 1]; ++k)
    if (--pending_[rev_[k]] == 0) ready_.push(rev_[k]);
}

void validateSchedule(const Schedule& s) {
  auto inside = [&](const Region& r, size_t i) {
    if (r.bytes == 0) return;
    if (r.end() > s.bufferBytes[idx(r.buffer)] || r.end() < r.offset)
      RANKMAP_THROW(InternalError, "schedule step {} region {} outside its buffer ({} bytes)",
                    s.describe(i), regionText(r), s.bufferBytes[idx(r.buffer)]);
    if (r.bytes % s.elementSize != 0)
      RANKMAP_THROW(InternalError, "schedule step {}: region {} not whole elements of {} bytes",
                    s.describe(i), regionText(r), s.elementSize);
  };
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& st = s.steps[i];
    for (auto d : s.depsOf(i))
      if (d >= i) RANKMAP_THROW(InternalError, "schedule step {} depends on a later step", i);
    switch (st.kind) {
      case StepKind::kSend:
      case StepKind::kRecv:
      case StepKind::kRecvReduce:
        if (st.peer < 0 || st.peer >= s.worldSize || st.peer == s.rank)
          RANKMAP_THROW(InternalError, "schedule step {}: bad peer", s.describe(i));
        break;
      default:
        break;
    }
    inside(st.dst, i);
    inside(st.src, i);
    inside(st.tmp, i);
  }
}

}  // namespace rankmap::coll
