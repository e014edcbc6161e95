// engine_groups: an MPI program that also makes communicators of rankmap's engine through its C
// API (librankmap.so), for the profile test of the MPI shim (shim_job_test.cc). Every pair of
// ranks (2p, 2p+1) makes one over TCP on loopback, rooted at a port its first rank found free,
// and all-reduces 1024 int32 three times on it. Prints "engine_groups rank R result N" per rank;
// exits 1 when an engine call failed.
#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "rankmap/coll.h"

namespace {
// A loopback port free now (closed again: the pair's first rank binds it as the root).
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int mine = rank % 2 == 0 ? freePort() : 0;
  std::vector<int> ports(static_cast<size_t>(size));
  MPI_Allgather(&mine, 1, MPI_INT, ports.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const int first = rank - rank % 2, n = first + 1 < size ? 2 : 1;
  const std::string root = "127.0.0.1:" + std::to_string(ports[static_cast<size_t>(first)]);
  rankmapComm_t comm = nullptr;
  rankmapResult_t result = rankmapCommInitRoot(&comm, rank % 2, n, root.c_str(), nullptr);
  std::vector<int32_t> in(1024, rank), out(1024);
  for (int step = 0; step < 3 && result == rankmapSuccess; ++step)
    result = rankmapAllReduce(in.data(), out.data(), in.size(), rankmapInt32, rankmapSum, comm);
  if (result != rankmapSuccess) std::fprintf(stderr, "engine_groups: %s\n", rankmapGetLastError());
  std::printf("engine_groups rank %d result %d\n", rank, static_cast<int>(result));
  std::fflush(stdout);
  rankmapCommDestroy(comm);
  MPI_Finalize();
  return result == rankmapSuccess ? 0 : 1;
}
