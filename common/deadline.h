// Deadline: the one way rankmap bounds a blocking call.
//
// Contract: every function that may block (socket I/O, waits, HTTP calls, probe rounds) takes a
// Deadline and throws TimeoutError (naming what it waited for) when it passes. A Deadline is a
// point on the steady clock; it is cheap to copy and to pass by value.
#pragma once

#include <algorithm>
#include <chrono>
#include <string_view>

namespace rankmap {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline afterMs(int64_t ms) { return after(std::chrono::milliseconds(ms)); }
  static Deadline at(Clock::time_point t) { return Deadline(t); }

  Clock::time_point when() const { return when_; }
  bool expired() const { return Clock::now() >= when_; }
  std::chrono::nanoseconds remaining() const {
    return std::max<std::chrono::nanoseconds>(std::chrono::nanoseconds(0), when_ - Clock::now());
  }
  // Milliseconds left, rounded up, for poll(2)/epoll_wait(2); 0 once expired.
  int pollTimeoutMs() const;
  // The earlier of this and `other`: a sub-step never outlives its caller's deadline.
  Deadline min(Deadline other) const { return Deadline(std::min(when_, other.when_)); }
  // Throws TimeoutError("timed out after ... waiting for <what>") if expired.
  void check(std::string_view what) const;

 private:
  explicit Deadline(Clock::time_point t) : when_(t) {}
  Clock::time_point when_;
};

}  // namespace rankmap
