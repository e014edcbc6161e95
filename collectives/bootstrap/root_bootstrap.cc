// Wire protocol (all ranks run the same build on the same architecture: integers are in host
// byte order). Every message is a frame: {u32 magic, u32 type, u64 length} then `length` bytes.
//   rank -> root  Hello    {u32 version, i32 rank, i32 size}
//   root -> rank  Welcome  {}                         or Error {text}
//   rank -> root  Data     {blob}                     (one per allgather)
//   root -> rank  Gathered {size x (u64 length, bytes)} or Error {text}
#include "collectives/bootstrap/root_bootstrap.h"

#include <chrono>
#include <cstdint>
#include <cstring>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll::bootstrap {

namespace {

constexpr uint32_t kMagic = 0x524d4253;  // "RMBS"
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxFrame = 1ull << 30;  // an allgather's blob or result
constexpr uint64_t kMaxErrorText = 64u << 10;
constexpr size_t kReadStep = 1u << 20;  // the first step of a growing payload
// A connection that does not say hello within this long is dropped (a port scanner, say).
constexpr auto kHelloTimeout = std::chrono::seconds(10);
// RANKMAP_ROOT: the port is required; a root may bind port 0 (tests, launchers).
constexpr HostPortRules kRootRules{.defaultPort = std::nullopt, .allowPortZero = true};

enum class FrameType : uint32_t { Hello = 1, Welcome = 2, Error = 3, Data = 4, Gathered = 5 };

struct FrameHeader {
  uint32_t magic;
  uint32_t type;
  uint64_t length;
};

struct Hello {
  uint32_t version;
  int32_t rank;
  int32_t size;
};

void sendFrame(Socket& s, FrameType type, const std::string& payload, Deadline deadline,
               std::string_view who) {
  FrameHeader h{kMagic, static_cast<uint32_t>(type), payload.size()};
  s.sendAll(&h, sizeof(h), deadline, who);
  if (!payload.empty()) s.sendAll(payload.data(), payload.size(), deadline, who);
}

// Reads one frame of type `expected` and at most `maxBytes` (an Error frame: at most
// kMaxErrorText), or throws PeerError: for an Error frame with the sender's text, for any other
// type or length before reading its payload. The payload grows as its bytes arrive, so a header
// that claims more than the sender sends costs no memory.
std::string recvFrame(Socket& s, FrameType expected, uint64_t maxBytes, Deadline deadline,
                      std::string_view who) {
  FrameHeader h{};
  s.recvAll(&h, sizeof(h), deadline, who);
  const bool error = h.type == static_cast<uint32_t>(FrameType::Error);
  if (h.magic != kMagic) {
    RANKMAP_THROW(PeerError, "bootstrap: {} does not speak the rankmap bootstrap protocol", who);
  }
  if (!error && h.type != static_cast<uint32_t>(expected)) {
    RANKMAP_THROW(PeerError, "bootstrap: {} sent frame type {} where {} was expected", who,
                  h.type, static_cast<uint32_t>(expected));
  }
  if (h.length > (error ? kMaxErrorText : maxBytes)) {
    RANKMAP_THROW(PeerError, "bootstrap: {} sent a frame of {} bytes where at most {} fit", who,
                  h.length, error ? kMaxErrorText : maxBytes);
  }
  std::string payload;
  while (payload.size() < h.length) {
    size_t have = payload.size();
    size_t step = std::min<uint64_t>(h.length - have, std::max<size_t>(have, kReadStep));
    payload.resize(have + step);
    s.recvAll(payload.data() + have, step, deadline, who);
  }
  if (error) RANKMAP_THROW(PeerError, "bootstrap: {} reported: {}", who, payload);
  return payload;
}

}  // namespace

RootListener::RootListener(const std::string& hostPort) {
  HostPort hp = parseHostPort(hostPort, "RANKMAP_ROOT", kRootRules);
  listener_ = Listener::bind(resolve(hp.host, hp.port, Lookup::kNames));
  address_ = listener_.localAddr().str();
}

