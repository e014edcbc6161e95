#include "agent/daemon.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <random>
#include <sstream>
#include <set>

#include "agent/api_server.h"
#include "agent/http_api.h"
#include "agent/topology_push.h"
#include "common/build_config.h"
#include "common/crypto.h"
#include "common/files.h"
#include "common/json.h"
#include "common/log.h"
#include "probe/drift.h"
#include "probe/fanout.h"
#include "probe/hosts.h"

namespace rankmap::agent {
namespace {

constexpr size_t kMinTokenBytes = 16;
// A host's job traffic counts as running when a rank reported within this (the engine reports
// every RANKMAP_PASSIVE_REPORT, 5 s by default).
constexpr auto kPassiveFresh = std::chrono::seconds(20);

// CPU time (user and system) of the calling thread.
double threadCpuSeconds() {
  rusage u{};
  if (getrusage(RUSAGE_THREAD, &u) != 0) return 0;
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

std::set<std::string> namesOf(const std::vector<Host>& hosts) {
  std::set<std::string> s;
  for (const auto& h : hosts) s.insert(h.name);
  return s;
}

}  // namespace

namespace {

// Takes STATE_DIR/rankmapd.lock (creating the dir), held while the returned Fd is open, with this
// process's id in it. A second agent on the same state dir would mark the first's running rounds
// failed and interleave its writes: refused, naming the holder.
Fd lockStateDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw IoError(fmt::format("state dir {}: cannot create: {}", dir, std::strerror(errno)));
  const std::string path = dir + "/rankmapd.lock";
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd.valid())
    throw IoError(fmt::format("state dir {}: cannot open {}: {}", dir, path, std::strerror(errno)));
  if (::flock(fd.fd(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK)
      throw IoError(fmt::format("state dir {}: cannot lock {}: {}", dir, path, std::strerror(errno)));
    char pid[32] = {};
    ssize_t n = ::pread(fd.fd(), pid, sizeof(pid) - 1, 0);
    std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    throw InvalidInput(fmt::format(
        "state dir {}: in use by another rankmapd{}: one agent per state dir (give this one "
        "--state-dir)",
        dir, holder.empty() ? "" : fmt::format(" (pid {})", holder)));
  }
  std::string me = fmt::format("{}\n", ::getpid());
  if (::ftruncate(fd.fd(), 0) != 0 || ::pwrite(fd.fd(), me.data(), me.size(), 0) < 0)
    RANKMAP_WARN(Agent, "state dir {}: cannot write this agent's pid to {}: {}", dir, path,
                 std::strerror(errno));
  return fd;
}

// Whether `host` is a loopback address or name (127.0.0.0/8, ::1, localhost).
bool loopbackHost(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

}  // namespace

Daemon::Daemon(AgentConfig cfg, ProbeService::Measure measure)
    : cfg_(std::move(cfg)),
      name_(cfg_.name.empty() ? localHostName() : cfg_.name),
      passive_(name_),
      measure_(std::move(measure)) {
  if (cfg_.keyFile.empty())
    throw InvalidInput(
        "no probe key: rankmapd needs --key-file (or key_file in the config), "
        "the key shared by the job's agents");
  key_ = probe::ProbeKey::load(cfg_.keyFile);
  if (!cfg_.tokenFile.empty())
    token_ = readSecretFile(cfg_.tokenFile, kMinTokenBytes, "token file");
  if (!cfg_.hostsFile.empty()) {
    hostsSeen_ = fileIdentity(cfg_.hostsFile);  // before the read: a change during it is seen
    hosts_ = probe::loadHostsFile(cfg_.hostsFile);
  }
  if (!cfg_.priorFile.empty()) {
    std::string text = readFile(cfg_.priorFile, kMaxJsonBytes);
    prior_ = reorder::parseDeclaredPlacement(
        parseJson(text, cfg_.priorFile), cfg_.priorFile,
        reorder::parseLabelKeys(cfg_.priorLabels, fmt::format("{}: prior_labels", cfg_.priorFile)));
    priorKey_ = "/prior:" + sha256Hex(text).substr(0, 16);
  }
  warnIfNotListed(hosts_);
  stateLock_ = lockStateDir(cfg_.stateDir);
  store_ = std::make_unique<Store>(cfg_.stateDir);
  if (int64_t n = store_->abandonRunningRounds())
    RANKMAP_WARN(Agent,
                 "agent {}: {} round(s) were running when the agent last stopped; marked "
                 "failed",
                 name_, n);
  describeMetrics();
  // A stored document this build cannot load must not keep the agent down: it still probes,
  // stores newer versions and serves the others; the summary metrics start empty.
  try {
    if (auto t = store_->latestTopology()) metrics_.setTopologySummary(*t);
  } catch (const InvalidInput& e) {
    RANKMAP_WARN(Agent, "agent {}: newest stored topology does not load: {}", name_, e.what());
  }
}

Daemon::~Daemon() { stop(); }

void Daemon::describeMetrics() {
  metrics_.describe("rankmap_probe_rounds_total", "counter", "Probe rounds by kind and result");
  metrics_.describe("rankmap_hosts_reloads_total", "counter",
                    "Hosts file changes seen by the hosts watch, by result (replaced: a valid list "
                    "took over; kept: the file was invalid and the list stayed)");
  metrics_.describe("rankmap_probe_round_duration_seconds", "histogram",
                    "Wall time of probe rounds");
  metrics_.describe("rankmap_probe_round_cpu_seconds_total", "counter",
                    "CPU time of the rounds this agent coordinated (the round's thread: its "
                    "requests, inference, store and topology push)");
  metrics_.describe("rankmap_probe_requests_total", "counter",
                    "Control requests sent to agents in rounds this agent coordinated");
  metrics_.describe("rankmap_probe_failures_total", "counter",
                    "Failed probe requests in rounds this agent coordinated, by reason");
  metrics_.describe("rankmap_probe_auth_rejections_total", "counter",
                    "Probe connections rejected by this agent's server, by reason");
  metrics_.describe("rankmap_probe_refused_connections_total", "counter",
                    "Probe connections this agent's server closed unanswered, by reason");
  metrics_.describe("rankmap_probe_tasks_total", "counter",
                    "Measurements this agent ran for a coordinator, by op and result");
  metrics_.describe("rankmap_probe_missing_pairs", "gauge", "Host pairs missing in the last round");
  metrics_.describe("rankmap_probe_dead_hosts", "gauge", "Agents that failed in the last round");
  metrics_.describe("rankmap_probe_degraded_hosts", "gauge",
                    "Hosts whose host link was under a tenth of the median in the last round");
  metrics_.describe("rankmap_topology_version", "gauge", "Latest topology version");
  metrics_.describe("rankmap_topology_hosts", "gauge", "Hosts in the latest topology");
  metrics_.describe("rankmap_topology_shared_links", "gauge", "Shared uplinks found");
  metrics_.describe("rankmap_topology_bandwidth_bytes_per_second", "gauge",
                    "Bandwidth of the latest topology's host pairs by tier (intra/cross group) "
                    "and quantile over the pairs");
  metrics_.describe("rankmap_topology_latency_seconds", "gauge",
                    "Median round trip of the latest topology's host pairs by tier and quantile "
                    "over the pairs");
  metrics_.describe("rankmap_topology_changes_total", "counter", "New topology versions published");
  metrics_.describe("rankmap_light_checks_total", "counter",
                    "Periodic light checks by result (held: steady job traffic, no probe)");
  metrics_.describe("rankmap_passive_reports_total", "counter",
                    "Traffic reports of engine ranks on this host (POST /v1/observations)");
  metrics_.describe("rankmap_passive_bytes_total", "counter",
                    "Bytes of job traffic the engine ranks on this host reported, both ways");
  metrics_.describe("rankmap_passive_series", "gauge",
                    "Fresh (peer, direction) series of job traffic on this host");
  metrics_.describe("rankmap_passive_windows_probed_total", "counter",
                    "Job traffic windows on this host left out of drift and backlog because "
                    "they overlapped the agents' own probing");
  metrics_.describe("rankmap_passive_drifts_total", "counter",
                    "Drifts in the job traffic that started a light check (coordinator)");
  metrics_.describe("rankmap_groups_kept_total", "counter",
                    "Rounds under job traffic that found no groups, groups their own pairs "
                    "contradict, or ran after a light check that found every host in its "
                    "group, and kept the last version's (coordinator)");
  metrics_.describe("rankmap_host_links_kept_total", "counter",
                    "Rounds under job traffic that kept host links read slower than the last "
                    "version, where the job's traffic did not name the sender slow "
                    "(coordinator)");
  metrics_.describe("rankmap_passive_patches_total", "counter",
                    "Topologies patched from the job's backlogged sends (coordinator), by "
                    "result: published, or kept (no pair changed enough)");
  metrics_.describe("rankmap_http_requests_total", "counter", "HTTP requests by status code");
  metrics_.describe("rankmap_http_rejected_connections_total", "counter",
                    "HTTP connections answered before any handler ran (busy, request timeout, "
                    "head limits), by reason");
  metrics_.describe("rankmap_http_open_connections", "gauge",
                    "HTTP connections open now (at most http.max_connections)");
  metrics_.describe("rankmap_build_info", "gauge", "Always 1; the version of this rankmapd");
  metrics_.set("rankmap_build_info", fmt::format("version=\"{}\"", RANKMAP_VERSION), 1);
  metrics_.describe("rankmap_last_successful_round_timestamp_seconds", "gauge",
                    "Unix time at which the last probe round or light check that did not fail "
                    "ended (absent until one has)");
  metrics_.describe("process_cpu_seconds_total", "counter", "User and system CPU time");
  metrics_.describe("process_resident_memory_bytes", "gauge", "Resident memory");
  metrics_.describe("process_virtual_memory_bytes", "gauge", "Virtual memory");
  metrics_.describe("process_open_fds", "gauge", "Open file descriptors");
  metrics_.describe("process_max_fds", "gauge", "The open file descriptor limit");
  metrics_.describe("process_start_time_seconds", "gauge", "Unix time the process started");
}

uint16_t Daemon::probePort() const { return probeServer_ ? probeServer_->port() : 0; }

void Daemon::start() {
  ProbeService::Hooks hooks;
  hooks.topologyVersion = [this]() -> std::optional<int64_t> {
    auto v = store_->topologies(1);
    if (v.empty()) return std::nullopt;
    return v.front().version;
  };
  hooks.passiveSummary = [this](bool rebase, std::optional<ProbeService::Hooks::ProbedAgo> p) {
    return passiveSummary(rebase, p);
  };
  hooks.storeTopology = [this](const Topology& t) {
    bool fresh = store_->putTopology(t);
    if (fresh) {
      // The newest version's record, not its document: parsing it again would double what a
      // push costs every agent.
      auto latest = store_->topologies(1);
      if (!latest.empty() && latest.front().version == t.version) metrics_.setTopologySummary(t);
      RANKMAP_INFO(Agent, "agent {}: stored pushed topology version {}", name_, t.version);
    }
    return fresh;
  };
  service_ = std::make_unique<ProbeService>(key_, name_, std::move(hooks), &metrics_, measure_);
  probe::ProbeServer::Options po;
  po.listen = cfg_.probeListen;
  po.name = name_;
  po.requestTimeout = cfg_.probe.roundTimeout;
  probeServer_ = std::make_unique<probe::ProbeServer>(
      po, key_, [this](const Json& req, const std::string& peer, Deadline d) {
        return service_->handle(req, peer, d);
      });
  probeServer_->start();

  try {
    startHttp(api_, cfg_.listen, ApiRoutes::kAll, "HTTP API");
    if (cfg_.metricsListen)
      startHttp(metricsHttp_, *cfg_.metricsListen, ApiRoutes::kMetricsOnly, "metrics_listen");
  } catch (...) {
    stopHttp(api_);
    probeServer_->stop();
    throw;
  }
  if (!loopbackHost(cfg_.listen.host))
    RANKMAP_WARN(Agent,
                 "agent {}: HTTP API on {}:{}, not loopback: the network can read topologies, "
                 "plans already made and /metrics without the token (writes still need it)",
                 name_, cfg_.listen.host, api_.port);
  RANKMAP_INFO(Agent, "agent {}: HTTP API on {}:{}, probes on {}:{}, {} hosts, state {}{}", name_,
               cfg_.listen.host, api_.port, cfg_.probeListen.host, probePort(), hosts().size(),
               store_->path(),
               cfg_.metricsListen ? fmt::format(", /metrics also on {}:{}",
                                                cfg_.metricsListen->host, metricsHttp_.port)
                                  : "");
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  if (cfg_.reprobe.interval.count() > 0 && !hosts().empty())
    reprobeThread_ = std::thread([this] { reprobeLoop(); });
  if (cfg_.hostsWatch.count() > 0 && !cfg_.hostsFile.empty())
    hostsWatchThread_ = std::thread([this] { hostsWatchLoop(); });
}

void Daemon::requestStop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  cancel_ = true;
  cv_.notify_all();
}

void Daemon::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopping_; });
}

