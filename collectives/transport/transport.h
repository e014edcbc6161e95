// The transport interface of the collective engine: device -> context -> pair, with tagged
// non-blocking sends and receives and deadline-bounded waits.
//
// Contract:
// - A Device is a backend instance (tcp, loopback, rdma) created only through makeDevice().
// - A Context is one rank's membership in a group of `size` ranks, connected by a bootstrap
//   (collectives/bootstrap/). It owns one Pair per peer and, for TCP, one progress thread.
// - isend/irecv post operations and return at once; the caller keeps the memory valid until the
//   request completes. Messages between one ordered pair of ranks with the same tag are matched
//   in posting order; a receive must name the exact length the sender sends (a mismatch fails
//   the request with InvalidInput naming the peer, tag and both lengths).
// - Every wait takes a Deadline. When it passes, wait() throws TimeoutError naming the peer and
//   tag; when a peer disconnects or dies, every pending and future request with that peer fails
//   with PeerError naming it, so no rank hangs on a dead one.
// - Contexts are used by one thread at a time (the collective's caller); the progress thread is
//   internal.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/deadline.h"

namespace rankmap {
class Config;
}  // namespace rankmap

namespace rankmap::coll::bootstrap {
class Bootstrap;
}  // namespace rankmap::coll::bootstrap

namespace rankmap::coll::transport {

class Request {
 public:
  virtual ~Request() = default;
  // Blocks until complete; throws TimeoutError / PeerError / InvalidInput.
  virtual void wait(Deadline deadline) = 0;
  // Non-blocking completion check; throws if the request failed.
  virtual bool test() = 0;
};
using RequestPtr = std::shared_ptr<Request>;

class Context {
 public:
  virtual ~Context() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }

  virtual RequestPtr isend(int peer, uint64_t tag, const void* buf, size_t bytes) = 0;
  virtual RequestPtr irecv(int peer, uint64_t tag, void* buf, size_t bytes) = 0;

  // Human-readable name of a peer for error messages ("rank 3 (10.213.0.4:41235)").
  virtual std::string peerName(int peer) const = 0;
  // Backend name: "tcp", "loopback", "rdma".
  virtual std::string backend() const = 0;

  // Keeps `memory` alive until this context is destroyed, after the backend has stopped: for a
  // user of a borrowed context that goes away while requests into its memory may still be in
  // flight (a failed collective's scratch, see Communicator), which would otherwise have to leak
  // it. Same thread rule as the requests.
  void keepUntilDestroyed(std::shared_ptr<void> memory) { kept_.push_back(std::move(memory)); }

 protected:
  Context(int rank, int size) : rank_(rank), size_(size) {}
  // Throws InvalidInput unless 0 <= peer < size(); backends check every peer argument with it.
  void checkPeer(int peer) const;

 private:
  int rank_;
  int size_;
  // Members of this base class are destroyed after the backend's destructor has run (and failed
  // or finished every request), so nothing writes into what they hold any more.
  std::vector<std::shared_ptr<void>> kept_;
};

// Waits for all requests; throws the first failure after every request is complete or failed.
void waitAll(std::vector<RequestPtr>& reqs, Deadline deadline);

// --- Backends and their factories (extension of the lead's interface above) -------------------
//
// Send completion: a send may complete before the matching receive is posted (TCP buffers
// unmatched messages at the receiver; loopback copies messages up to 64 KiB) or only once it is
// matched (loopback above 64 KiB, RDMA). Algorithms must therefore post the receives a step
// depends on before waiting for that step's sends; waitAll over both is always safe.
// Destroying a Context fails its pending requests (IoError) and, on the peers, every request
// that still needs it (PeerError); memory of a request that timed out stays in use until then.

enum class Backend { Loopback, Tcp, Rdma };

// "loopback", "tcp", "rdma".
std::string_view backendName(Backend backend);
// Inverse of backendName(); throws InvalidInput naming the accepted values.
Backend parseBackend(std::string_view name);