// Rank 0 keeps one connection per other rank (index = rank); the others keep one to the root.
class RootBootstrap final : public Bootstrap {
 public:
  RootBootstrap(RootListener listener, int size, Deadline deadline)
      : Bootstrap(0, size), rootAddress_(listener.address()), peers_(size), names_(size) {
    SockAddr bound = listener.listener_.localAddr();
    if (bound.host() != "0.0.0.0" && bound.host() != "::") localHost_ = bound.host();
    acceptAll(listener, deadline);
    RANKMAP_DEBUG(Coll, "bootstrap root {}: all {} ranks connected", rootAddress_, size);
  }

  RootBootstrap(int rank, int size, const std::string& root, Deadline deadline)
      : Bootstrap(rank, size), rootAddress_(root), peers_(1), names_(1) {
    HostPort hp = parseHostPort(root, "RANKMAP_ROOT", kRootRules);
    names_[0] = fmt::format("root {}", root);
    peers_[0] = Socket::connect(resolve(hp.host, hp.port, Lookup::kNames), deadline,
                                fmt::format("bootstrap root {} (from rank {})", root, rank),
                                {.retryRefused = true});
    localHost_ = peers_[0].localAddr().host();
    Hello hello{kVersion, rank, size};
    sendFrame(peers_[0], FrameType::Hello,
              std::string(reinterpret_cast<const char*>(&hello), sizeof(hello)), deadline,
              names_[0]);
    recvFrame(peers_[0], FrameType::Welcome, 0, deadline, names_[0]);
  }

  std::vector<std::string> allgather(const std::string& mine, Deadline deadline) override {
    return rank() == 0 ? rootAllgather(mine, deadline) : rankAllgather(mine, deadline);
  }

  std::string localHost() const override { return localHost_; }

