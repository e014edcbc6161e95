#include "collectives/transport/rdma/context.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "collectives/transport/rdma/memory.h"
#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll::transport::rdma {

namespace {
constexpr int kCqDepth = 4096;
constexpr auto kByeWait = std::chrono::milliseconds(200);
}  // namespace

DeviceState::~DeviceState() {
  cache.reset();
  if (pd != nullptr) ibv_dealloc_pd(pd);
  if (context != nullptr) ibv_close_device(context);
}

RdmaContext::RdmaContext(std::shared_ptr<DeviceState> device, int rank, int size)
    : Context(rank, size), device_(std::move(device)), self_(rank, rank) {
  channel_ = ibv_create_comp_channel(device_->context);
  if (channel_ == nullptr) throw SystemError("ibv_create_comp_channel", errno);
  cq_ = ibv_create_cq(device_->context, kCqDepth, nullptr, channel_, 0);
  if (cq_ == nullptr) {
    int err = errno;
    ibv_destroy_comp_channel(channel_);
    throw SystemError("ibv_create_cq", err);
  }
  try {
    wakeFd_ = RANKMAP_CHECK_SYS(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    pairs_.resize(size);
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      pairs_[peer] = std::make_unique<Pair>(rank, peer, device_->pd, cq_, device_->port,
                                            *device_->cache);
      byQpn_[pairs_[peer]->qpn()] = pairs_[peer].get();
    }
  } catch (...) {
    pairs_.clear();
    if (wakeFd_ >= 0) ::close(wakeFd_);
    ibv_destroy_cq(cq_);
    ibv_destroy_comp_channel(channel_);
    throw;
  }
}

RdmaContext::~RdmaContext() {
  if (progress_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& p : pairs_) {
        if (p) p->sendBye();
      }
    }
    // Let the Byes leave (the progress thread reaps their completions).
    auto until = std::chrono::steady_clock::now() + kByeWait;
    while (std::chrono::steady_clock::now() < until) {
      bool idle = true;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& p : pairs_) idle = idle && (!p || p->quiet());
      }
      if (idle) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop_ = true;
    uint64_t one = 1;
    if (::write(wakeFd_, &one, sizeof(one)) < 0) {
      RANKMAP_ERROR(Coll, "rank {}: cannot wake the rdma progress thread", rank());
    }
    progress_.join();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& p : pairs_) {
      if (p) p->fail(fmt::format("rank {} closed its context", rank()), false);
    }
  }
  self_.closeSrc();
  self_.closeDst();
  pairs_.clear();
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

std::string RdmaContext::localInfo() const {
  std::string out(reinterpret_cast<const char*>(&device_->portInfo), sizeof(PortInfo));
  for (int peer = 0; peer < size(); ++peer) {
    QpInfo q = pairs_[peer] ? pairs_[peer]->local() : QpInfo{0, 0};
    out.append(reinterpret_cast<const char*>(&q), sizeof(q));
  }
  return out;
}

void RdmaContext::connect(const std::vector<std::string>& infos) {
  const size_t expected = sizeof(PortInfo) + sizeof(QpInfo) * size();
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    const std::string& info = infos.at(peer);
    if (info.size() != expected) {
      RANKMAP_THROW(PeerError, "rdma transport: rank {} published {} bytes of queue-pair info, "
                    "expected {} (different world size or build?)", peer, info.size(), expected);
    }
    PortInfo remote{};
    std::memcpy(&remote, info.data(), sizeof(remote));
    if (remote.ethernet != device_->portInfo.ethernet) {
      RANKMAP_THROW(PeerError, "rdma transport: rank {} is on {} but rank {} is on {}", peer,
                    remote.ethernet ? "RoCE" : "InfiniBand", rank(),
                    device_->portInfo.ethernet ? "RoCE" : "InfiniBand");
    }
    QpInfo q{};
    std::memcpy(&q, info.data() + sizeof(PortInfo) + sizeof(QpInfo) * rank(), sizeof(q));
    pairs_[peer]->connect(device_->portInfo, remote, q);
  }
  if (ibv_req_notify_cq(cq_, 0) != 0) throw SystemError("ibv_req_notify_cq", errno);
  progress_ = std::thread([this] { progressLoop(); });
}

void RdmaContext::pollLocked() {
  ibv_wc wcs[32];
  for (;;) {
    int n = ibv_poll_cq(cq_, 32, wcs);
    if (n < 0) {
      for (auto& p : pairs_) {
        if (p) p->fail("ibv_poll_cq failed", false);
      }
      return;
    }
    for (int i = 0; i < n; ++i) {
      auto it = byQpn_.find(wcs[i].qp_num);
      if (it == byQpn_.end()) continue;
      try {
        it->second->onCompletion(wcs[i]);
      } catch (const std::exception& e) {
        it->second->fail(fmt::format("progress thread error: {}", e.what()), false);
      }
    }
    if (n < 32) return;
  }
}

void RdmaContext::progressLoop() {
  auto nextBeat = std::chrono::steady_clock::now() + kHeartbeatInterval;
  while (!stop_.load()) {
    pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {wakeFd_, POLLIN, 0}};
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        nextBeat - std::chrono::steady_clock::now());
    int rv = ::poll(fds, 2, static_cast<int>(std::max<int64_t>(0, wait.count())));
    if (rv < 0 && errno != EINTR) {
      RANKMAP_ERROR(Coll, "rank {}: poll on the completion channel failed: {}", rank(),
                    std::strerror(errno));
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (rv > 0 && (fds[0].revents & POLLIN)) {
      ibv_cq* cq = nullptr;
      void* ctx = nullptr;
      // The channel fd is blocking by default; POLLIN guarantees an event is there.
      if (ibv_get_cq_event(channel_, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        ibv_req_notify_cq(cq_, 0);
      }
    }
    // Poll after re-arming, so that a completion between the two is not missed.
    pollLocked();
    if (std::chrono::steady_clock::now() >= nextBeat) {
      for (auto& p : pairs_) {
        if (p) p->heartbeat();
      }
      nextBeat = std::chrono::steady_clock::now() + kHeartbeatInterval;
    }
  }
}

RequestPtr RdmaContext::isend(int peer, uint64_t tag, const void* buf, size_t bytes) {
  checkPeer(peer);
  if (peer == rank()) return self_.send(tag, buf, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  return pairs_[peer]->send(tag, buf, bytes);
}

RequestPtr RdmaContext::irecv(int peer, uint64_t tag, void* buf, size_t bytes) {
  checkPeer(peer);
  if (peer == rank()) return self_.recv(tag, buf, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  return pairs_[peer]->recv(tag, buf, bytes);
}

std::string RdmaContext::peerName(int peer) const {
  checkPeer(peer);
  if (peer == rank()) return fmt::format("rank {} (self)", peer);
  return *pairs_[peer]->name();
}

}  // namespace rankmap::coll::transport::rdma
