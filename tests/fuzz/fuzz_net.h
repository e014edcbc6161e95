// Socket helpers shared by the fuzz targets that talk over loopback.
#pragma once

#include <sys/socket.h>

#include "common/net.h"

namespace rankmap::fuzz {

// Closes with a reset, so that no connection lingers in TIME_WAIT over millions of inputs.
inline void closeHard(Socket& s) {
  linger l{1, 0};
  ::setsockopt(s.fd(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
  s.close();
}

}  // namespace rankmap::fuzz
