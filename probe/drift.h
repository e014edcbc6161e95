// Topology arithmetic across rounds: how far two topologies differ, and what a round run under
// a job's traffic, or the job's traffic itself, may change in the topology before it (the
// agent's schedule applies it: agent/daemon.h, "Passive hold" and "Rounds under job traffic").
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/topology.h"

namespace rankmap::probe {

// Relative change |b - a| / a (a > 0); infinite when a is 0 and b is not.
double relativeChange(double a, double b);

// A pair's single-flow rate: the matrix entry, or the link model's path without matrices.
std::optional<double> pairMbps(const Topology& t, size_t a, size_t b);

// Pairs whose bandwidth differs by more than `threshold` between two topologies over the same
// hosts (by name; pairs missing in either are ignored).
size_t changedPairs(const Topology& a, const Topology& b, double threshold);

// A job's send series that stayed backlogged (agent/passive.h): a sender whose path is slower
// than the data it has to send.
struct Backlog {
  std::string src, dst;  // host names: src is the reporting agent's host
  double mbps = 0;       // median of the backlogged windows' bytes per collective second
  double busy = 0;       // median fraction of collective time with a send in flight
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
bool standsOut(const Backlog& b, const std::map<std::string, double>& sendBusy);
// The senders the job's traffic names slow: the sender of each backlogged series that stands
// out, and each host whose sendBusyPeak (`sendPeak`: host -> the summary's) is at least
// kSlowSenderBusy and kStandOut x the median of the other hosts' peaks. The second is there
// when no series is backlogged: on the testbed, with a tenant taking half of one VM's 200
// Mbit/s link out, that VM's send windows were busy 0.10-0.58 of its collective time and every
// other VM's 0.01-0.05, so no series of it had kConfirmWindows windows at kBacklogFraction; the
// job's drift started a round that knew no slow sender, and the round's reading of that link
// was kept out (the job stayed at half its rate).
inline constexpr double kSlowSenderBusy = 0.25;
std::set<std::string> slowSenders(const std::vector<Backlog>& backlogged,
                                  const std::map<std::string, double>& sendBusy,
                                  const std::map<std::string, double>& sendPeak);
std::optional<Topology> patchBacklogged(const Topology& t, const std::vector<Backlog>& backlogged,
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

}  // namespace rankmap::probe
