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
// (all slower or all faster), or each of its last two or more when those windows span at least
// kConfirmSpan: one slow window is not a change. (Windows end at collective boundaries only, so
// a job whose calls outlast its report interval reports less often: after a migration on the
// testbed, 5-second calls made three windows 15 s, most of the time the job had to switch in.)
// rebase() takes the drifting series' recent rates as their new baseline once the drift was
// acted on, so that one change is reported once.
//
// The agents' own probes: a window that overlaps a span in which the agents probed (told by
// probed(), from the coordinator's rounds) measured the job beside the probe's flows, not the
// network, and counts neither for a baseline nor for a drift nor for backlog. Without this, a
// round's flows slowed the job's windows into a drift, whose light check ran under the job's
// traffic and published rates measured under it: on the testbed a job re-planned for a tenant
// then switched again, to a plan made from such rates (docs/performance.md, issue 16's sixth
// session).
//
// Backlog: the rate of a job's flow over its collective time says that the job slowed, not
// where. Where shows in the busy time of sends: a send finishes when its bytes are in the
// socket buffer, so only a sender whose path is slower than the data it has to send keeps its
// sends in flight (on the emulated cloud with a 100 Mbit/s tenant on one 200 Mbit/s host link,
// the ring's sender on that link had a send in flight 86% of its collective time, every other
// sender 1-2%, and the same 1-2% everywhere before the tenant). A send window is backlogged when
// its send busy time is at least kBacklogFraction of the window's collective time. A series is
// backlogged when its last kConfirmWindows windows were; the summary lists each with the median
// of their rates per second of collective time (what the job got through the path: bytes / busy
// time overstates it when the sends are only partly backlogged, 122-169 Mbit/s beside that
// tenant in a job with gaps between its calls) and of their busy fractions, and the median
// busy fraction of this host's fresh send series (sendBusy), so that the coordinator can tell a
// sender that stands out from a plan that loads every link evenly (agent/daemon.cc, "Passive
// patch").
//
// Thread-safe; bounded: at most kMaxSeries series (the oldest dropped), series unseen for
// kExpiry dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/json.h"
#include "common/topology.h"
#include "probe/drift.h"

namespace rankmap::agent {

class PassiveLedger {
 public:
  static constexpr uint64_t kMinWindowBytes = 1 << 20;
  static constexpr size_t kBaselineWindows = 5;
  static constexpr size_t kConfirmWindows = 3;
  static constexpr size_t kMinConfirmWindows = 2;
  static constexpr std::chrono::seconds kConfirmSpan{8};
  static constexpr double kBacklogFraction = 0.5;
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
    // A job reported within `freshFor`: its traffic, or the empty report a rank's link sends
    // when the job starts (collectives/agent_link.h), so that a light check does not meet the
    // job's first collectives before its traffic has been reported.
    bool fresh = false;
    size_t series = 0;     // fresh series
    size_t baselined = 0;  // ... with a baseline
    std::vector<Drift> drifting;
    std::vector<probe::Backlog> backlogged;  // fresh send series backlogged in their last windows
    double sendBusy = 0;  // median over fresh send series of their last window's busy fraction
    // The highest busy fraction of any fresh send series over its last kConfirmWindows windows:
    // a window's fraction swings with where the collectives fall in it (on the testbed the
    // tenant's VM read 0.10-0.58 window by window, its peak of three 0.3-0.6).
    double sendBusyPeak = 0;
    Json toJson() const;
    static Summary fromJson(const Json& j, std::string_view source);
  };
  // The drift view at `now` with `threshold` (relative). With `rebase`, drifting series take
  // their recent rates as the new baseline (the caller acts on this drift).
  Summary summary(Clock::time_point now, double threshold, std::chrono::milliseconds freshFor,
                  bool rebase);

  // The agents probed from `from` to `to`: the windows held that overlap it are dropped, and
  // windows reported later that overlap it are not counted. Keeps the last kProbeSpans spans.
  // Returns the windows dropped now.
  static constexpr size_t kProbeSpans = 8;
  uint64_t probed(Clock::time_point from, Clock::time_point to);
  // `seconds` (finite, >= 0, at most a day) before `now`.
  static Clock::time_point ago(Clock::time_point now, double seconds);

  // Totals since start, for /metrics.
  uint64_t reports() const;
  uint64_t bytes() const;
  uint64_t probedWindows() const;  // windows left out because they overlapped a probe

 private:
  // A window's span: [report time - window_s, report time].
  struct Span {
    Clock::time_point from, to;
    bool overlaps(const Span& o) const { return from < o.to && o.from < to; }
  };
  struct Rate {
    Span span;
    double mbps = 0;
  };
  struct Send {
    Span span;
    double fraction = 0;  // busy fraction of the window's collective time
    double mbps = 0;      // bytes per collective second when backlogged, else 0
  };
  struct Series {
    std::string plan;
    std::vector<Rate> base;   // first rates under `plan`
    std::deque<Rate> recent;  // the last kConfirmWindows rates after the baseline
    std::deque<Send> sends;   // send series: the last kConfirmWindows windows
    Clock::time_point lastSeen;
  };
  using Key = std::tuple<std::string, std::string, bool>;  // reporter, peer, send
  std::string self_;
  mutable std::mutex mu_;
  std::map<Key, Series> series_;
  uint64_t reports_ = 0;
  std::optional<Clock::time_point> lastReport_;  // of any report, empty ones included
  uint64_t bytes_ = 0;
  std::deque<Span> probes_;  // the agents' probing, latest last
  uint64_t probedWindows_ = 0;
};

}  // namespace rankmap::agent
