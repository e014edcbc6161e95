// Network helpers shared by the probe sockets (probe/socket.h) and the TCP transport
// (collectives/transport/tcp/socket.h): a move-only descriptor owner, a deadline-bounded poll,
// host:port text in both directions and sockaddr formatting.
//
// Contract: nothing here resolves names or blocks past a Deadline; what each caller accepts as an
// address (numeric only, or names for getaddrinfo) stays with the caller.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/deadline.h"

namespace rankmap {

// Owns one file descriptor (-1 = none) and closes it on destruction. Move-only; one thread uses
// an Fd at a time.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { close(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
};

// poll(2) on one descriptor until `d`; returns revents, 0 once the deadline has passed. Retries
// EINTR and wake-ups before the deadline (the timeout is rounded to milliseconds); a poll failure
// is a SystemError.
short pollFd(int fd, short events, Deadline d);

// TCP_NODELAY on; SystemError on failure.
void setTcpNoDelay(int fd);

// What parseHostPort accepts besides "ADDRESS:PORT" and "[IPV6]:PORT".
struct HostPortRules {
  // Port used when the text has none ("ADDRESS", "[IPV6]" or a bare IPv6 literal); nullopt makes
  // the port required, and then an unbracketed text splits at its last ':'.
  std::optional<uint16_t> defaultPort;
  // Port 0 asks a listener for any free port; allowed only where the caller binds.
  bool allowPortZero = false;
};

struct HostPort {
  std::string host;  // without brackets; may be a name, the caller decides
  uint16_t port = 0;
};

// Splits host and port; throws InvalidInput "<what>: '<text>': <expectation>" where `what` names
// the source ("RANKMAP_ROOT", "--listen", "hosts:3").
HostPort parseHostPort(std::string_view text, std::string_view what, HostPortRules rules);

// "10.0.0.1:7411", or "[fe80::1]:7411" when the host contains ':'.
std::string hostPortText(std::string_view host, uint16_t port);

// The numeric address of an AF_INET/AF_INET6 sockaddr ("?" for other families) and its port
// (0 for other families).
std::string sockaddrHost(const sockaddr_storage& ss);
uint16_t sockaddrPort(const sockaddr_storage& ss);

}  // namespace rankmap
