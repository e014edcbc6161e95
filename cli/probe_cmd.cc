// `rankmap probe --hosts FILE [--out topology.json] [--agent URL] [--token-file F]
//  [--key-file F] [--timeout D] [--json]`: measures the network between the hosts
// and writes topology.json.
//
// It asks an agent's HTTP API to run the round (--agent, or RANKMAP_AGENT when that answers),
// following the round's progress; with --key-file (and no --agent), or with no agent API at
// hand, it coordinates the round itself, talking to the agents' probe ports with the job's
// probe key (--key-file or RANKMAP_PROBE_KEY_FILE). Progress goes to stderr: a bar on a terminal,
// one line per step otherwise. --contention is accepted for old scripts and ignored (every
// round now loads the uplinks it suspects). The result line (or JSON with --json) goes to stdout.
// Exit status: 0 when a topology was written (possibly with missing pairs, reported), 1 when the
// round failed, 2 on bad input.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/error.h"
#include "common/files.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/net.h"
#include "probe/agent_fleet.h"
#include "probe/hosts.h"
#include "probe/round.h"
#include "reorder/report.h"

namespace rankmap::cli {
namespace {

struct ProbeArgs {
  std::string hostsFile;
  std::string out = "topology.json";
  std::string agent;
  std::string tokenFile;
  std::string keyFile;
  std::string timeout = "10m";
  bool contention = false;
  bool json = false;
};

// Progress on stderr: a redrawn bar on a terminal, a line per phase otherwise.
class ProgressView {
 public:
  ProgressView() : tty_(::isatty(STDERR_FILENO) == 1) {}
  ~ProgressView() { finish(); }
  // One line per step: a bar on a terminal (redrawn in place), else a line whenever the phase
  // or its detail changes. The round reports a handful of steps per phase at any host count
  // (leader rounds, trials, levels), so the log stays readable at 1000 hosts.
  void update(const std::string& phase, size_t done, size_t total, const std::string& detail) {
    if (tty_) {
      constexpr int kWidth = 30;
      double f = total ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 0;
      int fill = static_cast<int>(f * kWidth);
      std::string line =
          fmt::format("[{}{}] {:3.0f}% {:<10} {}", std::string(static_cast<size_t>(fill), '#'),
                      std::string(static_cast<size_t>(kWidth - fill), '.'), f * 100, phase, detail);
      line.resize(std::max<size_t>(line.size(), lastWidth_), ' ');
      lastWidth_ = std::min<size_t>(line.size(), 120);
      line.resize(lastWidth_);
      fmt::print(stderr, "\r{}", line);
      std::fflush(stderr);
      drawn_ = true;
    } else if (phase != lastPhase_ || detail != lastDetail_) {
      fmt::print(stderr, "rankmap probe: {}{}{}\n", phase, detail.empty() ? "" : ": ", detail);
    }
    lastPhase_ = phase;
    lastDetail_ = detail;
  }
  void finish() {
    if (drawn_) fmt::print(stderr, "\n");
    drawn_ = false;
  }

