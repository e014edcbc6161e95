// topology.json: what the probes measured, the input of the planner. Schema in docs/formats.md.
//
// Contract: a Topology that came out of fromJson()/load() is valid: host names unique and
// non-empty, matrices N x N (or 0 x 0 when `links` stands in for them), every value finite and
// non-negative, `links` sized to the hosts and to the groups of every level, `measured` a set of
// distinct in-range pairs. Missing measurements are nullopt ("null" in JSON). Matrix rows are
// senders, columns receivers.
//
// Thread safety: const members may be called from several threads at once (pathMbps() builds its
// index of the groups once, atomically); writing members while others read is the caller's to
// prevent, as for any struct.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/matrix.h"

namespace rankmap {

// The relative noise of one probe reading (a single flow's rate, a ping's floor) that the probe
// and the planner both assume, so that they agree on what counts as a difference: the probe
// takes a host link's readings within the noise's width of its best as one (probe::kHostBand), and
// the planner treats rings whose predicted times differ by less than the noise of what differs
// between them as equal (reorder::RingParams::noise).
inline constexpr double kProbeNoise = 0.1;

struct Host {
  std::string name;
  std::string address;  // "ip" or "ip:port"; may be empty for fixtures
  // The address without its port ("10.0.0.4" of "10.0.0.4:7411"; topology addresses are IPv4).
  std::string ip() const { return address.substr(0, address.find(':')); }
  bool operator==(const Host&) const = default;
};

// The median of measured values `v` (the upper one of an even count); 0 when empty.
double median(std::vector<double> v);

struct LatencyStats {
  double minUs = 0;
  double medianUs = 0;
  double p90Us = 0;
  double p99Us = 0;
  bool operator==(const LatencyStats&) const = default;
};

struct ProbeSettings {
  int64_t latencySamples = 0;     // round trips per pair after warm-up
  int64_t bandwidthMaxMs = 0;     // bulk transfer bound in time ...
  int64_t bandwidthMaxBytes = 0;  // ... and in bytes, whichever first
  bool contention = false;        // whether the contention probe ran
  bool operator==(const ProbeSettings&) const = default;
};

// One locality level of the inferred hierarchy ("rack", "pod"), innermost first.
struct HierarchyLevel {
  std::string name;
  double confidence = 0;                         // 0..1
  std::vector<std::vector<std::string>> groups;  // host names; every host in exactly one group
  bool operator==(const HierarchyLevel&) const = default;
};

// The name of level `level` (0 = innermost) when nothing better is known: "rack", "pod",
// "zone", then "level<k>". The planner and the probe name the levels they find alike.
std::string levelName(size_t level);

// A link shared by a set of hosts, found by the contention probe.
struct SharedLink {
  std::vector<std::string> hosts;
  double capacityMbps = 0;
  bool operator==(const SharedLink&) const = default;
};

// Two directions of one pair whose bandwidth differs by more than this ratio are a broken
// measurement, not a property of the network: the planner drops them (reorder/measurements.h)
// and the probe retries such pairs before they get there (probe/agent_fleet.cc).
inline constexpr double kMaxDirectionRatio = 3.0;

// Up to this many hosts a probe writes the full matrices (measured and inferred values); beyond
// it, `links` and the measured pairs stand in for them: N^2 values stop being readable or small
// (4.9 MB at 256 hosts, 79 MB at 1024, past what a push carries to every agent), while the link
// model states every pair in O(N).
inline constexpr size_t kDenseMaxHosts = 256;

// One link's capacity in each direction (out = away from the host or group).
struct LinkCapacity {
  double outMbps = 0;
  double inMbps = 0;
  bool operator==(const LinkCapacity&) const = default;
};

// The link model of a sparse probe ("links" in topology.json, schema 2): the capacity of every
// host link and of every group's uplink at every level of Topology::groups, each direction, and
// the one-way latency each tier adds. A pair's single-flow rate follows from it as the narrowest
// link on its path (Topology::pathMbps); a probe that measured a sample of pairs states the
// rest this way instead of measuring all N^2.
//
// The network it describes is a tree: a host's link goes to the switch of its group at level 0,
// a group's uplink from its switch to the switch of its group at the next level (the root's for
// the last level). A flow a -> b leaves a's host link (out), climbs the uplinks of a's groups
// below the lowest group a and b share (out), descends those of b's groups (in) and enters b's
// host link (in).
struct TopologyLinks {
  std::vector<LinkCapacity> hosts;                 // per host, in the order of Topology::hosts
  std::vector<std::vector<LinkCapacity>> uplinks;  // per level of `groups`, per group (in the
                                                   // order of that level's `groups`)
  // One-way latency of a host link (hostLatencyUs) and of each level's uplinks; 0 = unknown.
  double hostLatencyUs = 0;
  std::vector<double> uplinkLatencyUs;  // per level
  bool operator==(const TopologyLinks&) const = default;
};

// A ring measured as a ring collective loads the network: every host of `order` sending to the
// next at once (the probe round's last phase, probe/round.h), each hop's rate as its receiver
// read it. The planner checks its link model against such rings and never prefers an order to
// a measured one that its measurement does not support (reorder/planner.h).
struct RingCheck {
  std::string name;                         // "input" (the probe's host order), "structure", ...
  std::vector<int> order;                   // host indices (Topology::hosts), distinct
  std::vector<std::optional<double>> mbps;  // order[i] -> order[i + 1] (cyclic); null = failed
  // The ring's bottleneck as measured: the median of the readings within 2 x kProbeNoise of the
  // lowest when there are kRingBandForMedian of them (the noise of many equal hops does not pull
  // it down), else the lowest (one slow hop stands: a step waits for it, not for the next ones
  // up, where other tenants' flows spread the hops' rates); nullopt when more than
  // kMaxMissingHops of the hops have no reading. With the link model's rate of each hop
  // (`modelMbps`, as `mbps` is indexed) that explains the band's readings (they deviate from it,
  // after one common factor, by at most kProbeNoise / 2 in the median), the median counts only
  // the band's hops the model rates within kProbeNoise of the slowest of them: hops the model
  // tells apart are not equal hops, and the slowest decide (4096 hosts, thin uplinks: readings
  // 21.7-26.0 through uplinks the model put at 20.8-25.9 gave 24.5 where the ring ran at 21.1).
  // A model that does not explain them (its rates as noisy as the readings) tells nothing apart.
  std::optional<double> bottleneckMbps(std::span<const double> modelMbps = {}) const;
  bool operator==(const RingCheck&) const = default;
};
inline constexpr double kMaxMissingHops = 0.05;
// A measured ring agrees with the link model when its bottleneck (and, for the probe, each of its
// hops) reads at least this fraction of what the model predicts: the planner warns below it, and
// the probe reads such a ring a second time.
inline constexpr double kRingCheckAgreement = 0.85;
inline constexpr size_t kRingBandForMedian = 8;

struct Topology {
  // 2: "links" (a link model), "measured" (which bandwidth entries were measured, the others
  // being inferred from the links) and matrices that may be omitted when "links" is present.
  // Schema 1 documents load as schema 2 with every bandwidth value measured: no links, no
  // measured list (schema 1 had neither; a schema 1 document's "links" or "measured", unknown
  // fields then, are ignored). Writers write kSchemaVersion only.
  static constexpr int kSchemaVersion = 2;
  static constexpr int kOldestSchemaVersion = 1;  // the oldest that still loads

