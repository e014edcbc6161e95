// Engine routing (RANKMAP_MPI_ENGINE=1): MPI_Allreduce, MPI_Bcast, MPI_Allgather and
// MPI_Reduce_scatter_block on the reordered world served by rankmap's collective engine
// (collectives/communicator.h) with the plan's algorithm per message size.
//
// The engine's communicator is built at start-up over the reordered world itself: the MPI
// bootstrap (collectives/bootstrap/mpi_bootstrap.h) exchanges the transport addresses with
// PMPI_Allgather, then the transport (RANKMAP_TRANSPORT, RANKMAP_SOCKET_IFNAME, ...) connects the
// ranks. Its ranks are the reordered world's ranks, so it gets the plan re-expressed for that
// order (identity permutation, same algorithm table and groups).
//
// A call goes to the engine only when it can serve it exactly: the reordered world (the program's
// MPI_COMM_WORLD), a predefined contiguous type it knows, MPI_SUM/PROD/MIN/MAX for reductions,
// matching send and receive types and counts, no MPI_IN_PLACE for Reduce_scatter_block. Every
// other call (derived datatypes, user or non-commutative ops, other communicators) falls back to
// MPI. The tests are on arguments MPI requires to match across ranks, so every rank makes the
// same choice. A failure inside the engine is an MPI error raised on the world's error handler.
//
// Threads: start and stop run in MPI_Init/MPI_Finalize; the collectives follow MPI's rule that
// collective calls on one communicator are not concurrent.
#pragma once

#include <mpi.h>

#include <optional>

#include "common/config.h"
#include "common/plan.h"

namespace rankmap::shim_mpi {

// Collective over `world` (the reordered world); every rank calls it when every rank asked for
// the engine. Returns whether the engine is in use, the same on every rank. Never throws.
bool startEngine(MPI_Comm world, const Plan& plan, const Config& config, int rank) noexcept;
// Frees the engine (before the world is freed); rank 0 logs what it served. Never throws.
void stopEngine() noexcept;
bool engineActive() noexcept;

// Serve a call on `comm` with the engine, or nullopt to let MPI do it.
std::optional<int> engineAllreduce(const void* sendbuf, void* recvbuf, int count,
                                   MPI_Datatype type, MPI_Op op, MPI_Comm comm) noexcept;
std::optional<int> engineBcast(void* buffer, int count, MPI_Datatype type, int root,
                               MPI_Comm comm) noexcept;
std::optional<int> engineAllgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                   void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                   MPI_Comm comm) noexcept;
std::optional<int> engineReduceScatterBlock(const void* sendbuf, void* recvbuf, int recvcount,
                                            MPI_Datatype type, MPI_Op op, MPI_Comm comm) noexcept;

}  // namespace rankmap::shim_mpi
