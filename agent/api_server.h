// rankmapd's HTTP server: cpp-httplib's parser, routes and handlers (agent/http_api.h) behind
// connection handling of our own that bounds what one client can hold.
//
// Why: cpp-httplib 0.11 serves a connection on one of a fixed pool of threads and bounds only
// each recv() by the read timeout. A client that sends a request line and one header and then
// nothing (or one byte every few seconds) holds a pool thread for as long as it likes: eight of
// them made GET /v1/health time out. Here:
//   - every connection has its own thread (so an idle client never queues another behind it),
//     at most limits.maxConnections at once; one beyond that is answered 503 at once and closed;
//   - a request must arrive whole, head and body, within limits.requestTimeout of the moment the
//     server starts waiting for it (the accept, or the end of the previous answer), a deadline
//     that trickled bytes cannot extend (408 and close). A kept-alive connection that sends
//     nothing is closed at the same deadline;
//   - the head is at most limits.maxHeadBytes (431) with at most limits.maxHeaders header lines
//     (431) and a request target of at most limits.maxTargetBytes (414); bodies are bounded by
//     set_payload_max_length (413, by httplib);
//   - each write of an answer must complete within limits.writeTimeout (a client that does not
//     read its answer is dropped).
// Each refusal is counted by reason and logged with the client's address (rate-limited).
// What passes goes to httplib's own request parser and router (Server::process_request, the
// protected seam its SSLServer uses too) over a stream that keeps the same deadlines.
//
// Threads: httplib's listen thread accepts; each connection runs on its own detached thread,
// counted so that stopServing() (and httplib's task queue shutdown) waits for all of them.
#pragma once

#include <httplib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string_view>

#include "common/log.h"

namespace rankmap::agent {

// Every error answer of the API, from this layer or a handler: {"error": message, "code":
// status, "reason": the status's name}, as Kubernetes' Status carries message, code and reason:
// a client branches on code or reason and shows the message.
std::string errorBody(int status, std::string_view message);

class ApiServer : public httplib::Server {
 public:
  struct Limits {
    size_t maxConnections = 256;
    std::chrono::milliseconds requestTimeout{10000};
    std::chrono::milliseconds writeTimeout{10000};
    size_t maxRequestsPerConnection = 100;
    size_t maxHeadBytes = 16 << 10;
    size_t maxHeaders = 64;
    // httplib 0.11 refuses targets over 8192 bytes itself (CPPHTTPLIB_REQUEST_URI_MAX_LENGTH).
    size_t maxTargetBytes = 8192;
    // A declared Content-Length over this is answered 413 before any body byte is read.
    size_t maxBodyBytes = 1 << 20;
  };

  // Why a connection was answered by this layer instead of a handler; each is counted.
  enum class Reject {
    kBusy,
    kTimeout,
    kHeadTooLarge,
    kTooManyHeaders,
    kTargetTooLong,
    kBodyTooLarge
  };
  static constexpr Reject kAllRejects[] = {Reject::kBusy,          Reject::kTimeout,
                                           Reject::kHeadTooLarge,  Reject::kTooManyHeaders,
                                           Reject::kTargetTooLong, Reject::kBodyTooLarge};
  static std::string_view rejectName(Reject r);

  explicit ApiServer(Limits limits);
  ~ApiServer() override;

  // Binds to host:port (port 0: any free port) with a listen backlog of SOMAXCONN; returns the
  // port, or 0 if the address cannot be bound. httplib 0.11 listens with a backlog of 5, and a
  // burst of connections beyond it waits for SYN-ACK retransmissions (1 s, then 3 s, ...)
  // before the server even sees it.
  int bindTo(const std::string& host, int port);

  // Stops accepting and shuts down every open connection (a handler still running finishes; its
  // answer is lost); listen_after_bind() returns once every connection thread has ended.
  void stopServing();

  uint64_t rejected(Reject r) const { return rejected_[static_cast<size_t>(r)].load(); }
  size_t openConnections() const;
  const Limits& limits() const { return limits_; }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void reject(int fd, Reject why);

  Limits limits_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::set<int> open_;  // fds of admitted connections, to shut them down on stopServing()
  std::array<std::atomic<uint64_t>, std::size(kAllRejects)> rejected_{};
  std::array<log::RateLimit, std::size(kAllRejects)> rejectLog_{};  // a line per reason per 10 s
};

}  // namespace rankmap::agent