void Daemon::stop() {
  requestStop();
  if (reprobeThread_.joinable()) reprobeThread_.join();
  if (hostsWatchThread_.joinable()) hostsWatchThread_.join();
  if (roundThread_.joinable()) roundThread_.join();
  stopHttp(metricsHttp_);
  stopHttp(api_);
  if (probeServer_) probeServer_->stop();
}

void Daemon::startHttp(HttpListener& l, const probe::Endpoint& at, ApiRoutes which,
                       std::string_view what) {
  ApiServer::Limits limits;
  limits.maxConnections = cfg_.maxConnections;
  limits.requestTimeout = cfg_.httpTimeout;
  limits.writeTimeout = cfg_.httpTimeout;
  limits.maxBodyBytes = cfg_.maxBodyBytes;
  l.server = std::make_unique<ApiServer>(limits);
  installApi(*l.server, *this, which);
  int port = l.server->bindTo(at.host, at.port);
  if (port == 0) {
    l.server.reset();
    throw SystemError(fmt::format("{}: cannot listen on {}", what, at.text()), EADDRINUSE);
  }
  l.port = static_cast<uint16_t>(port);
  ApiServer* server = l.server.get();
  l.thread = std::thread([server] { server->listen_after_bind(); });
  // httplib's stop() does nothing until its listen loop runs, and the loop then runs forever: a
  // Daemon stopped right after start() hung in its destructor. Wait for the loop (bounded).
  for (Deadline running = Deadline::after(std::chrono::seconds(10));
       !server->is_running() && !running.expired();)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!server->is_running())
    RANKMAP_WARN(Agent, "agent {}: the {} listen loop did not start within 10 s", name_, what);
}

