// The probe server: answers pings, bulk transfers and control requests from other agents.
//
// Threads: start() spawns one accept thread; each accepted connection gets its own thread, up to
// maxConnections (more are closed at once, as is one that finds the process out of file
// descriptors; both counted by reason, see connectionsRefused(), and logged, rate-limited). A
// connection must finish its handshake within handshakeTimeout and then send a frame at least
// every idleTimeout, so a silent or slow peer holds a thread for a bounded time. Control requests
// (kRequest) go to the RequestHandler, which runs on the connection's thread and may block (an
// agent measuring a pair) up to the deadline it is given. stop() closes the listener and every
// connection and joins them all. Authentication failures are counted by reason (see
// authFailures()).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "common/log.h"
#include "probe/measure.h"
#include "probe/wire.h"

namespace rankmap::probe {

class ProbeServer {
 public:
  // Handles one control request from the authenticated agent `peer`; returns the reply.
  // Throwing InvalidInput/NotSupported sends an Error frame with the message.
  using RequestHandler =
      std::function<Json(const Json& request, const std::string& peer, Deadline)>;

  struct Options {
    Endpoint listen{"0.0.0.0", kDefaultProbePort};
    std::string name;  // our agent name, for logs
    size_t maxConnections = 256;
    std::chrono::milliseconds handshakeTimeout{5000};
    std::chrono::milliseconds idleTimeout{30000};
    // A control request may run this long (a measurement on the peer's behalf).
    std::chrono::milliseconds requestTimeout{120000};
    std::chrono::milliseconds replayWindow{60000};
    // Bounds on what a peer may ask of us in one bulk transfer.
    int64_t maxBulkMs = 10000;
    uint64_t maxBulkBytes = 1ull << 30;
  };

  ProbeServer(Options opts, ProbeKey key, RequestHandler handler);
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  // Binds (SystemError if the address is in use) and starts accepting.
  void start();
  void stop();
  uint16_t port() const { return port_; }

  uint64_t authFailures(AuthFailure f) const {
    return authFailures_[static_cast<size_t>(f)].load();
  }
  uint64_t connectionsAccepted() const { return accepted_.load(); }
  // Why a connection was closed unanswered, right after it was accepted.
  enum class Refusal { kBusy, kNoDescriptors };
  static constexpr std::array<Refusal, 2> kAllRefusals{Refusal::kBusy, Refusal::kNoDescriptors};
  static const char* refusalName(Refusal r);
  uint64_t connectionsRefused(Refusal r) const { return refused_[static_cast<size_t>(r)].load(); }

 private:
  void acceptLoop();
  void serve(Socket s, int dupFd);
  void reapFinished();  // joins the threads in finished_; called with mu_ held
  void serveChannel(Channel& c);
  void refuse(Refusal r, const std::string& detail);  // called with mu_ held

  Options opts_;
  ProbeKey key_;
  RequestHandler handler_;
  ReplayGuard guard_;
  Listener listener_;
  uint16_t port_ = 0;
  std::thread acceptThread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable idle_;
  std::set<int> active_;  // dup()ed fds of live connections, to shut them down on stop()
  size_t running_ = 0;    // connection threads not yet finished
  // Connection threads, joined (not detached): by acceptLoop once they have put their id in
  // finished_, and all by stop(), so that none still runs (its thread-local state, such as
  // OpenSSL's per-thread random generator, not yet freed) after stop() returns.
  std::map<std::thread::id, std::thread> threads_;
  std::vector<std::thread::id> finished_;
  std::array<std::atomic<uint64_t>, 5> authFailures_{};
  std::atomic<uint64_t> accepted_{0};
  std::array<std::atomic<uint64_t>, kAllRefusals.size()> refused_{};
  std::array<log::RateLimit, kAllRefusals.size()> refusedLog_{};
};

}  // namespace rankmap::probe
