// The probe's addresses and its socket extras, over common/net.h's Socket and Listener.
//
// Contract: probe addresses are numeric IPv4/IPv6 literals (or "localhost", read as 127.0.0.1)
// and are resolved with Lookup::kNumericOnly, so that no resolver call can block past a probe
// deadline. connectTo() tries once: a refusing agent is taken for a dead one at once (PeerError
// "connect to ADDRESS: ..."), not waited for; control requests (probe/fanout.h) retry a refused
// connection a few times within their deadline, measurements between agents do not.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/deadline.h"
#include "common/net.h"

namespace rankmap::probe {

inline constexpr uint16_t kDefaultProbePort = 7411;

// A numeric address (no brackets) and a port; text() gives "10.0.0.1:7411" or "[fe80::1]:7411".
using Endpoint = HostPort;

// Parses "ADDR", "ADDR:PORT", "[V6]:PORT" or "V6" (common/net.h, port 1..65535); ADDR must be a
// numeric IP literal or "localhost" (-> 127.0.0.1). Throws InvalidInput naming `what` on anything
// else.
Endpoint parseEndpoint(std::string_view text, uint16_t defaultPort, std::string_view what);

// Connects to `ep` before `d`; the socket has TCP_NODELAY on. A refused connection fails at once
// (control requests retry those, probe/fanout.h); one that gets no answer is attempted again
// after kSynRetry, then twice that, ... until `d`.
inline constexpr std::chrono::milliseconds kSynRetry{200};
Socket connectTo(const Endpoint& ep, Deadline d);
// Binds and listens on `ep` (port 0 picks a free port).
Listener listenOn(const Endpoint& ep);

// Closes with a reset (SO_LINGER 0): whatever is still queued to send is discarded instead of
// trickling out after the close. Ends bulk transfers so that their tail does not overlap the
// next measurement.
void abortConnection(Socket& s);
// shutdown(2) of the write side: the peer reads end-of-file after what was sent.
void shutdownWrite(Socket& s);

}  // namespace rankmap::probe
