// Root bootstrap: rank 0 listens on a well-known host:port (RANKMAP_ROOT, like NCCL's unique id);
// every other rank connects to it, says hello (rank, world size), and allgathers go through the
// root (gather to rank 0, then broadcast of the concatenation).
//
// Contract: construction blocks until the whole group has connected or the deadline passes.
// - A root that cannot be reached before the deadline: TimeoutError naming the root address.
// - A rank whose world size or rank disagrees with the root: the root and every rank already
//   connected get PeerError naming that rank and its address (it gets one naming the root).
// - A rank that dies or closes during an allgather: PeerError naming it, on every rank.
// The root trusts any client that speaks the protocol: bind it to a private network.
#pragma once

#include <memory>
#include <string>

#include "collectives/bootstrap/bootstrap.h"
#include "common/deadline.h"
#include "common/net.h"

namespace rankmap {
class Config;
}  // namespace rankmap

namespace rankmap::coll::bootstrap {

// The root's listening socket, made before the group starts so that a test or launcher can bind
// port 0 and hand the chosen address to the other ranks.
class RootListener {
 public:
  // Binds "host:port" (port 0 = ephemeral); throws InvalidInput on a bad address, SystemError
  // when the bind fails.
  explicit RootListener(const std::string& hostPort);
  // The address to give to the other ranks ("127.0.0.1:41235").
  std::string address() const { return address_; }

 private:
  friend class RootBootstrap;
  Listener listener_;
  std::string address_;
};

// Rank 0 on a listener made beforehand.
std::unique_ptr<Bootstrap> makeRootBootstrap(RootListener listener, int size, Deadline deadline);
// Any rank: rank 0 binds `root`, the others connect to it.
std::unique_ptr<Bootstrap> makeRootBootstrap(int rank, int size, const std::string& root,
                                             Deadline deadline);
// From RANKMAP_RANK, RANKMAP_WORLD_SIZE and RANKMAP_ROOT; throws InvalidInput naming the
// setting that is missing or out of range.
std::unique_ptr<Bootstrap> makeRootBootstrapFromConfig(const Config& config, Deadline deadline);

}  // namespace rankmap::coll::bootstrap
