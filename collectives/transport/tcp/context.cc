#include "collectives/transport/tcp/context.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll::transport::tcp {

namespace {
constexpr uint64_t kWakeData = ~0ull;
}  // namespace

TcpContext::TcpContext(int rank, int size, std::vector<std::unique_ptr<Pair>> pairs,
                       std::vector<std::string> addresses, int epollFd)
    : Context(rank, size),
      addresses_(std::move(addresses)),
      epollFd_(epollFd),
      wakeFd_(RANKMAP_CHECK_SYS(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC))),
      pairs_(std::move(pairs)),
      self_(rank, rank) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeData;
  RANKMAP_CHECK_SYS(::epoll_ctl(epollFd_, EPOLL_CTL_ADD, wakeFd_, &ev));
  progress_ = std::thread([this] { progressLoop(); });
}

TcpContext::~TcpContext() {
  stop_ = true;
  uint64_t one = 1;
  if (::write(wakeFd_, &one, sizeof(one)) < 0) {
    RANKMAP_ERROR(Coll, "rank {}: cannot wake the progress thread: {}", rank(),
                  std::strerror(errno));
  }
  progress_.join();
  for (auto& p : pairs_) {
    if (p) p->fail(fmt::format("rank {} closed its context", rank()), false);
  }
  self_.closeSrc();
  self_.closeDst();
  pairs_.clear();
  ::close(wakeFd_);
  ::close(epollFd_);
}

void TcpContext::progressLoop() {
  epoll_event events[64];
  while (!stop_.load(std::memory_order_relaxed)) {
    int n = ::epoll_wait(epollFd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      RANKMAP_ERROR(Coll, "rank {}: epoll_wait failed: {}; failing every pair", rank(),
                    std::strerror(errno));
      for (auto& p : pairs_) {
        if (p) p->fail("the progress thread stopped (epoll_wait failed)", false);
      }
      return;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t data = events[i].data.u64;
      if (data == kWakeData) {
        uint64_t v;
        while (::read(wakeFd_, &v, sizeof(v)) > 0) {
        }
        continue;
      }
      Pair& pair = *pairs_[data >> 8];
      int stream = static_cast<int>(data & 0xff);
      try {
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) pair.onReadable(stream);
        if (events[i].events & EPOLLOUT) pair.onWritable(stream);
      } catch (const std::exception& e) {
        // E.g. bad_alloc for a huge unexpected message: fail that pair, keep serving the rest.
        pair.fail(fmt::format("progress thread error: {}", e.what()), false);
      }
    }
  }
}

RequestPtr TcpContext::isend(int peer, uint64_t tag, const void* buf, size_t bytes) {
  checkPeer(peer);
  if (peer == rank()) return self_.send(tag, buf, bytes);
  return pairs_[peer]->send(tag, buf, bytes);
}

RequestPtr TcpContext::irecv(int peer, uint64_t tag, void* buf, size_t bytes) {
  checkPeer(peer);
  if (peer == rank()) return self_.recv(tag, buf, bytes);
  return pairs_[peer]->recv(tag, buf, bytes);
}

std::string TcpContext::peerName(int peer) const {
  checkPeer(peer);
  return fmt::format("rank {} ({})", peer, addresses_[peer]);
}

}  // namespace rankmap::coll::transport::tcp
