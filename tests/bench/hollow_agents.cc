// Hollow agents: the control plane at 1024-4096 agents on one machine, as Kubernetes proves its
// own with kubemark. Every agent is a real rankmapd (agent::Daemon: probe server, wire, key,
// SQLite store, HTTP API, topology push), many in one process, each on its own loopback ports;
// a coordinator, a real rankmapd in a process of its own, runs a full round over them (the real
// agent fleet and round, probe/agent_fleet.h) and pushes the topology to all. Only the measurements
// themselves are simulated: round trips and bulk flows are answered by a tests/sim datacenter
// (tests/sim/hollow_network.h) in a process of its own that every agents' process calls, so a
// figure from here is the control plane's, never the network's. The agents share this
// machine's cores, which real agents do not: what each agent does for the round (a measurement
// request, storing a pushed topology) is N times slower here.
//
//   hollow_agents --agents N [--agents-per-process K] [--timeout-s 900] [--verbose]
//                 [KEY=VALUE ...]
//
//   --agents-per-process  agents in each agents' process (default 1024): an agent holds about 7
//              descriptors and a measurement in flight 2 more, against a process's limit of
//              open files
//   --verbose  the agents' and the coordinator's log at info (stderr); otherwise errors only
//
// KEY=VALUE: the datacenter, as tests/sim/scenario.h describes it (hosts is --agents; its dead
// hosts get no agent: their address refuses connections). Prints one JSON line:
//   agents          agents in the hosts list (live and dead)
//   present         live agents in the published topology
//   dropped         live agents missing from it
//   pushed          live agents that hold the published version when the round has ended
//   status          the round's status (ok, partial: the dead hosts' pairs are missing)
//   levels          levels of groups in the published topology (what the probe found)
//   round_s         the round's wall time, from start to its record (push included)
//   phases_s        where it went: seconds in each phase the round reported (liveness,
//                   structure, links, rings; "done": storing and pushing the topology)
//   coordinator_cpu_s   CPU time of the coordinator's round thread
//                       (rankmap_probe_round_cpu_seconds_total); coordinator_process_cpu_s:
//                       of its whole process over the round
//   coordinator_peak_mib  growth of the coordinator process's peak resident memory over the
//                       round
//   store_mib       growth of the coordinator's state directory over the round (its SQLite
//                   files); store_max_mib: the largest state directory of any agent
//   requests        control requests the coordinator sent (rankmap_probe_requests_total)
//   flows, late_flows   bulk flows the network answered, and those that came after their trial
//                   was priced and ran alone (the harness too busy to keep a trial together)
//   network_trials  sets of flows the network priced together (a tagged trial, or an untagged
//                   flow alone): the round's trials when every flow carries its trial
//   refused         connections the agents' probe servers closed unanswered, by reason
//                   (rankmap_probe_refused_connections_total: busy, no_descriptors)
//   start_s         time to construct and start every agent
// Exits 1 when an agent was dropped or does not hold the topology, or the round failed.
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/daemon.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/log.h"
#include "probe/server.h"
#include "tests/bench/cpu_time.h"
#include "tests/sim/datacenter.h"
#include "tests/sim/hollow_network.h"
#include "tests/sim/scenario.h"
#include "tests/unit/common/temp_dir.h"

namespace {

using namespace rankmap;
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Args {
  int agents = 1024;
  int perProcess = 1024;
  int timeoutS = 900;
  bool verbose = false;
  std::vector<std::string> settings;
};

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const char* what) -> std::string {
      if (i + 1 >= argc) throw InvalidInput(fmt::format("{} needs {}", s, what));
      return argv[++i];
    };
    // A whole number in [lo, hi] for `s`, or InvalidInput naming the flag.
    auto number = [&](const char* what, int lo, int hi) {
      const std::string v = value(what);
      int n = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi)
        throw InvalidInput(
            fmt::format("{}: expected {} from {} to {}, got '{}'", s, what, lo, hi, v));
      return n;
    };
    if (s == "--agents")
      a.agents = number("a number of agents", 2, 65536);
    else if (s == "--agents-per-process")
      a.perProcess = number("a number of agents", 1, 65536);
    else if (s == "--timeout-s")
      a.timeoutS = number("seconds", 1, 86400);
    else if (s == "--verbose")
      a.verbose = true;
    else if (s.find('=') != std::string::npos)
      a.settings.push_back(s);
    else
      throw InvalidInput(fmt::format("unknown argument '{}' (see the file comment)", s));
  }
  // The datacenter, checked here: the agents' process would only die of it.
  std::vector<std::string> settings = a.settings;
  settings.push_back(fmt::format("hosts={}", a.agents));
  sim::Datacenter check(sim::Scenario::parse(settings).spec());
  return a;
}

