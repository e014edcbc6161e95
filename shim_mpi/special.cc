// The hand-written wrappers of librankmap_mpi.so (mode `manual` in shim_mpi/mpi_functions.txt):
// start-up and shutdown, Fortran handle conversion, and the calls where substituting the
// reordered world for MPI_COMM_WORLD needs a rule of its own (docs/mpi.md, "Substitution rules").
// Each is exported as PMPI_X and MPI_X, like the generated ones.
#include "shim_mpi/engine.h"
#include "shim_mpi/profile.h"
#include "shim_mpi/shim.h"
#include "shim_mpi/wrappers.gen.h"

using rankmap::shim_mpi::CallGuard;
using rankmap::shim_mpi::gReordered;
using rankmap::shim_mpi::isWorld;
using rankmap::shim_mpi::kNoComm;
using rankmap::shim_mpi::profileTraffic;
using rankmap::shim_mpi::toReordered;
namespace real = rankmap::shim_mpi::real;

namespace {
// The size of `comm` (0 when MPI cannot say): a collective's whole buffer from its per-rank count.
int commSize(MPI_Comm comm) {
  int n = 0;
  return real::PMPI_Comm_size(comm, &n) == MPI_SUCCESS ? n : 0;
}
}  // namespace

extern "C" {

// Start-up: the real MPI_Init, then the plan exchange and the split (collective on every rank).
RANKMAP_SHIM_EXPORT int PMPI_Init(int* argc, char*** argv) {
  CallGuard guard;
  int rc = real::PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS && guard.outermost()) rankmap::shim_mpi::afterInit();
  return rc;
}
RANKMAP_SHIM_EXPORT int MPI_Init(int* argc, char*** argv) __attribute__((alias("PMPI_Init")));

RANKMAP_SHIM_EXPORT int PMPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  CallGuard guard;
  int rc = real::PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS && guard.outermost()) rankmap::shim_mpi::afterInit();
  return rc;
}
RANKMAP_SHIM_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided)
    __attribute__((alias("PMPI_Init_thread")));

// Shutdown: the reordered world is freed while MPI still works.
RANKMAP_SHIM_EXPORT int PMPI_Finalize(void) {
  CallGuard guard;
  if (guard.outermost()) rankmap::shim_mpi::beforeFinalize();
  return real::PMPI_Finalize();
}
RANKMAP_SHIM_EXPORT int MPI_Finalize(void) __attribute__((alias("PMPI_Finalize")));

// Fortran handle 0 (MPI_COMM_WORLD) becomes the reordered world; Open MPI's Fortran bindings
// convert every communicator argument with PMPI_Comm_f2c. (PMPI_Comm_c2f maps the reordered world
// back to 0: mode `real`, generated.) In MPICH's ABI both are casts in mpi.h, a Fortran handle is
// the C handle, and its Fortran bindings pass MPI_COMM_WORLD to the wrapped calls as C does.
#ifndef MPI_Comm_f2c
RANKMAP_SHIM_EXPORT MPI_Comm PMPI_Comm_f2c(MPI_Fint comm) {
  CallGuard guard;
  MPI_Comm c = real::PMPI_Comm_f2c(comm);
  return guard.outermost() ? rankmap::shim_mpi::toReordered(c) : c;
}
RANKMAP_SHIM_EXPORT MPI_Comm MPI_Comm_f2c(MPI_Fint comm) __attribute__((alias("PMPI_Comm_f2c")));
#endif

// Freeing or disconnecting the world is erroneous: the reordered world is passed as the real one,
// so the program gets the very error MPI gives for MPI_COMM_WORLD, and the handle stays valid.
RANKMAP_SHIM_EXPORT int PMPI_Comm_free(MPI_Comm* comm) {
  CallGuard guard;
  if (guard.outermost() && comm != nullptr && isWorld(*comm)) {
    MPI_Comm world = MPI_COMM_WORLD;
    return real::PMPI_Comm_free(&world);
  }
  if (guard.outermost() && comm != nullptr) rankmap::shim_mpi::profileFree(*comm);
  return real::PMPI_Comm_free(comm);
}
RANKMAP_SHIM_EXPORT int MPI_Comm_free(MPI_Comm* comm) __attribute__((alias("PMPI_Comm_free")));

RANKMAP_SHIM_EXPORT int PMPI_Comm_disconnect(MPI_Comm* comm) {
  CallGuard guard;
  if (guard.outermost() && comm != nullptr && isWorld(*comm)) {
    MPI_Comm world = MPI_COMM_WORLD;
    return real::PMPI_Comm_disconnect(&world);
  }
  return real::PMPI_Comm_disconnect(comm);
}
RANKMAP_SHIM_EXPORT int MPI_Comm_disconnect(MPI_Comm* comm)
    __attribute__((alias("PMPI_Comm_disconnect")));

