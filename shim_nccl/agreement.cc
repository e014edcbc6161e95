#include "shim_nccl/agreement.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "common/net.h"

namespace rankmap::shim_nccl {

namespace {

constexpr char kTailMagic[8] = {'R', 'K', 'M', 'P', 'N', 'C', 'C', '1'};
constexpr uint32_t kVoteMagic = 0x524d5632;     // "RMV2": a PlanVote follows
constexpr uint32_t kVerdictMagic = 0x524d5231;  // "RMR1"
constexpr size_t kMaxReason = 2048;
// One client gets this long to send its vote once connected; the server's own deadline still
// bounds the whole.
constexpr std::chrono::seconds kPerClient{10};
constexpr std::chrono::seconds kConnect{10};

// Tail layout, offsets from kTailOffset: magic[8] nonce u64 timeoutMs u32 family u16 port u16
// (network order) address[16].
struct TailBytes {
  char magic[8];
  uint64_t nonce;
  uint32_t timeoutMs;
  uint16_t family;
  uint16_t port;
  uint8_t addr[16];
};
static_assert(sizeof(TailBytes) <= abi::kUniqueIdBytes - kTailOffset);

struct VoteHeader {
  uint32_t magic;
  uint32_t voteBytes;  // the encoded PlanVote that follows
  uint64_t nonce;
};

struct VerdictHeader {
  uint32_t magic;
  uint8_t decision;
  uint8_t pad;
  uint16_t reasonLen;
};

void sendVerdict(Socket& s, const PlanVerdict& v) {
  std::string reason = v.reason.substr(0, kMaxReason);
  VerdictHeader h{kVerdictMagic, static_cast<uint8_t>(v.apply), 0,
                  static_cast<uint16_t>(reason.size())};
  std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
  frame += reason;
  try {
    s.sendAll(frame.data(), frame.size(), Deadline::after(std::chrono::seconds(5)),
              "a voting rank");
  } catch (const std::exception& e) {
    // The rank is gone; it will fail its own init. Nothing else to tell it.
    RANKMAP_DEBUG(Shim, "plan agreement: could not answer a rank: {}", e.what());
  }
}

// Reads one vote; nullopt (after answering the client) for a malformed or foreign one.
std::optional<PlanVote> readVote(Socket& s, uint64_t nonce, Deadline deadline) {
  VoteHeader h{};
  s.recvAll(&h, sizeof(h), deadline, "a voting rank");
  if (h.magic != kVoteMagic || h.nonce != nonce || h.voteBytes > PlanVote::kMaxEncodedBytes) {
    sendVerdict(s, {false, "not a vote for this unique id"});
    return std::nullopt;
  }
  std::string bytes(h.voteBytes, '\0');
  if (!bytes.empty()) s.recvAll(bytes.data(), bytes.size(), deadline, "a voting rank");
  try {
    return PlanVote::decode(bytes, "NCCL plan agreement vote");
  } catch (const InvalidInput& e) {
    sendVerdict(s, {false, e.what()});
    return std::nullopt;
  }
}

void serve(std::shared_ptr<Listener> listener, uint64_t nonce, std::string creatorHash,
           std::chrono::milliseconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  std::vector<PlanVote> votes;
  std::vector<Socket> clients;
  std::optional<PlanVerdict> verdict;
  std::set<int> voted;
  try {
    while (!deadline.expired()) {
      std::optional<Socket> accepted = listener->accept(deadline);
      if (!accepted) break;
      Socket c = std::move(*accepted);
      std::optional<PlanVote> v;
      try {
        v = readVote(c, nonce, deadline.min(Deadline::after(kPerClient)));
      } catch (const std::exception& e) {
        RANKMAP_DEBUG(Shim, "plan agreement: dropped a connection: {}", e.what());
        continue;
      }
      if (!v) continue;
      votes.push_back(*v);
      if (verdict) {
        voted.insert(v->rank);
        sendVerdict(c, *verdict);
      } else {
        // The agreement rule one vote at a time (O(1) per vote rather than O(n)), then the
        // final verdict over all of them.
        verdict = checkPlanVote(votes.front(), voted, *v, creatorHash);
        voted.insert(v->rank);
        clients.push_back(std::move(c));
        if (!verdict && static_cast<int>(voted.size()) == votes.front().worldSize)
          verdict = judgePlan(votes, nullptr);
        if (verdict) {
          for (auto& s : clients) sendVerdict(s, *verdict);
          clients.clear();
        }
      }
      // Done once ranks 0..n-1 have voted exactly once each: nobody is left to answer. After any
      // other vote (twice, out of range) a rank may still be coming, and it gets the same
      // verdict until the deadline.
      const int n = votes.front().worldSize;
      if (verdict && static_cast<int>(votes.size()) == n && static_cast<int>(voted.size()) == n &&
          *voted.begin() == 0 && *voted.rbegin() == n - 1)
        break;
    }
  } catch (const std::exception& e) {
    RANKMAP_WARN(Shim, "plan agreement server: {}", e.what());
  }
  if (!verdict) {
    int n = votes.empty() ? 0 : votes.front().worldSize;
    verdict = PlanVerdict{false, fmt::format("only {} of {} ranks voted within {} ms",
                                             voted.size(), n, timeout.count())};
    for (auto& s : clients) sendVerdict(s, *verdict);
  }
}

}  // namespace

bool encodeTail(abi::UniqueId& id, const IdTail& tail) {
  for (size_t i = kTailOffset; i < abi::kUniqueIdBytes; ++i)
    if (id.internal[i] != 0) return false;
  TailBytes t{};
  std::memcpy(t.magic, kTailMagic, sizeof(kTailMagic));
  t.nonce = tail.nonce;
  t.timeoutMs = tail.timeoutMs;
  t.port = htons(tail.port);
  if (inet_pton(AF_INET, tail.host.c_str(), t.addr) == 1) {
    t.family = AF_INET;
  } else if (inet_pton(AF_INET6, tail.host.c_str(), t.addr) == 1) {
    t.family = AF_INET6;
  } else {
    RANKMAP_THROW(InvalidInput, "plan agreement: {} is not a numeric address", tail.host);
  }
  std::memcpy(id.internal + kTailOffset, &t, sizeof(t));
  return true;
}

std::optional<IdTail> decodeTail(const abi::UniqueId& id) {
  TailBytes t{};
  std::memcpy(&t, id.internal + kTailOffset, sizeof(t));
  if (std::memcmp(t.magic, kTailMagic, sizeof(kTailMagic)) != 0) return std::nullopt;
  char buf[INET6_ADDRSTRLEN] = {};
  if ((t.family != AF_INET && t.family != AF_INET6) ||
      inet_ntop(t.family, t.addr, buf, sizeof(buf)) == nullptr)
    return std::nullopt;
  IdTail out;
  out.nonce = t.nonce;
  out.timeoutMs = t.timeoutMs;
  out.host = buf;
  out.port = ntohs(t.port);
  return out;
}

std::optional<std::string> ncclRootHost(const abi::UniqueId& id) {
  // NCCL's bootstrap handle: uint64_t magic, then union { sockaddr; sockaddr_in; sockaddr_in6 }.
  constexpr size_t kAddr = 8;
  sa_family_t family = 0;
  std::memcpy(&family, id.internal + kAddr, sizeof(family));
  char buf[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET) {
    sockaddr_in sin{};
    std::memcpy(&sin, id.internal + kAddr, sizeof(sin));
    if (sin.sin_addr.s_addr == 0) return std::nullopt;
    if (inet_ntop(AF_INET, &sin.sin_addr, buf, sizeof(buf)) == nullptr) return std::nullopt;
    return std::string(buf);
  }
  if (family == AF_INET6) {
    sockaddr_in6 sin6{};
    std::memcpy(&sin6, id.internal + kAddr, sizeof(sin6));
    if (IN6_IS_ADDR_UNSPECIFIED(&sin6.sin6_addr)) return std::nullopt;
    // Link-local addresses would need the scope id; NCCL's peers reach them, ours might not.
    if (IN6_IS_ADDR_LINKLOCAL(&sin6.sin6_addr)) return std::nullopt;
    if (inet_ntop(AF_INET6, &sin6.sin6_addr, buf, sizeof(buf)) == nullptr) return std::nullopt;
    return std::string(buf);
  }
  return std::nullopt;
}

IdTail startAgreementServer(const std::string& host, const std::string& creatorHash,
                            std::chrono::milliseconds timeout) {
  // Numeric addresses only, here and in agree(): the tail carries one, and no resolver call
  // should run inside the application's NCCL init.
  auto listener =
      std::make_shared<Listener>(Listener::bind(resolve(host, 0, Lookup::kNumericOnly)));
  IdTail tail;
  tail.host = host;
  tail.port = listener->port();
  tail.timeoutMs = static_cast<uint32_t>(timeout.count());
  std::random_device rd;
  tail.nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  // Detached: it ends by its deadline on its own and touches only what it owns, so neither the
  // application nor process exit ever waits for it.
  std::thread(serve, listener, tail.nonce, creatorHash, timeout).detach();
  return tail;
}

PlanVerdict agree(const IdTail& tail, const PlanVote& vote) {
  const Deadline answerBy =
      Deadline::after(std::chrono::milliseconds(tail.timeoutMs) + kAnswerMargin);
  const std::string where = "plan agreement server " + hostPortText(tail.host, tail.port);
  Socket s;
  try {
    // Refused means the server is gone (it listens before the id is handed out), and it is
    // gone for good after its own timeout: retrying longer than that cannot help.
    auto connectFor = std::min<std::chrono::milliseconds>(
        kConnect, std::chrono::milliseconds(std::max<uint32_t>(tail.timeoutMs, 1)));
    s = Socket::connect(resolve(tail.host, tail.port, Lookup::kNumericOnly),
                        answerBy.min(Deadline::after(connectFor)), where, {.retryRefused = true});
    const std::string bytes = vote.encode();
    VoteHeader h{kVoteMagic, static_cast<uint32_t>(bytes.size()), tail.nonce};
    std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
    frame += bytes;
    s.sendAll(frame.data(), frame.size(), answerBy, where);
  } catch (const std::exception& e) {
    // Not delivered: the server cannot have answered "apply" without this vote.
    return {false, fmt::format("could not vote: {}", e.what())};
  }
  VerdictHeader h{};
  try {
    s.recvAll(&h, sizeof(h), answerBy, where);
  } catch (const PeerError&) {
    return {false, fmt::format("{} closed without an answer", where)};
  }
  // Not a verdict: another program took the port after the server ended (ports are reused),
  // so this vote never reached the server, which therefore cannot have answered "apply" to
  // anyone; identity is what every other rank gets too.
  if (h.magic != kVerdictMagic || h.reasonLen > kMaxReason)
    return {false, fmt::format("{} answered with something that is not a plan verdict (another "
                               "program listens on that port?)",
                               where)};
  PlanVerdict v;
  v.apply = h.decision != 0;
  v.reason.resize(h.reasonLen);
  try {
    if (h.reasonLen > 0) s.recvAll(v.reason.data(), h.reasonLen, answerBy, where);
  } catch (const PeerError&) {
    return {false, fmt::format("{} closed in the middle of its answer", where)};
  }
  return v;
}

}  // namespace rankmap::shim_nccl
