// The executor: runs any Schedule on any transport Context.
//
// Policy: post every step whose dependencies are done (in step order); local steps (copy,
// finalize, fence) run at once on the caller's thread; when nothing is ready, test the oldest
// few steps in flight and, if none has finished, block on the oldest one with the deadline. A
// finished receive-reduce applies the reduction on the caller's thread. Blocking on the oldest
// step is deadlock-free for schedules whose steps are ordered by a time shared by all ranks
// (see collectives/schedule/schedule.h), even over rendezvous transports.
//
// Threading: one caller thread per Context, as the transport requires. No allocation per byte;
// per step, one transport request.
#pragma once

#include <cstdint>

#include "collectives/reduce/reduction.h"
#include "collectives/schedule/schedule.h"
#include "collectives/transport/transport.h"
#include "common/deadline.h"

namespace rankmap::coll {

struct ExecBuffers {
  // Only the buffers the schedule names must be valid; `input` is written only by in-place
  // reduce-scatter schedules (where output lives inside it).
  void* input = nullptr;
  void* output = nullptr;
  void* scratch = nullptr;  // at least schedule.scratchBytes()
};

// Tag of message `msg` of a collective: tagBase carries the collective's sequence number and
// signature in the high 32 bits.
inline uint64_t messageTag(uint64_t tagBase, uint32_t msg) { return tagBase | msg; }

// Runs `schedule` to completion. `reduction` may be null for schedules without receive-reduce
// or finalize steps. Throws what the transport throws (TimeoutError naming the peer and tag,
// PeerError, InvalidInput on a length mismatch); after a throw, requests may still be in flight
// on the buffers, which must stay valid until the Context is destroyed.
void execute(const Schedule& schedule, transport::Context& ctx, const ExecBuffers& buffers,
             const Reduction* reduction, uint64_t tagBase, Deadline deadline);

}  // namespace rankmap::coll
