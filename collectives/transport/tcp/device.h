// TCP backend: non-blocking sockets with one epoll progress thread per context, optional
// parallel streams per peer (large messages striped across them), large socket buffers and
// TCP_NODELAY. See tcp/pair.h for the framing and matching.
#pragma once

#include <memory>

#include "collectives/transport/transport.h"

namespace rankmap::coll::transport::tcp {

// Throws InvalidInput on bad options (streams < 1, unknown interface).
std::shared_ptr<Device> makeTcpDevice(const TcpOptions& options);

}  // namespace rankmap::coll::transport::tcp
