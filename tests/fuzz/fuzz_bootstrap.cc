// Fuzz target for the collective engine's root bootstrap (collectives/bootstrap/root_bootstrap.h):
// the root reads hellos and allgather blobs from whoever connects to RANKMAP_ROOT, and every
// other rank reads the root's answers. Both sides read frames from a network port.
//
// Input: byte 0: bit 7 picks the side, the rest the group size (2 + b % 7).
// - Root side: then up to 12 connections, each [length u16 LE][bytes], connected, sent and
//   half-closed in order; then the real ranks 1..size-1, each sending a correct hello and the
//   blob "rank r", also queued. The root (kBootstrapHost, port 0) then accepts and runs one
//   allgather.
// - Rank side: byte 1 picks the rank (1 + b % (size - 1)); the rest is what a fake root sends
//   (then it half-closes). The rank connects, says hello and runs one allgather of "mine".
// Every byte either side will ever get is queued before it reads, so nothing waits on a peer.
//
// Findings: a crash or sanitizer report; an exception other than PeerError (a TimeoutError is a
// wait for bytes that were never coming); a root whose allgather returns anything but "root",
// "rank 1", ... (a stranger's bytes taking a rank's place); a rank whose allgather returns the
// wrong number of blobs or not its own blob in its place.
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/bootstrap/root_bootstrap.h"
#include "common/deadline.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"
#include "tests/fuzz/fuzz_net.h"

namespace {

using namespace rankmap;
using fuzz::closeHard;
using namespace std::chrono_literals;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_bootstrap: %s\n", what.c_str());
  std::abort();
}

constexpr size_t kMaxConnections = 12;

// The frames as root_bootstrap.cc writes them (host order): {u32 magic "RMBS", u32 type, u64
// length} and a hello {u32 version 1, i32 rank, i32 size}. The harness plays the real ranks.
std::string frame(uint32_t type, const std::string& payload) {
  struct {
    uint32_t magic = 0x524d4253;
    uint32_t type;
    uint64_t length;
  } h;
  h.type = type;
  h.length = payload.size();
  return std::string(reinterpret_cast<const char*>(&h), sizeof h) + payload;
}

std::string hello(int rank, int size) {
  int32_t v[3] = {1, rank, size};
  return frame(1, std::string(reinterpret_cast<const char*>(v), sizeof v));
}

Socket queue(const SockAddr& addr, const std::string& bytes) {
  Socket s = Socket::connect(addr, Deadline::after(5s), "fuzz bootstrap root");
  s.sendAll(bytes.data(), bytes.size(), Deadline::after(5s), "fuzz bytes");
  ::shutdown(s.fd(), SHUT_WR);
  return s;
}

void rootSide(const uint8_t* data, size_t size, int group) {
  coll::bootstrap::RootListener listener(std::string(fuzz::kBootstrapHost) + ":0");
  HostPort hp = parseHostPort(listener.address(), "root", {.defaultPort = std::nullopt});
  SockAddr addr = resolve(hp.host, hp.port, Lookup::kNumericOnly);
  std::vector<Socket> conns;
  size_t pos = 0;
  while (pos + 2 <= size && conns.size() < kMaxConnections) {
    size_t len = data[pos] | (size_t{data[pos + 1]} << 8);
    pos += 2;
    len = std::min(len, size - pos);
    conns.push_back(queue(addr, std::string(reinterpret_cast<const char*>(data + pos), len)));
    pos += len;
  }
  for (int r = 1; r < group; ++r)
    conns.push_back(queue(addr, hello(r, group) + frame(4, "rank " + std::to_string(r))));
  try {
    auto root = coll::bootstrap::makeRootBootstrap(std::move(listener), group, Deadline::after(20s));
    std::vector<std::string> all = root->allgather("root", Deadline::after(20s));
    if (all.size() != static_cast<size_t>(group) || all[0] != "root") finding("root: wrong result");
    for (int r = 1; r < group; ++r)
      if (all[static_cast<size_t>(r)] != "rank " + std::to_string(r))
        finding("root: rank " + std::to_string(r) + "'s place holds another blob");
  } catch (const PeerError&) {
  } catch (const TimeoutError& e) {
    finding(std::string("root: a wait for bytes that were never coming: ") + e.what());
  }
  for (auto& s : conns) closeHard(s);
}

void rankSide(const uint8_t* data, size_t size, int group) {
  if (size == 0) return;
  const int rank = 1 + data[0] % (group - 1);
  const std::string answer(reinterpret_cast<const char*>(data + 1), size - 1);
  Listener fake = Listener::bind(resolve(fuzz::kBootstrapHost, 0, Lookup::kNumericOnly));
  const std::string root = fake.localAddr().str();
  // The fake root: answers with the input at once, then reads until the rank closes.
  std::thread server([&] {
    std::optional<Socket> s = fake.accept(Deadline::after(20s));
    if (!s) return;
    try {
      s->sendAll(answer.data(), answer.size(), Deadline::after(20s), "fuzz rank");
      ::shutdown(s->fd(), SHUT_WR);
      char sink[4096];
      while (s->recvSome(sink, sizeof sink, Deadline::after(20s), "fuzz rank") > 0) {
      }
    } catch (const Error&) {
    }
    closeHard(*s);
  });
  try {
    auto bs = coll::bootstrap::makeRootBootstrap(rank, group, root, Deadline::after(20s));
    std::vector<std::string> all = bs->allgather("mine", Deadline::after(20s));
    if (all.size() != static_cast<size_t>(group)) finding("rank: wrong number of blobs");
    if (all[static_cast<size_t>(rank)] != "mine") finding("rank: its own place holds another blob");
  } catch (const PeerError&) {
  } catch (const TimeoutError& e) {
    finding(std::string("rank: a wait for bytes that were never coming: ") + e.what());
  }
  server.join();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (log::setLevel(log::Level::Off), true);
  (void)quiet;
  if (size == 0) return 0;
  const int group = 2 + (data[0] & 0x7f) % 7;
  if (data[0] & 0x80)
    rankSide(data + 1, size - 1, group);
  else
    rootSide(data + 1, size - 1, group);
  return 0;
}
