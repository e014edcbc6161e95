// Incremental re-probes: a light check of a topology against the network, and a re-probe of just
// the groups it found changed. Both talk only to a Fleet (probe/fleet.h) through a RoundState,
// like the round (probe/round.h), so the simulator runs them unchanged.
//
// The check (checkTopology) measures representatives of every link of the topology's model and
// compares each with what the model predicts for it (common/maxmin.h over the topology's tree):
//   liveness     every host once; a host of the topology that does not answer, or one out of it
//                that does, ends the check (a full round must place it);
//   host links   shift 1 inside every innermost group, all groups in one trial (no uplink is
//                crossed), with a ping of each pair when the topology has latency tiers;
//   uplinks      per level one trial: under each parent, group a sends to the next sibling b
//                (a ring, so every uplink carries one unit out and one in), with enough senders
//                spread over a's subgroups to carry kLoadMargin times the stated capacity (one
//                flow, as measureLinks does, when one flow already fills the uplink). Compared
//                as the unit's total.
// A unit beyond the threshold is measured again; only a confirmed change counts. Blame: a unit's
// links of its own tier are cleared by any unchanged unit through them; the changed units are
// then covered greedily by the groups that explain most of them (a rack whose uplink halved
// slows both units through it, its neighbours one each). Flows: about N for host links plus
// kLoadMargin x capacity / host rate senders per group and level; trials: 1 + levels (+ the
// confirmations when something moved).
//
// The verdict: unchanged; changed groups (at most kMaxRepairGroups, and kMaxRepairFraction of
// the innermost groups), which repairGroups re-measures the way measureLinks does and patches
// into the topology; or full, with the reason (membership, dead or moved hosts, too many
// groups, no link model): the caller runs a full round.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/topology.h"
#include "probe/fleet.h"
#include "probe/round.h"

namespace rankmap::probe {

// Senders across an uplink in the check: enough to carry this many times its stated capacity,
// so a drop shows and so does a rise up to this factor.
inline constexpr double kLoadMargin = 1.5;
// A change is re-probed group by group when it is confined to at most this many groups ...
inline constexpr size_t kMaxRepairGroups = 3;
// ... and to at most this fraction of the innermost groups; otherwise a full round.
inline constexpr double kMaxRepairFraction = 0.25;

struct RecheckOptions {
  double threshold = 0.25;  // relative change of a unit that counts (reprobe.change_threshold)
};

// One group of Topology::groups whose links changed.
struct GroupChange {
  size_t level = 0;
  int group = 0;           // index in groups[level].groups
  bool hostLinks = false;  // its hosts' links (innermost level only)
  bool uplink = false;     // its uplink (either direction)
  bool operator==(const GroupChange&) const = default;
};

// A confirmed change: one flow (host links) or the flows across one uplink, summed.
struct UnitChange {
  std::string what;  // "h0003 -> h0004" or "rack 5 -> rack 6 (12 flows)"
  double expectedMbps = 0;
  double gotMbps = 0;
};

enum class RecheckVerdict { Unchanged, Groups, Full };
const char* recheckVerdictName(RecheckVerdict v);  // "unchanged", "groups", "full"

struct RecheckResult {
  RecheckVerdict verdict = RecheckVerdict::Unchanged;
  std::string reason;               // why a full round is needed (empty otherwise)
  std::vector<GroupChange> groups;  // the changed groups (also with Full when too many)
  std::vector<std::string> names;   // of `groups`: "rack 5 uplink", "rack 2 hosts"
  std::vector<int> movedHosts;      // hosts whose group-mates look far away
  // Every host of the topology answered, none joined and none looks away from its group: a
  // Full verdict then comes from the links alone (too many groups changed, or none explains a
  // change).
  bool hostsInPlace = false;
  std::vector<UnitChange> changed;  // confirmed changes
  size_t units = 0;                 // units compared
  double maxChange = 0;             // largest confirmed relative change
};

// The check; `t` must list the fleet's hosts in the fleet's order (else the verdict is Full).
// Never throws for a host's failure: a host dropped during the check makes the verdict Full.
RecheckResult checkTopology(RoundState& s, const Topology& t, const RecheckOptions& o);

// `t` with the links of `groups` measured again (host links by measureHostLinks, uplinks by
// measureUplinks) and everything else kept: shared links follow the new links; pairs whose path
// crosses a re-measured link lose their old values (measured again alone, or inferred from the
// new links) and every other value and measured pair stays. `time` and `version` are kept for
// the caller to set.
Topology repairGroups(RoundState& s, const Topology& t, const std::vector<GroupChange>& groups);

// The check over a fleet, and what it spent.
struct RecheckOutcome {
  RecheckResult result;
  std::vector<Reading> readings;
  std::vector<std::string> deadHosts;        // by name
  std::map<std::string, uint64_t> failures;  // reason -> count
  FleetCost cost;                            // spent by the check alone
};
RecheckOutcome runRecheck(Fleet& fleet, const Topology& t, const RecheckOptions& o,
                          const RoundOptions& opts, Deadline d,
                          const std::atomic<bool>* cancel = nullptr);

// The group re-probe over a fleet, as a round's outcome (structure taken from `t`, signal
// "topology"; cost spent by the re-probe alone). A host dropped during it is named in deadHosts:
// the caller then runs a full round instead.
RoundOutcome runRepair(Fleet& fleet, const Topology& t, const std::vector<GroupChange>& groups,
                       const RoundOptions& opts, Deadline d, const RoundProgressFn& progress = {},
                       const std::atomic<bool>* cancel = nullptr);

}  // namespace rankmap::probe
