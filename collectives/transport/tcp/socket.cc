#include "collectives/transport/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace rankmap::coll::transport::tcp {

namespace {

int newSocket(int family) {
  return RANKMAP_CHECK_SYS(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

}  // namespace

void splitHostPort(std::string_view text, std::string_view what, std::string* host,
                   uint16_t* port) {
  HostPort hp = parseHostPort(text, what, {.defaultPort = std::nullopt, .allowPortZero = true});
  *host = std::move(hp.host);
  *port = hp.port;
}

SockAddr resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rv = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rv != 0 || res == nullptr) {
    RANKMAP_THROW(InvalidInput, "cannot resolve host '{}': {}", host, ::gai_strerror(rv));
  }
  SockAddr a;
  std::memcpy(&a.storage, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return a;
}

std::string interfaceAddress(const std::string& ifname) {
  ifaddrs* list = nullptr;
  RANKMAP_CHECK_SYS(::getifaddrs(&list));
  std::string found;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (ifname != i->ifa_name) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    found = buf;
    break;
  }
  ::freeifaddrs(list);
  if (found.empty()) {
    RANKMAP_THROW(InvalidInput, "RANKMAP_SOCKET_IFNAME={}: no such interface with an IPv4 address",
                  ifname);
  }
  return found;
}

void Socket::setBuffers(uint64_t bytes) {
  if (bytes == 0) return;
  int v = static_cast<int>(std::min<uint64_t>(bytes, 1u << 30));
  // The kernel caps these at net.core.{w,r}mem_max; a smaller effective size is not an error.
  RANKMAP_CHECK_SYS(::setsockopt(fd(), SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)));
  RANKMAP_CHECK_SYS(::setsockopt(fd(), SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)));
}

Socket Socket::listen(const SockAddr& addr, uint64_t bufferBytes) {
  Socket s(newSocket(addr.storage.ss_family));
  int one = 1;
  RANKMAP_CHECK_SYS(::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
  s.setBuffers(bufferBytes);
  if (::bind(s.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0) {
    int err = errno;
    throw SystemError(fmt::format("bind to {}", addr.str()), err);
  }
  RANKMAP_CHECK_SYS(::listen(s.fd(), SOMAXCONN));
  return s;
}

Socket Socket::connect(const SockAddr& addr, uint64_t bufferBytes, Deadline deadline,
                       std::string_view what) {
  auto delay = std::chrono::milliseconds(10);
  std::string lastError = "no attempt";
  for (;;) {
    Socket s(newSocket(addr.storage.ss_family));
    s.setBuffers(bufferBytes);
    int rv = ::connect(s.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    int err = rv == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      if (pollFd(s.fd(), POLLOUT, deadline) == 0) {
        lastError = "connect still in progress";
        break;
      }
      socklen_t len = sizeof(err);
      RANKMAP_CHECK_SYS(::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len));
    }
    if (err == 0) return s;
    lastError = std::strerror(err);
    // Refused or unreachable: the listener may not be up yet; retry with backoff.
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH && err != ENETUNREACH &&
        err != ECONNRESET && err != EAGAIN) {
      throw SystemError(fmt::format("connect to {} ({})", what, addr.str()), err);
    }
    if (deadline.remaining() <= delay) break;
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
  RANKMAP_THROW(TimeoutError, "could not connect to {} ({}) before the deadline (last error: {})",
                what, addr.str(), lastError);
}

Socket Socket::accept(Deadline deadline, std::string_view what) {
  for (;;) {
    int cfd = ::accept4(fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd >= 0) return Socket(cfd);
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) RANKMAP_CHECK_SYS(cfd);
    if (pollFd(fd(), POLLIN, deadline) == 0) {
      RANKMAP_THROW(TimeoutError, "timed out waiting for {} to connect", what);
    }
  }
}

void Socket::sendAll(const void* buf, size_t bytes, Deadline deadline, std::string_view what) {
  const char* p = static_cast<const char*>(buf);
  while (bytes > 0) {
    ssize_t n = ::send(fd(), p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (pollFd(fd(), POLLOUT, deadline) == 0) {
        RANKMAP_THROW(TimeoutError, "timed out sending to {}", what);
      }
      continue;
    }
    RANKMAP_THROW(PeerError, "connection to {} failed while sending: {}", what,
                  std::strerror(errno));
  }
}

void Socket::recvAll(void* buf, size_t bytes, Deadline deadline, std::string_view what) {
  char* p = static_cast<char*>(buf);
  while (bytes > 0) {
    ssize_t n = ::recv(fd(), p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) RANKMAP_THROW(PeerError, "{} closed the connection", what);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (pollFd(fd(), POLLIN, deadline) == 0) {
        RANKMAP_THROW(TimeoutError, "timed out waiting for data from {}", what);
      }
      continue;
    }
    RANKMAP_THROW(PeerError, "connection to {} failed while receiving: {}", what,
                  std::strerror(errno));
  }
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

}  // namespace rankmap::coll::transport::tcp
