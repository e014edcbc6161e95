// The MPI path of the bootstrap (bootstrap/mpi_bootstrap.h): run under mpiexec with several
// processes, every rank connects a TCP context through PMPI_Allgather and passes a token around
// a ring. CTest runs it as `mpiexec -n 3` (tests/unit/CMakeLists.txt).
#include <gtest/gtest.h>

#include "collectives/bootstrap/mpi_bootstrap.h"
#include "collectives/transport/transport.h"

namespace rankmap::coll {
namespace {

TEST(MpiBootstrap, ConnectsTcpContextsOverMpiCommWorld) {
  auto bs = bootstrap::makeMpiBootstrap(MPI_COMM_WORLD);
  int worldSize = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  ASSERT_EQ(bs->size(), worldSize);
  Deadline d = Deadline::afterMs(30000);
  auto all = bs->allgather(std::string(static_cast<size_t>(bs->rank()) * 3, 'x'), d);
  for (int r = 0; r < worldSize; ++r) ASSERT_EQ(all[r].size(), static_cast<size_t>(r) * 3);

  transport::DeviceOptions o;
  o.tcp.host = "127.0.0.1";
  o.tcp.streams = 2;
  auto ctx = transport::makeDevice(o)->connect(*bs, d);
  int r = ctx->rank(), n = ctx->size(), got = -1;
  std::vector<transport::RequestPtr> reqs{ctx->irecv((r + n - 1) % n, 0, &got, sizeof(got)),
                                          ctx->isend((r + 1) % n, 0, &r, sizeof(r))};
  transport::waitAll(reqs, d);
  EXPECT_EQ(got, (r + n - 1) % n);
  bs->barrier(d);
}

}  // namespace
}  // namespace rankmap::coll

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  // Every rank's verdict counts: fail if any rank failed.
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
