// Backend-independent parts of the transport: waitAll, RequestState, backend names, options from
// the configuration and the makeDevice() factory that dispatches to the backends.
#include "collectives/transport/transport.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "collectives/bootstrap/callback_bootstrap.h"
#include "collectives/transport/loopback/device.h"
#include "collectives/transport/rdma/device.h"
#include "collectives/transport/request.h"
#include "collectives/transport/tcp/device.h"
#include "common/build_config.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll::transport {
namespace {

std::atomic<uint64_t> gAutoFallbacks{0};

// An allgather between the two ranks of the self-test (threads of this process), bounded by a
// deadline: a rank that never arrives is a TimeoutError, not a hang.
class ThreadAllgather {
 public:
  explicit ThreadAllgather(Deadline d) : deadline_(d) {}
  void run(int rank, const void* send, void* recv, size_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t generation = generation_;
    in_[rank].assign(static_cast<const char*>(send), bytes);
    if (++arrived_ == 2) {
      out_ = in_[0] + in_[1];
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_until(lock, deadline_.when(), [&] { return generation_ != generation; })) {
      throw TimeoutError("RDMA self-test: the other rank did not reach the bootstrap");
    }
    std::memcpy(recv, out_.data(), 2 * bytes);
  }

 private:
  Deadline deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::string in_[2];
  std::string out_;
};

}  // namespace

RdmaSelfTestResult rdmaSelfTest(const RdmaOptions& options, std::chrono::milliseconds timeout) {
  using Outcome = RdmaSelfTestResult::Outcome;
  if (!rdmaAvailable())
    return {Outcome::kNoDevice,
            RANKMAP_HAVE_RDMA ? "no verbs device on this host" : "this build has no RDMA support"};
  const Deadline deadline = Deadline::after(timeout);
  constexpr size_t kBytes = 256u << 10;
  try {
    std::shared_ptr<Device> device = makeDevice(DeviceOptions{Backend::Rdma, {}, options});
    ThreadAllgather gather(deadline);
    std::string errors[2];
    auto rank = [&](int r) {
      try {
        auto boot = bootstrap::makeCallbackBootstrap(
            r, 2, [&](const void* s, void* v, size_t n) { gather.run(r, s, v, n); });
        auto ctx = device->connect(*boot, deadline);
        std::vector<uint8_t> out(kBytes), in(kBytes, 0);
        for (size_t i = 0; i < kBytes; ++i) out[i] = static_cast<uint8_t>(i * 31 + 7 * r);
        std::vector<RequestPtr> reqs = {ctx->irecv(1 - r, 1, in.data(), kBytes),
                                        ctx->isend(1 - r, 1, out.data(), kBytes)};
        waitAll(reqs, deadline);
        for (size_t i = 0; i < kBytes; ++i)
          if (in[i] != static_cast<uint8_t>(i * 31 + 7 * (1 - r)))
            RANKMAP_THROW(InternalError, "byte {} of {} received wrong", i, kBytes);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    };
    std::thread other(rank, 1);
    rank(0);
    other.join();
    for (const auto& e : errors)
      if (!e.empty()) return {Outcome::kFailed, e};
    return {Outcome::kPassed,
            fmt::format("loopback self-test passed ({} KiB both ways)", kBytes >> 10)};
  } catch (const std::exception& e) {
    return {Outcome::kFailed, e.what()};
  }
}

AutoTransport chooseAutoTransport(const RdmaOptions& options, const RdmaSelfTest& selfTest) {
  RdmaSelfTestResult r = selfTest(options);
  switch (r.outcome) {
    case RdmaSelfTestResult::Outcome::kPassed:
      return {Backend::Rdma, "RDMA " + r.detail};
    case RdmaSelfTestResult::Outcome::kNoDevice:
      return {Backend::Tcp, r.detail};
    case RdmaSelfTestResult::Outcome::kFailed:
      break;
  }
  ++gAutoFallbacks;
  RANKMAP_WARN(Net,
               "RANKMAP_TRANSPORT=auto: using tcp: the RDMA self-test on device '{}' "
               "failed: {}",
               options.device.empty() ? "(first)" : options.device, r.detail);
  return {Backend::Tcp, "RDMA self-test failed: " + r.detail};
}

uint64_t autoTransportFallbacks() { return gAutoFallbacks.load(); }

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

DeviceOptions deviceOptionsFromConfig(const Config& config, const RdmaSelfTest& selfTest) {
  DeviceOptions o;
  const std::string& t = config.get(settings::kTransport);
  if (t != "auto" && t != "tcp" && t != "rdma")
    RANKMAP_THROW(InvalidInput, "RANKMAP_TRANSPORT='{}': expected auto, tcp or rdma", t);
  o.tcp.ifname = config.get(settings::kSocketIfname);
  o.tcp.streams = static_cast<int>(config.get(settings::kTcpStreams));  // 1-64 (settings.def)
  o.tcp.socketBuffer = config.get(settings::kSocketBuffer);
  if (o.tcp.socketBuffer > (1u << 30)) {
    RANKMAP_THROW(InvalidInput, "RANKMAP_SOCKET_BUFFER={}: at most 1G", o.tcp.socketBuffer);
  }
  o.rdma.device = config.get(settings::kIbDevice);
  o.rdma.gidIndex = static_cast<int>(config.get(settings::kIbGidIndex));
  if (t != "auto") {
    o.backend = parseBackend(t);
  } else if (selfTest) {
    o.backend = chooseAutoTransport(o.rdma, selfTest).backend;
  } else {
    // The real self-test once per process and device settings: communicators made later reuse
    // the answer (and its one warning).
    static std::mutex mu;
    static std::map<std::string, Backend> chosen;
    std::lock_guard<std::mutex> lock(mu);
    std::string key = fmt::format("{}/{}/{}", o.rdma.device, o.rdma.port, o.rdma.gidIndex);
    auto it = chosen.find(key);
    if (it == chosen.end()) {
      auto real = [](const RdmaOptions& r) { return rdmaSelfTest(r); };
      it = chosen.emplace(key, chooseAutoTransport(o.rdma, real).backend).first;
    }
    o.backend = it->second;
  }
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
