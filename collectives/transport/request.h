// RequestState: the one Request implementation shared by every backend.
//
// Contract: a backend creates one RequestState per isend/irecv and later calls complete() or
// fail() exactly once, from any thread (usually its progress thread); further calls are ignored.
// wait() blocks the caller on a condition variable until then or until the deadline, when it
// throws TimeoutError naming the operation ("recv from rank 3 (127.0.0.1:4100) tag 7, 64 bytes")
// and leaves the request pending. A failed request rethrows its error on every wait()/test().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/transport/transport.h"
#include "common/error.h"

namespace rankmap::coll::transport {

enum class OpKind { Send, Recv };

class RequestState final : public Request {
 public:
  // `peerName` is shared with the pair so that requests do not copy it.
  RequestState(OpKind kind, std::shared_ptr<const std::string> peerName, uint64_t tag,
               size_t bytes)
      : kind_(kind), peerName_(std::move(peerName)), tag_(tag), bytes_(bytes) {}

  void wait(Deadline deadline) override;
  bool test() override;

  // Marks the request done and wakes waiters; returns false if it had already finished.
  bool complete();
  // Marks the request failed with `error` and wakes waiters; false if it had already finished.
  bool fail(std::exception_ptr error);
  // fail() because the pair broke earlier with `failure`: PeerError when the peer was at fault
  // (died, closed its context), else IoError. `rank` is this rank, for the message.
  bool failBrokenPair(int rank, const std::string& failure, bool peerFault);
  // fail() for a receive whose message has `sentBytes` instead of bytes(): InvalidInput naming
  // the peer, the tag and both lengths (the contract in transport.h).
  bool failSizeMismatch(int rank, uint64_t sentBytes);
  bool finished() const;

  OpKind kind() const { return kind_; }
  uint64_t tag() const { return tag_; }
  size_t bytes() const { return bytes_; }
  const std::string& peerName() const { return *peerName_; }
  // "send to rank 3 (127.0.0.1:4100) tag 7, 64 bytes": for error messages.
  std::string describe() const;

 private:
  enum class State { Pending, Done, Failed };

  const OpKind kind_;
  const std::shared_ptr<const std::string> peerName_;
  const uint64_t tag_;
  const size_t bytes_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::Pending;
  std::exception_ptr error_;
};

using RequestStatePtr = std::shared_ptr<RequestState>;

// Builds an exception_ptr holding Type(message + " (file:line)"), for RequestState::fail().
#define RANKMAP_MAKE_ERROR(Type, ...)                                                  \
  std::make_exception_ptr(Type(fmt::format("{} ({}:{})", fmt::format(__VA_ARGS__),     \
                                           ::rankmap::detail::baseName(__FILE__), __LINE__)))

}  // namespace rankmap::coll::transport
