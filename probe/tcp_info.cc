#include "probe/tcp_info.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace rankmap::probe {

std::optional<uint64_t> tcpBytesReceived(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return std::nullopt;
  // Older kernels return a shorter struct without the field.
  if (len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received))
    return std::nullopt;
  return info.tcpi_bytes_received;
}

}  // namespace rankmap::probe
