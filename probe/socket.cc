#include "probe/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace rankmap::probe {
namespace {

// sockaddr for a numeric literal; the parser already checked it, so failure is a bug.
socklen_t toSockaddr(const Endpoint& ep, sockaddr_storage& ss) {
  std::memset(&ss, 0, sizeof(ss));
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  if (inet_pton(AF_INET, ep.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(ep.port);
    return sizeof(sockaddr_in);
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET6, ep.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(ep.port);
    return sizeof(sockaddr_in6);
  }
  throw InvalidInput(fmt::format("address '{}': expected a numeric IPv4 or IPv6 address", ep.host));
}

std::string sockaddrText(const sockaddr_storage& ss) {
  if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) return "?";
  return hostPortText(sockaddrHost(ss), sockaddrPort(ss));
}

bool isResetErrno(int err) {
  return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED;
}

}  // namespace

Endpoint parseEndpoint(std::string_view text, uint16_t defaultPort, std::string_view what) {
  HostPort hp = parseHostPort(text, what, {.defaultPort = defaultPort, .allowPortZero = false});
  Endpoint ep{std::move(hp.host), hp.port};
  if (ep.host == "localhost") ep.host = "127.0.0.1";
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, ep.host.c_str(), buf) != 1 &&
      inet_pton(AF_INET6, ep.host.c_str(), buf) != 1)
    throw InvalidInput(
        fmt::format("{}: '{}': expected a numeric IPv4/IPv6 address (host names are not resolved)",
                    what, text));
  return ep;
}

void Socket::abort() {
  if (!valid()) return;
  linger l{1, 0};
  ::setsockopt(fd(), SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close();
}

void Socket::shutdownWrite() {
  if (valid()) ::shutdown(fd(), SHUT_WR);
}

void Socket::shutdownBoth() {
  if (valid()) ::shutdown(fd(), SHUT_RDWR);
}

Socket Socket::connect(const Endpoint& ep, Deadline d) {
  sockaddr_storage ss;
  socklen_t len = toSockaddr(ep, ss);
  Socket s(
      RANKMAP_CHECK_SYS(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  int rc = ::connect(s.fd(), reinterpret_cast<sockaddr*>(&ss), len);
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    throw PeerError(fmt::format("connect to {}: {}", ep.text(), std::strerror(err)));
  }
  if (rc != 0) {
    short ev = pollFd(s.fd(), POLLOUT, d);
    if (ev == 0)
      throw TimeoutError(fmt::format("connect to {}: no answer within the deadline", ep.text()));
    int err = 0;
    socklen_t elen = sizeof(err);
    RANKMAP_CHECK_SYS(::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &elen));
    if (err != 0) throw PeerError(fmt::format("connect to {}: {}", ep.text(), std::strerror(err)));
  }
  s.setNoDelay();
  return s;
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
      short ev = pollFd(fd(), POLLOUT, d);
      if (ev == 0)
        throw TimeoutError(
            fmt::format("{}: peer {} did not read within the deadline", what, peerText()));
      continue;
    }
    int err = errno;
    if (isResetErrno(err))
      throw PeerError(fmt::format("{}: peer {} closed the connection", what, peerText()));
    throw SystemError(fmt::format("{}: send to {}", what, peerText()), err);
  }
}

size_t Socket::recvSome(void* data, size_t n, Deadline d, std::string_view what) {
  for (;;) {
    ssize_t k = ::recv(fd(), data, n, 0);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      short ev = pollFd(fd(), POLLIN, d);
      if (ev == 0)
        throw TimeoutError(
            fmt::format("{}: peer {} sent nothing within the deadline", what, peerText()));
      continue;
    }
    int err = errno;
    if (isResetErrno(err))
      throw PeerError(fmt::format("{}: peer {} reset the connection", what, peerText()));
    throw SystemError(fmt::format("{}: recv from {}", what, peerText()), err);
  }
}

void Socket::recvAll(void* data, size_t n, Deadline d, std::string_view what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    size_t k = recvSome(p, n, d, what);
    if (k == 0) throw PeerError(fmt::format("{}: peer {} closed the connection", what, peerText()));
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
    int err = errno;
    if (isResetErrno(err))
      throw PeerError(fmt::format("{}: peer {} closed the connection", what, peerText()));
    throw SystemError(fmt::format("{}: send to {}", what, peerText()), err);
  }
}

std::optional<size_t> Socket::recvNow(void* data, size_t n, std::string_view what) {
  for (;;) {
    ssize_t k = ::recv(fd(), data, n, 0);
    if (k >= 0) return static_cast<size_t>(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    int err = errno;
    if (isResetErrno(err))
      throw PeerError(fmt::format("{}: peer {} reset the connection", what, peerText()));
    throw SystemError(fmt::format("{}: recv from {}", what, peerText()), err);
  }
}

bool Socket::waitReadable(Deadline d) const { return pollFd(fd(), POLLIN, d) != 0; }
bool Socket::waitWritable(Deadline d) const { return pollFd(fd(), POLLOUT, d) != 0; }

std::pair<bool, bool> Socket::waitEither(Deadline d) const {
  short ev = pollFd(fd(), POLLIN | POLLOUT, d);
  // Errors and hang-ups count as readable: the next recv reports them.
  bool readable = (ev & (POLLIN | POLLERR | POLLHUP)) != 0;
  return {readable, (ev & POLLOUT) != 0};
}

std::string Socket::peerText() const {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (!valid() || ::getpeername(fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return sockaddrText(ss);
}

Listener Listener::bind(const Endpoint& ep, int backlog) {
  sockaddr_storage ss;
  socklen_t len = toSockaddr(ep, ss);
  Listener l;
  l.fd_ =
      Fd(RANKMAP_CHECK_SYS(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)));
  int one = 1;
  RANKMAP_CHECK_SYS(::setsockopt(l.fd_.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  if (::bind(l.fd_.fd(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    throw SystemError(fmt::format("bind {}", ep.text()), errno);
  RANKMAP_CHECK_SYS(::listen(l.fd_.fd(), backlog));
  sockaddr_storage bound;
  socklen_t blen = sizeof(bound);
  RANKMAP_CHECK_SYS(::getsockname(l.fd_.fd(), reinterpret_cast<sockaddr*>(&bound), &blen));
  l.port_ = sockaddrPort(bound);
  l.wakeFd_ = Fd(RANKMAP_CHECK_SYS(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)));
  return l;
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
      continue;
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

}  // namespace rankmap::probe
