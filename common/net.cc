#include "common/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace rankmap {

namespace {

int newSocket(int family) {
  return RANKMAP_CHECK_SYS(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

// Errors that mean the peer or the path to it is gone, not that a local call was misused.
bool peerGone(int err) {
  return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED ||
         err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN ||
         err == ENETRESET;
}

// connect(2) errors worth retrying while the other side may still be starting.
bool refusedOrUnreachable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == ECONNRESET || err == EAGAIN;
}

// "peer 10.0.0.2:40123", or "the peer" once the kernel has forgotten it.
std::string peerPart(const Socket& s) {
  std::string t = s.peerText();
  return t == "?" ? std::string("the peer") : "peer " + t;
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void Fd::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

short pollFd(int fd, short events, Deadline d) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, d.pollTimeoutMs());
    if (rc < 0) {
      if (errno == EINTR) continue;
      RANKMAP_CHECK_SYS(rc);
    }
    if (rc == 0) {
      if (d.expired()) return 0;
      continue;  // rounding: poll woke a little early
    }
    return p.revents;
  }
}

void setTcpNoDelay(int fd) {
  int one = 1;
  RANKMAP_CHECK_SYS(::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
}

HostPort parseHostPort(std::string_view text, std::string_view what, HostPortRules rules) {
  auto bad = [&](std::string_view why) -> InvalidInput {
    return InvalidInput(fmt::format("{}: '{}': {}", what, text, why));
  };
  const bool portRequired = !rules.defaultPort.has_value();
  if (text.empty()) {
    throw bad(portRequired ? "expected ADDRESS:PORT, got an empty string"
                           : "expected ADDRESS or ADDRESS:PORT, got an empty string");
  }
  std::string_view host = text;
  std::optional<std::string_view> port;
  if (text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) throw bad("unterminated '[' in an IPv6 address");
    host = text.substr(1, close - 1);
    auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw bad("expected ':PORT' after ']'");
      port = rest.substr(1);
    }
  } else {
    // An unbracketed IPv6 literal has several ':'. Where the port is optional such a text is an
    // address; where it is required, the last ':' separates the port.
    auto colon = std::string_view::npos;
    if (portRequired)
      colon = text.rfind(':');
    else if (std::count(text.begin(), text.end(), ':') == 1)
      colon = text.find(':');
    if (colon != std::string_view::npos) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
    }
  }
  if (!port && portRequired) throw bad("expected ADDRESS:PORT or [IPV6]:PORT, got no port");
  if (port && port->empty()) throw bad("empty port after ':'");
  if (host.empty()) throw bad("empty address");
  HostPort hp{std::string(host), rules.defaultPort.value_or(0)};
  if (port) {
    std::string_view range =
        rules.allowPortZero ? "port out of range 0..65535" : "port out of range 1..65535";
    unsigned value = 0;
    for (char c : *port) {
      if (c < '0' || c > '9') throw bad("expected a numeric port");
      value = value * 10 + static_cast<unsigned>(c - '0');
      if (value > 65535) throw bad(range);
    }
    if (value == 0 && !rules.allowPortZero) throw bad(range);
    hp.port = static_cast<uint16_t>(value);
  }
  return hp;
}

std::string hostPortText(std::string_view host, uint16_t port) {
  if (host.find(':') != std::string_view::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::string sockaddrHost(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  } else {
    return "?";
  }
  return buf;
}

uint16_t sockaddrPort(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

SockAddr resolve(const std::string& host, uint16_t port, Lookup lookup) {
  SockAddr a;
  if (lookup == Lookup::kNumericOnly) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a.storage);
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
    if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(port);
      a.len = sizeof(sockaddr_in);
    } else if (::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(port);
      a.len = sizeof(sockaddr_in6);
    } else {
      RANKMAP_THROW(InvalidInput,
                    "address '{}': expected a numeric IPv4 or IPv6 address (host names are not "
                    "resolved here)",
                    host);
    }
    return a;
  }
  addrinfo hints{};
  hints.ai_family = lookup == Lookup::kNamesIpv4 ? AF_INET : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rv = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rv != 0 || res == nullptr) {
    RANKMAP_THROW(InvalidInput, "cannot resolve host '{}': {}", host, ::gai_strerror(rv));
  }
  std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return a;
}

