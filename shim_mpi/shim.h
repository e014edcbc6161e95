// librankmap_mpi.so: reorders MPI_COMM_WORLD inside unmodified MPI programs (LD_PRELOAD).
//
// After the real MPI_Init/MPI_Init_thread (from C, or PMPI_Init from Open MPI's Fortran
// bindings), every rank reads RANKMAP_PLAN and all ranks exchange what they hold (one allgather:
// plan vote: hash, status, hostname); common/plan_agreement.h decides. When every rank holds the same
// valid plan, the shim builds PMPI_Comm_split(MPI_COMM_WORLD, 0, newRank) and every wrapped call
// gets it in place of MPI_COMM_WORLD (shim_mpi/wrap.h, shim_mpi/mpi_functions.txt). Otherwise
// every rank keeps the identity order and rank 0 prints one line saying why. The rules for what
// substitution changes (attributes, groups, error handlers, Fortran handles) are in docs/mpi.md.
//
// Contract: the shim never calls exit(), never writes to stdout, and no exception crosses its
// extern "C" entries.
#pragma once

namespace rankmap::shim_mpi {

// Called by the Init wrappers after the real MPI_Init succeeded, on every rank (collective over
// MPI_COMM_WORLD). Never throws.
void afterInit() noexcept;
// Called by the Finalize wrapper before the real MPI_Finalize: withdraws and frees the reordered
// world. Never throws.
void beforeFinalize() noexcept;

}  // namespace rankmap::shim_mpi
