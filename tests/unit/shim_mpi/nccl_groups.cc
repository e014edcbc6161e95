// nccl_groups: an MPI program that also makes NCCL communicators, for the profile test of the
// MPI shim with librankmap_nccl.so beside it (shim_job_test.cc). NCCL here is nccl_test_double in
// process mode (RANKMAP_NCCL_DOUBLE_PROCESS=1, RANKMAP_NCCL_DOUBLE_DIR), the double and not NCCL:
// its init joins ranks across processes, its collectives move no data. Rank 0 makes one unique id
// per pair of ranks and broadcasts them over MPI; every rank then makes the communicator of its
// pair (ranks 2p and 2p+1). Prints "nccl_groups rank R result N" per rank; exits 1 when an
// NCCL call failed.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "tests/unit/shim_nccl/nccl_api.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int pairs = (size + 1) / 2;
  std::vector<nccl_api::UniqueId> ids(static_cast<size_t>(pairs));
  int result = 0;
  if (rank == 0)
    for (auto& id : ids)
      if (int r = ncclGetUniqueId(&id); r != 0) result = r;
  MPI_Bcast(ids.data(), static_cast<int>(ids.size() * sizeof(nccl_api::UniqueId)), MPI_BYTE, 0,
            MPI_COMM_WORLD);
  nccl_api::Comm comm = nullptr;
  const int pair = rank / 2;
  const int n = pair * 2 + 1 < size ? 2 : 1;
  if (result == 0) result = ncclCommInitRank(&comm, n, ids[static_cast<size_t>(pair)], rank % 2);
  std::printf("nccl_groups rank %d result %d\n", rank, result);
  std::fflush(stdout);
  if (comm != nullptr) ncclCommDestroy(comm);
  MPI_Finalize();
  return result == 0 ? 0 : 1;
}
