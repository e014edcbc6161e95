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
  struct Backlog {
    std::string src, dst;  // host names: src is this agent's host
    double mbps = 0;       // median of the backlogged windows' bytes per collective second
    double busy = 0;       // median fraction of collective time with a send in flight
  };
  struct Summary {
    // A job reported within `freshFor`: its traffic, or the empty report a rank's link sends
    // when the job starts (collectives/agent_link.h), so that a light check does not meet the
    // job's first collectives before its traffic has been reported.
    bool fresh = false;
    size_t series = 0;     // fresh series
    size_t baselined = 0;  // ... with a baseline
    std::vector<Drift> drifting;
    std::vector<Backlog> backlogged;  // fresh send series backlogged in their last windows
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

// Passive patch: a copy of `t` in which each host that the job's backlogged sends show slower
// than `t` says sends at most what they delivered: its host link out (the link model) and its
// row of the bandwidth matrix capped at the sum of its backlogged series' rates (concurrent
// flows through one host link). A backlogged series counts only when its busy fraction is at
// least kStandOut times the median of the other hosts' sendBusy (`sendBusy`: host -> the
// summary's sendBusy; no other host, no patch): a plan that loads every link evenly keeps
// every sender busy, and then none of them is the slow one. Nor does a series whose rate is
// within `threshold` of its pair's rate in `t` (what the path carries alone): on the testbed,
// with 100 Mbit/s uplinks under 400 Mbit/s host links, the ring's sender across each uplink was
// backlogged at 97 in a steady job and was patched as a 97 Mbit/s host link. A host is patched only
// when its sum is below its modelled rate out (the link model's, or without one its fastest matrix
// entry) by more than `threshold` (relative). The slowness is put on the sender's host link:
// the link that only it loads on its flows' paths in a ring; a slow receiver or uplink reads the
// same from here, and the plan that avoids the sender's link also avoids its flows' paths.
// Stamped with the time, version 0. nullopt when no host is patched; `notes` gets one line per
// patched host.
inline constexpr double kStandOut = 3;
// Whether backlogged series `b` counts against its sender by that rule (`sendBusy` as above).
bool standsOut(const PassiveLedger::Backlog& b, const std::map<std::string, double>& sendBusy);
// The senders the job's traffic names slow: the sender of each backlogged series that stands
// out, and each host whose sendBusyPeak (`sendPeak`: host -> the summary's) is at least
// kSlowSenderBusy and kStandOut x the median of the other hosts' peaks. The second is there
// when no series is backlogged: on the testbed, with a tenant taking half of one VM's 200
// Mbit/s link out, that VM's send windows were busy 0.10-0.58 of its collective time and every
// other VM's 0.01-0.05, so no series of it had kConfirmWindows windows at kBacklogFraction; the
// job's drift started a round that knew no slow sender, and the round's reading of that link
// was kept out (the job stayed at half its rate).
inline constexpr double kSlowSenderBusy = 0.25;
std::set<std::string> slowSenders(const std::vector<PassiveLedger::Backlog>& backlogged,
                                  const std::map<std::string, double>& sendBusy,
                                  const std::map<std::string, double>& sendPeak);
std::optional<Topology> patchBacklogged(const Topology& t,
                                        const std::vector<PassiveLedger::Backlog>& backlogged,
                                        const std::map<std::string, double>& sendBusy,
                                        double threshold, std::vector<std::string>& notes);

// A round run while the job's traffic crosses the network cannot see a shared uplink that the
// job already loads: its contention tests meet the job's flows on every path alike. On the
// testbed such rounds found no groups at all (the plan then crossed the racks five times), or
// a "rack" of 7 hosts and one of 1 behind a 68 Mbit/s uplink while pairs across it had been
// measured alone at 190 (the plan then kept the slow order: docs/performance.md), or racks with
// one host of each swapped behind 60 Mbit/s uplinks that no pair contradicted (400 Mbit/s
// alone; the job's plan made from it ran no faster than the tenant let the old one). When `t`,
// from a round under job traffic over the same hosts as `baseline`, has no groups, or groups
// that its own measured pairs contradict (groupsContradicted), or any groups at all when
// `hostsInPlace` (the light check that started the round found every host answering and in its
// group: what changed is links, and the uplinks are what the round cannot measure), and
// `baseline` has some, `t` keeps the baseline's groups, shared links and uplink capacities (with
// a link model in both or in neither; its own host links and measured pairs stay) and its pairs
// not measured are inferred again through them. Otherwise groups that agree with the round's
// pairs (a migration: the check saw the moved host) stay its own. True when kept; `note` says
// what was kept and why. What this gives up: an uplink that a neighbour loads while the job
// runs keeps its old capacity until a round without the job's traffic measures it.
bool keepGroupsUnderJobTraffic(Topology& t, const Topology& baseline, bool hostsInPlace,
                               std::string& note);

// A round under the job's traffic reads a host link slower by the job's own flows through it:
// on the testbed the receiver of the ring flow out of the tenant-loaded VM (a flow that never
// pauses, the ring's bottleneck feeding it) read 120 Mbit/s in, where it measures 197 alone,
// and the plan made from that round ran 126 Mbit/s where one that slows only the tenant's VM
// ran 164 (docs/performance.md). So `t`, from such a round over the same hosts as `baseline`
// (both with a link model), may change a host link downwards only where the job's traffic says
// it is slow: the link out of each host in `senders` (slowSenders). Every other direction keeps
// the higher of its two readings, and the pairs whose path enters or leaves through a link so
// kept are inferred again through the model, the pairs measured under the job's traffic
// through it included (they leave `measured`). Call it after keepGroupsUnderJobTraffic. Also
// after a light check that saw a host away from its group: that check ran under the job's
// traffic too (on the testbed it named a host that had not moved), and a VM that moves keeps
// its host link. True when a link was kept; `note` names each with both readings. What this
// gives up: a host link into a VM that a neighbour loads while the job runs reads as its
// sender's link out (the passive patch's stance), and a host link that slows with no job
// traffic through it reads as before, until a round without the job's traffic measures them.
bool keepHostLinksUnderJobTraffic(Topology& t, const Topology& baseline,
                                  const std::set<std::string>& senders, std::string& note);

// A pair measured alone across an uplink faster than kUplinkContradiction x that uplink's
// capacity (the link model's, the narrower of the two groups' directions) contradicts the
// groups: a description of the first such pair, or nullopt (also without a link model).
inline constexpr double kUplinkContradiction = 1.25;
std::optional<std::string> groupsContradicted(const Topology& t);

}  // namespace rankmap::agent
