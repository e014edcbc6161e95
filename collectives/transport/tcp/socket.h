// Socket helpers for the TCP transport and the root bootstrap: name resolution, deadline-bounded
// connect/accept/send/recv on non-blocking sockets. The descriptor owner, host:port parsing and
// sockaddr text are common/net.h's, shared with probe/.
//
// Contract: every blocking helper takes a Deadline and throws TimeoutError naming what it waited
// for; a closed or reset connection throws PeerError naming `what` (the caller says who the
// other side is). Sockets are IPv4 or IPv6, close-on-exec and non-blocking from creation.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/deadline.h"
#include "common/net.h"

namespace rankmap::coll::transport::tcp {

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  // "10.0.0.4:4100" or "[fe80::1]:4100".
  std::string str() const { return hostPortText(host(), port()); }
  // The address without the port ("10.0.0.4").
  std::string host() const { return sockaddrHost(storage); }
  uint16_t port() const { return sockaddrPort(storage); }
};

// Splits "host:port" or "[v6]:port" (common/net.h: the port is required, 0 = ephemeral); throws
// InvalidInput naming `what` ("RANKMAP_ROOT").
void splitHostPort(std::string_view text, std::string_view what, std::string* host,
                   uint16_t* port);
// Resolves a host name or numeric address (first IPv4/IPv6 result); throws InvalidInput.
SockAddr resolve(const std::string& host, uint16_t port);
// IPv4 address of interface `ifname` ("10.213.0.4"); throws InvalidInput if it has none.
std::string interfaceAddress(const std::string& ifname);

// A TCP socket. Owns its descriptor (fd(), valid(), close() come from rankmap::Fd).
class Socket : public Fd {
 public:
  using Fd::Fd;

  // A listening socket on `addr` (port 0 = ephemeral). `bufferBytes` (0 = kernel default) is set
  // on the listener so that accepted sockets inherit it before the handshake (window scaling).
  static Socket listen(const SockAddr& addr, uint64_t bufferBytes);
  // Connects to `addr`, retrying refused connections (the listener may not be up yet) until the
  // deadline; throws TimeoutError naming `what` and the last error.
  static Socket connect(const SockAddr& addr, uint64_t bufferBytes, Deadline deadline,
                        std::string_view what);
  // Accepts one connection; throws TimeoutError naming `what`.
  Socket accept(Deadline deadline, std::string_view what);

  // Whole-buffer I/O bounded by the deadline (poll + non-blocking calls).
  void sendAll(const void* buf, size_t bytes, Deadline deadline, std::string_view what);
  void recvAll(void* buf, size_t bytes, Deadline deadline, std::string_view what);

  SockAddr localAddr() const;
  SockAddr peerAddr() const;
  void setNoDelay() { setTcpNoDelay(fd()); }
  void setBuffers(uint64_t bytes);
};

}  // namespace rankmap::coll::transport::tcp