void Daemon::stopHttp(HttpListener& l) {
  if (!l.server) return;
  l.server->stopServing();
  if (l.thread.joinable()) l.thread.join();
}

bool Daemon::checkToken(std::string_view presented) const {
  if (token_.empty()) return false;
  // Hash both so that the comparison takes the same time whatever the lengths.
  return constantTimeEqual(sha256Hex(presented), sha256Hex(token_));
}

Daemon::StartResult Daemon::startRound(std::optional<std::vector<Host>> hosts,
                                       std::optional<ProbeOptions> opts,
                                       const std::string& reason) {
  std::vector<Host> list = hosts ? std::move(*hosts) : this->hosts();
  if (list.empty())
    throw InvalidInput("no hosts to probe: start rankmapd with --hosts FILE or pass \"hosts\"");
  probe::validateHosts(list, "probe request");
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) throw InvalidInput("agent is stopping");
  if (runningId_) return {std::nullopt, runningId_};
  if (roundThread_.joinable()) roundThread_.join();  // the previous round has finished
  int64_t n = static_cast<int64_t>(list.size());
  int64_t id = store_->beginRound("full", n, n * (n - 1) / 2);
  runningId_ = id;
  runningKind_ = "full";
  progress_ = probe::RoundProgress{"starting", 0, 0, ""};
  cancel_ = false;
  RANKMAP_INFO(Agent, "agent {}: round {} over {} hosts ({})", name_, id, n, reason);
  roundThread_ =
      std::thread([this, id, list = std::move(list), o = opts.value_or(cfg_.probe)]() mutable {
        roundMain(id, std::move(list), std::move(o), false, std::nullopt);
      });
  return {id, std::nullopt};
}

