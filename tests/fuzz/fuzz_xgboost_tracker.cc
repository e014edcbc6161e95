// Fuzz target for the XGBoost (Rabit) tracker's protocol (launch/xgboost_tracker.h): the real
// RabitTracker on kTrackerHost (a fresh port per input), fed by workers whose bytes are the input.
//
// Input: byte 0 gives the worker count (1 + b % 8); then up to 16 connections, each
// [length u16 LE][bytes]: the harness connects, sends the bytes, and half-closes, before serve()
// runs, so every byte a worker will ever send is already queued; a last connection closes at
// once. The tracker serves them in order, one at a time, and the last one ends serve() with a
// PeerError if nothing did before. Replies are left unread.
//
// Findings: a crash, an exception other than PeerError (TimeoutError means a wait the queued
// bytes cannot satisfy: a hang), or ranks that are not distinct and in [0, workers).
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"
#include "tests/fuzz/fuzz_net.h"
#include "launch/xgboost_tracker.h"

namespace {

using namespace rankmap;
using fuzz::closeHard;
using namespace std::chrono_literals;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_xgboost_tracker: %s\n", what.c_str());
  std::abort();
}

constexpr size_t kMaxConnections = 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (log::setLevel(log::Level::Off), true);
  (void)quiet;
  if (size == 0) return 0;
  int workers = 1 + data[0] % 8;
  launch::RabitTracker tracker(fuzz::kTrackerHost, 0, workers);
  SockAddr addr = resolve(fuzz::kTrackerHost, tracker.port(), Lookup::kNumericOnly);
  std::vector<Socket> conns;
  size_t pos = 1;
  while (pos + 2 <= size && conns.size() < kMaxConnections) {
    size_t len = data[pos] | (size_t{data[pos + 1]} << 8);
    pos += 2;
    len = std::min(len, size - pos);
    Socket s = Socket::connect(addr, Deadline::after(5s), "fuzz tracker");
    s.sendAll(data + pos, len, Deadline::after(5s), "fuzz worker bytes");
    ::shutdown(s.fd(), SHUT_WR);
    conns.push_back(std::move(s));
    pos += len;
  }
  Socket last = Socket::connect(addr, Deadline::after(5s), "fuzz tracker");
  last.close();

  auto start = std::chrono::steady_clock::now();
  auto tick = [&start] {
    if (std::chrono::steady_clock::now() - start > 30s) finding("serve() still running after 30 s");
  };
  try {
    tracker.serve(Deadline::after(20s), 10s, tick, [](const std::string&) {});
  } catch (const PeerError&) {
  } catch (const TimeoutError& e) {
    finding(std::string("a wait for bytes that were never coming: ") + e.what());
  }
  std::set<int> ranks;
  for (const auto& [task, rank] : tracker.ranks())
    if (rank < 0 || rank >= workers || !ranks.insert(rank).second)
      finding("rank " + std::to_string(rank) + " given to task " + task);
  for (auto& s : conns) closeHard(s);
  return 0;
}
