// A reader for a FIFO that a test writes to: it opens the FIFO at construction (non-blocking, so
// that a writer's open finds a reader at once) and reads it on its own thread.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

namespace rankmap::testing {

class FifoReader {
 public:
  // Reads until the writer closes the FIFO, or until `closeAfter` bytes have arrived (then it
  // closes its end early, so the writer sees the reader go), or for at most `timeout`.
  explicit FifoReader(const std::string& path, size_t closeAfter = SIZE_MAX,
                      std::chrono::seconds timeout = std::chrono::seconds(30))
      : fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("cannot open the FIFO " + path + " for reading");
    thread_ = std::thread([this, closeAfter, timeout] { run(closeAfter, timeout); });
  }
  ~FifoReader() { join(); }
  FifoReader(const FifoReader&) = delete;
  FifoReader& operator=(const FifoReader&) = delete;

  // Waits for the reading thread to end; the bytes it read.
  const std::string& data() {
    join();
    return data_;
  }

 private:
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  void run(size_t closeAfter, std::chrono::seconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    while (std::chrono::steady_clock::now() < end && data_.size() < closeAfter) {
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 50);
      size_t want = std::min(sizeof(buf), closeAfter - data_.size());
      ssize_t n = ::read(fd_, buf, want);
      if (n > 0) data_.append(buf, static_cast<size_t>(n));
      // 0 means no writer: none yet while nothing has arrived, the writer gone after.
      if (n == 0 && !data_.empty()) break;
    }
    ::close(fd_);
  }

  int fd_;
  std::string data_;
  std::thread thread_;
};

}  // namespace rankmap::testing
