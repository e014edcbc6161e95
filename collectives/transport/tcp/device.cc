// Connection setup of the TCP backend. Each rank listens on an ephemeral port, allgathers
// "host:port streams nonce" through the bootstrap, then connects `streams` sockets to every lower
// rank and accepts them from every higher one. Connecting before accepting cannot deadlock: the
// kernel completes handshakes into the listen backlog without accept(). Every data connection
// starts with a Hello naming the group (rank 0's nonce), the rank and the stream, so that stray
// or stale connections are dropped.
#include "collectives/transport/tcp/device.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <sstream>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/transport/tcp/context.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"

namespace rankmap::coll::transport::tcp {

namespace {

constexpr uint32_t kHelloMagic = 0x524d5443;  // "RMTC"
constexpr auto kHelloTimeout = std::chrono::seconds(10);

struct Hello {
  uint32_t magic;
  uint32_t stream;
  uint64_t group;
  int32_t rank;
  int32_t size;
};

struct PeerInfo {
  std::string address;
  int streams = 0;
  uint64_t nonce = 0;
};

PeerInfo parseInfo(const std::string& blob, int rank) {
  std::istringstream in(blob);
  PeerInfo p;
  if (!(in >> p.address >> p.streams >> p.nonce)) {
    RANKMAP_THROW(PeerError, "tcp transport: rank {} published a malformed address '{}'", rank,
                  blob);
  }
  return p;
}

class TcpDevice final : public Device {
 public:
  explicit TcpDevice(TcpOptions options) : options_(std::move(options)) {
    if (options_.streams < 1 || options_.streams > 64) {
      RANKMAP_THROW(InvalidInput, "tcp transport: {} streams per peer; expected 1 to 64",
                    options_.streams);
    }
    if (options_.host.empty() && !options_.ifname.empty()) {
      options_.host = interfaceAddress(options_.ifname, "RANKMAP_SOCKET_IFNAME");
    }
  }

  std::string backend() const override { return "tcp"; }

  std::unique_ptr<Context> connect(bootstrap::Bootstrap& bs, Deadline deadline) override {
    const int rank = bs.rank();
    const int size = bs.size();
    const int streams = options_.streams;
    auto start = std::chrono::steady_clock::now();

    std::string host = options_.host;
    if (host.empty()) host = bs.localHost();
    if (host.empty()) host = "127.0.0.1";
    Listener listener =
        Listener::bind(resolve(host, 0, Lookup::kNames), {.bufferBytes = options_.socketBuffer});
    std::string address = listener.localAddr().str();

    uint64_t nonce = std::random_device{}();
    nonce = (nonce << 32) ^ std::random_device{}() ^
            static_cast<uint64_t>(start.time_since_epoch().count());
    std::vector<std::string> blobs =
        bs.allgather(fmt::format("{} {} {}", address, streams, nonce), deadline);
    std::vector<PeerInfo> peers(size);
    std::vector<std::string> addresses(size);
    for (int r = 0; r < size; ++r) {
      peers[r] = parseInfo(blobs.at(r), r);
      addresses[r] = peers[r].address;
      if (peers[r].streams != streams) {
        RANKMAP_THROW(PeerError,
                      "tcp transport: rank {} ({}) uses {} streams per peer but rank {} uses {} "
                      "(set RANKMAP_TCP_STREAMS alike on every rank)",
                      r, peers[r].address, peers[r].streams, rank, streams);
      }
    }
    const uint64_t group = peers[0].nonce;

    int epollFd = RANKMAP_CHECK_SYS(::epoll_create1(EPOLL_CLOEXEC));
    std::vector<std::vector<Socket>> sockets(size);
    try {
      // Connect to lower ranks.
      for (int peer = 0; peer < rank; ++peer) {
        HostPort hp = parseHostPort(peers[peer].address, "peer address",
                                    {.defaultPort = std::nullopt, .allowPortZero = false});
        SockAddr addr = resolve(hp.host, hp.port, Lookup::kNames);
        std::string what = fmt::format("rank {} ({})", peer, peers[peer].address);
        for (int s = 0; s < streams; ++s) {
          Socket sock = Socket::connect(
              addr, deadline, what, {.retryRefused = true, .bufferBytes = options_.socketBuffer});
          Hello hello{kHelloMagic, static_cast<uint32_t>(s), group, rank, size};
          sock.sendAll(&hello, sizeof(hello), deadline, what);
          sockets[peer].push_back(std::move(sock));
        }
      }
      // Accept from higher ranks.
      for (int peer = rank + 1; peer < size; ++peer) sockets[peer].resize(streams);
      int expected = (size - 1 - rank) * streams;
      while (expected > 0) {
        std::optional<Socket> accepted = listener.accept(deadline);
        if (!accepted) {
          std::string missing;
          for (int peer = rank + 1; peer < size; ++peer) {
            int have = 0;
            for (const Socket& x : sockets[peer]) have += x.valid() ? 1 : 0;
            if (have < streams) {
              missing += fmt::format("{}rank {} ({}, {} of {} streams)", missing.empty() ? "" : ", ",
                                     peer, peers[peer].address, have, streams);
            }
          }
          RANKMAP_THROW(TimeoutError, "tcp transport: rank {} timed out waiting for {} to connect",
                        rank, missing);
        }
        Socket sock = std::move(*accepted);
        std::string from = sock.peerAddr().str();
        Hello hello{};
        try {
          sock.recvAll(&hello, sizeof(hello), deadline.min(Deadline::after(kHelloTimeout)), from);
        } catch (const Error& e) {
          RANKMAP_WARN(Coll, "rank {}: dropped a connection from {}: {}", rank, from, e.what());
          continue;
        }
        if (hello.magic != kHelloMagic || hello.group != group) {
          RANKMAP_WARN(Coll, "rank {}: dropped a connection from {} of another group", rank, from);
          continue;
        }
        if (hello.size != size || hello.rank <= rank || hello.rank >= size ||
            hello.stream >= static_cast<uint32_t>(streams) ||
            sockets[hello.rank][hello.stream].valid()) {
          RANKMAP_THROW(PeerError,
                        "tcp transport: rank {}: bad hello from {} (rank {}, world size {}, "
                        "stream {})",
                        rank, from, hello.rank, hello.size, hello.stream);
        }
        sockets[hello.rank][hello.stream] = std::move(sock);
        --expected;
      }
      std::vector<std::unique_ptr<Pair>> pairs(size);
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        pairs[peer] = std::make_unique<Pair>(
            rank, peer, fmt::format("rank {} ({})", peer, peers[peer].address),
            std::move(sockets[peer]), epollFd, options_.stripeMin);
      }
      auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start);
      RANKMAP_DEBUG(Coll, "rank {}: tcp context of {} ranks connected at {} ({} streams) in {:.1f} ms",
                    rank, size, address, streams, ms.count());
      return std::make_unique<TcpContext>(rank, size, std::move(pairs), std::move(addresses),
                                          epollFd);
    } catch (...) {
      ::close(epollFd);
      throw;
    }
  }

 private:
  TcpOptions options_;
};

}  // namespace

std::shared_ptr<Device> makeTcpDevice(const TcpOptions& options) {
  return std::make_shared<TcpDevice>(options);
}

}  // namespace rankmap::coll::transport::tcp