 private:
  void acceptAll(RootListener& listener, Deadline deadline) {
    int connected = 1;
    while (connected < size()) {
      std::optional<Socket> accepted = listener.listener_.accept(deadline);
      if (!accepted) {
        std::string missing;
        for (int r = 1; r < size(); ++r) {
          if (!peers_[r].valid()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        failAll(fmt::format("timed out waiting for ranks {} to connect", missing));
        RANKMAP_THROW(TimeoutError,
                      "bootstrap root {}: timed out waiting for ranks {} to connect ({} of {} "
                      "connected)",
                      rootAddress_, missing, connected, size());
      }
      Socket s = std::move(*accepted);
      std::string from = s.peerAddr().str();
      Hello hello{};
      try {
        std::string p = recvFrame(s, FrameType::Hello, sizeof(Hello),
                                  deadline.min(Deadline::after(kHelloTimeout)), from);
        if (p.size() != sizeof(Hello)) RANKMAP_THROW(PeerError, "bad hello size {}", p.size());
        std::memcpy(&hello, p.data(), sizeof(hello));
      } catch (const Error& e) {
        RANKMAP_WARN(Coll, "bootstrap root {}: dropped connection from {}: {}", rootAddress_, from,
                     e.what());
        continue;
      }
      std::string name = fmt::format("rank {} ({})", hello.rank, from);
      std::string problem;
      if (hello.version != kVersion) {
        problem = fmt::format("{} speaks bootstrap version {} but the root speaks {}", name,
                              hello.version, kVersion);
      } else if (hello.size != size()) {
        problem = fmt::format("{} has world size {} but the root has world size {}", name,
                              hello.size, size());
      } else if (hello.rank <= 0 || hello.rank >= size()) {
        problem = fmt::format("{} is not a valid non-root rank in a world of size {}", name,
                              size());
      } else if (peers_[hello.rank].valid()) {
        problem = fmt::format("rank {} connected twice (from {} and {})", hello.rank,
                              names_[hello.rank], from);
      }
      if (!problem.empty()) {
        try {
          sendFrame(s, FrameType::Error, problem, deadline, name);
        } catch (const Error&) {
          // The offender may be gone already; the others are told below.
        }
        failAll(problem);
        RANKMAP_THROW(PeerError, "bootstrap root {}: {}", rootAddress_, problem);
      }
      peers_[hello.rank] = std::move(s);
      names_[hello.rank] = name;
      ++connected;
    }
    for (int r = 1; r < size(); ++r) sendFrame(peers_[r], FrameType::Welcome, {}, deadline, names_[r]);
  }

  // Best effort: tell every connected rank why the group failed, so it fails at once too.
  void failAll(const std::string& why) {
    Deadline d = Deadline::afterMs(1000);
    for (int r = 1; r < size(); ++r) {
      if (!peers_[r].valid()) continue;
      try {
        sendFrame(peers_[r], FrameType::Error, fmt::format("root {}: {}", rootAddress_, why), d,
                  names_[r]);
      } catch (const Error&) {
      }
    }
  }

  std::vector<std::string> rootAllgather(const std::string& mine, Deadline deadline) {
    std::vector<std::string> all(size());
    all[0] = mine;
    try {
      for (int r = 1; r < size(); ++r) {
        all[r] = recvFrame(peers_[r], FrameType::Data, kMaxFrame, deadline, names_[r]);
      }
    } catch (const Error& e) {
      failAll(e.what());
      throw;
    }
    std::string out;
    for (const auto& blob : all) {
      uint64_t n = blob.size();
      out.append(reinterpret_cast<const char*>(&n), sizeof(n));
      out += blob;
    }
    for (int r = 1; r < size(); ++r) sendFrame(peers_[r], FrameType::Gathered, out, deadline, names_[r]);
    return all;
  }

  std::vector<std::string> rankAllgather(const std::string& mine, Deadline deadline) {
    sendFrame(peers_[0], FrameType::Data, mine, deadline, names_[0]);
    std::string in = recvFrame(peers_[0], FrameType::Gathered, kMaxFrame, deadline, names_[0]);
    std::vector<std::string> all;
    all.reserve(size());
    size_t pos = 0;
    for (int r = 0; r < size(); ++r) {
      uint64_t n = 0;
      if (pos + sizeof(n) > in.size()) break;
      std::memcpy(&n, in.data() + pos, sizeof(n));
      pos += sizeof(n);
      if (n > in.size() - pos) break;
      all.emplace_back(in.data() + pos, n);
      pos += n;
    }
    if (all.size() != static_cast<size_t>(size()) || pos != in.size()) {
      RANKMAP_THROW(PeerError, "bootstrap: malformed allgather result from {}", names_[0]);
    }
    if (all[static_cast<size_t>(rank())] != mine) {
      RANKMAP_THROW(PeerError, "bootstrap: {} returned another blob for rank {} than it sent",
                    names_[0], rank());
    }
    return all;
  }

  std::string rootAddress_;
  std::string localHost_;
  std::vector<Socket> peers_;
  std::vector<std::string> names_;
};

std::unique_ptr<Bootstrap> makeRootBootstrap(RootListener listener, int size, Deadline deadline) {
  return std::make_unique<RootBootstrap>(std::move(listener), size, deadline);
}

std::unique_ptr<Bootstrap> makeRootBootstrap(int rank, int size, const std::string& root,
                                             Deadline deadline) {
  if (size < 1 || rank < 0 || rank >= size) {
    RANKMAP_THROW(InvalidInput, "bootstrap: rank {} is not in a group of {} ranks", rank, size);
  }
  if (rank == 0) return makeRootBootstrap(RootListener(root), size, deadline);
  return std::make_unique<RootBootstrap>(rank, size, root, deadline);
}

std::unique_ptr<Bootstrap> makeRootBootstrapFromConfig(const Config& config, Deadline deadline) {
  int64_t rank = config.get(settings::kRank);
  int64_t size = config.get(settings::kWorldSize);
  const std::string& root = config.get(settings::kRoot);
  if (size < 1 || size > (1 << 20)) {
    RANKMAP_THROW(InvalidInput, "RANKMAP_WORLD_SIZE={}: set it to the number of ranks", size);
  }
  if (rank < 0 || rank >= size) {
    RANKMAP_THROW(InvalidInput, "RANKMAP_RANK={}: set it to this process's rank, 0 to {}", rank,
                  size - 1);
  }
  if (root.empty()) {
    RANKMAP_THROW(InvalidInput, "RANKMAP_ROOT is not set: give rank 0's host:port");
  }
  return makeRootBootstrap(static_cast<int>(rank), static_cast<int>(size), root, deadline);
}

}  // namespace rankmap::coll::bootstrap
