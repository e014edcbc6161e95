#include "collectives/transport/loopback/context.h"

#include "common/error.h"

namespace rankmap::coll::transport::loopback {

Fabric::Fabric(int size) : size_(size) {
  pairs_.reserve(static_cast<size_t>(size) * size);
  for (int src = 0; src < size; ++src) {
    for (int dst = 0; dst < size; ++dst) pairs_.push_back(std::make_unique<Pair>(src, dst));
  }
}

void Fabric::close(int rank) {
  for (int peer = 0; peer < size_; ++peer) {
    pair(rank, peer).closeSrc();
    pair(peer, rank).closeDst();
  }
}

LoopbackContext::LoopbackContext(std::shared_ptr<Fabric> fabric, int rank)
    : Context(rank, fabric->size()), fabric_(std::move(fabric)) {}

LoopbackContext::~LoopbackContext() { fabric_->close(rank()); }

RequestPtr LoopbackContext::isend(int peer, uint64_t tag, const void* buf, size_t bytes) {
  checkPeer(peer);
  return fabric_->pair(rank(), peer).send(tag, buf, bytes);
}

RequestPtr LoopbackContext::irecv(int peer, uint64_t tag, void* buf, size_t bytes) {
  checkPeer(peer);
  return fabric_->pair(peer, rank()).recv(tag, buf, bytes);
}

std::string LoopbackContext::peerName(int peer) const {
  return fmt::format("rank {} (loopback)", peer);
}

}  // namespace rankmap::coll::transport::loopback
