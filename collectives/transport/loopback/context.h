// loopback::Context: one rank of an in-process group (a Fabric of size x size pairs).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/loopback/pair.h"
#include "collectives/transport/transport.h"

namespace rankmap::coll::transport::loopback {

// The shared state of one group: pair (src, dst) at index src * size + dst.
class Fabric {
 public:
  explicit Fabric(int size);
  int size() const { return size_; }
  Pair& pair(int src, int dst) { return *pairs_[static_cast<size_t>(src) * size_ + dst]; }
  // Rank `rank` left: fail everything that still needs it.
  void close(int rank);

 private:
  int size_;
  std::vector<std::unique_ptr<Pair>> pairs_;
};

class LoopbackContext final : public Context {
 public:
  LoopbackContext(std::shared_ptr<Fabric> fabric, int rank);
  // Fails this rank's pending requests and, on the other ranks, those that needed this one.
  ~LoopbackContext() override;

  RequestPtr isend(int peer, uint64_t tag, const void* buf, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* buf, size_t bytes) override;
  std::string peerName(int peer) const override;
  std::string backend() const override { return "loopback"; }

 private:
  std::shared_ptr<Fabric> fabric_;
};

}  // namespace rankmap::coll::transport::loopback