// Attributes: looked up on the reordered world first (user attributes set through the shim live
// there), then on the real world, which alone carries the predefined ones (MPI_TAG_UB, MPI_HOST,
// MPI_IO, MPI_WTIME_IS_GLOBAL, MPI_APPNUM, MPI_UNIVERSE_SIZE, MPI_LASTUSEDCODE).
RANKMAP_SHIM_EXPORT int PMPI_Comm_get_attr(MPI_Comm comm, int keyval, void* value, int* flag) {
  CallGuard guard;
  MPI_Comm w = gReordered.load(std::memory_order_acquire);
  if (guard.outermost() && w != kNoComm && isWorld(comm)) {
    int rc = real::PMPI_Comm_get_attr(w, keyval, value, flag);
    if (rc != MPI_SUCCESS || (flag != nullptr && *flag)) return rc;
    return real::PMPI_Comm_get_attr(MPI_COMM_WORLD, keyval, value, flag);
  }
  return real::PMPI_Comm_get_attr(comm, keyval, value, flag);
}
RANKMAP_SHIM_EXPORT int MPI_Comm_get_attr(MPI_Comm comm, int keyval, void* value, int* flag)
    __attribute__((alias("PMPI_Comm_get_attr")));

RANKMAP_SHIM_EXPORT int PMPI_Attr_get(MPI_Comm comm, int keyval, void* value, int* flag) {
  CallGuard guard;
  MPI_Comm w = gReordered.load(std::memory_order_acquire);
  if (guard.outermost() && w != kNoComm && isWorld(comm)) {
    int rc = real::PMPI_Attr_get(w, keyval, value, flag);
    if (rc != MPI_SUCCESS || (flag != nullptr && *flag)) return rc;
    return real::PMPI_Attr_get(MPI_COMM_WORLD, keyval, value, flag);
  }
  return real::PMPI_Attr_get(comm, keyval, value, flag);
}
RANKMAP_SHIM_EXPORT int MPI_Attr_get(MPI_Comm comm, int keyval, void* value, int* flag)
    __attribute__((alias("PMPI_Attr_get")));

// An error handler set on the world goes on both: the reordered world serves the wrapped calls,
// the real one the calls that name no communicator (MPI reports those on MPI_COMM_WORLD).
RANKMAP_SHIM_EXPORT int PMPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler) {
  CallGuard guard;
  MPI_Comm w = gReordered.load(std::memory_order_acquire);
  if (guard.outermost() && w != kNoComm && isWorld(comm)) {
    int rc = real::PMPI_Comm_set_errhandler(MPI_COMM_WORLD, errhandler);
    if (rc != MPI_SUCCESS) return rc;
    return real::PMPI_Comm_set_errhandler(w, errhandler);
  }
  return real::PMPI_Comm_set_errhandler(comm, errhandler);
}
RANKMAP_SHIM_EXPORT int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler)
    __attribute__((alias("PMPI_Comm_set_errhandler")));

// The collectives the engine may serve (RANKMAP_MPI_ENGINE=1, shim_mpi/engine.h): substituted
// like every `world` call, then offered to the engine, then MPI.
RANKMAP_SHIM_EXPORT int PMPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = rankmap::shim_mpi::toReordered(comm);
    profileTraffic("allreduce", comm, count, datatype);
    if (rankmap::shim_mpi::engineActive())
      if (auto rc = rankmap::shim_mpi::engineAllreduce(sendbuf, recvbuf, count, datatype, op, comm))
        return *rc;
  }
  return real::PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}
RANKMAP_SHIM_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                      MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
    __attribute__((alias("PMPI_Allreduce")));

RANKMAP_SHIM_EXPORT int PMPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                   MPI_Comm comm) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = rankmap::shim_mpi::toReordered(comm);
    profileTraffic("broadcast", comm, count, datatype);
    if (rankmap::shim_mpi::engineActive())
      if (auto rc = rankmap::shim_mpi::engineBcast(buffer, count, datatype, root, comm)) return *rc;
  }
  return real::PMPI_Bcast(buffer, count, datatype, root, comm);
}
RANKMAP_SHIM_EXPORT int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                  MPI_Comm comm) __attribute__((alias("PMPI_Bcast")));

RANKMAP_SHIM_EXPORT int PMPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                       void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                       MPI_Comm comm) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = rankmap::shim_mpi::toReordered(comm);
    if (rankmap::shim_mpi::profiling())
      profileTraffic("allgather", comm, 1ll * recvcount * commSize(comm), recvtype);
    if (rankmap::shim_mpi::engineActive())
      if (auto rc = rankmap::shim_mpi::engineAllgather(sendbuf, sendcount, sendtype, recvbuf,
                                                       recvcount, recvtype, comm))
        return *rc;
  }
  return real::PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
