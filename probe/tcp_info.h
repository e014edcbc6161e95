// Kernel-side TCP counters (TCP_INFO). Kept apart from common/net.cc because <linux/tcp.h>
// and <netinet/tcp.h> cannot be included together.
#pragma once

#include <cstdint>
#include <optional>

namespace rankmap::probe {

// Bytes the kernel has received on this TCP socket so far (tcpi_bytes_received, Linux >= 4.1),
// whether or not the application has read them; nullopt where the kernel does not report it.
std::optional<uint64_t> tcpBytesReceived(int fd);

}  // namespace rankmap::probe
