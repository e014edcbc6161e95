// Socket helpers shared by the fuzz targets that talk over loopback.
#pragma once

#include <sys/socket.h>

#include "common/net.h"

namespace rankmap::fuzz {

// Each target that listens on loopback ports has a loopback address of its own (Linux answers
// every 127.0.0.0/8 address on lo). A real rank retries the port of a server that is gone (the
// product's behaviour); on 127.0.0.1 the kernel could hand that port to another test's listener
// meanwhile, and the rank read that listener's bytes (CI, 2026-12-05: the agreement and
// bootstrap replays each reported the other's traffic on 127.0.0.1:37771). A port freed on an
// address of its own reaches only a listener on that address, or one on the wildcard address.
inline constexpr const char* kAgreementHost = "127.0.0.11";
inline constexpr const char* kBootstrapHost = "127.0.0.12";
inline constexpr const char* kTrackerHost = "127.0.0.13";

// Closes with a reset, so that no connection lingers in TIME_WAIT over millions of inputs.
inline void closeHard(Socket& s) {
  linger l{1, 0};
  ::setsockopt(s.fd(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  s.close();
}

}  // namespace rankmap::fuzz
