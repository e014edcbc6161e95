// rankmapd's configuration: a JSON file (comments allowed, see configs/rankmapd.json) plus
// command-line overrides. Parsed once at start-up into an immutable AgentConfig.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "probe/measure.h"
#include "probe/socket.h"

namespace rankmap::agent {

// How a probe round measures (shared by the daemon and `rankmap probe` coordinating itself).
struct ProbeOptions {
  probe::LatencyOptions latency;
  probe::BandwidthOptions bandwidth;
  bool bandwidthEnabled = true;
  // Both directions of a pair at once (halves the time; the reverse ACKs share the links).
  bool bidirectional = false;
  // Run the contention probe (shared-uplink discovery) after the round-robin rounds.
  bool contention = false;
  int contentionTrials = 0;  // 0 = 2 (N - 1)
  // Window of the round-robin (discovery) transfers; 0 = bandwidth.maxMs. Flows that reach
  // their single-flow rate there are final; the others are measured again with the full window.
  int64_t discoveryMs = 100;
  // Re-measure flows that ran slower than the inferred model says they would alone, in up to
  // this many passes.
  bool remeasure = true;
  int remeasurePasses = 2;
  size_t maxParallelFlows = 4;  // per re-measurement slot; 0 = no limit
  std::chrono::milliseconds connectTimeout{2000};
  std::chrono::milliseconds taskSlack{3000};
  std::chrono::milliseconds roundTimeout{300000};
};

struct ReprobeOptions {
  std::chrono::milliseconds interval{0};  // 0 = no periodic re-probe
  double jitter = 0.1;                    // +- fraction of the interval
  int sampleRounds = 2;                   // round-robin rounds measured by a light check
  double changeThreshold = 0.25;          // relative change that triggers a full round
  double publishThreshold = 0.15;         // ... and that a new topology must show to replace
};

struct AgentConfig {
  std::string name;  // this agent in the hosts file; empty = hostname
  probe::Endpoint listen{"127.0.0.1", 7410};
  probe::Endpoint probeListen{"0.0.0.0", probe::kDefaultProbePort};
  std::string hostsFile;
  std::string stateDir = "/var/lib/rankmapd";
  std::string tokenFile;
  std::string keyFile;
  std::string coordinator;  // empty = the first live host of the hosts file
  ProbeOptions probe;
  ReprobeOptions reprobe;
  size_t maxBodyBytes = 1 << 20;
  std::chrono::milliseconds httpTimeout{10000};

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

// Reads a secret file (token or key): trimmed, at least `minBytes`. InvalidInput otherwise.
std::string readSecretFile(const std::string& path, size_t minBytes, std::string_view what);

// This machine's host name (gethostname).
std::string localHostName();

}  // namespace rankmap::agent
