// Loopback backend: the ranks of a group are threads of one process and messages are copied
// from the sender's buffer to the receiver's. It is a real transport (matching, eager and
// rendezvous sends, dead peers), not a mock: the engine's tests run every algorithm over it.
//
// Send completion: messages up to kEagerLimit bytes are copied at isend() and the send
// completes at once; larger sends complete when the matching receive copies them (rendezvous),
// like RDMA, so an algorithm that waits for a send before posting the receive it needs fails
// here with TimeoutError instead of working by luck.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "collectives/transport/transport.h"

namespace rankmap::coll::transport::loopback {

inline constexpr size_t kEagerLimit = 64u << 10;

// Makes a connected group of `size` contexts, one per rank (index = rank). Each context is then
// used by its own thread. Throws InvalidInput when size < 1.
std::vector<std::unique_ptr<Context>> makeLoopbackGroup(int size);

// A loopback device: ranks (threads of this process) that call connect() on the same device with
// bootstraps of one group are joined into one group. Prefer makeLoopbackGroup() in tests.
std::shared_ptr<Device> makeLoopbackDevice();

}  // namespace rankmap::coll::transport::loopback
