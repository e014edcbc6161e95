#include "collectives/transport/tcp/pair.h"

#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll::transport::tcp {

namespace {
// Headers and payload pieces smaller than this go through the staging buffer (one recv for many
// small messages); larger payloads are read straight into their destination.
constexpr size_t kStagingBytes = 64u << 10;
constexpr size_t kDirectMin = 16u << 10;
// Bytes one onReadable() call may consume before yielding to the other sockets.
constexpr size_t kReadBudget = 16u << 20;
constexpr int kMaxIov = 64;
constexpr size_t kHeaderBytes = sizeof(ChunkHeader);
// Unexpected messages above this are mapped (MessageBuffer).
constexpr uint64_t kHeapMessageMax = 1u << 20;
}  // namespace

MessageBuffer MessageBuffer::allocate(uint64_t bytes) {
  MessageBuffer b;
  if (bytes <= kHeapMessageMax) {
    b.data_ = new (std::nothrow) char[std::max<uint64_t>(bytes, 1)];
    return b;
  }
  if (bytes > std::numeric_limits<size_t>::max()) return b;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return b;
  b.data_ = static_cast<char*>(p);
  b.mapped_ = bytes;
  return b;
}

MessageBuffer& MessageBuffer::operator=(MessageBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    mapped_ = std::exchange(o.mapped_, 0);
  }
  return *this;
}

void MessageBuffer::release() {
  if (data_ == nullptr) return;
  if (mapped_ > 0)
    ::munmap(data_, mapped_);
  else
    delete[] data_;
  data_ = nullptr;
  mapped_ = 0;
}

Pair::Pair(int rank, int peer, std::string peerName, std::vector<Socket> sockets, int epollFd,
           uint64_t stripeMin)
    : rank_(rank),
      peer_(peer),
      name_(std::make_shared<const std::string>(std::move(peerName))),
      epollFd_(epollFd),
      stripeMin_(std::max<uint64_t>(stripeMin, 1)),
      streams_(sockets.size()) {
  for (size_t i = 0; i < sockets.size(); ++i) {
    Stream& s = streams_[i];
    s.socket = std::move(sockets[i]);
    s.staging = std::make_unique<char[]>(kStagingBytes);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = (static_cast<uint64_t>(peer) << 8) | i;
    RANKMAP_CHECK_SYS(::epoll_ctl(epollFd_, EPOLL_CTL_ADD, s.socket.fd(), &ev));
  }
}

RequestPtr Pair::send(uint64_t tag, const void* buf, size_t bytes) {
  auto req = std::make_shared<RequestState>(OpKind::Send, name_, tag, bytes);
  std::string error;
  {
    std::lock_guard<std::mutex> lock(sendMu_);
    if (failed_) {
      failRequestLocked(*req);
      return req;
    }
    uint64_t seq = sendSeq_[tag]++;
    int nStreams = static_cast<int>(streams_.size());
    int chunks = (nStreams > 1 && bytes >= stripeMin_) ? nStreams : 1;
    size_t chunkBytes = (bytes + chunks - 1) / chunks;
    auto op = std::make_shared<SendOp>(SendOp{req, chunks});
    const char* data = static_cast<const char*>(buf);
    std::vector<int> touched;
    for (int k = 0; k < chunks; ++k) {
      size_t offset = std::min(bytes, k * chunkBytes);
      size_t length = std::min(chunkBytes, bytes - offset);
      int stream = (nextStream_ + k) % nStreams;
      streams_[stream].queue.push_back(
          SendChunk{op, ChunkHeader{tag, seq, bytes, offset, length}, data + offset});
      touched.push_back(stream);
    }
    nextStream_ = (nextStream_ + 1) % nStreams;
    // A non-empty queue is being flushed by the progress thread (wantWrite); else write now.
    for (int stream : touched) {
      if (!streams_[stream].wantWrite) {
        error = flushLocked(stream);
        if (!error.empty()) break;
      }
    }
  }
  if (!error.empty()) fail(error, true);
  return req;
}

RequestPtr Pair::recv(uint64_t tag, void* buf, size_t bytes) {
  auto req = std::make_shared<RequestState>(OpKind::Recv, name_, tag, bytes);
  std::lock_guard<std::mutex> lock(recvMu_);
  Key key{tag, recvSeq_[tag]++};
  if (auto a = arrived_.find(key); a != arrived_.end()) {
    if (a->second.total != bytes) {
      req->failSizeMismatch(rank_, a->second.total);
    } else {
      if (bytes > 0) std::memcpy(buf, a->second.buffer.get(), bytes);
      req->complete();
    }
    arrived_.erase(a);
    return req;
  }
  if (auto in = incoming_.find(key); in != incoming_.end()) {
    // Still arriving into an unexpected buffer: copy when the last chunk lands.
    in->second.req = req;
    if (in->second.total != bytes) {
      in->second.discard = true;
      req->failSizeMismatch(rank_, in->second.total);
    } else {
      in->second.copyTo = static_cast<char*>(buf);
    }
    return req;
  }
  if (failed_) {
    failRequestLocked(*req);
    return req;
  }
  posted_.emplace(key, PostedRecv{req, static_cast<char*>(buf), bytes});
  return req;
}