void Daemon::roundMain(int64_t id, std::vector<Host> hosts, ProbeOptions opts, bool light,
                       std::optional<Topology> baseline) {
  const double cpuFrom = threadCpuSeconds();
  // The round's probing: from its start to the end of its last measurement (job windows
  // reported after that, while the round is stored, are the network's again).
  const auto from = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> to;
  auto measured = [&] { to = std::chrono::steady_clock::now(); };
  // Ends the round, however it ends: its span for the passive hold, then the round slot.
  auto done = [&] {
    metrics_.add("rankmap_probe_round_cpu_seconds_total", "", threadCpuSeconds() - cpuFrom);
    {
      std::lock_guard<std::mutex> lock(probeSpanMu_);
      lastProbe_.emplace(from, to.value_or(std::chrono::steady_clock::now()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    runningId_.reset();
    cv_.notify_all();
  };
  try {
    probe::AgentFleet fleet(hosts, key_, name_, opts.fleet);
    std::string what = "probe round";  // names the progress lines: a round or a re-probe
    auto onProgress = [this, &what](const probe::RoundProgress& p) {
      if (!p.detail.empty()) RANKMAP_INFO(Probe, "{}: {}: {}", what, p.phase, p.detail);
      std::lock_guard<std::mutex> lock(mu_);
      progress_ = p;
    };
    // Seconds since `t0`: a round's or a check's wall time for the store.
    auto since = [](std::chrono::steady_clock::time_point t0) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    // Starts round `next` of `kind` on this thread (after the light check's record).
    auto begin = [&](const std::string& kind) {
      int64_t n = static_cast<int64_t>(hosts.size());
      int64_t next = store_->beginRound(kind, n, n * (n - 1) / 2);
      std::lock_guard<std::mutex> lock(mu_);
      runningId_ = next;
      runningKind_ = kind;
      progress_ = probe::RoundProgress{"starting", 0, 0, ""};
      cv_.notify_all();
      return next;
    };
    JobTraffic job;
    job.under = light && jobTraffic_.load();
    if (job.under) {
      std::lock_guard<std::mutex> lock(mu_);
      job.slowSenders = jobSlowSenders_;
    }
    if (light) {
      // A light check against `baseline`; a change confined to a few groups re-probes those
      // groups, any other change turns into a full round.
      const auto checkFrom = std::chrono::steady_clock::now();
      probe::RecheckOptions ro;
      ro.threshold = cfg_.reprobe.changeThreshold;
      probe::RecheckOutcome out = probe::runRecheck(fleet, *baseline, ro, opts.round,
                                                    Deadline::after(opts.roundTimeout), &cancel_);
      measured();
      const probe::RecheckResult& c = out.result;
      job.hostsInPlace = c.hostsInPlace;
      const bool changed = c.verdict != probe::RecheckVerdict::Unchanged;
      store_->addMeasurements(id, measurementRows(out.readings, hosts));
      size_t flows = 0;
      for (const auto& r : out.readings) flows += r.kind == "bandwidth";
      std::vector<std::string> changedFlows;
      for (const auto& f : c.changed)
        changedFlows.push_back(
            fmt::format("{} {:.0f} -> {:.0f} Mbit/s", f.what, f.expectedMbps, f.gotMbps));
      RoundRecord rec;
      rec.id = id;
      rec.status = changed ? "changed" : "unchanged";
      rec.pairsTotal = static_cast<int64_t>(flows);
      rec.seconds = since(checkFrom);
      if (c.verdict == probe::RecheckVerdict::Groups)
        rec.error = fmt::format("changed in {}: {}", fmt::join(c.names, ", "),
                                fmt::join(changedFlows, "; "));
      else if (changed)
        rec.error = fmt::format("full round: {}", c.reason);
      store_->finishRound(rec);
      for (const auto& [why, k] : out.failures)
        metrics_.add("rankmap_probe_failures_total", fmt::format("reason=\"{}\"", why),
                     static_cast<double>(k));
      metrics_.add("rankmap_light_checks_total", fmt::format("result=\"{}\"", rec.status));
      if (rec.status != "failed") markRoundSucceeded();
      metrics_.observe("rankmap_probe_round_duration_seconds", "kind=\"light\"", rec.seconds);
      RANKMAP_INFO(Agent, "agent {}: light check {}: {} flows, {}{}{}", name_, id, flows,
                   probe::recheckVerdictName(c.verdict), rec.error.empty() ? "" : ": ", rec.error);
      if (!changed || cancel_) {
        done();
        return;
      }
      if (c.verdict == probe::RecheckVerdict::Groups) {
        id = begin("repair");
        const auto repairFrom = std::chrono::steady_clock::now();
        what = "group re-probe";
        probe::RoundOutcome r =
            probe::runRepair(fleet, *baseline, c.groups, opts.round,
                             Deadline::after(opts.roundTimeout), onProgress, &cancel_);
        measured();
        if (r.deadHosts.empty() && !r.cancelled) {
          finishRound(id, "repair", r, since(repairFrom), baseline, hosts, job);
          done();
          return;
        }
        RoundRecord failed;
        failed.id = id;
        failed.kind = "repair";
        failed.status = "failed";
        failed.error = r.cancelled ? "cancelled"
                                   : fmt::format("no answer from: {}; a full round follows",
                                                 fmt::join(r.deadHosts, ", "));
        store_->finishRound(failed);
        metrics_.add("rankmap_probe_rounds_total", "kind=\"repair\",result=\"failed\"");
        if (cancel_) {
          done();
          return;
        }
      }
      id = begin("full");
    }
    const auto roundFrom = std::chrono::steady_clock::now();
    what = "probe round";
    probe::RoundOutcome r = probe::runRound(fleet, opts.round, Deadline::after(opts.roundTimeout),
                                            onProgress, &cancel_);
    measured();
    finishRound(id, "full", r, since(roundFrom), baseline, hosts, job);
  } catch (const std::exception& e) {
    measured();  // it may have failed while measuring
    RANKMAP_ERROR(Agent, "agent {}: round {} failed: {}", name_, id, e.what());
    try {
      RoundRecord rec;
      rec.id = id;
      rec.status = "failed";
      rec.error = e.what();
      store_->finishRound(rec);
    } catch (const std::exception& e2) {
      RANKMAP_ERROR(Agent, "agent {}: cannot record round {}: {}", name_, id, e2.what());
    }
    metrics_.add("rankmap_probe_rounds_total", "kind=\"full\",result=\"failed\"");
  }
  done();
}

std::optional<int64_t> Daemon::finishRound(int64_t id, const std::string& kind,
                                           probe::RoundOutcome& r, double seconds,
                                           const std::optional<Topology>& baseline,
                                           const std::vector<Host>& hosts, const JobTraffic& job) {
  const probe::RoundSummary sum = probe::summarize(r);
  if (kind != "passive") RANKMAP_INFO(Probe, "{}, {:.2f} s", sum.text, seconds);
  store_->addMeasurements(id, measurementRows(r.readings, hosts));
  RoundRecord rec;
  rec.id = id;
  rec.kind = kind;
  rec.status = sum.status;
  rec.pairsTotal = static_cast<int64_t>(sum.pairsTotal);
  rec.pairsMissing = static_cast<int64_t>(sum.pairsMissing);
  rec.seconds = seconds;
  if (!r.deadHosts.empty())
    rec.error = fmt::format("no answer from: {}", fmt::join(r.deadHosts, ", "));
  if (!r.degradedHosts.empty())
    rec.error += fmt::format("{}degraded host links: {}", rec.error.empty() ? "" : "; ",
                             fmt::join(r.degradedHosts, ", "));
  bool publish = rec.status != "failed";
  // Rings measured under the job's traffic read its load, not the network: a plan must not be
  // judged by them (reorder/planner.h, ring checks).
  if (job.under) r.topology.rings.clear();
  if (publish && job.under && baseline) {
    std::string note;
    // A repair re-probed only the changed groups and placed their hosts itself.
    if (kind == "full" &&
        probe::keepGroupsUnderJobTraffic(r.topology, *baseline, job.hostsInPlace, note)) {
      metrics_.add("rankmap_groups_kept_total", "");
      rec.error += fmt::format("{}{}", rec.error.empty() ? "" : "; ", note);
      RANKMAP_INFO(Agent, "agent {}: round {}: {}", name_, id, note);
    }
    if (probe::keepHostLinksUnderJobTraffic(r.topology, *baseline, job.slowSenders, note)) {
      metrics_.add("rankmap_host_links_kept_total", "");
      rec.error += fmt::format("{}{}", rec.error.empty() ? "" : "; ", note);
      RANKMAP_INFO(Agent, "agent {}: round {}: {}", name_, id, note);
    }
  }
  if (publish && baseline && namesOf(baseline->hosts) == namesOf(r.topology.hosts)) {
    size_t changed = probe::changedPairs(*baseline, r.topology, cfg_.reprobe.publishThreshold);
    if (changed == 0) {
      publish = false;
      rec.error += fmt::format("{}no pair changed by more than {:.0f}%; kept topology version {}",
                               rec.error.empty() ? "" : "; ", cfg_.reprobe.publishThreshold * 100,
                               baseline->version);
    }
  }
  if (publish) {
    rec.topologyVersion = store_->addTopology(r.topology, id);
    metrics_.setTopologySummary(r.topology);
    metrics_.add("rankmap_topology_changes_total", "");
    RANKMAP_INFO(Agent, "agent {}: round {} published topology version {}", name_, id,
                 *rec.topologyVersion);
  }
  store_->finishRound(rec);
  store_->prune({});
  if (rec.status != "failed") markRoundSucceeded();
  metrics_.add("rankmap_probe_rounds_total",
               fmt::format("kind=\"{}\",result=\"{}\"", kind, rec.status));
  metrics_.observe("rankmap_probe_round_duration_seconds", fmt::format("kind=\"{}\"", kind),
                   seconds);
  metrics_.add("rankmap_probe_requests_total", "", static_cast<double>(r.cost.requests));
  for (const auto& [why, k] : r.failures)
    metrics_.add("rankmap_probe_failures_total", fmt::format("reason=\"{}\"", why),
                 static_cast<double>(k));
  metrics_.set("rankmap_probe_missing_pairs", "", static_cast<double>(sum.pairsMissing));
  metrics_.set("rankmap_probe_dead_hosts", "", static_cast<double>(r.deadHosts.size()));
  metrics_.set("rankmap_probe_degraded_hosts", "", static_cast<double>(r.degradedHosts.size()));
  if (publish) pushTopology(r.topology, hosts, r.deadHosts);
  return rec.topologyVersion;
}

void Daemon::pushTopology(const Topology& t, const std::vector<Host>& hosts,
                          const std::vector<std::string>& dead) {
  auto doc = std::make_shared<const std::string>(t.toJson().dump());
  size_t bytes = doc->size();
  if (bytes > probe::kMaxDocumentPayload - 4096) {
    RANKMAP_WARN(Agent,
                 "agent {}: topology version {} is {} bytes; too large to push, agents "
                 "must ask the coordinator",
                 name_, t.version, bytes);
    return;
  }
  // Hosts the round found dead are not waited for: they get the next version, or ask.
  std::vector<Host> to;
  for (const auto& h : hosts)
    if (std::find(dead.begin(), dead.end(), h.name) == dead.end()) to.push_back(h);
  auto t0 = std::chrono::steady_clock::now();
  // The round ends after the push (agent/topology_push.h, pushDeadlines).
  const auto routes = pushRoutes(t, to, name_);
  const auto deadlines = pushDeadlines(routes, bytes);
  auto rep = agent::pushTopology(doc, routes, key_, name_, deadlines.relayWave, deadlines.end);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string failed;
  for (const auto& [host, why] : rep.failed) failed += fmt::format("; {}: {}", host, why);
  if (rep.failed.empty())
    RANKMAP_INFO(Agent,
                 "agent {}: topology version {} ({} KiB) pushed to {} of {} agents in {:.2f} s "
                 "({} through relays, {} direct, {} of them asked again)",
                 name_, t.version, bytes / 1024, rep.reached, rep.agents, secs, rep.relays,
                 rep.direct, rep.retried);
  else
    RANKMAP_WARN(Agent,
                 "agent {}: topology version {} pushed to {} of {} agents in {:.2f} s; not "
                 "reached{}",
                 name_, t.version, rep.reached, rep.agents, secs, failed);
}

std::optional<Json> Daemon::roundStatus(int64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (runningId_ && *runningId_ == id) {
      return Json{{"id", id},
                  {"kind", runningKind_},
                  {"status", "running"},
                  {"phase", progress_.phase},
                  {"done", progress_.done},
                  {"total", progress_.total},
                  {"detail", progress_.detail}};
    }
  }
  auto r = store_->round(id);
  if (!r) return std::nullopt;
  Json j = r->toJson();
  j["phase"] = "done";
  return j;
}

bool Daemon::waitRound(int64_t id, Deadline d) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, d.when(), [&] { return !runningId_ || *runningId_ != id; });
}

