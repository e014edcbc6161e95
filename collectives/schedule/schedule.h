// Schedules: an algorithm's plan for one rank, as pure data. (Called Schedule, not Plan, to keep
// it apart from plan.json's rankmap::Plan, which chooses the rank order and the algorithms.)
//
// A Schedule is a list of steps over byte regions of three buffers (the caller's input and
// output and an engine-owned scratch buffer): send a region, receive into a region, receive and
// reduce into a region, copy, finalize (divide for avg), and no-op fences. Each step lists the
// earlier steps it depends on. The executor (collectives/executor.h) posts every step whose
// dependencies are done and otherwise blocks on the lowest-numbered step in flight; the
// generators emit steps in an order consistent across ranks (a message's send and receive sit at
// the same "time" on both sides, and times never decrease along a rank's list), which is what
// makes that policy deadlock-free even when every send waits for its receive (rendezvous).
// tests/unit/collectives/schedule_sim.* checks this, and the data flow, without a network.
//
// Messages: a send to peer P is the k-th send to P in the list (Step::msg = k), and matches the
// k-th receive from this rank in P's list. The executor turns msg into a transport tag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <functional>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <vector>

namespace rankmap::coll {

enum class BufferId : uint8_t { kInput = 0, kOutput = 1, kScratch = 2 };
inline constexpr int kNumBuffers = 3;

struct Region {
  BufferId buffer = BufferId::kOutput;
  uint64_t offset = 0;  // bytes
  uint64_t bytes = 0;
  uint64_t end() const { return offset + bytes; }
  bool operator==(const Region&) const = default;
};

enum class StepKind : uint8_t {
  kSend,        // isend(peer, src)
  kRecv,        // irecv(peer) straight into dst
  kRecvReduce,  // irecv(peer) into tmp (scratch), then dst = src (op) tmp
  kCopy,        // dst = src
  kFinalize,    // dst /= world size for avg; nothing for other operators
  kNop,         // a fence: completes when its dependencies have
};

struct Step {
  StepKind kind = StepKind::kNop;
  int peer = -1;     // transport rank, for kSend / kRecv / kRecvReduce
  uint32_t msg = 0;  // index among this rank's sends to (or receives from) peer
  Region dst;        // written by kRecv, kRecvReduce, kCopy, kFinalize
  Region src;        // read by kSend, kCopy and kRecvReduce (its first operand)
  Region tmp;        // kRecvReduce: where the message lands
  uint32_t depBegin = 0;  // dependencies: Schedule::deps[depBegin, depEnd)
  uint32_t depEnd = 0;
};

struct Schedule {
  int rank = 0;
  int worldSize = 1;
  size_t elementSize = 1;
  uint64_t bufferBytes[kNumBuffers] = {0, 0, 0};  // input, output, scratch sizes the steps use
  std::vector<Step> steps;
  std::vector<uint32_t> deps;

  std::span<const uint32_t> depsOf(size_t i) const {
    return {deps.data() + steps[i].depBegin, deps.data() + steps[i].depEnd};
  }
  uint64_t scratchBytes() const { return bufferBytes[static_cast<int>(BufferId::kScratch)]; }
  size_t count(StepKind kind) const;
  // One line per step, for logs and test failures: "#3 recv-reduce peer 2 msg 0 out[0,64) ...".
  std::string describe(size_t i) const;
  std::string dump() const;
};

std::string_view stepKindName(StepKind kind);
std::string regionText(const Region& r);

// Where the caller's input lives inside its output or the reverse (in-place collectives): the
// builder then rewrites every region of the aliased buffer onto the other one, so the schedule
// only names one buffer and its dependencies see the overlap.
struct Alias {
  enum class Kind { kNone, kInputInOutput, kOutputInInput } kind = Kind::kNone;
  uint64_t offset = 0;  // bytes: input = output + offset, or output = input + offset
};

// The largest pipelining segment when nothing says otherwise (RANKMAP_SEGMENT_SIZE's default
// too; a unit test keeps the two equal).
inline constexpr uint64_t kDefaultSegmentBytes = 1u << 20;

// The segment for a collective whose largest buffer is `messageBytes`, with segments of at most
// `maxSegment`: messageBytes / 64, but at least 256 KiB (or maxSegment when that is smaller).
// Why: at 4-16 MiB the steps of hier and rhd move a few MiB per rank and 1 MiB segments leave
// them barely pipelined (256 KiB: 8-17% faster on the emulated cloud), while at 64 MiB hier is
// 8-11% faster with 1 MiB segments; the ring does not care (docs/performance.md, "Segment size").
uint64_t segmentFor(uint64_t messageBytes, uint64_t maxSegment);

struct BuilderOptions {
  int rank = 0;
  int worldSize = 1;
  size_t elementSize = 1;
  uint64_t inputBytes = 0;
  uint64_t outputBytes = 0;
  Alias alias;
  // Pipelining unit; receive slots in scratch are this large (rounded down to whole elements,
  // at least one element).
  uint64_t segmentBytes = kDefaultSegmentBytes;
  // Number of scratch slots that receives to be reduced land in, used round-robin; a slot is
  // reused only after its previous contents were consumed (dependencies see to it).
  int numSlots = 8;
};

// Builds a Schedule from steps given in program order, deriving each step's dependencies from
// the regions it reads and writes (read-after-write, write-after-read, write-after-write), so
// generators only say what to move where.
//
// Contract: the steps, executed one by one in the given order, compute the collective
// ("sequential semantics"); dependencies make any execution that respects them compute the same.
// Generators must not reuse a slot while its contents are still to be read later in the list
// (a slot is live from its allocation to its last read).
class ScheduleBuilder {
 public:
  explicit ScheduleBuilder(const BuilderOptions& options);