 private:
  bool tty_;
  bool drawn_ = false;
  std::string lastPhase_, lastDetail_;
  size_t lastWidth_ = 0;
};

struct Outcome {
  std::string status;
  size_t hosts = 0;
  size_t pairs = 0;
  size_t missing = 0;
  double seconds = 0;
  int64_t version = 0;
  std::string via;
  std::vector<std::string> dead;
  std::vector<std::string> degraded;  // probe::degradedHosts of the topology written
  std::optional<Topology> topology;   // the topology written
};

// `tokenFile` is where `token` came from, for the error when the agent refuses it.
Outcome viaAgent(const ProbeArgs& a, const std::string& url, const std::string& tokenFile,
                 const std::vector<Host>& hosts, Deadline d) {
  HttpClient client(url, readSecretFile(tokenFile, 1, "token file"));
  Json body = {{"hosts", Json::array()}};
  for (const auto& h : hosts) body["hosts"].push_back({{"name", h.name}, {"address", h.address}});
  auto t0 = std::chrono::steady_clock::now();
  HttpResponse r =
      client.post("/v1/probe", body.dump(), Deadline::after(std::chrono::seconds(30)).min(d));
  // A token was sent (the caller refuses to go on without one): the hint is about which.
  if (r.status == 401)
    throw InvalidInput(fmt::format(
        "agent {}: {} (HTTP 401): the token in {} is not this agent's; pass the token file the "
        "agent was started with (its --token-file)",
        url, r.errorText(), tokenFile));
  if (r.status == 403)
    throw InvalidInput(fmt::format("agent {}: {} (HTTP 403)", url, r.errorText()));
  if (r.status == 409)
    throw PeerError(fmt::format("agent {}: {}; try again when it is done", url, r.errorText()));
  if (r.status == 400) throw InvalidInput(fmt::format("agent {}: {}", url, r.errorText()));
  if (r.status != 202)
    throw PeerError(fmt::format("agent {}: HTTP {}: {}", url, r.status, r.errorText()));
  int64_t id = parseJson(r.body, "probe answer").at("round_id").get<int64_t>();
  ProgressView view;
  Json st;
  for (;;) {
    d.check(fmt::format("round {} on agent {}", id, url));
    HttpResponse s = client.get(fmt::format("/v1/rounds/{}", id),
                                Deadline::after(std::chrono::seconds(10)).min(d));
    if (s.status != 200)
      throw PeerError(
          fmt::format("agent {}: round {}: HTTP {}: {}", url, id, s.status, s.errorText()));
    st = parseJson(s.body, "round status");
    if (st.value("status", "") != "running") break;
    view.update(st.value("phase", "?"), st.value("done", 0u), st.value("total", 0u),
                st.value("detail", ""));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  view.finish();
  Outcome o;
  o.via = "agent " + url;
  o.status = st.value("status", "failed");
  o.hosts = hosts.size();
  o.pairs = st.value("pairs_total", 0u);
  o.missing = st.value("pairs_missing", 0u);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!st.contains("topology_version") || st["topology_version"].is_null())
    throw PeerError(fmt::format("agent {}: round {} {}: {}", url, id, o.status,
                                st.value("error", "no topology")));
  o.version = st["topology_version"].get<int64_t>();
  HttpResponse t = client.get(fmt::format("/v1/topology?version={}", o.version), d);
  if (t.status != 200)
    throw PeerError(
        fmt::format("agent {}: topology {}: HTTP {}: {}", url, o.version, t.status, t.errorText()));
  Topology topo = Topology::parse(t.body, fmt::format("agent {} topology", url));
  o.degraded = probe::degradedHosts(topo);
  topo.save(a.out);
  o.topology = std::move(topo);
  return o;
}

Outcome coordinateHere(const ProbeArgs& a, const CliContext& ctx, const std::vector<Host>& hosts,
                       Deadline d) {
  std::string keyFile = !a.keyFile.empty() ? a.keyFile : ctx.config.get(settings::kProbeKeyFile);
  if (keyFile.empty())
    throw InvalidInput(
        "no agent API answered and no probe key to coordinate the round here: "
        "pass --agent URL (with --token-file), or --key-file FILE (or set "
        "RANKMAP_PROBE_KEY_FILE)");
  probe::ProbeKey key = probe::ProbeKey::load(keyFile);
  probe::RoundOptions opts;
  probe::AgentFleet fleet(hosts, key, "rankmap-probe@" + localHostName());
  ProgressView view;
  const auto t0 = std::chrono::steady_clock::now();
  probe::RoundOutcome r = probe::runRound(fleet, opts, d, [&](const probe::RoundProgress& p) {
    view.update(p.phase, p.done, p.total, p.detail);
  });
  view.finish();
  const probe::RoundSummary sum = probe::summarize(r);
  RANKMAP_INFO(Probe, "{}", sum.text);
  Outcome o;
  o.via = "coordinated here";
  o.status = sum.status;
  o.hosts = hosts.size();
  o.pairs = sum.pairsTotal;
  o.missing = sum.pairsMissing;
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.dead = r.deadHosts;
  if (o.status == "failed")
    throw PeerError(
        fmt::format("probe round failed: no pair measured ({} of {} agents did not "
                    "answer: {})",
                    r.deadHosts.size(), hosts.size(), fmt::join(r.deadHosts, ", ")));
  o.degraded = probe::degradedHosts(r.topology);
  r.topology.save(a.out);
  o.topology = std::move(r.topology);
  return o;
}

int runProbe(const CliContext& ctx, const ProbeArgs& a) {
  auto timeout = parseDuration(a.timeout);
  if (!timeout || timeout->count() <= 0)
    throw InvalidInput(fmt::format("--timeout '{}': expected a duration such as 10m", a.timeout));
  Deadline d = Deadline::after(*timeout);
  if (a.contention)
    fmt::print(stderr,
               "rankmap probe: --contention is ignored: every round loads the uplinks it "
               "suspects\n");
  std::vector<Host> hosts = probe::loadHostsFile(a.hostsFile);
  std::string url = !a.agent.empty() ? a.agent : ctx.config.get(settings::kAgent);
  bool useAgent = !a.agent.empty();
  // --key-file without --agent means "coordinate here"; otherwise the default agent is used
  // when it answers.
  if (!useAgent && a.keyFile.empty() && !url.empty()) {
    // The default agent is used when it answers; otherwise we coordinate here.
    try {
      useAgent =
          HttpClient(url).get("/v1/health", Deadline::after(std::chrono::seconds(1))).status == 200;
    } catch (const std::exception&) {
      useAgent = false;
    }
  }
  Outcome o;
  if (useAgent) {
    std::string tokenFile =
        !a.tokenFile.empty() ? a.tokenFile : ctx.config.get(settings::kTokenFile);
    if (tokenFile.empty())
      throw InvalidInput(
          fmt::format("agent {} needs a bearer token to start a round: pass "
                      "--token-file or set RANKMAP_TOKEN_FILE",
                      url));
    o = viaAgent(a, url, tokenFile, hosts, d);
  } else {
    o = coordinateHere(a, ctx, hosts, d);
  }
  if (a.json) {
    Json j = {{"out", a.out},     {"status", o.status},         {"hosts", o.hosts},
              {"pairs", o.pairs}, {"missing_pairs", o.missing}, {"seconds", o.seconds},
              {"via", o.via},     {"dead_hosts", o.dead},       {"degraded_hosts", o.degraded}};
    j["version"] = o.version ? Json(o.version) : Json(nullptr);
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("rankmap probe: wrote {}: {} hosts, {} pairs, {} missing, {:.1f} s, {} ({})\n",
               a.out, o.hosts, o.pairs, o.missing, o.seconds, o.status, o.via);
    if (o.topology) {
      std::istringstream lines(reorder::structureText(*o.topology));
      for (std::string line; std::getline(lines, line);) fmt::print("rankmap probe: {}\n", line);
    }
  }
  if (!o.degraded.empty())
    fmt::print(stderr,
               "rankmap probe: warning: degraded host links (under {:.0f}% of the median): {}\n",
               probe::kDegradedHostRatio * 100, fmt::join(o.degraded, ", "));
  if (o.missing > 0 || !o.dead.empty())
    fmt::print(stderr, "rankmap probe: warning: {} pairs missing{}{}\n", o.missing,
               o.dead.empty() ? "" : "; no answer from ", fmt::join(o.dead, ", "));
  return 0;
}

}  // namespace

void registerProbeCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  auto* cmd = app.add_subcommand("probe", "Measure the network between hosts; write topology.json");
  auto a = std::make_shared<ProbeArgs>();
  cmd->add_option("--hosts", a->hostsFile, "Hosts file: one `name address[:port]` per line")
      ->required();
  cmd->add_option("-o,--out", a->out, "Where to write topology.json (default ./topology.json)");
  cmd->add_option("--agent", a->agent, "rankmapd API URL (default RANKMAP_AGENT when it answers)");
  cmd->add_option("--token-file", a->tokenFile,
                  "Bearer token for the agent (or RANKMAP_TOKEN_FILE)");
  cmd->add_option("--key-file", a->keyFile,
                  "Probe key, to coordinate here without an agent API (or RANKMAP_PROBE_KEY_FILE)");
  cmd->add_option("--timeout", a->timeout, "Deadline for the whole round (default 10m)");
  cmd->add_flag("--contention", a->contention,
                "Ignored (kept for old scripts): every round loads the uplinks it suspects");
  cmd->add_flag("--json", a->json, "Print the result as JSON");
  cmd->callback([&ctx, &run, a] { run = [&ctx, a] { return runProbe(ctx, *a); }; });
}

}  // namespace rankmap::cli