Json Daemon::health() {
  Json j = {{"status", "ok"},
            {"name", name_},
            {"version", RANKMAP_VERSION},
            {"hosts", hosts().size()},
            {"store", store_->path()}};
  auto t = store_->topologies(1);
  j["topology_version"] = t.empty() ? Json(nullptr) : Json(t.front().version);
  j["store_recovered_from"] =
      store_->recoveredFrom() ? Json(*store_->recoveredFrom()) : Json(nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  j["round"] = runningId_
                   ? Json{{"id", *runningId_}, {"kind", runningKind_}, {"phase", progress_.phase}}
                   : Json(nullptr);
  return j;
}

Json Daemon::readiness() {
  Json reasons = Json::array();
  auto t = store_->topologies(1);
  if (t.empty()) reasons.push_back("no topology yet: no probe round has finished and none was pushed");
  for (const auto& r : store_->rounds(8)) {
    if (r.status == "running") continue;
    if (r.status == "failed")
      reasons.push_back(fmt::format("the last probe round ({}, {}) failed: {}", r.id,
                                    r.finishedAt, r.error.empty() ? "no reason recorded" : r.error));
    break;
  }
  if (auto why = store_->writeProblem()) reasons.push_back("the store cannot be written: " + *why);
  return Json{{"ready", reasons.empty()},
              {"reasons", reasons},
              {"topology_version", t.empty() ? Json(nullptr) : Json(t.front().version)}};
}

void Daemon::markRoundSucceeded() {
  metrics_.set("rankmap_last_successful_round_timestamp_seconds", "",
               std::chrono::duration<double>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count());
}

namespace {

// The process_* series Prometheus' client libraries export, from /proc/self (Linux).
void setProcessMetrics(Metrics& m) {
  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  static const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  std::string stat;
  try {
    stat = readFile("/proc/self/stat", 4096);
  } catch (const std::exception&) {
    return;
  }
  // Fields after the command name in parentheses: state is field 3; utime 14, stime 15,
  // starttime 22, vsize 23, rss 24 (pages).
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(in), {}};
  if (f.size() < 22) return;
  auto field = [&](size_t n) { return std::stod(f[n - 3]); };
  m.set("process_cpu_seconds_total", "", (field(14) + field(15)) / ticks);
  m.set("process_virtual_memory_bytes", "", field(23));
  m.set("process_resident_memory_bytes", "", field(24) * page);
  double bootTime = 0;
  try {
    std::istringstream sys(readFile("/proc/stat", 1 << 20));
    for (std::string key; sys >> key;)
      if (key == "btime" && (sys >> bootTime)) break;
  } catch (const std::exception&) {
  }
  if (bootTime > 0) m.set("process_start_time_seconds", "", bootTime + field(22) / ticks);
  size_t fds = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++fds;
    ::closedir(d);
    m.set("process_open_fds", "", static_cast<double>(fds - 1));  // less opendir's own
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0)
    m.set("process_max_fds", "", static_cast<double>(lim.rlim_cur));
}

}  // namespace