// Every agent holds a few files and sockets, and a round's fan-out one connection per request:
// the soft limit goes up to what is needed, and the hard one with it where this process may
// raise it (root).
void raiseFileLimit(const Args& args) {
  const rlim_t need = 16 * static_cast<rlim_t>(std::min(args.agents, args.perProcess)) + 1024;
  rlimit l{};
  getrlimit(RLIMIT_NOFILE, &l);
  if (l.rlim_max < need) {
    rlimit raised{need, need};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return;
  }
  l.rlim_cur = l.rlim_max;
  setrlimit(RLIMIT_NOFILE, &l);
  if (l.rlim_cur < need)
    fmt::print(stderr, "hollow_agents: open files limited to {} (about {} wanted)\n", l.rlim_cur,
               need);
}

uint64_t dirBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

// A line of /proc/self/status in kB ("VmHWM", "VmRSS").
double statusKb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1));
  return 0;
}

// A series of the agent's Prometheus text, labels included in `name` (0 when absent).
double metricIn(const std::string& text, const std::string& name) {
  size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + name.size() + 2));
}
double metric(agent::Daemon& d, const std::string& name) {
  return metricIn(d.renderMetrics(), name);
}

// Host h of the datacenter: its name, and until its agent binds, an address of the loopback
// network where nothing listens (a dead host keeps it, and refuses connections).
Host hollowHost(size_t h) {
  return {fmt::format("h{:04}", h), fmt::format("127.1.{}.{}:1", h / 256 % 256, h % 256)};
}
std::vector<Host> hollowHosts(size_t n) {
  std::vector<Host> hosts;
  for (size_t h = 0; h < n; ++h) hosts.push_back(hollowHost(h));
  return hosts;
}

// An agents' process: an agent for every live host of `dc` in [first, last), started 8 at a time
// (each constructs its store and binds its ports). `hosts` gets their addresses.
std::vector<std::unique_ptr<agent::Daemon>> startAgents(const testing::TempDir& dir,
                                                        std::vector<Host>& hosts,
                                                        sim::Datacenter& dc,
                                                        sim::HollowNetworkClient& net, size_t first,
                                                        size_t last) {
  std::vector<std::unique_ptr<agent::Daemon>> live(last - first);
  std::atomic<size_t> next{first};
  std::mutex mu;
  std::string failure;
  auto worker = [&] {
    for (size_t h; (h = next++) < last;) {
      if (!dc.alive(static_cast<int>(h))) continue;
      try {
        agent::AgentConfig c;
        c.name = hosts[h].name;
        c.listen = {"127.0.0.1", 0};
        c.probeListen = {"127.0.0.1", 0};
        c.stateDir = dir.file("state-" + c.name);
        c.keyFile = dir.file("key");
        c.tokenFile = dir.file("token");
        agent::ProbeService::Measure m;
        const int self = static_cast<int>(h);
        m.latency = [&net, self](const Host& p, const probe::LatencyOptions& o, Deadline d) {
          return net.latency(self, p, o, d);
        };
        m.bulk = [&net, self](const Host& p, const probe::BandwidthOptions& o, bool send,
                              const std::vector<Host>& pings,
                              std::vector<std::optional<double>>& pingsUs,
                              Deadline d) { return net.bulk(self, p, o, send, pings, pingsUs, d); };
        auto a = std::make_unique<agent::Daemon>(c, std::move(m));
        a->start();
        hosts[h].address = fmt::format("127.0.0.1:{}", a->probePort());
        live[h - first] = std::move(a);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failure = fmt::format("agent {}: {}", hosts[h].name, e.what());
        next = last;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (!failure.empty()) throw IoError(failure);
  return live;
}

// One byte over a pipe, waited for with a deadline.
void signal(int fd) {
  const char c = 1;
  if (::write(fd, &c, 1) != 1) throw IoError("pipe write failed");
}
void await(int fd, Deadline d, const char* what) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, d.pollTimeoutMs()) != 1)
    throw TimeoutError(fmt::format("{} did not come in time", what));
  char c;
  if (::read(fd, &c, 1) != 1)
    throw IoError(fmt::format("{}: the other process ended (its error is above)", what));
}

