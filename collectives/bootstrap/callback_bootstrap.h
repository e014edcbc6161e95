// Callback bootstrap: the allgather is a function the embedding program provides, so that the
// engine can join an existing job's side channel (MPI, a PyTorch store) without linking it.
//
// Why callbacks rather than an MPI_Comm-based class in rankmap_collectives: the library must not
// force MPI on users that do not run under MPI (the root bootstrap needs no MPI), and the MPI
// shim must call PMPI_Allgather (not its own intercepted MPI_Allgather). So the MPI glue is the
// header-only mpi_bootstrap.h, compiled only by code that includes <mpi.h> anyway.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "collectives/bootstrap/bootstrap.h"

namespace rankmap::coll::bootstrap {

// A fixed-size allgather: every rank passes `bytes` bytes at `send`; `recv` (size * bytes)
// receives them ordered by rank. It blocks until all ranks call it and throws on failure.
// MPI_Allgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, comm) is one.
using AllgatherFn = std::function<void(const void* send, void* recv, size_t bytes)>;

// allgather() first exchanges (world size, blob length) with one call, failing with PeerError
// naming a rank whose world size differs, then the blobs padded to the longest with a second.
// The callback cannot be interrupted: the deadline is checked before each call only, and the
// embedding runtime (MPI) is responsible for its own failure detection.
std::unique_ptr<Bootstrap> makeCallbackBootstrap(int rank, int size, AllgatherFn allgather);

}  // namespace rankmap::coll::bootstrap