std::string Daemon::renderMetrics() {
  setProcessMetrics(metrics_);
  if (api_.server) {
    // The API's and metrics_listen's servers together.
    auto total = [&](auto get) {
      return static_cast<double>(get(*api_.server) +
                                 (metricsHttp_.server ? get(*metricsHttp_.server) : 0));
    };
    for (auto r : ApiServer::kAllRejects)
      metrics_.set("rankmap_http_rejected_connections_total",
                   fmt::format("reason=\"{}\"", ApiServer::rejectName(r)),
                   total([r](const ApiServer& s) { return s.rejected(r); }));
    metrics_.set("rankmap_http_open_connections", "",
                 total([](const ApiServer& s) { return s.openConnections(); }));
  }
  if (probeServer_) {
    for (auto f : probe::kAllAuthFailures)
      metrics_.set("rankmap_probe_auth_rejections_total",
                   fmt::format("reason=\"{}\"", probe::authFailureName(f)),
                   static_cast<double>(probeServer_->authFailures(f)));
    for (auto r : probe::ProbeServer::kAllRefusals)
      metrics_.set("rankmap_probe_refused_connections_total",
                   fmt::format("reason=\"{}\"", probe::ProbeServer::refusalName(r)),
                   static_cast<double>(probeServer_->connectionsRefused(r)));
  }
  return metrics_.render();
}

