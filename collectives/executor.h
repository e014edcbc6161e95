// The executor: one loop that runs any Schedule on any transport Context, over a step backend
// that knows where the bytes live.
//
// Policy (runSchedule): post every step whose dependencies are done, in step order; a step the
// backend finishes at once (copy, finalize, fence on host memory) completes on the caller's
// thread. When nothing is ready, poll the oldest in-flight steps (the backend says how many);
// if none moved, wait on the oldest one with the deadline. Waiting on the oldest step is
// deadlock-free for schedules whose steps are ordered by a time shared by all ranks (see
// collectives/schedule/schedule.h), even over rendezvous transports.
//
// Backends: HostSteps (below, via execute()) runs steps on host memory: one transport request
// per message step, the reduction applied on the caller's thread when a receive-reduce lands.
// The device backend (collectives/cuda/device_executor.h) stages device memory through host
// mirrors and moves each step through copy, network and kernel phases.
//
// Threading: one caller thread per Context, as the transport requires. No allocation per byte;
// per step, one transport request.
#pragma once

#include <cstdint>

#include "collectives/passive.h"
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

// What polling or waiting did to an in-flight step.
enum class StepProgress : uint8_t {
  kIdle,   // nothing changed
  kMoved,  // it advanced a phase and is still in flight
  kDone,   // it finished; its dependents may start
};

// How the steps of one schedule run on one kind of memory. Called by runSchedule() only, on the
// caller's thread, with step indices of the schedule it was made for.
class StepBackend {
 public:
  virtual ~StepBackend() = default;
  // Starts step i, whose dependencies are done. False if it finished at once.
  virtual bool start(uint32_t i) = 0;
  // Moves step i (in flight) along without blocking.
  virtual StepProgress poll(uint32_t i) = 0;
  // Nothing moved in a whole sweep: block or back off until step i (the oldest in flight) may
  // move; throws TimeoutError once the deadline has passed.
  virtual StepProgress wait(uint32_t i, Deadline deadline) = 0;
  // How many of the oldest in-flight steps one sweep polls. Host steps progress inside the
  // transport, so a few suffice; a backend that moves steps between phases itself polls all.
  virtual size_t pollWindow() const = 0;
  // The run failed: called before the exception leaves runSchedule(). Must not throw.
  virtual void abandon() noexcept {}
};

// Runs `schedule` to completion over `backend`. Throws what the backend throws (the transport's
// TimeoutError naming the peer and tag, PeerError, InvalidInput on a length mismatch) or
// InternalError if the schedule cannot progress; after a throw, requests may still be in flight
// on the buffers, which must stay valid until the Context is destroyed.
void runSchedule(const Schedule& schedule, StepBackend& backend, Deadline deadline);

// runSchedule() with host-memory buffers. `reduction` may be null for schedules without
// receive-reduce or finalize steps; `meter` (may be null) is told of every message step
// (collectives/passive.h).
void execute(const Schedule& schedule, transport::Context& ctx, const ExecBuffers& buffers,
             const Reduction* reduction, uint64_t tagBase, Deadline deadline,
             PassiveMeter* meter = nullptr);

}  // namespace rankmap::coll
