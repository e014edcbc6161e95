// TCP sockets for the probe protocol: every blocking operation takes a Deadline.
//
// Contract: sockets are non-blocking underneath; sendAll/recvAll/connect/accept wait with poll(2)
// until the deadline and throw TimeoutError naming what they waited for. A peer that closes
// the connection mid-message is a PeerError; a failed system call is a SystemError. Addresses are
// numeric IPv4/IPv6 literals (or "localhost"): no resolver call can block past a deadline.
// A Socket is owned by one thread at a time; Listener::accept may run on one thread while another
// calls Listener::shutdown().
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/deadline.h"
#include "common/net.h"

namespace rankmap::probe {

inline constexpr uint16_t kDefaultProbePort = 7411;

// A numeric address and a port.
struct Endpoint {
  std::string host;  // numeric IPv4 or IPv6 literal (no brackets)
  uint16_t port = 0;
  // "10.0.0.1:7411" or "[fe80::1]:7411".
  std::string text() const { return hostPortText(host, port); }
  bool operator==(const Endpoint&) const = default;
};

// Parses "ADDR", "ADDR:PORT", "[V6]:PORT" or "V6" (common/net.h, port 1..65535); ADDR must be a
// numeric IP literal or "localhost" (-> 127.0.0.1). Throws InvalidInput naming `what` on anything
// else.
Endpoint parseEndpoint(std::string_view text, uint16_t defaultPort, std::string_view what);

// A connected TCP socket. Owns its descriptor (fd(), valid(), close() come from rankmap::Fd).
class Socket : public Fd {
 public:
  using Fd::Fd;

  // Connects to `ep` before `d`; throws TimeoutError or PeerError ("connection refused").
  static Socket connect(const Endpoint& ep, Deadline d);

  // Closes with a reset (SO_LINGER 0): whatever is still queued to send is discarded instead of
  // trickling out after the close. Ends bulk transfers so that their tail does not overlap the
  // next measurement.
  void abort();
  // shutdown(2) of the write side: the peer reads EOF after what was sent.
  void shutdownWrite();
  // shutdown(2) of both sides; wakes a thread blocked in poll on this socket.
  void shutdownBoth();

  // Sends all of `data` before `d`. PeerError if the peer reset the connection.
  void sendAll(const void* data, size_t n, Deadline d, std::string_view what);
  // Receives exactly `n` bytes before `d`. PeerError on EOF.
  void recvAll(void* data, size_t n, Deadline d, std::string_view what);
  // Waits until readable, then reads at most `n` bytes; returns 0 on EOF.
  size_t recvSome(void* data, size_t n, Deadline d, std::string_view what);
  // Writes what fits now without waiting; returns the bytes written (0 if the buffer is full).
  size_t sendNow(const void* data, size_t n, std::string_view what);
  // Reads what is there now without waiting; nullopt if nothing, 0 on EOF.
  std::optional<size_t> recvNow(void* data, size_t n, std::string_view what);
  // Waits for readability (or writability) until `d`; false on timeout.
  bool waitReadable(Deadline d) const;
  bool waitWritable(Deadline d) const;
  // Waits until readable or writable; returns {readable, writable}; both false on timeout.
  std::pair<bool, bool> waitEither(Deadline d) const;

  void setNoDelay() { setTcpNoDelay(fd()); }
  // "10.0.0.2:40123"
  std::string peerText() const;
};

class Listener {
 public:
  // Binds and listens (SO_REUSEADDR); port 0 picks a free port. Throws SystemError naming
  // the address when it is in use.
  static Listener bind(const Endpoint& ep, int backlog = 256);
  uint16_t port() const { return port_; }
  // Waits for a connection until `d`; nullopt on timeout or after shutdown().
  std::optional<Socket> accept(Deadline d);
  // Makes accept() return nullopt from now on; safe from another thread.
  void shutdown();

 private:
  Fd fd_;
  Fd wakeFd_;  // eventfd that shutdown() signals
  uint16_t port_ = 0;
};

}  // namespace rankmap::probe