void Daemon::warnIfNotListed(const std::vector<Host>& hosts) const {
  if (!hosts.empty() && !namesOf(hosts).count(name_))
    RANKMAP_WARN(Agent,
                 "agent {}: not in hosts file {}; it serves probes but never coordinates "
                 "periodic rounds (set --name)",
                 name_, cfg_.hostsFile);
}

std::vector<Host> Daemon::hosts() const {
  std::lock_guard<std::mutex> lock(hostsMu_);
  return hosts_;
}

bool Daemon::reloadHosts() {
  if (cfg_.hostsFile.empty()) {
    RANKMAP_WARN(Agent, "agent {}: reload: no hosts file configured (hosts_file, --hosts)", name_);
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(hostsMu_);
    hostsSeen_ = fileIdentity(cfg_.hostsFile);
  }
  std::vector<Host> fresh;
  try {
    fresh = probe::loadHostsFile(cfg_.hostsFile);
    if (fresh.empty())
      throw InvalidInput(fmt::format("{}: no hosts (expected `name address[:port]` lines)",
                                     cfg_.hostsFile));
  } catch (const std::exception& e) {
    RANKMAP_WARN(Agent, "agent {}: reload: keeping the {} hosts it had: {}", name_, hosts().size(),
                 e.what());
    return false;
  }
  warnIfNotListed(fresh);
  size_t before = 0;
  {
    std::lock_guard<std::mutex> lock(hostsMu_);
    before = hosts_.size();
    hosts_ = std::move(fresh);
  }
  RANKMAP_INFO(Agent, "agent {}: reloaded hosts file {}: {} hosts (had {})", name_,
               cfg_.hostsFile, hosts().size(), before);
  return true;
}

bool Daemon::isCoordinator() {
  if (!cfg_.coordinator.empty()) return cfg_.coordinator == name_;
  std::vector<Host> before;
  for (const auto& h : hosts()) {
    if (h.name == name_) {
      if (before.empty()) return true;
      probe::AgentFleet probeBefore(before, key_, name_, cfg_.probe.fleet);
      auto up = probeBefore.alive(Deadline::after(cfg_.probe.fleet.connectTimeout));
      for (bool u : up)
        if (u) return false;
      return true;
    }
    before.push_back(h);
  }
  return false;
}

void Daemon::reprobeOnce() {
  const std::vector<Host> hostsNow = hosts();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (runningId_ || stopping_ || hostsNow.empty()) return;
  }
  if (!isCoordinator()) return;
  auto current = store_->latestTopology();
  if (!current || namesOf(current->hosts) != namesOf(hostsNow)) {
    startRound(std::nullopt, std::nullopt, current ? "hosts changed" : "no topology yet");
    return;
  }
  jobTraffic_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobSlowSenders_.clear();
  }
  if (cfg_.reprobe.passiveHold.count() > 0 && holdForPassive()) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (runningId_ || stopping_) return;
  if (roundThread_.joinable()) roundThread_.join();
  lastActiveCheck_ = std::chrono::steady_clock::now();
  int64_t id = store_->beginRound("light", static_cast<int64_t>(hostsNow.size()), 0);
  runningId_ = id;
  runningKind_ = "light";
  progress_ = probe::RoundProgress{"check", 0, 0, ""};
  cancel_ = false;
  roundThread_ = std::thread([this, id, hosts = hostsNow, baseline = std::move(*current)]() mutable {
    roundMain(id, std::move(hosts), cfg_.probe, true, std::move(baseline));
  });
}

uint64_t Daemon::addObservations(const Json& report, std::string_view source) {
  uint64_t bytes = passive_.add(report, source, PassiveLedger::Clock::now());
  metrics_.add("rankmap_passive_reports_total", "");
  metrics_.add("rankmap_passive_bytes_total", "", static_cast<double>(bytes));
  return bytes;
}

Json Daemon::passiveSummary(bool rebase, std::optional<ProbeService::Hooks::ProbedAgo> probed) {
  const auto now = PassiveLedger::Clock::now();
  if (probed)
    passive_.probed(PassiveLedger::ago(now, probed->from), PassiveLedger::ago(now, probed->to));
  metrics_.set("rankmap_passive_windows_probed_total", "",
               static_cast<double>(passive_.probedWindows()));
  PassiveLedger::Summary s =
      passive_.summary(now, cfg_.reprobe.changeThreshold, kPassiveFresh, rebase);
  metrics_.set("rankmap_passive_series", "", static_cast<double>(s.series));
  return s.toJson();
}