  std::vector<Host> hosts;
  SquareMatrix<std::optional<double>> bandwidthMbps;
  SquareMatrix<std::optional<LatencyStats>> latencyUs;
  ProbeSettings probe;
  std::string
      time;  // RFC 3339 UTC time of the measurement (parseUtcTime); may be empty for fixtures
  int64_t version = 0;                  // monotonic per agent state; 0 = unversioned
  std::vector<HierarchyLevel> groups;   // optional; with `links`, the levels it refers to
  std::vector<SharedLink> sharedLinks;  // optional
  // Schema 2. When `links` is set, `groups` holds the levels it refers to, and the matrices may
  // be empty (0 x 0: a probe of more than kDenseMaxHosts hosts); otherwise they are N x N.
  std::optional<TopologyLinks> links;
  // Directed pairs (sender, receiver) whose bandwidth value was measured alone on its path; the
  // other values of bandwidthMbps were inferred from `links`. Empty with `links` unset means
  // every value present was measured (schema 1); non-empty only with `links` (the parser
  // refuses it otherwise). Distinct pairs, sender != receiver, in the probe's order.
  std::vector<std::pair<int, int>> measured;
  // Schema 2, optional: rings measured as a collective runs them ("rings").
  std::vector<RingCheck> rings;

  size_t size() const { return hosts.size(); }
  // Whether the matrices are N x N (always, unless `links` stands in for them).
  bool hasMatrices() const { return bandwidthMbps.size() == hosts.size(); }
  // The single-flow rate of a -> b by the link model (the narrowest link on the path, levels
  // from `groups`); nullopt without `links`, and for a == b (no path; the diagonal is null).
  // O(levels) per call: the first call indexes host -> group per level (O(N)); later calls reuse
  // the index after checking, in O(levels), that `groups` still lists a and b where it says, and
  // index again when not (so edits to hosts or groups between calls are always seen).
  // Throws InvalidInput when `links` does not fit the hosts and groups (a writer's bug: parsed
  // topologies always fit) and InternalError for a host index out of range.
  std::optional<double> pathMbps(int a, int b) const;
  // The one-way latency of a -> b by the link model: both host links and, twice, each level's
  // uplink latency below the lowest common group (tiers of unknown latency, 0, add nothing).
  // nullopt as for pathMbps.
  std::optional<double> pathLatencyUs(int a, int b) const;
  // Index of a host by name, or -1.
  int indexOf(std::string_view name) const;
  // An empty topology of `hosts` with all measurements missing.
  static Topology empty(std::vector<Host> hosts);