  const BuilderOptions& options() const { return opts_; }
  size_t elementSize() const { return opts_.elementSize; }
  // Elements per segment (>= 1).
  uint64_t segmentElements() const { return segElems_; }

  // Regions by element offset and count.
  Region input(uint64_t elemOffset, uint64_t elems) const;
  Region output(uint64_t elemOffset, uint64_t elems) const;

  // Steps. Empty regions produce no step, except for zero-byte messages (send/recv), which
  // barriers use.
  void send(int peer, Region src);
  void recv(int peer, Region dst);
  // Receives dst.bytes from peer into a fresh slot, then dst = src (op) slot.
  void recvReduce(int peer, Region dst, Region src);
  // Receives bytes into a fresh slot, then slot = src (op) slot; returns the slot, whose content
  // the caller must consume (e.g. send) before numSlots more slots are allocated.
  Region recvReduceIntoSlot(int peer, Region src);
  void copy(Region dst, Region src);
  void finalize(Region dst);
  // Every later step depends on every earlier one.
  void fence();

  // A dedicated scratch region (not a slot), initialised by nobody: write before reading.
  Region arena(uint64_t bytes);

  Schedule finish();

 private:
  struct Span {
    uint64_t end;
    int64_t writer;                 // last step writing it, -1 = none
    std::vector<uint32_t> readers;  // steps reading it since that write
  };
  using SpanMap = std::map<uint64_t, Span>;

  // Checks r against its buffer and moves an aliased input or output region onto the other one.
  Region canonical(Region r) const;
  // A send or receive step with `peer`, numbered among this rank's sends to (receives from) it.
  Step message(StepKind kind, int peer);
  Region nextSlot(uint64_t bytes);
  void checkBounds(const Region& r) const;
  void splitAt(SpanMap& m, uint64_t x);
  void collect(const Region& r, bool write, std::vector<uint32_t>& deps);
  void mark(const Region& r, bool write, uint32_t step);
  // Appends a step reading `reads` and writing `writes` (after canonicalisation).
  void add(Step step, std::initializer_list<Region> reads, std::initializer_list<Region> writes);

  BuilderOptions opts_;
  uint64_t segElems_;
  uint64_t slotBytes_;
  int nextSlot_ = 0;
  uint64_t maxSlotUse_ = 0;
  uint64_t arenaBytes_ = 0;
  Schedule sched_;
  SpanMap spans_[kNumBuffers];
  std::vector<uint32_t> sendCount_;
  std::vector<uint32_t> recvCount_;
  std::optional<uint32_t> fenceStep_;
  std::vector<uint32_t> sinceFence_;
};

// The executors' dispatch state: which steps have all their dependencies done. pop() hands
// out the lowest-numbered ready step (program order, which the deadlock-freedom argument at the
// top of this file relies on); complete(i) releases the steps waiting for i.
class ReadySteps {
 public:
  explicit ReadySteps(const Schedule& s);
  bool empty() const { return ready_.empty(); }
  uint32_t pop();
  void complete(uint32_t i);

 private:
  std::vector<uint32_t> pending_;   // unfinished dependencies of each step
  std::vector<uint32_t> revBegin_;  // dependents of step i: rev_[revBegin_[i], revBegin_[i+1])
  std::vector<uint32_t> rev_;
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> ready_;
};

// Checks what the executor relies on: regions inside their buffers, element-aligned lengths,
// dependencies on earlier steps only, peers in range and not this rank. Throws InternalError.
void validateSchedule(const Schedule& s);

}  // namespace rankmap::coll
