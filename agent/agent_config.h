// rankmapd's configuration: a JSON file (comments allowed, see configs/rankmapd.json) plus
// command-line overrides. Parsed once at start-up into an immutable AgentConfig.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "probe/agent_fleet.h"
#include "probe/measure.h"
#include "probe/round.h"
#include "probe/socket.h"

namespace rankmap::agent {

// How a probe round measures (shared by the daemon and `rankmap probe` coordinating itself); the
// round itself is probe/round.h.
// The agent's "probe" settings: the round's own (probe/round.h), its control requests'
// (probe/agent_fleet.h) and the round's deadline.
struct ProbeOptions {
  probe::RoundOptions round;
  probe::AgentFleetOptions fleet;
  std::chrono::milliseconds roundTimeout{300000};
};

// Keys of the all-pairs probe that the structure-first probe no longer has: accepted in
// configuration files and requests so that old files keep working, ignored with a warning.
inline constexpr const char* kRetiredProbeKeys[] = {
    "bidirectional", "contention", "contention_trials", "discovery_ms", "remeasure",
    "remeasure_passes"};

// Keys of the sampling light check that the incremental one (probe/recheck.h) no longer has:
// accepted and ignored with a warning, like kRetiredProbeKeys.
inline constexpr const char* kRetiredReprobeKeys[] = {"sample_rounds"};

struct ReprobeOptions {
  std::chrono::milliseconds interval{0};  // 0 = no periodic re-probe
  double jitter = 0.1;                    // +- fraction of the interval
  double changeThreshold = 0.25;          // relative change that triggers a re-probe
  double publishThreshold = 0.15;         // ... and that a new topology must show to replace
  // While engine ranks report steady job traffic, the light check waits up to this long after
  // the last active one (agent/daemon.h, "Passive hold"); 0 = check at every interval.
  std::chrono::milliseconds passiveHold{1800000};
};

// The port of `metrics_listen` when it names none (the API's 7410 and the probes' 7411 next).
inline constexpr uint16_t kDefaultMetricsPort = 7412;

struct AgentConfig {
  std::string name;  // this agent in the hosts file; empty = hostname
  probe::Endpoint listen{"127.0.0.1", 7410};
  probe::Endpoint probeListen{"0.0.0.0", probe::kDefaultProbePort};
  // A second listener that serves GET /metrics alone, without the token, for a Prometheus that
  // cannot reach the API's loopback address (a Kubernetes pod scraping the node): nullopt = none.
  std::optional<probe::Endpoint> metricsListen;
  std::string hostsFile;
  // How often the hosts file is looked at (one stat) and read again when it changed, as on
  // SIGHUP; 0 = only on SIGHUP. A Kubernetes ConfigMap or a file the cluster rewrites
  // (deploy/kubernetes) so reaches the agent without a restart.
  std::chrono::milliseconds hostsWatch{10000};
  std::string stateDir = "/var/lib/rankmapd";
  std::string tokenFile;
  std::string keyFile;
  std::string coordinator;  // empty = the first live host of the hosts file
  // A declared placement (reorder/prior.h) that GET /v1/plan compares with the measured groups
  // and records in its plans; empty = none. Label keys, comma-separated, top first, for node
  // labels (empty = the known families).
  std::string priorFile;
  std::string priorLabels;
  ProbeOptions probe;
  ReprobeOptions reprobe;
  size_t maxBodyBytes = 1 << 20;
  // A request must arrive whole within httpTimeout, and each write of an answer complete within
  // it; at most maxConnections HTTP connections at once (agent/api_server.h).
  std::chrono::milliseconds httpTimeout{10000};
  size_t maxConnections = 256;

  // Parses a configuration document; throws InvalidInput naming `source`, the key and what was
  // expected (unknown keys are errors: they are usually typos).
  static AgentConfig fromJson(const Json& doc, std::string_view source);
  // Reads FILE (JSON with // comments).
  static AgentConfig load(const std::string& path);
  Json toJson() const;
};

// Applies the "probe" section of a configuration (also used for POST /v1/probe options).
void applyProbeOptions(const JsonReader& r, ProbeOptions& p);
Json probeOptionsToJson(const ProbeOptions& p);

}  // namespace rankmap::agent
