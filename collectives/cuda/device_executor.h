// The device step backend: runs any engine Schedule (collectives/schedule/schedule.h) when the
// collective's buffers are device memory, over any transport, staging through host memory. The
// loop is the one executor's (runSchedule, collectives/executor.h); this file only says how a
// step moves when its bytes live on a device.
//
// How: every buffer of the schedule (input, output, scratch) has a host mirror in DeviceOps'
// staging memory. A send copies its region device-to-host (lane kToHost) and sends from the
// mirror once the copy is done; a receive lands in the mirror and is copied host-to-device (lane
// kCompute); a receive-reduce lands in the mirror, is copied into the schedule's scratch slot on
// the device and reduced there by the reduction kernel, on the same lane. Because the schedule
// cuts messages into segments and every step starts as soon as its dependencies are done,
// segment k's device-to-host copy, segment k-1's network transfer and segment k-2's reduction
// run at the same time: copies in both directions, network and kernels overlap. A region whose
// mirror already holds the device's bytes (it was just received, e.g. the allgather half of a
// ring allreduce forwarding a segment) is sent from the mirror without a copy.
//
// Why staging through host memory: the TCP transport reads and writes host memory; GPUDirect
// RDMA would avoid the copies and is for a later transport. Mirrors as large as the buffers (not
// a small ring of slots) keep the schedule's own dependencies sufficient for correctness and
// cannot deadlock waiting for a free slot over rendezvous transports.
//
// Contract: as execute() (collectives/executor.h), with `device` holding device pointers (scratch
// at least schedule.scratchBytes()) and `ops` the device (and its staging) to use. Completion is
// polled: the caller's thread runs the schedule to its end, so on return the output is final on
// the device. On failure the device work in flight is drained before the exception leaves.
#pragma once

#include <cstdint>

#include "collectives/cuda/device_ops.h"
#include "collectives/executor.h"
#include "collectives/schedule/schedule.h"
#include "collectives/transport/transport.h"
#include "collectives/types.h"
#include "common/deadline.h"

namespace rankmap::coll::cuda {

void executeDevice(const Schedule& schedule, transport::Context& ctx, const ExecBuffers& device,
                   DataType type, ReduceOp op, uint64_t tagBase, Deadline deadline, DeviceOps& ops);

}  // namespace rankmap::coll::cuda