void Pair::setWantWriteLocked(int stream, bool want) {
  Stream& s = streams_[stream];
  if (s.wantWrite == want) return;
  s.wantWrite = want;
  // A stream at end-of-file has left the epoll set: the peer is going away, and the pair fails
  // when its last stream ends, which also fails what is queued here.
  if (s.eof) return;
  epoll_event ev{};
  ev.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
  ev.data.u64 = (static_cast<uint64_t>(peer_) << 8) | static_cast<uint64_t>(stream);
  ::epoll_ctl(epollFd_, EPOLL_CTL_MOD, s.socket.fd(), &ev);
}

std::string Pair::flushLocked(int stream) {
  Stream& s = streams_[stream];
  while (!s.queue.empty()) {
    iovec iov[kMaxIov];
    int count = 0;
    for (auto it = s.queue.begin(); it != s.queue.end() && count + 2 <= kMaxIov; ++it) {
      if (it->sent < kHeaderBytes) {
        iov[count++] = {reinterpret_cast<char*>(&it->header) + it->sent, kHeaderBytes - it->sent};
      }
      size_t payloadSent = it->sent > kHeaderBytes ? it->sent - kHeaderBytes : 0;
      if (it->header.length > payloadSent) {
        iov[count++] = {const_cast<char*>(it->data) + payloadSent,
                        it->header.length - payloadSent};
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    ssize_t n = ::sendmsg(s.socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        setWantWriteLocked(stream, true);
        return {};
      }
      return fmt::format("sending to {} failed on stream {}: {}", *name_, stream,
                         std::strerror(errno));
    }
    size_t left = static_cast<size_t>(n);
    while (left > 0) {
      SendChunk& c = s.queue.front();
      size_t take = std::min(left, kHeaderBytes + c.header.length - c.sent);
      c.sent += take;
      left -= take;
      if (c.sent == kHeaderBytes + c.header.length) {
        if (--c.op->chunksLeft == 0) c.op->req->complete();
        s.queue.pop_front();
      }
    }
  }
  setWantWriteLocked(stream, false);
  return {};
}

void Pair::onWritable(int stream) {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(sendMu_);
    if (failed_) return;
    error = flushLocked(stream);
  }
  if (!error.empty()) fail(error, true);
}

void Pair::onReadable(int stream) {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(recvMu_);
    if (failed_) return;
    error = readLocked(stream);
  }
  if (!error.empty()) fail(error, true);
}

std::string Pair::beginChunkLocked(Stream& s) {
  const ChunkHeader& h = s.header;
  if (h.length > h.total || h.offset > h.total - h.length) {
    return fmt::format("{} sent a corrupt chunk header (offset {}, length {}, total {})", *name_,
                       h.offset, h.length, h.total);
  }
  Key key{h.tag, h.seq};
  auto it = incoming_.find(key);
  if (it != incoming_.end()) {
    if (it->second.total != h.total) {
      return fmt::format("{} sent chunks of one message (tag {}) with totals {} and {}", *name_,
                         h.tag, it->second.total, h.total);
    }
    return {};
  }
  Incoming in;
  in.total = h.total;
  if (auto p = posted_.find(key); p != posted_.end()) {
    in.req = p->second.req;
    if (p->second.bytes != h.total) {
      in.discard = true;
      in.req->failSizeMismatch(rank_, h.total);
    } else {
      in.dest = p->second.buf;
    }
    posted_.erase(p);
  } else {
    // Unexpected: keep it until its receive is posted.
    in.buffer = MessageBuffer::allocate(h.total);
    if (!in.buffer) {
      return fmt::format("{} sent a message of {} bytes (tag {}) that this process cannot hold",
                         *name_, h.total, h.tag);
    }
    in.dest = in.buffer.get();
  }
  incoming_.emplace(key, std::move(in));
  return {};
}

char* Pair::payloadDestLocked(Stream& s) {
  Incoming& in = incoming_.at(Key{s.header.tag, s.header.seq});
  if (in.discard) return nullptr;
  return in.dest + s.header.offset + s.payloadGot;
}

void Pair::payloadLocked(Stream& s, const char* src, size_t n) {
  Incoming& in = incoming_.at(Key{s.header.tag, s.header.seq});
  if (src != nullptr && !in.discard) std::memcpy(in.dest + s.header.offset + s.payloadGot, src, n);
  s.payloadGot += n;
  in.received += n;
}