RANKMAP_SHIM_EXPORT int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                      void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                      MPI_Comm comm) __attribute__((alias("PMPI_Allgather")));

RANKMAP_SHIM_EXPORT int PMPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = rankmap::shim_mpi::toReordered(comm);
    if (rankmap::shim_mpi::profiling())
      profileTraffic("reducescatter", comm, 1ll * recvcount * commSize(comm), datatype);
    if (rankmap::shim_mpi::engineActive())
      if (auto rc = rankmap::shim_mpi::engineReduceScatterBlock(sendbuf, recvbuf, recvcount,
                                                                datatype, op, comm))
        return *rc;
  }
  return real::PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
}
RANKMAP_SHIM_EXPORT int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                                 MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
    __attribute__((alias("PMPI_Reduce_scatter_block")));

// Recorded in the job's profile (shim_mpi/profile.h): the communicators the program makes, and
// the traffic of the collectives and sends above and below; otherwise like the generated
// `world` wrappers.
RANKMAP_SHIM_EXPORT int PMPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  CallGuard guard;
  if (!guard.outermost()) return real::PMPI_Comm_split(comm, color, key, newcomm);
  int rc = real::PMPI_Comm_split(toReordered(comm), color, key, newcomm);
  if (rc == MPI_SUCCESS && newcomm != nullptr)
    rankmap::shim_mpi::profileComm("MPI_Comm_split", *newcomm);
  return rc;
}
RANKMAP_SHIM_EXPORT int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm)
    __attribute__((alias("PMPI_Comm_split")));

RANKMAP_SHIM_EXPORT int PMPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* newcomm) {
  CallGuard guard;
  if (!guard.outermost()) return real::PMPI_Comm_create(comm, group, newcomm);
  int rc = real::PMPI_Comm_create(toReordered(comm), group, newcomm);
  if (rc == MPI_SUCCESS && newcomm != nullptr)
    rankmap::shim_mpi::profileComm("MPI_Comm_create", *newcomm);
  return rc;
}
RANKMAP_SHIM_EXPORT int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* newcomm)
    __attribute__((alias("PMPI_Comm_create")));

RANKMAP_SHIM_EXPORT int PMPI_Iallreduce(const void* sendbuf, void* recvbuf, int count,
                                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                        MPI_Request* request) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = toReordered(comm);
    profileTraffic("allreduce", comm, count, datatype);
  }
  return real::PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}
RANKMAP_SHIM_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count,
                                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                       MPI_Request* request)
    __attribute__((alias("PMPI_Iallreduce")));

RANKMAP_SHIM_EXPORT int PMPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                      void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                      MPI_Comm comm) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = toReordered(comm);
    if (rankmap::shim_mpi::profiling())
      profileTraffic("alltoall", comm, 1ll * sendcount * commSize(comm), sendtype);
  }
  return real::PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}
RANKMAP_SHIM_EXPORT int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                     void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                     MPI_Comm comm) __attribute__((alias("PMPI_Alltoall")));

RANKMAP_SHIM_EXPORT int PMPI_Send(const void* buf, int count, MPI_Datatype datatype, int dest,
                                  int tag, MPI_Comm comm) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = toReordered(comm);
    profileTraffic("sendrecv", comm, count, datatype, dest);
  }
  return real::PMPI_Send(buf, count, datatype, dest, tag, comm);
}
RANKMAP_SHIM_EXPORT int MPI_Send(const void* buf, int count, MPI_Datatype datatype, int dest,
                                 int tag, MPI_Comm comm) __attribute__((alias("PMPI_Send")));

RANKMAP_SHIM_EXPORT int PMPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest,
                                   int tag, MPI_Comm comm, MPI_Request* request) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = toReordered(comm);
    profileTraffic("sendrecv", comm, count, datatype, dest);
  }
  return real::PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
}
RANKMAP_SHIM_EXPORT int MPI_Isend(const void* buf, int count, MPI_Datatype datatype, int dest,
                                  int tag, MPI_Comm comm, MPI_Request* request)
    __attribute__((alias("PMPI_Isend")));

RANKMAP_SHIM_EXPORT int PMPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                      int dest, int sendtag, void* recvbuf, int recvcount,
                                      MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                                      MPI_Status* status) {
  CallGuard guard;
  if (guard.outermost()) {
    comm = toReordered(comm);
    profileTraffic("sendrecv", comm, sendcount, sendtype, dest);
  }
  return real::PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount,
                             recvtype, source, recvtag, comm, status);
}
RANKMAP_SHIM_EXPORT int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                     int dest, int sendtag, void* recvbuf, int recvcount,
                                     MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                                     MPI_Status* status) __attribute__((alias("PMPI_Sendrecv")));

}  // extern "C"
