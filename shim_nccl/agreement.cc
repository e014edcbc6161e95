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
constexpr uint32_t kVoteMagic = 0x524d5631;     // "RMV1"
constexpr uint32_t kVerdictMagic = 0x524d5231;  // "RMR1"
constexpr size_t kMaxHash = 128;
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
  uint32_t pad;
  uint64_t nonce;
  int32_t rank;
  int32_t nranks;
  uint8_t fits;
  uint8_t hashLen;
  uint16_t pad2;
};

struct VerdictHeader {
  uint32_t magic;
  uint8_t decision;
  uint8_t pad;
  uint16_t reasonLen;
};

std::string endpoint(const IdTail& t) {
  return t.host.find(':') != std::string::npos ? fmt::format("[{}]:{}", t.host, t.port)
                                               : fmt::format("{}:{}", t.host, t.port);
}

void sendVerdict(Socket& s, const Verdict& v) {
  std::string reason = v.reason.substr(0, kMaxReason);
  VerdictHeader h{kVerdictMagic, static_cast<uint8_t>(v.decision == Decision::Permute), 0,
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
std::optional<Vote> readVote(Socket& s, uint64_t nonce, Deadline deadline) {
  VoteHeader h{};
  s.recvAll(&h, sizeof(h), deadline, "a voting rank");
  if (h.magic != kVoteMagic || h.nonce != nonce || h.hashLen > kMaxHash) {
    sendVerdict(s, {Decision::Identity, "not a vote for this unique id"});
    return std::nullopt;
  }
  Vote v;
  v.rank = h.rank;
  v.nranks = h.nranks;
  v.fits = h.fits != 0;
  v.planHash.resize(h.hashLen);
  if (h.hashLen > 0) s.recvAll(v.planHash.data(), h.hashLen, deadline, "a voting rank");
  return v;
}

void serve(std::shared_ptr<Listener> listener, uint64_t nonce, std::string creatorHash,
           std::chrono::milliseconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  std::vector<Vote> votes;
  std::vector<Socket> clients;
  std::optional<Verdict> verdict;
  std::set<int> voted;
  try {
    while (!deadline.expired()) {
      std::optional<Socket> accepted = listener->accept(deadline);
      if (!accepted) break;
      Socket c = std::move(*accepted);
      std::optional<Vote> v;
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
        // judge(), one vote at a time: O(1) per vote rather than O(n).
        verdict = checkVote(creatorHash, votes.front(), voted, *v);
        voted.insert(v->rank);
        clients.push_back(std::move(c));
        if (!verdict && static_cast<int>(voted.size()) == votes.front().nranks)
          verdict = Verdict{Decision::Permute, fmt::format("all {} ranks hold plan {}",
                                                           votes.front().nranks, creatorHash)};
        if (verdict) {
          for (auto& s : clients) sendVerdict(s, *verdict);
          clients.clear();
        }
      }
      // Done once every rank has its answer (after Permute, or after Identity told to all).
      if (verdict && static_cast<int>(voted.size()) >= votes.front().nranks) break;
    }
  } catch (const std::exception& e) {
    RANKMAP_WARN(Shim, "plan agreement server: {}", e.what());
  }
  if (!verdict) {
    int n = votes.empty() ? 0 : votes.front().nranks;
    verdict = Verdict{Decision::Identity, fmt::format("only {} of {} ranks voted within {} ms",
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

std::optional<Verdict> checkVote(const std::string& creatorHash, const Vote& first,
                                 const std::set<int>& seen, const Vote& v) {
  const int n = first.nranks;
  if (v.nranks != n)
    return Verdict{Decision::Identity, fmt::format("rank {} says {} ranks, rank {} says {}", v.rank,
                                                   v.nranks, first.rank, n)};
  if (v.rank < 0 || v.rank >= n)
    return Verdict{Decision::Identity, fmt::format("rank {} is outside 0..{}", v.rank, n - 1)};
  if (seen.count(v.rank) != 0)
    return Verdict{Decision::Identity, fmt::format("rank {} voted twice", v.rank)};
  if (v.planHash.empty())
    return Verdict{Decision::Identity, fmt::format("rank {} has no valid plan", v.rank)};
  if (v.planHash != creatorHash)
    return Verdict{Decision::Identity,
                   fmt::format("rank {} holds plan {} but the id's creator holds {}", v.rank,
                               v.planHash, creatorHash)};
  if (!v.fits)
    return Verdict{Decision::Identity,
                   fmt::format("plan {} does not cover {} ranks", creatorHash, n)};
  return std::nullopt;
}

std::optional<Verdict> judge(const std::string& creatorHash, const std::vector<Vote>& votes) {
  if (votes.empty()) return std::nullopt;
  std::set<int> seen;
  for (const auto& v : votes) {
    if (auto bad = checkVote(creatorHash, votes.front(), seen, v)) return bad;
    seen.insert(v.rank);
  }
  const int n = votes.front().nranks;
  if (static_cast<int>(seen.size()) < n) return std::nullopt;
  return Verdict{Decision::Permute, fmt::format("all {} ranks hold plan {}", n, creatorHash)};
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

Verdict agree(const IdTail& tail, const Vote& vote) {
  const Deadline answerBy =
      Deadline::after(std::chrono::milliseconds(tail.timeoutMs) + kAnswerMargin);
  const std::string where = "plan agreement server " + endpoint(tail);
  Socket s;
  try {
    // Refused means the server is gone (it listens before the id is handed out), and it is
    // gone for good after its own timeout: retrying longer than that cannot help.
    auto connectFor = std::min<std::chrono::milliseconds>(
        kConnect, std::chrono::milliseconds(std::max<uint32_t>(tail.timeoutMs, 1)));
    s = Socket::connect(resolve(tail.host, tail.port, Lookup::kNumericOnly),
                        answerBy.min(Deadline::after(connectFor)), where, {.retryRefused = true});
    VoteHeader h{kVoteMagic,
                 0,
                 tail.nonce,
                 vote.rank,
                 vote.nranks,
                 static_cast<uint8_t>(vote.fits),
                 static_cast<uint8_t>(std::min(vote.planHash.size(), kMaxHash)),
                 0};
    std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
    frame += vote.planHash.substr(0, kMaxHash);
    s.sendAll(frame.data(), frame.size(), answerBy, where);
  } catch (const std::exception& e) {
    // Not delivered: the server cannot have answered Permute without this vote.
    return {Decision::Identity, fmt::format("could not vote: {}", e.what())};
  }
  VerdictHeader h{};
  try {
    s.recvAll(&h, sizeof(h), answerBy, where);
  } catch (const PeerError&) {
    return {Decision::Identity, fmt::format("{} closed without an answer", where)};
  }
  if (h.magic != kVerdictMagic || h.reasonLen > kMaxReason)
    RANKMAP_THROW(PeerError, "{} sent a malformed answer", where);
  Verdict v;
  v.decision = h.decision ? Decision::Permute : Decision::Identity;
  v.reason.resize(h.reasonLen);
  if (h.reasonLen > 0) s.recvAll(v.reason.data(), h.reasonLen, answerBy, where);
  return v;
}

}  // namespace rankmap::shim_nccl