void Pair::endChunkLocked(Stream& s) {
  s.inPayload = false;
  s.headerGot = 0;
  Key key{s.header.tag, s.header.seq};
  auto it = incoming_.find(key);
  Incoming& in = it->second;
  if (in.received < in.total) return;
  if (in.req) {
    if (!in.discard) {
      if (in.copyTo != nullptr && in.total > 0) std::memcpy(in.copyTo, in.buffer.get(), in.total);
      in.req->complete();
    }
  } else {
    arrived_.emplace(key, Arrived{std::move(in.buffer), in.total});
  }
  incoming_.erase(it);
}

std::string Pair::readLocked(int stream) {
  Stream& s = streams_[stream];
  size_t budget = kReadBudget;
  for (;;) {
    // Dispatch what is staged.
    while (s.stagingBegin < s.stagingEnd) {
      size_t avail = s.stagingEnd - s.stagingBegin;
      const char* p = s.staging.get() + s.stagingBegin;
      if (!s.inPayload) {
        size_t n = std::min(avail, kHeaderBytes - s.headerGot);
        std::memcpy(reinterpret_cast<char*>(&s.header) + s.headerGot, p, n);
        s.headerGot += n;
        s.stagingBegin += n;
        if (s.headerGot == kHeaderBytes) {
          std::string error = beginChunkLocked(s);
          if (!error.empty()) return error;
          s.inPayload = true;
          s.payloadGot = 0;
          if (s.header.length == 0) endChunkLocked(s);
        }
      } else {
        size_t n = std::min<uint64_t>(avail, s.header.length - s.payloadGot);
        payloadLocked(s, p, n);
        s.stagingBegin += n;
        if (s.payloadGot == s.header.length) endChunkLocked(s);
      }
    }
    s.stagingBegin = s.stagingEnd = 0;
    if (budget == 0) return {};

    ssize_t n;
    char* direct = nullptr;
    uint64_t remaining = s.inPayload ? s.header.length - s.payloadGot : 0;
    if (remaining >= kDirectMin) direct = payloadDestLocked(s);
    if (direct != nullptr) {
      n = ::recv(s.socket.fd(), direct, std::min<uint64_t>(remaining, budget), MSG_DONTWAIT);
      if (n > 0) {
        payloadLocked(s, nullptr, static_cast<size_t>(n));
        if (s.payloadGot == s.header.length) endChunkLocked(s);
      }
    } else {
      n = ::recv(s.socket.fd(), s.staging.get(), kStagingBytes, MSG_DONTWAIT);
      if (n > 0) s.stagingEnd = static_cast<size_t>(n);
    }
    if (n > 0) {
      budget -= std::min(budget, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      if (s.inPayload || s.headerGot > 0) {
        return fmt::format("{} closed the connection in the middle of a message (stream {})",
                           *name_, stream);
      }
      s.eof = true;
      ::epoll_ctl(epollFd_, EPOLL_CTL_DEL, s.socket.fd(), nullptr);
      bool all = std::all_of(streams_.begin(), streams_.end(),
                             [](const Stream& x) { return x.eof.load(); });
      if (all) return fmt::format("{} closed the connection (exited or closed its context)", *name_);
      return {};
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
    return fmt::format("connection to {} failed on stream {}: {}", *name_, stream,
                       std::strerror(errno));
  }
}

void Pair::failRequestLocked(RequestState& req) { req.failBrokenPair(rank_, failure_, peerFault_); }

void Pair::fail(const std::string& reason, bool peerFault) {
  std::lock_guard<std::mutex> sendLock(sendMu_);
  std::lock_guard<std::mutex> recvLock(recvMu_);
  failLocked(reason, peerFault);
}

void Pair::failLocked(const std::string& reason, bool peerFault) {
  if (failed_) return;
  failed_ = true;
  failure_ = reason;
  peerFault_ = peerFault;
  size_t pending = posted_.size();
  for (auto& [key, in] : incoming_) pending += in.req ? 1 : 0;
  for (Stream& s : streams_) pending += s.queue.size();
  // A peer leaving while nothing waits on it is the normal end of a job.
  if (peerFault && pending > 0) {
    RANKMAP_WARN(Coll, "rank {}: pair {}->{}: {}; failing {} pending operation(s)", rank_, rank_,
                 peer_, reason, pending);
  } else {
    RANKMAP_DEBUG(Coll, "rank {}: pair {}->{}: {}", rank_, rank_, peer_, reason);
  }
  for (Stream& s : streams_) {
    for (SendChunk& c : s.queue) failRequestLocked(*c.op->req);
    s.queue.clear();
    if (!s.eof) ::epoll_ctl(epollFd_, EPOLL_CTL_DEL, s.socket.fd(), nullptr);
    s.eof = true;
    // Wakes the peer (end-of-file) at once; the descriptor is closed with the pair.
    ::shutdown(s.socket.fd(), SHUT_RDWR);
  }
  for (auto& [key, p] : posted_) failRequestLocked(*p.req);
  posted_.clear();
  for (auto& [key, in] : incoming_) {
    if (in.req) failRequestLocked(*in.req);
  }
  incoming_.clear();
}

}  // namespace rankmap::coll::transport::tcp