std::vector<InterfaceAddress> interfaceAddresses() {
  ifaddrs* list = nullptr;
  RANKMAP_CHECK_SYS(::getifaddrs(&list));
  std::vector<InterfaceAddress> out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    out.push_back({i->ifa_name, buf});
  }
  ::freeifaddrs(list);
  return out;
}

std::string interfaceAddress(const std::string& ifname, std::string_view what) {
  for (const auto& a : interfaceAddresses())
    if (a.interface == ifname) return a.address;
  RANKMAP_THROW(InvalidInput, "{}={}: no such interface with an IPv4 address", what, ifname);
}

std::optional<std::string> sourceAddressFor(const std::string& address) {
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(9);  // discard; nothing is sent
  if (::inet_pton(AF_INET, address.c_str(), &dst.sin_addr) != 1) return std::nullopt;
  Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return std::nullopt;
  if (::connect(fd.fd(), reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) return std::nullopt;
  sockaddr_storage src{};
  socklen_t len = sizeof src;
  if (::getsockname(fd.fd(), reinterpret_cast<sockaddr*>(&src), &len) != 0) return std::nullopt;
  return sockaddrHost(src);
}

// --- Socket ---

Socket Socket::startConnect(const SockAddr& addr, int& error, ConnectOptions options) {
  Socket s(newSocket(addr.storage.ss_family));
  s.setBuffers(options.bufferBytes);
  int rv = ::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
  error = rv == 0 ? 0 : errno;
  // EINTR: the handshake goes on in the background, as for EINPROGRESS.
  if (error == EINPROGRESS || error == EINTR) error = 0;
  if (error != 0) s.close();
  return s;
}

int Socket::finishConnect() {
  int err = 0;
  socklen_t len = sizeof(err);
  RANKMAP_CHECK_SYS(::getsockopt(fd(), SOL_SOCKET, SO_ERROR, &err, &len));
  if (err == 0) setNoDelay();
  return err;
}

Socket Socket::connect(const SockAddr& addr, Deadline d, std::string_view what,
                       ConnectOptions options) {
  auto delay = std::chrono::milliseconds(10);
  std::string lastError = "no attempt";
  for (;;) {
    int err = 0;
    Socket s = startConnect(addr, err, options);
    if (err == 0) {
      if (pollFd(s.fd(), POLLOUT, d) == 0) {
        lastError = "no answer";
        break;
      }
      err = s.finishConnect();
      if (err == 0) return s;
    }
    lastError = std::strerror(err);
    if (!refusedOrUnreachable(err)) throw SystemError(fmt::format("connect to {}", what), err);
    if (!options.retryRefused) RANKMAP_THROW(PeerError, "connect to {}: {}", what, lastError);
    if (d.remaining() <= delay) break;
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
  RANKMAP_THROW(TimeoutError, "connect to {}: not connected before the deadline (last error: {})",
                what, lastError);
}

void Socket::fail(int err, bool sending, std::string_view what) const {
  if (peerGone(err)) {
    RANKMAP_THROW(PeerError, "{}: {} {} failed: {}", what,
                  sending ? "sending to" : "receiving from", peerPart(*this), std::strerror(err));
  }
  throw SystemError(fmt::format("{}: {} {}", what, sending ? "send to" : "recv from", peerText()),
                    err);
}

void Socket::sendAll(const void* data, size_t n, Deadline d, std::string_view what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd(), p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (pollFd(fd(), POLLOUT, d) == 0) {
        RANKMAP_THROW(TimeoutError, "{}: {} did not read within the deadline", what,
                      peerPart(*this));
      }
      continue;
    }
    fail(errno, true, what);
  }
}

size_t Socket::recvSome(void* data, size_t n, Deadline d, std::string_view what) {
  for (;;) {
    ssize_t k = ::recv(fd(), data, n, 0);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (pollFd(fd(), POLLIN, d) == 0) {
        RANKMAP_THROW(TimeoutError, "{}: {} sent nothing within the deadline", what,
                      peerPart(*this));
      }
      continue;
    }
    fail(errno, false, what);
  }
}

void Socket::recvAll(void* data, size_t n, Deadline d, std::string_view what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    size_t k = recvSome(p, n, d, what);
    if (k == 0) RANKMAP_THROW(PeerError, "{}: {} closed the connection", what, peerPart(*this));
    p += k;
    n -= k;
  }
}

