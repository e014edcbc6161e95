// Bootstrap: how the ranks of a group find each other before the transport connects them.
//
// A Bootstrap knows this rank, the world size and can allgather small blobs (listen addresses,
// queue-pair numbers) over some side channel. Two kinds exist:
// - root (root_bootstrap.h): like NCCL's unique id, rank 0 listens on RANKMAP_ROOT=host:port and
//   every other rank connects to it; standalone launches and tests use it;
// - callback (callback_bootstrap.h): the allgather is a function the embedding program provides,
//   e.g. MPI_Allgather on the application's communicator in the MPI shim (mpi_bootstrap.h).
//
// Contract: allgather() is collective, every rank calls it the same number of times in the same
// order; it is used by one thread at a time. A bootstrap is only used while connecting; the
// transport does not keep it.
#pragma once

#include <string>
#include <vector>

#include "common/deadline.h"

namespace rankmap::coll::bootstrap {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Every rank contributes `mine` (any bytes, any length); returns every rank's contribution,
  // indexed by rank. Throws TimeoutError when the group does not complete before `deadline`,
  // PeerError when a rank fails or disagrees.
  virtual std::vector<std::string> allgather(const std::string& mine, Deadline deadline) = 0;

  // Returns once every rank has entered it.
  void barrier(Deadline deadline) { allgather(std::string(), deadline); }

  // The local IPv4 address this rank used to reach the group ("10.213.0.4"), or "" when the
  // bootstrap has no network of its own. The TCP transport listens there by default.
  virtual std::string localHost() const { return std::string(); }

 protected:
  Bootstrap(int rank, int size);

 private:
  int rank_;
  int size_;
};

}  // namespace rankmap::coll::bootstrap
