// Recording the job's profile (common/job_profile.h) when RANKMAP_PROFILE_OUT names a file: the
// communicators the program creates (MPI_Comm_split, MPI_Comm_create) and the buffers of the
// collectives and sends it makes on them and on the world. At MPI_Finalize, world rank 0 (the
// launcher's first rank) gathers every rank's record and writes the profile there, atomically;
// `rankmap run --profile` plans the next run from it (reorder/mesh.h meshFromProfile).
//
// Counted: MPI_Allreduce/Iallreduce (allreduce), MPI_Allgather (allgather),
// MPI_Reduce_scatter_block (reducescatter), MPI_Bcast (broadcast), MPI_Alltoall (alltoall),
// MPI_Send/Isend and the send half of MPI_Sendrecv to a real rank (sendrecv). Other calls move
// what they move unrecorded. Recording costs one lock and a lookup per counted call; without the
// setting, one atomic load.
//
// Contract: never throws, never writes to stdout; a rank that cannot record makes the profile
// unwritten (rank 0 says why), never the job fail.
#pragma once

#include <mpi.h>

#include <string_view>

#include "common/config.h"

namespace rankmap::shim_mpi {

// From afterInit, on every rank once the world is settled, when every rank's setting asks for
// it (the start-up allgather tells; otherwise none records and rank 0 says why).
void startProfile(const Config& cfg) noexcept;
bool profiling() noexcept;

// After a communicator-creating call returned, on every rank that made it (`made` may be
// MPI_COMM_NULL: the call still counts, so that every rank numbers the calls alike).
void profileComm(std::string_view madeBy, MPI_Comm made) noexcept;
// Before MPI_Comm_free: the handle may be reused; its group's record stays.
void profileFree(MPI_Comm comm) noexcept;
// `count` elements of `type` on `comm` (as the program passed them, after substitution), in a
// call of `collective`; for "sendrecv", `peer` is the destination (MPI_PROC_NULL: nothing sent).
void profileTraffic(std::string_view collective, MPI_Comm comm, long long count, MPI_Datatype type,
                    int peer = 0) noexcept;

// From beforeFinalize, on every rank (collective over MPI_COMM_WORLD when recording).
void finishProfile() noexcept;

}  // namespace rankmap::shim_mpi
