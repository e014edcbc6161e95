#include "collectives/transport/loopback/pair.h"

#include <cstring>

#include "collectives/transport/loopback/device.h"
#include "common/error.h"

namespace rankmap::coll::transport::loopback {

namespace {
std::shared_ptr<const std::string> rankName(int rank) {
  return std::make_shared<const std::string>(fmt::format("rank {} (loopback)", rank));
}
}  // namespace

Pair::Pair(int src, int dst)
    : src_(src), dst_(dst), srcName_(rankName(src)), dstName_(rankName(dst)) {}

void Pair::deliver(Message& msg, PostedRecv& recv) {
  if (msg.bytes != recv.bytes) {
    recv.req->failSizeMismatch(dst_, msg.bytes);
  } else {
    if (msg.bytes > 0) {
      // Eager messages carry their bytes; the others still point at the sender's buffer.
      std::memcpy(recv.buf, msg.src != nullptr ? msg.src : msg.data.data(), msg.bytes);
    }
    recv.req->complete();
  }
  if (msg.req) msg.req->complete();
}

RequestPtr Pair::send(uint64_t tag, const void* buf, size_t bytes) {
  auto req = std::make_shared<RequestState>(OpKind::Send, dstName_, tag, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (dstClosed_) {
    req->fail(RANKMAP_MAKE_ERROR(PeerError, "rank {}: {} closed its context; cannot {}", src_,
                                 *dstName_, req->describe()));
    return req;
  }
  auto posted = posted_.find(tag);
  if (posted != posted_.end() && !posted->second.empty()) {
    PostedRecv recv = std::move(posted->second.front());
    posted->second.pop_front();
    if (posted->second.empty()) posted_.erase(posted);
    Message msg{req, buf, bytes, {}};
    deliver(msg, recv);
    return req;
  }
  Message msg;
  msg.bytes = bytes;
  if (bytes <= kEagerLimit) {
    const char* p = static_cast<const char*>(buf);
    msg.data.assign(p, p + bytes);
    req->complete();
  } else {
    msg.req = req;
    msg.src = buf;
  }
  unexpected_[tag].push_back(std::move(msg));
  return req;
}

RequestPtr Pair::recv(uint64_t tag, void* buf, size_t bytes) {
  auto req = std::make_shared<RequestState>(OpKind::Recv, srcName_, tag, bytes);
  PostedRecv recv{req, buf, bytes};
  std::lock_guard<std::mutex> lock(mu_);
  auto queued = unexpected_.find(tag);
  if (queued != unexpected_.end() && !queued->second.empty()) {
    Message msg = std::move(queued->second.front());
    queued->second.pop_front();
    if (queued->second.empty()) unexpected_.erase(queued);
    deliver(msg, recv);
    return req;
  }
  if (srcClosed_) {
    req->fail(RANKMAP_MAKE_ERROR(PeerError, "rank {}: {} closed its context; cannot complete {}",
                                 dst_, *srcName_, req->describe()));
    return req;
  }
  posted_[tag].push_back(std::move(recv));
  return req;
}

void Pair::closeSrc() {
  std::lock_guard<std::mutex> lock(mu_);
  srcClosed_ = true;
  for (auto& [tag, queue] : posted_) {
    for (auto& r : queue) {
      r.req->fail(RANKMAP_MAKE_ERROR(PeerError, "rank {}: {} closed its context during {}", dst_,
                                     *srcName_, r.req->describe()));
    }
  }
  posted_.clear();
  // Rendezvous messages point into the closing rank's memory: drop them. Eager copies stay
  // receivable, as over TCP where bytes already sent survive the sender's exit.
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    auto& queue = it->second;
    for (auto m = queue.begin(); m != queue.end();) {
      if (m->req) {
        m->req->fail(RANKMAP_MAKE_ERROR(IoError, "rank {}: context closed during {}", src_,
                                        m->req->describe()));
        m = queue.erase(m);
      } else {
        ++m;
      }
    }
    it = queue.empty() ? unexpected_.erase(it) : std::next(it);
  }
}

void Pair::closeDst() {
  std::lock_guard<std::mutex> lock(mu_);
  dstClosed_ = true;
  for (auto& [tag, queue] : posted_) {
    for (auto& r : queue) {
      r.req->fail(RANKMAP_MAKE_ERROR(IoError, "rank {}: context closed during {}", dst_,
                                     r.req->describe()));
    }
  }
  posted_.clear();
  for (auto& [tag, queue] : unexpected_) {
    for (auto& m : queue) {
      if (m.req) {
        m.req->fail(RANKMAP_MAKE_ERROR(PeerError, "rank {}: {} closed its context during {}",
                                       src_, *dstName_, m.req->describe()));
      }
    }
  }
  unexpected_.clear();
}

}  // namespace rankmap::coll::transport::loopback