sim::Datacenter datacenter(const Args& args) {
  std::vector<std::string> settings = args.settings;
  settings.push_back(fmt::format("hosts={}", args.agents));
  return sim::Datacenter(sim::Scenario::parse(settings).spec());
}

// The network's process: the datacenter behind a loopback port (network.json), until `done`.
int networkMain(const Args& args, const testing::TempDir& dir, int ready, int done) {
  sim::Datacenter dc = datacenter(args);
  sim::HollowNetwork net(dc, hollowHosts(dc.hosts()));
  sim::HollowNetworkServer server(net);
  writeFileAtomic(dir.file("network.json"), Json{{"port", server.port()}}.dump());
  signal(ready);
  await(done, Deadline::after(std::chrono::seconds(args.timeoutS + 600)), "the coordinator's end");
  const auto c = net.counts();
  writeFileAtomic(
      dir.file("network-report.json"),
      Json{{"flows", c.flows}, {"late_flows", c.late}, {"network_trials", c.trials}}.dump());
  signal(ready);
  await(done, Deadline::after(std::chrono::seconds(60)), "the coordinator's end");
  return 0;
}

// Agents' process `index`, hosts [first, last): starts their agents, writes their part of the
// hosts list (hosts-INDEX.json), signals `ready`; when `done` comes, writes what each holds
// (agents-INDEX.json: name, topology version, state bytes, refusals), signals again and stops
// them.
int agentsMain(const Args& args, const testing::TempDir& dir, size_t index, size_t first,
               size_t last, int ready, int done) {
  sim::Datacenter dc = datacenter(args);
  std::vector<Host> hosts = hollowHosts(dc.hosts());
  const Json network = parseJson(readFile(dir.file("network.json"), 1 << 16), "network.json");
  sim::HollowNetworkClient net(network.at("port").get<uint16_t>());
  const auto t0 = Clock::now();
  auto live = startAgents(dir, hosts, dc, net, first, last);
  net.connect(last - first);  // a flow per agent at once
  Json list = Json::array();
  for (size_t h = first; h < last; ++h)
    list.push_back({{"name", hosts[h].name}, {"address", hosts[h].address}});
  writeFileAtomic(dir.file(fmt::format("hosts-{}.json", index)),
                  Json{{"hosts", list}, {"start_s", secondsSince(t0)}}.dump());
  signal(ready);
  await(done, Deadline::after(std::chrono::seconds(args.timeoutS + 60)), "the coordinator's end");
  Json held = Json::array();
  for (auto& a : live) {
    if (!a) continue;
    auto v = a->store().topologies(1);
    Json refused = Json::object();
    const std::string metrics = a->renderMetrics();  // once per agent, for every reason
    for (auto r : probe::ProbeServer::kAllRefusals) {
      const std::string reason = probe::ProbeServer::refusalName(r);
      refused[reason] = metricIn(
          metrics, fmt::format("rankmap_probe_refused_connections_total{{reason=\"{}\"}}", reason));
    }
    held.push_back({{"name", a->name()},
                    {"version", v.empty() ? Json(nullptr) : Json(v.front().version)},
                    {"bytes", dirBytes(a->config().stateDir)},
                    {"refused", refused}});
  }
  writeFileAtomic(dir.file(fmt::format("agents-{}.json", index)), held.dump());
  signal(ready);
  std::atomic<size_t> next{0};
  std::vector<std::thread> stoppers;
  for (int t = 0; t < 8; ++t)
    stoppers.emplace_back([&] {
      for (size_t h; (h = next++) < live.size();)
        if (live[h]) live[h]->stop();
    });
  for (auto& t : stoppers) t.join();
  return 0;
}

// A child process and the pipes to it.
struct Child {
  pid_t pid = -1;
  int ready = -1;  // read end: the child signals
  int done = -1;   // write end: this process signals
};

