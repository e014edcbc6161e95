// rankmapd: the per-VM agent. Owns the store, the probe server, the HTTP API and the periodic
// re-probe, and runs probe rounds when it is the coordinator.
//
// Threads: the probe server's (probe/server.h), the HTTP server's pool, one round thread at a
// time (a round started over HTTP or by the re-probe loop), and the re-probe loop. All public
// methods are thread-safe. stop() cancels a running round at its next step, stops the servers
// and joins every thread.
//
// Coordinator: the configured `coordinator`, or else the first host of the hosts file that
// answers a "hello" (so when it dies, the next one takes over at its next re-probe). Any agent
// asked over HTTP to probe runs that round itself. After a round, the coordinator stores the
// topology as a new version and pushes it to every live agent, so that every agent's
// GET /v1/topology answers locally.
//
// Periodic re-probe (reprobe.interval > 0, with +-jitter): a light check of the current topology
// (probe::runRecheck over the agents, probe/recheck.h): liveness, one flow per host inside its
// group and a load across every uplink, compared with the topology's link model. A confirmed change
// beyond reprobe.change_threshold confined to a few groups starts a group re-probe (round kind
// "repair": just those groups' links measured again and patched into the topology); any other
// change (hosts dead, moved or new, many groups) starts a full round. Either topology replaces
// the current one only if at least one pair differs by more than reprobe.publish_threshold
// (otherwise the old version stays). Two thresholds give the hysteresis: small drifts neither
// trigger rounds nor flip versions back and forth.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "agent/agent_config.h"
#include "agent/http_api.h"
#include "agent/metrics.h"
#include "agent/passive.h"
#include "agent/probe_service.h"
#include "agent/store.h"
#include "common/files.h"
#include "probe/agent_fleet.h"
#include "probe/recheck.h"
#include "probe/round.h"
#include "probe/server.h"
#include "reorder/prior.h"

namespace rankmap::agent {

class ApiServer;

// What a round knew of the job's traffic when it started (Daemon::finishRound).
struct JobTraffic {
  bool under = false;         // the job's traffic was fresh (the last passive hold saw it)
  bool hostsInPlace = false;  // the light check before the round found every host in its group
  std::set<std::string> slowSenders;  // the senders the job's traffic named slow (slowSenders)
};

class Daemon {
 public:
  // Loads the key, token and hosts files and opens the store. Throws InvalidInput (bad files)
  // or IoError (state dir) naming what is wrong. `measure`: empty for every rankmapd; the
  // hollow agents' simulated measurement (ProbeService::Measure).
  explicit Daemon(AgentConfig cfg, ProbeService::Measure measure = {});
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Binds the probe port and the HTTP address (SystemError if taken) and starts the threads.
  void start();
  void stop();
  // Blocks until stop() or requestStop().
  void wait();
  void requestStop();

  uint16_t httpPort() const { return api_.port; }
  // The metrics_listen port; 0 when not configured.
  uint16_t metricsPort() const { return metricsHttp_.port; }
  uint16_t probePort() const;
  const std::string& name() const { return name_; }
  const AgentConfig& config() const { return cfg_; }
  // The declared placement of the configuration ("prior"), read once at start; and a key part
  // naming its content, so that plans cached with another prior are not served.
  const std::optional<reorder::DeclaredPlacement>& prior() const { return prior_; }
  const std::string& priorKey() const { return priorKey_; }
  Store& store() { return *store_; }
  Metrics& metrics() { return metrics_; }

  // Starts a full round on the round thread. `hosts` replaces the configured list for this
  // round. Returns the round id, or nullopt with `busyId` set when one is already running.
  struct StartResult {
    std::optional<int64_t> id;
    std::optional<int64_t> busyId;
  };
  StartResult startRound(std::optional<std::vector<Host>> hosts, std::optional<ProbeOptions> opts,
                         const std::string& reason);
  // Status of a round: the live one with progress, or its stored record.
  std::optional<Json> roundStatus(int64_t id);
  // Waits until round `id` is no longer running or `d` passes; true if it finished.
  bool waitRound(int64_t id, Deadline d);
  // Liveness: cheap, answered whatever the state.
  Json health();
  // Readiness: {"ready": bool, "reasons": [...]}; not ready while there is no topology, the
  // last finished probe round failed, or the store cannot be written.
  Json readiness();
  // Prometheus text: the metrics plus the probe server's counters.
  std::string renderMetrics();
  // The hosts list (hosts file) as it stands now: SIGHUP, or a change of the file seen by the
  // hosts watch (hosts_watch), may replace it (reloadHosts).
  std::vector<Host> hosts() const;
  // Reads the hosts file again (rankmapd on SIGHUP, `systemctl reload`, or the hosts watch when
  // the file's identity changed: common/files.h FileIdentity): a valid list replaces
  // the current one, and the next periodic step sees the change and probes the new hosts; a
  // missing or invalid file keeps the current list, with a warning naming the file and the
  // problem. Returns whether the list was replaced.
  bool reloadHosts();

  // Bearer token check, constant time. False when no token is configured.
  bool checkToken(std::string_view presented) const;
  bool hasToken() const { return !token_.empty(); }