size_t Socket::sendNow(const void* data, size_t n, std::string_view what) {
  for (;;) {
    ssize_t k = ::send(fd(), data, n, MSG_NOSIGNAL);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    fail(errno, true, what);
  }
}

std::optional<size_t> Socket::recvNow(void* data, size_t n, std::string_view what) {
  for (;;) {
    ssize_t k = ::recv(fd(), data, n, 0);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    fail(errno, false, what);
  }
}

bool Socket::waitReadable(Deadline d) const { return pollFd(fd(), POLLIN, d) != 0; }
bool Socket::waitWritable(Deadline d) const { return pollFd(fd(), POLLOUT, d) != 0; }

std::pair<bool, bool> Socket::waitEither(Deadline d) const {
  short ev = pollFd(fd(), POLLIN | POLLOUT, d);
  bool readable = (ev & (POLLIN | POLLERR | POLLHUP)) != 0;
  return {readable, (ev & POLLOUT) != 0};
}

SockAddr Socket::localAddr() const {
  SockAddr a;
  a.len = sizeof(a.storage);
  RANKMAP_CHECK_SYS(::getsockname(fd(), reinterpret_cast<sockaddr*>(&a.storage), &a.len));
  return a;
}

SockAddr Socket::peerAddr() const {
  SockAddr a;
  a.len = sizeof(a.storage);
  RANKMAP_CHECK_SYS(::getpeername(fd(), reinterpret_cast<sockaddr*>(&a.storage), &a.len));
  return a;
}

std::string Socket::peerText() const {
  SockAddr a;
  a.len = sizeof(a.storage);
  if (!valid() || ::getpeername(fd(), reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0)
    return "?";
  if (a.storage.ss_family != AF_INET && a.storage.ss_family != AF_INET6) return "?";
  return a.str();
}

void Socket::setBuffers(uint64_t bytes) {
  if (bytes == 0) return;
  int v = static_cast<int>(std::min<uint64_t>(bytes, 1u << 30));
  // The kernel caps these at net.core.{w,r}mem_max; a smaller effective size is not an error.
  RANKMAP_CHECK_SYS(::setsockopt(fd(), SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)));
  RANKMAP_CHECK_SYS(::setsockopt(fd(), SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)));
}

// --- Listener ---

Listener Listener::bind(const SockAddr& addr, ListenOptions options) {
  Listener l;
  Socket s(newSocket(addr.storage.ss_family));
  int one = 1;
  RANKMAP_CHECK_SYS(::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  s.setBuffers(options.bufferBytes);
  if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0) {
    int err = errno;
    throw SystemError(fmt::format("bind to {}", addr.str()), err);
  }
  RANKMAP_CHECK_SYS(::listen(s.fd(), options.backlog));
  l.port_ = s.localAddr().port();
  l.fd_ = std::move(s);
  l.wakeFd_ = Fd(RANKMAP_CHECK_SYS(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)));
  return l;
}

SockAddr Listener::localAddr() const {
  SockAddr a;
  a.len = sizeof(a.storage);
  RANKMAP_CHECK_SYS(::getsockname(fd_.fd(), reinterpret_cast<sockaddr*>(&a.storage), &a.len));
  return a;
}

std::optional<Socket> Listener::accept(Deadline d) {
  for (;;) {
    pollfd p[2] = {{fd_.fd(), POLLIN, 0}, {wakeFd_.fd(), POLLIN, 0}};
    int rc = ::poll(p, 2, d.pollTimeoutMs());
    if (rc < 0) {
      if (errno == EINTR) continue;
      RANKMAP_CHECK_SYS(rc);
    }
    if (p[1].revents) return std::nullopt;
    if (rc == 0) {
      if (d.expired()) return std::nullopt;
      continue;  // rounding: poll woke a little early
    }
    int cfd = ::accept4(fd_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd < 0) {
      // The connection may be gone already, or we are out of descriptors for a moment:
      // neither stops the listener.
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED ||
          errno == EPROTO)
        continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Back off instead of spinning on a listener that stays readable.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      RANKMAP_CHECK_SYS(cfd);
    }
    Socket s(cfd);
    s.setNoDelay();
    return s;
  }
}

void Listener::shutdown() {
  if (wakeFd_.valid()) {
    uint64_t one = 1;
    [[maybe_unused]] auto rc = ::write(wakeFd_.fd(), &one, sizeof(one));
  }
}

std::string localHostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace rankmap
