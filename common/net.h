// The network layer every module shares: a move-only descriptor owner, a deadline-bounded poll,
// host:port text, socket addresses and their resolution, and one TCP Socket and Listener. The
// probe protocol (probe/), the TCP transport and the root bootstrap (collectives/) and the NCCL
// shim's plan agreement (shim_nccl/) all talk through these.
//
// Contract:
// - Every call that can block takes a Deadline and throws TimeoutError naming what it waited for,
//   except resolve(..., Lookup::kNames), which may wait on DNS: callers bound by a deadline (the
//   probe) accept numeric addresses only and resolve with Lookup::kNumericOnly.
// - Sockets are IPv4 or IPv6 TCP, close-on-exec and non-blocking from creation; connected and
//   accepted sockets have TCP_NODELAY on (every protocol here is request/response).
// - A connection that the peer or the network broke (refused, reset, closed mid-message,
//   unreachable) is a PeerError; a failure of a local call is a SystemError; an address that
//   does not parse or resolve is InvalidInput.
// - `what` in an I/O call names the exchange or the other side ("rank 3 (10.0.0.4:4100)",
//   "receive frame header"); messages start with it and add the peer's address when the kernel
//   still knows it. Connect errors read "connect to <what>: ..." (probe::failureOf classifies on
//   that).
// - One thread uses a Socket at a time; Listener::shutdown() may be called from any thread.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// "10.0.0.1:7411", or "[fe80::1]:7411" when the host contains ':'.
std::string hostPortText(std::string_view host, uint16_t port);

struct HostPort {
  std::string host;  // without brackets; may be a name, the caller decides
  uint16_t port = 0;
  std::string text() const { return hostPortText(host, port); }
  bool operator==(const HostPort&) const = default;
};

// Splits host and port; throws InvalidInput "<what>: '<text>': <expectation>" where `what` names
// the source ("RANKMAP_ROOT", "--listen", "hosts:3").
HostPort parseHostPort(std::string_view text, std::string_view what, HostPortRules rules);

// The numeric address of an AF_INET/AF_INET6 sockaddr ("?" for other families) and its port
// (0 for other families).
std::string sockaddrHost(const sockaddr_storage& ss);
uint16_t sockaddrPort(const sockaddr_storage& ss);

// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  // "10.0.0.4:4100" or "[fe80::1]:4100".
  std::string str() const { return hostPortText(host(), port()); }
  // The numeric address without the port ("10.0.0.4").
  std::string host() const { return sockaddrHost(storage); }
  uint16_t port() const { return sockaddrPort(storage); }
};

// What resolve() may do with a host that is not a numeric literal.
enum class Lookup {
  // Numeric IPv4/IPv6 literals only (inet_pton): never blocks. For deadline-bound protocols.
  kNumericOnly,
  // Host names too, through getaddrinfo (first IPv4/IPv6 result): may wait on DNS. For addresses
  // a user configured (RANKMAP_ROOT, a peer's published host).
  kNames,
  // As kNames, IPv4 results only: for protocols whose peers speak IPv4 only (XGBoost's tracker).
  kNamesIpv4,
};

// `host` (no brackets) and `port` as a socket address; throws InvalidInput naming the host.
SockAddr resolve(const std::string& host, uint16_t port, Lookup lookup);

// The IPv4 address of interface `ifname` ("10.213.0.4"); throws InvalidInput naming `what`
// (the setting that named the interface) when it does not exist or has no IPv4 address.
std::string interfaceAddress(const std::string& ifname, std::string_view what);

// This machine's IPv4 interface addresses, in getifaddrs(3) order. SystemError if it fails.
struct InterfaceAddress {
  std::string interface;  // "eth0"
  std::string address;    // "10.213.0.4"
};
std::vector<InterfaceAddress> interfaceAddresses();

// The local IPv4 address the kernel would send from to reach `address` (a numeric IPv4
// address), found with a UDP connect, which sends nothing. nullopt when `address` is not a
// numeric IPv4 address or there is no route to it.
std::optional<std::string> sourceAddressFor(const std::string& address);

struct ConnectOptions {
  // Retry refused and unreachable connections, backing off from 10 ms to 500 ms, until the
  // deadline: for ranks whose listener may not be up yet. Off, the first refusal is a PeerError
  // (the probe takes a refusing agent for a dead one at once).
  bool retryRefused = false;
  // SO_SNDBUF and SO_RCVBUF before the handshake, so that window scaling fits them (0 = the
  // kernel's default; the kernel caps them at net.core.{w,r}mem_max).
  uint64_t bufferBytes = 0;
};

