#include "common/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/error.h"

namespace rankmap {

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

}  // namespace rankmap
