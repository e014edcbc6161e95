// Distributing a published topology from the coordinator to every agent of the round.
//
// A topology.json of N hosts with its matrices is O(N^2) bytes (64 hosts: ~0.5 MB), so sending
// one copy to each of N-1 agents from the coordinator puts O(N^3) bytes through its host link
// and its rack's uplink: at 64 emulated VMs (100 / 25 Mbit/s) that took longer than the push's
// deadline for a third of the agents. Instead the push follows the groups the round found: the
// coordinator sends one copy to one agent of each other innermost group (a relay) with the list
// of that group's other members, and the relay forwards it inside its group; the coordinator's
// own group gets it directly. With no groups, chunks of ~sqrt(N) hosts in list order play the
// groups' part. Copies over the coordinator's links fall from N-1 to (groups - 1) + its group.
//
// Failures: a relay that does not answer, and every member a relay could not reach, get the
// topology directly from the coordinator in a second wave, and those it could not reach for a
// cause that may pass again in up to kPushRetryWaves more; what is still not reached is
// reported by name. Pushing is idempotent (an agent keeps the first copy of a version).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/json.h"
#include "common/topology.h"
#include "probe/wire.h"

namespace rankmap::agent {

// One request of the first wave: the topology to `to`, which forwards it to `relay` (empty:
// `to` only).
struct PushRoute {
  Host to;
  std::vector<Host> relay;
};

// The routes to every host of `hosts` except `self` (by name): groups from the topology's first
// level where it has one (hosts it does not place go direct), else chunks of ceil(sqrt(N)) hosts
// in `hosts` order; a group larger than ceil(sqrt(N)) hosts is relayed in chunks of that size,
// and so are the direct hosts when they are more. Every host other than `self` appears exactly
// once, as a `to` or in a relay.
std::vector<PushRoute> pushRoutes(const Topology& t, const std::vector<Host>& hosts,
                                  std::string_view self);

struct PushReport {
  size_t agents = 0;   // hosts the push was for
  size_t reached = 0;  // that stored it or already had it
  size_t relays = 0;   // first-wave requests that carried a relay list
  size_t direct = 0;   // direct requests (relays that failed, members they missed), retries too
  size_t retried = 0;  // of them, requests to agents a direct request had failed (retry waves)
  std::vector<std::pair<std::string, std::string>> failed;  // host name, why
};

// How long a push may take, from now: the first wave kPushRelayWave plus what the busiest
// sender of it (the coordinator, or a relay) needs to send its copies of `bytes` at
// kPushFloorMbps; the direct wave kPushDirectWave more, plus what the coordinator needs to send
// a copy to every agent of `routes` at that rate. Fixed deadlines sized for 64 agents cut a push
// to a thousand short (1020 copies of 185 KB: tests/bench/hollow_agents).
inline constexpr auto kPushRelayWave = std::chrono::seconds(8);
inline constexpr auto kPushDirectWave = std::chrono::seconds(4);
inline constexpr double kPushFloorMbps = 100;
// Agents a direct request failed for a cause that may pass are asked again after this pause, at
// most this many times, while the push's deadline leaves twice the pause (pushTopology).
inline constexpr auto kPushRetryPause = std::chrono::milliseconds(1000);
inline constexpr int kPushRetryWaves = 3;
struct PushDeadlines {
  Deadline relayWave, end;
};
PushDeadlines pushDeadlines(const std::vector<PushRoute>& routes, size_t bytes);

// Pushes `document` (the topology's JSON text, made once by the caller, who needs its size too)
// along `routes`: the first wave until `relayWave`, the second (direct) until `end`. Blocks the
// calling thread until both waves have their outcomes; starts no thread (probe::requestAll).
PushReport pushTopology(std::shared_ptr<const std::string> document,
                        const std::vector<PushRoute>& routes,
                        const probe::ProbeKey& key, const std::string& self, Deadline relayWave,
                        Deadline end);

// The relay's half, run by the agent that received a push with a "relay" list (`list`, read
// from the request as `source` describes it): forwards `topology` to each listed host before
// `d`. Returns the reply's "relay" object: {"sent": n, "failed": [{"name", "error"}...]}.
// InvalidInput, naming the field, for a list that is not an array of at most kMaxHosts
// {"name", "address"} objects that a hosts file would accept (probe::validateHosts).
Json relayTopology(const Json& topology, const Json& list, std::string_view source,
                   const probe::ProbeKey& key, const std::string& self, Deadline d);

}  // namespace rankmap::agent
