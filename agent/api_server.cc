#include "agent/api_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <thread>

#include "common/deadline.h"
#include "common/json.h"
#include "common/log.h"
#include "common/net.h"

namespace rankmap::agent {
namespace {

// One thread per connection, counted: shutdown() (called by httplib when its listen loop ends)
// returns once every connection thread has finished. The threads are detached so that a
// finished one needs no join; the last thing each does is the decrement under the mutex.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++running_;
    }
    try {
      std::thread([this, fn = std::move(fn)]() mutable {
        fn();
        fn = nullptr;  // closures freed before the count says we are done
        std::lock_guard<std::mutex> lock(mu_);
        if (--running_ == 0) done_.notify_all();
      }).detach();
    } catch (const std::system_error& e) {
      // No thread to be had: serve it here, on the listen thread (still bounded by the
      // request deadline), rather than leak the socket.
      RANKMAP_WARN(Agent, "HTTP API: cannot start a connection thread ({}); serving inline",
                   e.what());
      fn();
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) done_.notify_all();
    }
  }
  void shutdown() override {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return running_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  size_t running_ = 0;
};

// A connection's bytes for httplib's parser: what the head check already read first, then the
// socket, every read bounded by the request's deadline and every write by its own.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(int fd, std::chrono::milliseconds writeTimeout)
      : fd_(fd), writeTimeout_(writeTimeout) {}

  void setReadDeadline(Deadline d) { readDeadline_ = d; }
  bool failed() const { return failed_; }

  enum class Head { kComplete, kClosed, kTimeout, kTooLarge };
  // Reads until the buffer holds a whole head ("\r\n\r\n") of at most maxBytes, by `d`.
  // `headBytes` is its length including the blank line.
  Head readHead(Deadline d, size_t maxBytes, size_t& headBytes) {
    buf_.erase(0, pos_);  // what the previous request left (a pipelined next one) comes first
    pos_ = 0;
    size_t searched = 0;
    for (;;) {
      size_t end = buf_.find("\r\n\r\n", searched > 3 ? searched - 3 : 0);
      if (end != std::string::npos && end + 4 <= maxBytes) {
        headBytes = end + 4;
        return Head::kComplete;
      }
      if (buf_.size() >= maxBytes) return Head::kTooLarge;
      searched = buf_.size();
      ssize_t n = fill(d, maxBytes - buf_.size());
      if (n == 0) return Head::kClosed;
      if (n < 0) return failed_ ? Head::kClosed : Head::kTimeout;
    }
  }
  std::string_view buffered() const { return std::string_view(buf_).substr(pos_); }
  // Adds a header line ("Name: value\r\n") to the buffered head of `headBytes` bytes.
  void addHeader(size_t headBytes, std::string_view line) {
    buf_.insert(pos_ + headBytes - 2, line);
  }

  bool is_readable() const override {
    return pos_ < buf_.size() || (pollFd(fd_, POLLIN, readDeadline_) & (POLLIN | POLLHUP)) != 0;
  }
  bool is_writable() const override {
    return (pollFd(fd_, POLLOUT, Deadline::after(writeTimeout_)) & POLLOUT) != 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ >= buf_.size()) {
      buf_.clear();
      pos_ = 0;
      ssize_t n = fill(readDeadline_, 4096);
      if (n <= 0) return n < 0 ? -1 : 0;
    }
    size_t k = std::min(size, buf_.size() - pos_);
    std::memcpy(ptr, buf_.data() + pos_, k);
    pos_ += k;
    return static_cast<ssize_t>(k);
  }
  ssize_t write(const char* ptr, size_t size) override {
    Deadline d = Deadline::after(writeTimeout_);
    size_t off = 0;
    while (off < size) {
      if ((pollFd(fd_, POLLOUT, d) & POLLOUT) == 0) {
        failed_ = true;
        return -1;
      }
      ssize_t n = ::send(fd_, ptr + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
        failed_ = true;
        return -1;
      }
      off += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(::getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // Appends up to `most` bytes from the socket once readable by `d`: >0 bytes, 0 at end of
  // stream, -1 on timeout or error (failed_ set for an error).
  ssize_t fill(Deadline d, size_t most) {
    for (;;) {
      short ev = pollFd(fd_, POLLIN, d);
      if (ev == 0) return -1;
      size_t old = buf_.size();
      buf_.resize(old + most);
      ssize_t n = ::recv(fd_, buf_.data() + old, most, MSG_DONTWAIT);
      buf_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
      if (n >= 0) return n;
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      failed_ = true;
      return -1;
    }
  }
  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (get(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return;
    ip = sockaddrHost(ss);
    port = sockaddrPort(ss);
  }

  int fd_;
  std::chrono::milliseconds writeTimeout_;
  Deadline readDeadline_ = Deadline::after(std::chrono::seconds(0));
  std::string buf_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// The status line and JSON error body this layer answers with.
struct RejectAnswer {
  int status;
  const char* message;
};

RejectAnswer answerFor(ApiServer::Reject r) {
  switch (r) {
    case ApiServer::Reject::kBusy:
      return {503, "too many open connections; try again"};
    case ApiServer::Reject::kTimeout:
      return {408, "the request did not arrive within the request timeout"};
    case ApiServer::Reject::kHeadTooLarge:
      return {431, "request head too large"};
    case ApiServer::Reject::kTooManyHeaders:
      return {431, "too many header lines"};
    case ApiServer::Reject::kTargetTooLong:
      return {414, "request target too long"};
    case ApiServer::Reject::kBodyTooLarge:
      return {413, "request body too large: its Content-Length is over http.max_body_bytes"};
  }
  return {500, "internal error"};
}

// What a request head says of its body: the Content-Length (nullopt when absent or not a
// number, which httplib answers itself) and whether it is chunked or its method carries one.
struct BodyOfHead {
  bool hasLength = false;
  std::optional<uint64_t> length;
  bool chunked = false;
  bool methodWithBody = false;
};

BodyOfHead bodyOfHead(std::string_view head) {
  BodyOfHead b;
  size_t lineEnd = head.find("\r\n");
  std::string_view method = head.substr(0, head.find(' '));
  b.methodWithBody = method == "POST" || method == "PUT" || method == "PATCH";
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  for (size_t p = lineEnd; p != std::string_view::npos && p + 2 < head.size();) {
    size_t next = head.find("\r\n", p + 2);
    std::string_view line = head.substr(p + 2, next == std::string_view::npos ? next : next - p - 2);
    p = next;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = lower(line.substr(0, colon));
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (name == "content-length") {
      b.hasLength = true;
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec == std::errc() && end == value.data() + value.size()) b.length = v;
    } else if (name == "transfer-encoding") {
      b.chunked = true;
    }
  }
  return b;
}

// Reads and drops what `fd` receives until its end, an error or `d`.
void drain(int fd, Deadline d) {
  char buf[16384];
  while ((pollFd(fd, POLLIN, d) & (POLLIN | POLLHUP)) != 0) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return;
  }
}

}  // namespace

namespace {
// The reason phrases of the statuses the API answers with (RFC 9110; 431 RFC 6585).
const char* reasonPhrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Server Error" : "Client Error";
  }
}
}  // namespace

