#include "probe/socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <utility>

#include "common/error.h"

namespace rankmap::probe {

Endpoint parseEndpoint(std::string_view text, uint16_t defaultPort, std::string_view what) {
  Endpoint ep = parseHostPort(text, what, {.defaultPort = defaultPort, .allowPortZero = false});
  if (ep.host == "localhost") ep.host = "127.0.0.1";
  unsigned char buf[sizeof(in6_addr)];
  if (inet_pton(AF_INET, ep.host.c_str(), buf) != 1 &&
      inet_pton(AF_INET6, ep.host.c_str(), buf) != 1)
    throw InvalidInput(
        fmt::format("{}: '{}': expected a numeric IPv4/IPv6 address (host names are not resolved)",
                    what, text));
  return ep;
}

Socket connectTo(const Endpoint& ep, Deadline d) {
  // A SYN lost in a queue full of a trial's bulk data would wait for the kernel's retransmission
  // (1 s, then 3 s): a fresh attempt re-sends it sooner (kSynRetry, doubling), so a connection
  // held up behind load costs a few hundred milliseconds, not seconds.
  auto addr = resolve(ep.host, ep.port, Lookup::kNumericOnly);
  auto wait = kSynRetry;
  for (;;) {
    try {
      return Socket::connect(addr, Deadline::after(wait).min(d), ep.text());
    } catch (const TimeoutError&) {
      if (d.expired()) throw;
      wait *= 2;
    }
  }
}

Listener listenOn(const Endpoint& ep) {
  return Listener::bind(resolve(ep.host, ep.port, Lookup::kNumericOnly));
}

void abortConnection(Socket& s) {
  if (!s.valid()) return;
  linger l{1, 0};
  ::setsockopt(s.fd(), SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  s.close();
}

void shutdownWrite(Socket& s) {
  if (s.valid()) ::shutdown(s.fd(), SHUT_WR);
}

}  // namespace rankmap::probe
