// Fuzz target for the NCCL shim's plan agreement (shim_nccl/agreement.h): the vote server that
// the rank creating a unique id starts on NCCL's bootstrap address reads votes from a network
// port, and every rank reads the tail it left in the id. Both are bytes from outside.
//
// Input: byte 0 gives the job's ranks n (1 + b % 8). The first 128 bytes (zero-padded) are also
// a unique id for decodeTail and ncclRootHost. Then up to 12 connections, each [flags u8]
// [length u16 LE][bytes]: flags bit 0 writes the server's nonce into bytes 8..15 and bit 1 the
// vote magic into bytes 0..3 (a stranger cannot know the nonce, a rank of another job can), so
// that mutations reach the vote's decoder. The harness connects, sends the bytes and
// half-closes each, in order, before the n real ranks vote through agree() from n threads
// (rank r, n ranks, the creator's plan hash).
//
// Findings: a crash or sanitizer report; a real rank that gets no verdict (a TimeoutError is a
// hang) or a malformed one; when no connection carried a well-formed vote for this id, a real
// rank told anything but the same "apply" as the others (bytes from a stranger must change
// nothing); a decoded tail that does not encode back to itself.
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"
#include "tests/fuzz/fuzz_net.h"
#include "common/plan_agreement.h"
#include "shim_nccl/agreement.h"

namespace {

using namespace rankmap;
using fuzz::closeHard;
using fuzz::kAgreementHost;
using namespace std::chrono_literals;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_nccl_agreement: %s\n", what.c_str());
  std::abort();
}

constexpr size_t kMaxConnections = 12;
constexpr char kCreatorHash[] = "sha256:1111111111111111111111111111111111111111111111111111";
// The vote frame's header as agreement.cc writes it: u32 magic "RMV2", u32 vote length, u64
// nonce, in host order; the harness needs it to aim mutations past the header.
constexpr uint32_t kVoteMagic = 0x524d5632;
constexpr size_t kVoteHeader = 16;

// Whether `frame` is a vote the server counts: its header names this id and the vote decodes.
bool isVote(const std::string& frame, uint64_t nonce) {
  if (frame.size() < kVoteHeader) return false;
  uint32_t magic = 0, length = 0;
  uint64_t n = 0;
  std::memcpy(&magic, frame.data(), 4);
  std::memcpy(&length, frame.data() + 4, 4);
  std::memcpy(&n, frame.data() + 8, 8);
  if (magic != kVoteMagic || n != nonce || length > PlanVote::kMaxEncodedBytes ||
      frame.size() < kVoteHeader + length)
    return false;
  try {
    PlanVote::decode(std::string_view(frame).substr(kVoteHeader, length), "fuzz");
    return true;
  } catch (const InvalidInput&) {
    return false;
  }
}

// The vote servers that may still run: each is a detached thread that outlives its input by up
// to its deadline. LeakSanitizer's check at exit (clang 14) scans a live thread's stack only if
// it finds the thread by its kernel id, and every thread created joinable (a std::thread, joined
// or detached later) stays in its registry under its id after it ends. Once the kernel has
// handed out all ids (pid_max, 32768 on the fuzzing machines) and gives an old one to a new
// server, the check skips that server's stack ("Thread N not found in registry" with
// LSAN_OPTIONS=log_threads=1) and reports all it holds as leaked. So at exit the harness waits
// until every server it started has ended; what is still allocated after that is a real leak.
std::vector<uint16_t> recentServers;  // their ports; at most kRecentServers, oldest first
constexpr size_t kRecentServers = 512;