std::string errorBody(int status, std::string_view message) {
  const char* reason = reasonPhrase(status);
  // Not UTF-8 (a request's path echoed in the message): U+FFFD in place of the bad bytes, where
  // dump() would throw.
  return Json{{"error", message}, {"code", status}, {"reason", reason}}.dump(
             1, ' ', false, Json::error_handler_t::replace) +
         "\n";
}

std::string_view ApiServer::rejectName(Reject r) {
  switch (r) {
    case Reject::kBusy:
      return "busy";
    case Reject::kTimeout:
      return "timeout";
    case Reject::kHeadTooLarge:
      return "head_too_large";
    case Reject::kTooManyHeaders:
      return "too_many_headers";
    case Reject::kTargetTooLong:
      return "target_too_long";
    case Reject::kBodyTooLarge:
      return "body_too_large";
  }
  return "unknown";
}

ApiServer::ApiServer(Limits limits) : limits_(limits) {
  new_task_queue = [] { return new ConnectionThreads(); };
}

ApiServer::~ApiServer() { stopServing(); }

int ApiServer::bindTo(const std::string& host, int port) {
  if (port == 0) {
    port = bind_to_any_port(host);
    if (port <= 0) return 0;
  } else if (!bind_to_port(host, port)) {
    return 0;
  }
  // Linux takes a second listen() on a listening socket as a new backlog.
  if (::listen(svr_sock_, SOMAXCONN) != 0)
    RANKMAP_WARN(Agent, "HTTP API: cannot raise the listen backlog: {}", std::strerror(errno));
  return port;
}

