// The agent's view of running jobs' traffic (passive measurement): what engine ranks on this
// host report (POST /v1/observations, collectives/agent_link.h), folded into a drift detector,
// so that while a job runs the network's change shows in the job's own traffic and active probes
// are needed only to confirm it (agent/daemon.h, "Passive hold").
//
// Series: one per (reporter, peer host, direction): a reporter is one engine rank; "send" is
// this host -> peer, "recv" peer -> this host. Each report adds one window per peer: bytes, and
// the rank's seconds inside collectives in the window ("collective_s"; reports without it use
// the peer's busy seconds). A window with at least kMinWindowBytes gives a rate (bytes x 8 /
// seconds, Mbit/s): the job's own rate with that peer per second of communication, steady while
// the job and the network are. (The per-message busy time is no measure here: a send that lands
// in a socket buffer with room finishes at once, and such rates swung tenfold between windows
// of a steady job on the emulated cloud.) A series' baseline is the median of
// its first kBaselineWindows rates under one plan (a report with another plan hash starts the
// series again: a new order moves other bytes over other links). It drifts when each of its
// last kConfirmWindows rates differs from the baseline by more than the threshold, the same way
// (all slower or all faster): one slow window (a GC pause, a checkpoint) is not a change.
// rebase() takes the drifting series' recent rates as their new baseline once the drift was
// acted on, so that one change is reported once.
//
// Thread-safe; bounded: at most kMaxSeries series (the oldest dropped), series unseen for
// kExpiry dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/json.h"

namespace rankmap::agent {

class PassiveLedger {
 public:
  static constexpr uint64_t kMinWindowBytes = 1 << 20;
  static constexpr size_t kBaselineWindows = 5;
  static constexpr size_t kConfirmWindows = 3;
  static constexpr size_t kMaxSeries = 65536;
  static constexpr std::chrono::seconds kExpiry{120};
  using Clock = std::chrono::steady_clock;

  // `self` is this agent's host name: reports must come from ranks on it.
  explicit PassiveLedger(std::string self);

  // One report (the JSON body of POST /v1/observations). Throws InvalidInput naming `source`,
  // the field and what was expected. Returns the bytes the report adds (both directions).
  uint64_t add(const Json& report, std::string_view source, Clock::time_point now);

  struct Drift {
    std::string src, dst;  // host names, direction of the bytes
    double baselineMbps = 0;
    double nowMbps = 0;
  };
  struct Summary {
    // A job's traffic was reported within `freshFor`.
    bool fresh = false;
    size_t series = 0;     // fresh series
    size_t baselined = 0;  // ... with a baseline
    std::vector<Drift> drifting;
    Json toJson() const;
    static Summary fromJson(const Json& j, std::string_view source);
  };
  // The drift view at `now` with `threshold` (relative). With `rebase`, drifting series take
  // their recent rates as the new baseline (the caller acts on this drift).
  Summary summary(Clock::time_point now, double threshold, std::chrono::milliseconds freshFor,
                  bool rebase);

  // Totals since start, for /metrics.
  uint64_t reports() const;
  uint64_t bytes() const;

 private:
  struct Series {
    std::string plan;
    std::vector<double> base;     // first rates under `plan`
    std::deque<double> recent;    // the last kConfirmWindows rates after the baseline
    Clock::time_point lastSeen;
  };
  using Key = std::tuple<std::string, std::string, bool>;  // reporter, peer, send
  std::string self_;
  mutable std::mutex mu_;
  std::map<Key, Series> series_;
  uint64_t reports_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace rankmap::agent
