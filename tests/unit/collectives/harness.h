// In-process multi-rank test harness for the collective engine (gloo's test base).
//
// spawn(worldSize, backend, fn) makes a connected group of `worldSize` ranks over `backend`
// (Loopback: makeLoopbackGroup(); Tcp: real root bootstrap and TCP sockets on 127.0.0.1), runs
// fn(context) for every rank on its own thread, and rethrows the first failure (by time) after
// every thread has finished. A rank whose fn throws closes its context at once, so the other
// ranks get PeerError instead of waiting for it until their deadlines.
//
// Tests pass deadlines to every wait (kTestDeadline is a sensible one); spawn itself bounds only
// the connection phase.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "collectives/transport/transport.h"
#include "common/deadline.h"

namespace rankmap::coll::testing {

using transport::Backend;

// Generous bound for one wait in a test on a loaded 2-core machine; tests that expect a timeout
// use their own, short, deadlines.
inline constexpr std::chrono::seconds kTestDeadline{30};

inline Deadline testDeadline() { return Deadline::after(kTestDeadline); }

struct SpawnOptions {
  // Options of the TCP device (streams, buffers); `host` defaults to 127.0.0.1.
  transport::TcpOptions tcp;
  // Bound of the connection phase.
  std::chrono::milliseconds connectTimeout{30000};
};

// Connects a group of `worldSize` contexts over `backend` (index = rank). TCP contexts are
// connected by one thread per rank through a root bootstrap on 127.0.0.1 (ephemeral port).
std::vector<std::unique_ptr<transport::Context>> makeGroup(int worldSize, Backend backend,
                                                           const SpawnOptions& options = {});

// Runs fn on every rank of a fresh group, one thread per rank; rethrows the first failure.
void spawn(int worldSize, Backend backend, const std::function<void(transport::Context&)>& fn,
           const SpawnOptions& options = {});

}  // namespace rankmap::coll::testing