bool Daemon::holdForPassive() {
  // Every agent's view of the job traffic on its host, drift taken as acted on.
  const std::vector<Host> list = hosts();  // this step's list (a reload may replace hosts_)
  probe::AgentFleet fleet(list, key_, name_, cfg_.probe.fleet);
  Json ask = {{"op", "passive"}, {"rebase", true}};
  {
    std::lock_guard<std::mutex> lock(probeSpanMu_);
    const auto now = std::chrono::steady_clock::now();
    // The last round, if within the ledgers' memory: its windows are not the network's.
    if (lastProbe_ && now - lastProbe_->second < PassiveLedger::kExpiry) {
      auto ago = [&](auto t) { return std::chrono::duration<double>(now - t).count(); };
      ask["probed_s"] = Json::array({ago(lastProbe_->first), ago(lastProbe_->second)});
    }
  }
  auto replies = fleet.ask(ask, Deadline::after(cfg_.probe.fleet.connectTimeout));
  size_t fresh = 0, asked = 0;
  std::vector<std::string> drift;
  std::vector<probe::Backlog> backlog;
  std::map<std::string, double> sendBusy;  // host -> its summary's sendBusy (hosts with sends)
  std::map<std::string, double> sendPeak;  // host -> its summary's sendBusyPeak
  for (size_t h = 0; h < replies.size(); ++h) {
    if (!replies[h]) continue;
    ++asked;
    try {
      auto s = PassiveLedger::Summary::fromJson(
          *replies[h], fmt::format("agent {}'s passive view", list[h].name));
      fresh += s.fresh;
      for (const auto& d : s.drifting)
        drift.push_back(fmt::format("{} -> {} {:.0f} -> {:.0f} Mbit/s", d.src, d.dst,
                                    d.baselineMbps, d.nowMbps));
      // Each agent speaks for its own host's sends only.
      for (auto& b : s.backlogged)
        if (b.src == list[h].name) backlog.push_back(std::move(b));
      if (s.fresh && s.sendBusy > 0) sendBusy[list[h].name] = s.sendBusy;
      if (s.fresh && s.sendBusyPeak > 0) sendPeak[list[h].name] = s.sendBusyPeak;
    } catch (const InvalidInput& e) {
      RANKMAP_WARN(Agent, "agent {}: {}", name_, e.what());
    }
  }
  jobTraffic_ = fresh > 0;
  {
    auto slow = probe::slowSenders(backlog, sendBusy, sendPeak);
    std::lock_guard<std::mutex> lock(mu_);
    jobSlowSenders_ = std::move(slow);
  }
  // A host link the job's own sends show slower than the topology: published from the job's
  // traffic at once, without probing.
  const bool patched = !backlog.empty() && publishPassivePatch(backlog, sendBusy);
  // A drift is confirmed by a light check, patched or not: the patch puts the slowness on the
  // sender's host link, and a migration or a loaded uplink reads the same from the job's sends
  // (on the testbed a patch after a migration blamed a host link, and the drift, taken as acted
  // on, never ran the check that would have found the moved host).
  if (!drift.empty()) {
    metrics_.add("rankmap_passive_drifts_total", "");
    RANKMAP_INFO(Agent, "agent {}: job traffic drifted ({}): a light check confirms", name_,
                 fmt::join(drift, "; "));
    return false;
  }
  if (patched) return true;
  const auto held = std::chrono::steady_clock::now() - lastActiveCheck_;
  if (fresh == 0 || held >= cfg_.reprobe.passiveHold) return false;
  metrics_.add("rankmap_light_checks_total", "result=\"held\"");
  RANKMAP_DEBUG(Agent,
                "agent {}: light check held: job traffic on {} of {} hosts answering is steady "
                "(last active check {} s ago)",
                name_, fresh, asked,
                std::chrono::duration_cast<std::chrono::seconds>(held).count());
  return true;
}

bool Daemon::publishPassivePatch(const std::vector<probe::Backlog>& backlog,
                                 const std::map<std::string, double>& sendBusy) {
  auto current = store_->latestTopology();
  if (!current) return false;
  std::vector<std::string> notes;
  auto patched =
      probe::patchBacklogged(*current, backlog, sendBusy, cfg_.reprobe.changeThreshold, notes);
  if (!patched) return false;
  const std::vector<Host> hostsNow = hosts();
  const auto n = static_cast<int64_t>(hostsNow.size());
  int64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (runningId_ || stopping_) return false;
    id = store_->beginRound("passive", n, 0);
    runningId_ = id;
    runningKind_ = "passive";
    progress_ = probe::RoundProgress{"passive", 0, 0, ""};
  }
  RANKMAP_INFO(Agent, "agent {}: passive patch {}: {}", name_, id, fmt::join(notes, "; "));
  std::optional<int64_t> version;
  try {
    probe::RoundOutcome r;
    r.topology = std::move(*patched);
    version = finishRound(id, "passive", r, 0, current, hostsNow);
  } catch (const std::exception& e) {
    RANKMAP_ERROR(Agent, "agent {}: passive patch {} failed: {}", name_, id, e.what());
  }
  metrics_.add("rankmap_passive_patches_total",
               version ? "result=\"published\"" : "result=\"kept\"");
  std::lock_guard<std::mutex> lock(mu_);
  runningId_.reset();
  cv_.notify_all();
  return version.has_value();
}

void Daemon::hostsWatchLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, cfg_.hostsWatch, [&] { return stopping_; })) return;
    }
    FileIdentity now = fileIdentity(cfg_.hostsFile);
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(hostsMu_);
      changed = now != hostsSeen_;
    }
    if (!changed) continue;
    RANKMAP_INFO(Agent, "agent {}: hosts file {} changed", name_, cfg_.hostsFile);
    try {
      metrics_.add("rankmap_hosts_reloads_total",
                   reloadHosts() ? "result=\"replaced\"" : "result=\"kept\"");
    } catch (const std::exception& e) {
      RANKMAP_ERROR(Agent, "agent {}: hosts watch: {}", name_, e.what());
    }
  }
}

void Daemon::reprobeLoop() {
  std::mt19937 rng(std::random_device{}());
  for (;;) {
    double j = cfg_.reprobe.jitter;
    std::uniform_real_distribution<double> u(1 - j, 1 + j);
    auto wait = std::chrono::milliseconds(
        static_cast<int64_t>(static_cast<double>(cfg_.reprobe.interval.count()) * u(rng)));
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, wait, [&] { return stopping_; })) return;
    }
    try {
      reprobeOnce();
    } catch (const std::exception& e) {
      RANKMAP_ERROR(Agent, "agent {}: periodic re-probe failed: {}", name_, e.what());
    }
  }
}

}  // namespace rankmap::agent
