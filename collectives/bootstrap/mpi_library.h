// The MPI library loaded at run time (dlopen), so that a program that does not link MPI
// (`rankmap bench`, the C API's rankmapCommInitFromEnv) can find its peers under mpirun the way
// an MPI program does: MPI_Init, then rank 0's listen address broadcast over MPI_COMM_WORLD
// (collectives/connect.h uses it and then runs the root bootstrap).
//
// ABI: only Open MPI's (libmpi.so.40) is handled. There MPI_Comm and MPI_Datatype are pointers,
// and MPI_COMM_WORLD / MPI_BYTE are the addresses of the exported objects ompi_mpi_comm_world and
// ompi_mpi_byte, found with dlsym. MPICH's ABI (libmpich.so.12) uses integer handles and other
// function signatures; it is not handled here (chooseRendezvous refuses it with an error that
// names RANKMAP_ROOT). A library without ompi_mpi_comm_world is refused the same way.
//
// Blocking: MPI_Init, MPI_Bcast and MPI_Finalize take no deadline and cannot be interrupted.
// They are the only uninterruptible steps of the rendezvous; the launcher is responsible for a
// rank that dies or never starts (Open MPI's mpirun aborts the whole job then).
//
// This file is a dlopen border: the resolved functions are held as function pointers, nowhere
// else. Used by one thread at a time.
#pragma once

#include <memory>
#include <string>

namespace rankmap::coll::bootstrap {

class MpiLibrary {
 public:
  // dlopen(`path`) (a soname such as "libmpi.so.40" or a file), resolves the functions and
  // MPI_COMM_WORLD, and calls MPI_Init unless MPI is initialized already (then MPI_Finalize is
  // left to whoever initialized it). Throws IoError naming the path and dlerror() when the
  // library or a symbol is missing, PeerError naming the call when MPI_Init fails.
  static std::unique_ptr<MpiLibrary> open(const std::string& path);
  // MPI_Finalize if open() called MPI_Init; never throws. The library stays loaded (Open MPI
  // leaves threads and handlers behind that must not lose their code).
  ~MpiLibrary();
  MpiLibrary(const MpiLibrary&) = delete;
  MpiLibrary& operator=(const MpiLibrary&) = delete;

  const std::string& path() const { return path_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Collective on MPI_COMM_WORLD: every rank calls it; rank 0's `mine` (at most `maxBytes`
  // bytes; longer is InvalidInput, on rank 0, before any byte is sent) is returned on every
  // rank. Throws PeerError naming MPI_Bcast and MPI's error string when the call fails.
  std::string broadcastFromRank0(const std::string& mine, size_t maxBytes);

  struct Api;  // the resolved functions (mpi_library.cc)

 private:
  MpiLibrary(std::string path, std::unique_ptr<Api> api);
  std::string errorText(int rc) const;

  std::string path_;
  std::unique_ptr<Api> api_;
  bool initializedHere_ = false;
  int rank_ = -1;
  int size_ = -1;
};

}  // namespace rankmap::coll::bootstrap