  // One re-probe step (what the periodic loop does once); for tests and `kill -USR1`-style use.
  void reprobeOnce();

  // Passive measurement: a report of an engine rank on this host (POST /v1/observations;
  // InvalidInput naming `source` and the field), and this agent's drift view (the probe
  // protocol's "passive" op; with `rebase` the drift it reports is taken as acted on).
  uint64_t addObservations(const Json& report, std::string_view source);
  Json passiveSummary(bool rebase,
                      std::optional<ProbeService::Hooks::ProbedAgo> probed = std::nullopt);

 private:
  void describeMetrics();
  // Runs on the round thread: a full round, or (light) a check against `baseline` that turns
  // into a group re-probe or a full round when it confirms a change.
  void roundMain(int64_t id, std::vector<Host> hosts, ProbeOptions opts, bool light,
                 std::optional<Topology> baseline);
  // Stores the result, publishes the topology if warranted, pushes it, updates metrics. A full
  // round under the job's traffic may keep the baseline's groups (keepGroupsUnderJobTraffic);
  // a full or repair round under it keeps the baseline's host links except the slow senders'
  // links out (keepHostLinksUnderJobTraffic).
  // `seconds`: the round's wall time.
  std::optional<int64_t> finishRound(int64_t id, const std::string& kind, probe::RoundOutcome& r,
                                     double seconds, const std::optional<Topology>& baseline,
                                     const std::vector<Host>& hosts, const JobTraffic& job = {});
  void pushTopology(const Topology& t, const std::vector<Host>& hosts,
                    const std::vector<std::string>& dead);
  bool isCoordinator();
  // Warns when this agent's name is not in `hosts` (read from the hosts file; empty: no file).
  void warnIfNotListed(const std::vector<Host>& hosts) const;
  void reprobeLoop();
  // Every hosts_watch: reloadHosts() when the hosts file's identity differs from the one last
  // read (so a file that stays invalid is warned about once, not at every look).
  void hostsWatchLoop();
  // The passive hold (coordinator): asks every agent for its view of the job traffic. True
  // when the light check is held back: some host's job traffic is fresh, none drifted, and the
  // last active check is younger than reprobe.passive_hold.
  bool holdForPassive();
  // The passive patch (probe/drift.h patchBacklogged) of the latest topology from the job's
  // backlogged sends and every host's send busy fraction, published as a round of kind
  // "passive" when a pair changed by more than reprobe.publish_threshold. True when a version
  // was published.
  bool publishPassivePatch(const std::vector<probe::Backlog>& backlog,
                           const std::map<std::string, double>& sendBusy);

  AgentConfig cfg_;
  std::string name_;
  probe::ProbeKey key_;
  std::string token_;
  mutable std::mutex hostsMu_;  // guards hosts_: read by every thread, replaced by reloadHosts
  std::vector<Host> hosts_;
  FileIdentity hostsSeen_;  // the hosts file as last read (under hostsMu_)
  std::optional<reorder::DeclaredPlacement> prior_;
  std::string priorKey_;
  // rankmap_last_successful_round_timestamp_seconds: now.
  void markRoundSucceeded();
  Fd stateLock_;  // flock on STATE_DIR/rankmapd.lock: one agent per state dir; outlives store_
  std::unique_ptr<Store> store_;
  Metrics metrics_;
  PassiveLedger passive_;
  // Whether the last passive hold found fresh job traffic on some host (the light check that
  // follows runs under it).
  std::atomic<bool> jobTraffic_{false};
  // The senders that the last passive hold found slow (slowSenders; under mu_).
  std::set<std::string> jobSlowSenders_;
  // When the coordinator last ran an active light check (or started; for the passive hold).
  std::chrono::steady_clock::time_point lastActiveCheck_ = std::chrono::steady_clock::now();
  // The span of this agent's last round (any kind that probes): the passive hold names it to
  // every agent, whose job windows that overlap it do not count (agent/passive.h). Set by the
  // round thread as the round ends, before its slot (runningId_) is freed; under probeSpanMu_.
  std::mutex probeSpanMu_;
  std::optional<
      std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>>
      lastProbe_;
  ProbeService::Measure measure_;
  std::unique_ptr<ProbeService> service_;
  std::unique_ptr<probe::ProbeServer> probeServer_;
  // One HTTP server with its listen thread: the API (cfg_.listen), and /metrics alone on
  // cfg_.metricsListen when set.
  struct HttpListener {
    std::unique_ptr<ApiServer> server;
    std::thread thread;
    uint16_t port = 0;
  };
  // Binds `l` to `at` with `which` routes and starts its listen loop; throws SystemError naming
  // `what` when it cannot listen.
  void startHttp(HttpListener& l, const probe::Endpoint& at, ApiRoutes which,
                 std::string_view what);
  static void stopHttp(HttpListener& l);
  HttpListener api_, metricsHttp_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool started_ = false;
  std::atomic<bool> cancel_{false};
  std::thread roundThread_;
  std::optional<int64_t> runningId_;
  probe::RoundProgress progress_;
  std::string runningKind_;
  std::thread reprobeThread_;
  std::thread hostsWatchThread_;
};

}  // namespace rankmap::agent