struct ListenOptions {
  int backlog = SOMAXCONN;
  // Set on the listener so that accepted sockets inherit it before the handshake (see
  // ConnectOptions::bufferBytes).
  uint64_t bufferBytes = 0;
};

// A TCP connection. Owns its descriptor (fd(), valid(), close() come from Fd) and adds nothing
// to it: the TCP transport's pairs keep one per stream and do their hot-path I/O on fd() with
// their own sendmsg/recv calls.
class Socket : public Fd {
 public:
  using Fd::Fd;

  // Connects to `addr` before `d`. `what` names the other side with its address. TimeoutError
  // when nothing answers (or, with retryRefused, nothing accepts) before the deadline;
  // PeerError when refused or unreachable; SystemError for other failures.
  static Socket connect(const SockAddr& addr, Deadline d, std::string_view what,
                        ConnectOptions options = {});
  // The two halves of connect() for callers that multiplex many sockets (probe/fanout.h), which
  // wait for writability themselves. startConnect() starts the TCP handshake and returns at once:
  // `error` is 0 when the handshake is under way or done, else the errno of an immediate
  // failure (refused, unreachable; the socket is then closed). SystemError only when no socket
  // can be created (EMFILE, ENFILE, ...).
  static Socket startConnect(const SockAddr& addr, int& error, ConnectOptions options = {});
  // Once a started socket is writable (or reports an error): 0 when it is connected (TCP_NODELAY
  // is then on), else the errno of the failed handshake.
  int finishConnect();

  // Sends all of `data` before `d`. PeerError if the connection breaks.
  void sendAll(const void* data, size_t n, Deadline d, std::string_view what);
  // Receives exactly `n` bytes before `d`. PeerError on end-of-file or a broken connection.
  void recvAll(void* data, size_t n, Deadline d, std::string_view what);
  // Waits until readable, then reads at most `n` bytes; returns 0 on end-of-file.
  size_t recvSome(void* data, size_t n, Deadline d, std::string_view what);
  // Writes what fits now without waiting; returns the bytes written (0 if the buffer is full).
  size_t sendNow(const void* data, size_t n, std::string_view what);
  // Reads what is there now without waiting; nullopt if nothing, 0 on end-of-file.
  std::optional<size_t> recvNow(void* data, size_t n, std::string_view what);
  // Wait for readability (or writability) until `d`; false on timeout.
  bool waitReadable(Deadline d) const;
  bool waitWritable(Deadline d) const;
  // Waits until readable or writable; returns {readable, writable}, both false on timeout.
  // Errors and hang-ups count as readable: the next read reports them.
  std::pair<bool, bool> waitEither(Deadline d) const;

  SockAddr localAddr() const;
  SockAddr peerAddr() const;
  // "10.0.0.2:40123", or "?" when the kernel no longer knows the peer (after a reset). Never
  // throws: for messages.
  std::string peerText() const;
  void setNoDelay() { setTcpNoDelay(fd()); }
  void setBuffers(uint64_t bytes);

 private:
  [[noreturn]] void fail(int err, bool sending, std::string_view what) const;
};

// A listening TCP socket (SO_REUSEADDR) with a wake-up descriptor, so that another thread can
// stop a blocked accept(). Move-only.
class Listener {
 public:
  Listener() = default;
  // Binds `addr` (port 0 picks a free port) and listens. SystemError naming the address when
  // the bind fails (in use, not local).
  static Listener bind(const SockAddr& addr, ListenOptions options = {});

  bool valid() const { return fd_.valid(); }
  uint16_t port() const { return port_; }
  SockAddr localAddr() const;
  // Waits for a connection until `d`; nullopt on timeout or after shutdown(). A connection that
  // is gone before it is accepted, or a moment without free descriptors, does not end the wait.
  std::optional<Socket> accept(Deadline d);
  // Makes every accept(), blocked or later, return nullopt; safe from another thread.
  void shutdown();

 private:
  Fd fd_;
  Fd wakeFd_;  // eventfd that shutdown() signals
  uint16_t port_ = 0;
};

// This machine's host name (gethostname; "localhost" when it fails).
std::string localHostName();

}  // namespace rankmap