void ApiServer::stopServing() {
  stopping_ = true;
  stop();
  std::lock_guard<std::mutex> lock(mu_);
  for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
}

size_t ApiServer::openConnections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.size();
}

void ApiServer::reject(int fd, Reject why) {
  const size_t i = static_cast<size_t>(why);
  rejected_[i]++;
  RejectAnswer a = answerFor(why);
  if (uint64_t left = 0; rejectLog_[i].allow(left)) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const std::string peer =
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 ? sockaddrHost(ss) : "?";
    RANKMAP_WARN(Agent, "HTTP {} to {}: {}{}", a.status, peer, a.message,
                 left ? fmt::format(" ({} more since the last line of this kind)", left) : "");
  }
  std::string body = errorBody(a.status, a.message);
  std::string text = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      a.status, reasonPhrase(a.status), body.size(), body);
  // Best effort and never blocking: the answer fits the socket buffer of a fresh connection.
  (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool ApiServer::process_and_close_socket(socket_t sock) {
  bool admitted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_ && open_.size() < limits_.maxConnections) {
      open_.insert(sock);
      admitted = true;
    }
  }
  if (!admitted) {
    if (!stopping_) reject(sock, Reject::kBusy);
  } else {
    ConnectionStream s(sock, limits_.writeTimeout);
    for (size_t n = 0; n < limits_.maxRequestsPerConnection && !stopping_; ++n) {
      Deadline d = Deadline::after(limits_.requestTimeout);
      size_t headBytes = 0;
      auto head = s.readHead(d, limits_.maxHeadBytes, headBytes);
      if (head == ConnectionStream::Head::kClosed) break;
      if (head == ConnectionStream::Head::kTimeout) {
        // A kept-alive connection with nothing buffered just ends; a request started and left
        // unfinished is told why.
        if (n == 0 || !s.buffered().empty()) reject(sock, Reject::kTimeout);
        break;
      }
      if (head == ConnectionStream::Head::kTooLarge) {
        reject(sock, Reject::kHeadTooLarge);
        break;
      }
      std::string_view h = s.buffered().substr(0, headBytes);
      size_t lineEnd = h.find("\r\n");
      std::string_view requestLine = h.substr(0, lineEnd);
      size_t sp1 = requestLine.find(' ');
      size_t sp2 = sp1 == std::string_view::npos ? sp1 : requestLine.find(' ', sp1 + 1);
      size_t target = sp1 == std::string_view::npos   ? 0
                      : sp2 == std::string_view::npos ? requestLine.size() - sp1 - 1
                                                      : sp2 - sp1 - 1;
      if (target > limits_.maxTargetBytes) {
        reject(sock, Reject::kTargetTooLong);
        break;
      }
      size_t lines = 0;
      for (size_t p = lineEnd; (p = h.find("\r\n", p + 2)) != std::string_view::npos;) ++lines;
      if (lines > 0) --lines;  // the blank line that ends the head
      if (lines > limits_.maxHeaders) {
        reject(sock, Reject::kTooManyHeaders);
        break;
      }
      // A declared body over the limit is refused before any of it is read (httplib would read
      // it to its end first, bounded only by the request deadline). A POST, PUT or PATCH with
      // neither Content-Length nor Transfer-Encoding has an empty body (RFC 9112, 6.3: `curl -X
      // POST` sends one so); httplib would answer 400, so its head gets "Content-Length: 0".
      BodyOfHead body = bodyOfHead(h);
      if (body.length && *body.length > limits_.maxBodyBytes) {
        reject(sock, Reject::kBodyTooLarge);
        // A close with the client's body unread would reset the connection, and the client
        // could lose the answer: read and drop what comes for a moment first.
        ::shutdown(sock, SHUT_WR);
        drain(sock, Deadline::after(std::chrono::milliseconds(200)));
        break;
      }
      if (body.methodWithBody && !body.hasLength && !body.chunked)
        s.addHeader(headBytes, "Content-Length: 0\r\n");
      s.setReadDeadline(d);
      bool closed = false;
      bool last = n + 1 == limits_.maxRequestsPerConnection || stopping_;
      process_request(s, last, closed, nullptr);
      if (closed || s.failed()) break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    open_.erase(sock);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return true;
}

}  // namespace rankmap::agent
