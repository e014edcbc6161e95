// Backend-independent parts of the transport: waitAll, RequestState, backend names, options from
// the configuration and the makeDevice() factory that dispatches to the backends.
#include "collectives/transport/transport.h"

#include <algorithm>
#include <exception>

#include "collectives/transport/loopback/device.h"
#include "collectives/transport/rdma/device.h"
#include "collectives/transport/request.h"
#include "collectives/transport/tcp/device.h"
#include "common/build_config.h"
#include "common/config.h"
#include "common/error.h"

namespace rankmap::coll::transport {

void waitAll(std::vector<RequestPtr>& reqs, Deadline deadline) {
  // Wait for every request even after a failure, so that no request still writes into memory
  // the caller frees after we throw; a timeout, though, ends the wait at once (the deadline is
  // shared, so the remaining waits could not succeed either).
  std::exception_ptr first;
  for (auto& r : reqs) {
    if (!r) continue;
    try {
      r->wait(deadline);
    } catch (const TimeoutError&) {
      if (first) std::rethrow_exception(first);
      throw;
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void Context::checkPeer(int peer) const {
  if (peer < 0 || peer >= size()) {
    RANKMAP_THROW(InvalidInput, "rank {}: peer {} out of range for a group of {}", rank(), peer,
                  size());
  }
}

void RequestState::wait(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline.when(), [&] { return state_ != State::Pending; })) {
    lock.unlock();
    RANKMAP_THROW(TimeoutError, "timed out waiting for {}", describe());
  }
  if (state_ == State::Failed) std::rethrow_exception(error_);
}

bool RequestState::test() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::Failed) std::rethrow_exception(error_);
  return state_ == State::Done;
}

bool RequestState::complete() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::Pending) return false;
    state_ = State::Done;
  }
  cv_.notify_all();
  return true;
}

bool RequestState::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::Pending) return false;
    state_ = State::Failed;
    error_ = std::move(error);
  }
  cv_.notify_all();
  return true;
}

bool RequestState::failBrokenPair(int rank, const std::string& failure, bool peerFault) {
  if (peerFault) {
    return fail(RANKMAP_MAKE_ERROR(PeerError, "rank {}: {} failed: {}", rank, describe(), failure));
  }
  return fail(RANKMAP_MAKE_ERROR(IoError, "rank {}: {} failed: {}", rank, describe(), failure));
}

bool RequestState::failSizeMismatch(int rank, uint64_t sentBytes) {
  return fail(RANKMAP_MAKE_ERROR(
      InvalidInput, "rank {}: message from {} tag {} has {} bytes but the receive expects {}", rank,
      *peerName_, tag_, sentBytes, bytes_));
}

bool RequestState::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ != State::Pending;
}

std::string RequestState::describe() const {
  return fmt::format("{} {} {} tag {}, {} bytes", kind_ == OpKind::Send ? "send" : "recv",
                     kind_ == OpKind::Send ? "to" : "from", *peerName_, tag_, bytes_);
}

std::string_view backendName(Backend backend) {
  switch (backend) {
    case Backend::Loopback: return "loopback";
    case Backend::Tcp: return "tcp";
    case Backend::Rdma: return "rdma";
  }
  return "unknown";
}

Backend parseBackend(std::string_view name) {
  for (Backend b : {Backend::Loopback, Backend::Tcp, Backend::Rdma}) {
    if (name == backendName(b)) return b;
  }
  RANKMAP_THROW(InvalidInput, "unknown transport '{}': expected loopback, tcp or rdma", name);
}

DeviceOptions deviceOptionsFromConfig(const Config& config) {
  DeviceOptions o;
  const std::string& t = config.get(settings::kTransport);
  if (t == "auto") {
    o.backend = rdmaAvailable() ? Backend::Rdma : Backend::Tcp;
  } else if (t == "tcp" || t == "rdma") {
    o.backend = parseBackend(t);
  } else {
    RANKMAP_THROW(InvalidInput, "RANKMAP_TRANSPORT='{}': expected auto, tcp or rdma", t);
  }
  o.tcp.ifname = config.get(settings::kSocketIfname);
  int64_t streams = config.get(settings::kTcpStreams);
  if (streams < 1 || streams > 64) {
    RANKMAP_THROW(InvalidInput, "RANKMAP_TCP_STREAMS={}: expected 1 to 64", streams);
  }
  o.tcp.streams = static_cast<int>(streams);
  o.tcp.socketBuffer = config.get(settings::kSocketBuffer);
  if (o.tcp.socketBuffer > (1u << 30)) {
    RANKMAP_THROW(InvalidInput, "RANKMAP_SOCKET_BUFFER={}: at most 1G", o.tcp.socketBuffer);
  }
  o.rdma.device = config.get(settings::kIbDevice);
  o.rdma.gidIndex = static_cast<int>(config.get(settings::kIbGidIndex));
  return o;
}

std::shared_ptr<Device> makeDevice(const DeviceOptions& options) {
  switch (options.backend) {
    case Backend::Loopback: return loopback::makeLoopbackDevice();
    case Backend::Tcp: return tcp::makeTcpDevice(options.tcp);
    case Backend::Rdma: return rdma::makeRdmaDevice(options.rdma);
  }
  RANKMAP_THROW(InvalidInput, "unknown backend {}", static_cast<int>(options.backend));
}

}  // namespace rankmap::coll::transport
