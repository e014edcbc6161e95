// tcp::TcpContext: one rank of a TCP group. Owns one Pair per peer, an epoll set over all their
// sockets and the progress thread that serves it; messages to itself go through an in-process
// loopback pair.
//
// Threads: isend/irecv run on the caller's thread (one at a time, per transport.h) and may write
// to sockets directly; the progress thread reads everything that arrives and finishes writes
// that would have blocked. The destructor stops the thread, then fails what is pending with
// IoError and closes the sockets (peers see end-of-file and fail their requests with PeerError).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/transport/loopback/pair.h"
#include "collectives/transport/tcp/pair.h"
#include "collectives/transport/transport.h"

namespace rankmap::coll::transport::tcp {

class TcpContext final : public Context {
 public:
  // `pairs[rank]` is null (self); the others are connected. `addresses` are the ranks' listen
  // addresses, for names.
  TcpContext(int rank, int size, std::vector<std::unique_ptr<Pair>> pairs,
             std::vector<std::string> addresses, int epollFd);
  ~TcpContext() override;

  RequestPtr isend(int peer, uint64_t tag, const void* buf, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* buf, size_t bytes) override;
  std::string peerName(int peer) const override;
  std::string backend() const override { return "tcp"; }

 private:
  void progressLoop();

  std::vector<std::string> addresses_;
  int epollFd_;
  int wakeFd_;
  std::vector<std::unique_ptr<Pair>> pairs_;
  loopback::Pair self_;
  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace rankmap::coll::transport::tcp