  // Validating parsers: throw InvalidInput naming `source`, the JSON path and what was expected.
  static Topology fromJson(const Json& doc, std::string_view source);
  static Topology parse(std::string_view text, std::string_view source);
  static Topology load(const std::string& path);

  Json toJson() const;
  std::string dump() const;                  // pretty JSON text with a trailing newline
  void save(const std::string& path) const;  // atomic
  // SHA-256 of the canonical JSON (used as a plan's source reference): contentHashOf(toJson().dump()).
  std::string contentHash() const;

  bool operator==(const Topology&) const = default;

 private:
  // Indexes derived from the content: caches, not content (equal whatever they hold; copied with
  // the topology, checked against it at each use and rebuilt when they no longer fit it).
  template <typename T>
  struct Cache {
    mutable std::atomic<std::shared_ptr<const T>> index;
    Cache() = default;
    Cache(const Cache& o) : index(o.index.load()) {}
    Cache& operator=(const Cache& o) {
      index.store(o.index.load());
      return *this;
    }
    bool operator==(const Cache&) const { return true; }
  };
  // pathMbps()'s index of the groups, current for hosts a and b (built anew when not).
  struct PathIndex;
  std::shared_ptr<const PathIndex> pathIndex(int a, int b) const;
  Cache<PathIndex> pathCache_;
  // indexOf()'s host names (a lookup is checked against hosts[]; a miss rebuilds it).
  struct NameIndex;
  Cache<NameIndex> nameCache_;
};

// contentHash() of the topology whose toJson().dump() is `canonicalJson`, for a caller that has
// that text already (the store writes it too).
std::string contentHashOf(std::string_view canonicalJson);

// Shared by topology and plan parsers.
// "YYYY-MM-DDTHH:MM:SS[.fraction]Z" (RFC 3339 in UTC, as rankmapd writes it, years 1970..2200)
// as a time point; nullopt for anything else.
std::optional<std::chrono::system_clock::time_point> parseUtcTime(std::string_view text);
// Now, as parseUtcTime reads it, with milliseconds: "2024-05-01T12:00:00.123Z".
std::string utcNow();

std::vector<HierarchyLevel> parseHierarchy(const JsonReader& r,
                                           const std::vector<std::string>& hostNames);
Json hierarchyToJson(const std::vector<HierarchyLevel>& levels);

}  // namespace rankmap