struct TcpOptions {
  // Address to listen on for peers. Empty: the IPv4 address of `ifname`, else the local address
  // the bootstrap reached its root from, else 127.0.0.1.
  std::string host;
  std::string ifname;
  // Parallel TCP connections per peer; messages of at least stripeMin bytes are cut into
  // `streams` chunks sent on all of them (clouds cap the rate of one flow).
  int streams = 1;
  // SO_SNDBUF / SO_RCVBUF in bytes, set before connecting; 0 leaves the kernel's autotuning.
  uint64_t socketBuffer = 4u << 20;
  uint64_t stripeMin = 256u << 10;
};

struct RdmaOptions {
  // Verbs device name ("mlx5_0"); empty: the first device.
  std::string device;
  int port = 1;
  // GID table index for RoCE; -1: use the LID (InfiniBand) or GID 0.
  int gidIndex = -1;
  // Keep user buffers registered between operations (see rdma/memory.h for the caveat).
  bool cacheRegistrations = true;
};

struct DeviceOptions {
  Backend backend = Backend::Tcp;
  TcpOptions tcp;
  RdmaOptions rdma;
};

// The outcome of a self-test of the RDMA transport on this host.
struct RdmaSelfTestResult {
  enum class Outcome { kNoDevice, kPassed, kFailed };
  Outcome outcome = Outcome::kNoDevice;
  std::string detail;  // what failed, or why there is no device
};
using RdmaSelfTest = std::function<RdmaSelfTestResult(const RdmaOptions&)>;

// The loopback self-test: without a verbs device (or without verbs in this build) kNoDevice;
// otherwise two ranks on threads of this process connect through the device and exchange a
// 256 KiB pattern both ways, every byte checked, within `timeout` (kFailed with the error).
RdmaSelfTestResult rdmaSelfTest(const RdmaOptions& options,
                                std::chrono::milliseconds timeout = std::chrono::seconds(5));

// What RANKMAP_TRANSPORT=auto runs on: rdma only if `selfTest` passed on this host, never an
// RDMA path that was not exercised here. A failed self-test falls back to tcp with a warning
// naming the failure and counts it (autoTransportFallbacks()); no device at all is tcp as usual.
struct AutoTransport {
  Backend backend = Backend::Tcp;
  std::string reason;  // why this backend
};
AutoTransport chooseAutoTransport(const RdmaOptions& options, const RdmaSelfTest& selfTest);
// Times RANKMAP_TRANSPORT=auto fell back to tcp because the RDMA self-test failed, in this
// process.
uint64_t autoTransportFallbacks();

// Reads RANKMAP_TRANSPORT (auto: chooseAutoTransport()), RANKMAP_SOCKET_IFNAME,
// RANKMAP_TCP_STREAMS, RANKMAP_SOCKET_BUFFER, RANKMAP_IB_DEVICE and RANKMAP_IB_GID_INDEX.
// Throws InvalidInput naming the setting on a bad value. `selfTest` replaces the real self-test
// (tests); the real one runs once per process and device settings, and its result is kept.
DeviceOptions deviceOptionsFromConfig(const Config& config, const RdmaSelfTest& selfTest = {});

// True when rankmap was built with verbs and ibv_get_device_list() returns at least one device.
bool rdmaAvailable();

// A backend instance. Thread-safe: several ranks of one process (threads) may share one Device.
class Device {
 public:
  virtual ~Device() = default;
  virtual std::string backend() const = 0;
  // Collective over `bootstrap`: every rank of the group calls it (each with its own bootstrap
  // handle); returns this rank's Context with every pair connected. Throws TimeoutError when a
  // peer does not show up before `deadline`, PeerError when one disagrees.
  virtual std::unique_ptr<Context> connect(bootstrap::Bootstrap& bootstrap, Deadline deadline) = 0;
};

// The only way to make a backend. Loopback devices connect ranks that are threads of this
// process (they need a bootstrap too; see also makeLoopbackGroup() in loopback/device.h).
// Throws NotSupported for rdma when built without verbs or without a device.
std::shared_ptr<Device> makeDevice(const DeviceOptions& options);

}  // namespace rankmap::coll::transport
