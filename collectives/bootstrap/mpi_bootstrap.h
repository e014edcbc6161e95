// MPI glue for the callback bootstrap, header-only on purpose: only code that already includes
// <mpi.h> and links MPI (the MPI shim, MPI test programs) compiles it, so rankmap_collectives
// never depends on MPI. It calls PMPI_Allgather, not MPI_Allgather, so that it bypasses the
// shim's own interception of MPI_Allgather (PMPI is the profiling interface every MPI provides).
#pragma once

// Only MPI's C API is used; Open MPI's deprecated C++ bindings do not compile warning-free.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>
#include <memory>

#include "collectives/bootstrap/callback_bootstrap.h"
#include "common/error.h"

namespace rankmap::coll::bootstrap {

// A bootstrap over `comm` (its rank and size). The communicator must stay valid while the
// bootstrap is used; MPI errors become PeerError naming the MPI call and error string.
inline std::unique_ptr<Bootstrap> makeMpiBootstrap(MPI_Comm comm) {
  int rank = 0;
  int size = 0;
  if (PMPI_Comm_rank(comm, &rank) != MPI_SUCCESS || PMPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    RANKMAP_THROW(InvalidInput, "MPI bootstrap: cannot query the communicator's rank and size");
  }
  return makeCallbackBootstrap(rank, size, [comm](const void* send, void* recv, size_t bytes) {
    if (bytes > static_cast<size_t>(INT_MAX)) {
      RANKMAP_THROW(InvalidInput, "MPI bootstrap: {} bytes per rank exceed MPI's int count",
                    bytes);
    }
    int n = static_cast<int>(bytes);
    int rc = PMPI_Allgather(const_cast<void*>(send), n, MPI_BYTE, recv, n, MPI_BYTE, comm);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING] = {};
      int len = 0;
      PMPI_Error_string(rc, text, &len);
      RANKMAP_THROW(PeerError, "MPI bootstrap: PMPI_Allgather failed: {}", text);
    }
  });
}

}  // namespace rankmap::coll::bootstrap