// The coordinator's process: a rankmapd that is none of the hosts, asked for a full round over
// the agents' hosts list (as POST /v1/probe with "hosts" asks it).
int coordinatorMain(const Args& args, const testing::TempDir& dir, const std::vector<Child>& agents,
                    const Child& network) {
  const Deadline until = Deadline::after(std::chrono::seconds(args.timeoutS));
  std::vector<Host> hosts;
  double startS = 0;
  for (size_t i = 0; i < agents.size(); ++i) {
    await(agents[i].ready, Deadline::after(std::chrono::seconds(600)), "the agents' start");
    const std::string file = fmt::format("hosts-{}.json", i);
    const Json list = parseJson(readFile(dir.file(file), 1 << 30), file);
    for (const auto& h : list.at("hosts"))
      hosts.push_back({h.at("name").get<std::string>(), h.at("address").get<std::string>()});
    startS = std::max(startS, list.at("start_s").get<double>());
  }

  agent::AgentConfig c;
  c.name = "coordinator";
  c.listen = {"127.0.0.1", 0};
  c.probeListen = {"127.0.0.1", 0};
  c.stateDir = dir.file("state-coordinator");
  c.keyFile = dir.file("key");
  c.tokenFile = dir.file("token");
  c.probe.roundTimeout = std::chrono::seconds(args.timeoutS);
  agent::Daemon coord(c);
  coord.start();

  const std::string state = c.stateDir;
  const uint64_t storeBefore = dirBytes(state);
  const double cpuBefore = metric(coord, "rankmap_probe_round_cpu_seconds_total");
  const double processBefore = bench::processCpuSeconds();
  const double requestsBefore = metric(coord, "rankmap_probe_requests_total");
  std::ofstream("/proc/self/clear_refs") << "5";  // peak resident memory from now
  const double rssBefore = statusKb("VmRSS");
  const auto started = Clock::now();
  auto res = coord.startRound(hosts, std::nullopt, "hollow agents bench");
  if (!res.id) throw IoError("the coordinator is busy");
  std::map<std::string, double> phases;
  std::string phase = "starting";
  auto phaseFrom = started;
  for (;;) {
    const bool ended = coord.waitRound(*res.id, Deadline::after(std::chrono::milliseconds(50)));
    std::string now = "done";
    if (!ended) {
      auto st = coord.roundStatus(*res.id);
      if (st && st->value("status", std::string()) == "running")
        now = st->value("phase", std::string("starting"));
    }
    if (now != phase) {
      phases[phase] += secondsSince(phaseFrom);
      phase = now;
      phaseFrom = Clock::now();
    }
    if (ended) break;
    if (until.expired()) throw TimeoutError(fmt::format("round not done in {} s", args.timeoutS));
  }
  phases[phase] += secondsSince(phaseFrom);
  const double roundS = secondsSince(started);
  const double peakKb = statusKb("VmHWM");
  const double processCpu = bench::processCpuSeconds() - processBefore;
  auto record = coord.roundStatus(*res.id);
  const Json rec = record ? *record : Json::object();

  for (const auto& c : agents) signal(c.done);
  Json held = Json::array();
  for (size_t i = 0; i < agents.size(); ++i) {
    await(agents[i].ready, Deadline::after(std::chrono::seconds(300)), "the agents' report");
    const std::string file = fmt::format("agents-{}.json", i);
    for (auto& a : parseJson(readFile(dir.file(file), 1 << 30), file)) held.push_back(a);
  }
  auto latest = coord.store().latestTopology();
  std::set<std::string> inTopology;
  if (latest)
    for (const auto& h : latest->hosts) inTopology.insert(h.name);
  size_t live = 0, present = 0, pushed = 0;
  uint64_t storeMax = 0;
  Json refused = Json::object();
  for (const auto& a : held)
    for (const auto& [reason, n] : a.at("refused").items())
      refused[reason] = refused.value(reason, 0.0) + n.get<double>();
  for (const auto& a : held) {
    ++live;
    present += inTopology.count(a.at("name").get<std::string>());
    pushed +=
        latest && a.at("version").is_number() && a.at("version").get<int64_t>() == latest->version;
    storeMax = std::max(storeMax, a.at("bytes").get<uint64_t>());
  }
  Json out = {
      {"agents", hosts.size()},
      {"live", live},
      {"present", present},
      {"dropped", live - present},
      {"pushed", pushed},
      {"status", rec.value("status", std::string("unknown"))},
      {"levels", latest ? latest->groups.size() : 0},
      {"round_s", roundS},
      {"phases_s", phases},
      {"coordinator_cpu_s", metric(coord, "rankmap_probe_round_cpu_seconds_total") - cpuBefore},
      {"coordinator_process_cpu_s", processCpu},
      {"coordinator_peak_mib", std::max(0.0, peakKb - rssBefore) / 1024},
      {"store_mib", static_cast<double>(dirBytes(state) - storeBefore) / (1 << 20)},
      {"store_max_mib", static_cast<double>(storeMax) / (1 << 20)},
      {"requests", metric(coord, "rankmap_probe_requests_total") - requestsBefore},
      {"refused", refused},
      {"start_s", startS},
      {"agent_processes", agents.size()}};
  signal(network.done);
  await(network.ready, Deadline::after(std::chrono::seconds(60)), "the network's report");
  const Json report =
      parseJson(readFile(dir.file("network-report.json"), 1 << 16), "network-report.json");
  for (const auto& [key, value] : report.items()) out[key] = value;
  fmt::print("{}\n", out.dump());
  std::fflush(stdout);
  coord.stop();
  const bool ok =
      latest && present == live && pushed == live && rec.value("status", std::string()) != "failed";
  return ok ? 0 : 1;
}