void awaitServers() {
  // A server closes its listener when it returns, after its votes and clients are freed: a
  // refused connection means it is done. Its thread then only frees its start arguments.
  const Deadline limit = Deadline::after(10s);
  for (uint16_t port : recentServers) {
    SockAddr addr = resolve(kAgreementHost, port, Lookup::kNumericOnly);
    while (!limit.expired()) {
      try {
        Socket s = Socket::connect(addr, Deadline::after(1s), "fuzz agreement server");
        closeHard(s);
      } catch (const PeerError&) {
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
  }
  std::this_thread::sleep_for(50ms);
}

void noteServer(uint16_t port) {
  static bool registered = (std::atexit(awaitServers), true);
  (void)registered;
  if (recentServers.size() == kRecentServers) recentServers.erase(recentServers.begin());
  recentServers.push_back(port);
}

void checkTail(const uint8_t* data, size_t size) {
  shim_nccl::abi::UniqueId id{};
  std::memcpy(id.internal, data, std::min(size, sizeof(id.internal)));
  (void)shim_nccl::ncclRootHost(id);
  auto tail = shim_nccl::decodeTail(id);
  if (!tail) return;
  shim_nccl::abi::UniqueId fresh{};
  if (!shim_nccl::encodeTail(fresh, *tail)) finding("encodeTail refused a zeroed id");
  auto again = shim_nccl::decodeTail(fresh);
  if (!again || !(*again == *tail)) finding("a decoded tail does not encode back to itself");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (log::setLevel(log::Level::Off), true);
  (void)quiet;
  if (size == 0) return 0;
  checkTail(data, size);
  const int n = 1 + data[0] % 8;
  // The server's deadline: enough for n queued votes on a loaded machine (a late server is
  // recognised below), and short, since it bounds an input's time: a real rank that finds the
  // server gone retries its port until then, and a server waiting for more ranks than vote ends
  // by it on its own (it is detached). A forged vote for more ranks than the job has makes every
  // input built on it wait this long: at 400 ms the replay of the forged-vote seeds took 51 s.
  constexpr std::chrono::milliseconds kDeadline{150};
  const auto started = std::chrono::steady_clock::now();
  const shim_nccl::IdTail tail =
      shim_nccl::startAgreementServer(kAgreementHost, kCreatorHash, kDeadline);
  noteServer(tail.port);
  SockAddr addr = resolve(kAgreementHost, tail.port, Lookup::kNumericOnly);

  std::vector<Socket> conns;
  bool voteSent = false;
  bool serverGone = false;
  size_t pos = 1;
  while (pos + 3 <= size && conns.size() < kMaxConnections) {
    uint8_t flags = data[pos];
    size_t len = data[pos + 1] | (size_t{data[pos + 2]} << 8);
    pos += 3;
    len = std::min(len, size - pos);
    std::string frame(reinterpret_cast<const char*>(data + pos), len);
    pos += len;
    if ((flags & 1) && frame.size() >= kVoteHeader) std::memcpy(&frame[8], &tail.nonce, 8);
    if ((flags & 2) && frame.size() >= 4) std::memcpy(&frame[0], &kVoteMagic, 4);
    voteSent = voteSent || isVote(frame, tail.nonce);
    // The server is gone once forged votes completed the job's set, or past its deadline on a
    // loaded machine: a refused or reset connection ends the strangers' turn, not the input.
    try {
      Socket s = Socket::connect(addr, Deadline::after(5s), "fuzz agreement server");
      s.sendAll(frame.data(), frame.size(), Deadline::after(5s), "fuzz vote bytes");
      ::shutdown(s.fd(), SHUT_WR);
      conns.push_back(std::move(s));
    } catch (const PeerError&) {
      serverGone = true;
      break;
    }
  }
  // Ranks voting to a server that is gone retry its port until their deadline (the product's
  // behaviour, Agreement.UnreachableServerMeansIdentity): time the fuzzer gets nothing for. One
  // more connection that sends nothing (a port scanner's) tells whether it is still there.
  if (!serverGone) {
    try {
      Socket probe = Socket::connect(addr, Deadline::after(5s), "fuzz agreement server");
      closeHard(probe);
    } catch (const PeerError&) {
      serverGone = true;
    }
  }
  if (serverGone) {
    for (auto& s : conns) closeHard(s);
    return 0;
  }

  // The real ranks, after the connections above (the server accepts in connection order).
  std::vector<PlanVerdict> verdicts(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      PlanVote v;
      v.rank = r;
      v.worldSize = n;
      v.status = PlanStatus::kOk;
      v.hash = kCreatorHash;
      try {
        verdicts[static_cast<size_t>(r)] = shim_nccl::agree(tail, v);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r)
    if (!errors[static_cast<size_t>(r)].empty())
      finding("rank " + std::to_string(r) + " got no verdict: " + errors[static_cast<size_t>(r)]);
  // Bytes without this id's nonce, or that are no vote, must change nothing: every real rank
  // gets "apply" with one reason (unless the server passed its deadline first, on a machine too
  // loaded to take n votes in 0.15 s: then ranks read "only k of n ranks voted", or "closed
  // without an answer" when it was never accepted). A vote with the nonce comes
  // from a rank of this job (the nonce travels only in the id); one that repeats a real rank's
  // number is a duplicated process, which the agreement cannot tell from the real one: then
  // only the absence of crashes, hangs and malformed answers is checked.
  bool late = std::chrono::steady_clock::now() - started >= kDeadline;
  for (const auto& v : verdicts)
    late = late || v.reason.find("ranks voted within") != std::string::npos;
  if (!voteSent && !late)
    for (const auto& v : verdicts)
      if (!v.apply || v.reason != verdicts[0].reason)
        finding("with only the real ranks voting: '" + verdicts[0].reason + "' and '" + v.reason +
                "'");
  for (auto& s : conns) closeHard(s);
  return 0;
}