// Forks before any thread exists: a child runs the network, one child per --agents-per-process
// agents runs those, and this process the coordinator.
int run(const Args& args) {
  raiseFileLimit(args);
  testing::TempDir dir;
  dir.write("key", std::string(64, 'k') + "\n");
  dir.write("token", std::string(32, 't') + "\n");
  std::vector<Child> children;
  // This process's pipe ends so far: a child closes them, so that the end of any child shows
  // at once (its pipe's read end closes).
  std::vector<int> ours;
  auto spawn = [&](const char* what, const std::function<int(int ready, int done)>& body) {
    int up[2], down[2];  // child -> this process, this process -> child
    if (::pipe(up) != 0 || ::pipe(down) != 0) throw IoError("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) throw IoError("fork failed");
    if (pid == 0) {
      for (int fd : ours) ::close(fd);
      ::close(up[0]);
      ::close(down[1]);
      int rc = 2;
      try {
        rc = body(up[1], down[0]);
      } catch (const std::exception& e) {
        fmt::print(stderr, "hollow_agents: {}: {}\n", what, e.what());
      }
      std::fflush(stderr);
      ::_exit(rc);  // the directory is the coordinator's to remove
    }
    ::close(up[1]);
    ::close(down[0]);
    ours.push_back(up[0]);
    ours.push_back(down[1]);
    children.push_back({pid, up[0], down[1]});
    return children.back();
  };
  auto reap = [&](bool kill) {
    bool clean = true;
    for (const auto& c : children) {
      if (kill) ::kill(c.pid, SIGKILL);
      int status = 0;
      ::waitpid(c.pid, &status, 0);
      clean &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    return clean;
  };
  int rc = 2;
  try {
    const Child network =
        spawn("network", [&](int ready, int done) { return networkMain(args, dir, ready, done); });
    await(network.ready, Deadline::after(std::chrono::seconds(60)), "the network's start");
    std::vector<Child> agents;
    const auto n = static_cast<size_t>(args.agents), per = static_cast<size_t>(args.perProcess);
    for (size_t first = 0; first < n; first += per) {
      const size_t index = agents.size(), last = std::min(n, first + per);
      agents.push_back(spawn("agents", [&, index, first, last](int ready, int done) {
        return agentsMain(args, dir, index, first, last, ready, done);
      }));
    }
    rc = coordinatorMain(args, dir, agents, network);
    signal(network.done);
  } catch (...) {
    reap(true);
    throw;
  }
  return reap(false) ? rc : 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parseArgs(argc, argv);
    log::setLevel(args.verbose ? log::Level::Info : log::Level::Error);
    return run(args);
  } catch (const std::exception& e) {
    fmt::print(stderr, "hollow_agents: {}\n", e.what());
    return 2;
  }
}
