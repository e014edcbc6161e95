// Hollow agents: the control plane at 1024-4096 agents on one machine, as Kubernetes proves its
// own with kubemark. Every agent is a real rankmapd (agent::Daemon: probe server, wire, key,
// SQLite store, HTTP API, topology push), all in this process, each on its own loopback ports;
// the first live one coordinates a full round over the others (the real Coordinator and round)
// and pushes the topology to all. Only the measurements themselves are simulated: round trips
// and bulk flows are answered by a tests/sim datacenter (tests/sim/hollow_network.h), so a
// figure from here is the control plane's, never the network's.
//
//   hollow_agents --agents N [--timeout-s 900] [--verbose] [KEY=VALUE ...]
//
//   --verbose  the agents' log at info (stderr); otherwise errors only
//
// KEY=VALUE: the datacenter, as tests/sim/scenario.h describes it (hosts is --agents; its dead
// hosts get no agent: their address refuses connections). Prints one JSON line:
//   agents          agents in the hosts list (live and dead)
//   present         live agents in the published topology
//   dropped         live agents missing from it
//   pushed          live agents that hold the published version when the round has ended
//   round_s         the round's wall time, from start to its record (push included)
//   phases_s        where it went: seconds in each phase the round reported (liveness,
//                   structure, links, rings, ...; "finish": store and push)
//   coordinator_cpu_s   CPU time of the coordinator's round thread
//                       (rankmap_probe_round_cpu_seconds_total)
//   coordinator_peak_mib  growth of this process's peak resident memory over the round: the
//                       coordinator's, plus what the agents' connection threads touched (an
//                       upper bound of the coordinator's)
//   store_mib       growth of the coordinator's state directory over the round (its SQLite
//                   files); store_max_mib: the largest state directory of any agent
//   requests        control requests the coordinator sent (rankmap_probe_requests_total)
//   start_s         time to construct and start every agent
// Exits 1 when an agent was dropped or does not hold the topology, or the round failed.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/daemon.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
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
    if (s == "--agents")
      a.agents = std::stoi(value("a number of agents"));
    else if (s == "--timeout-s")
      a.timeoutS = std::stoi(value("seconds"));
    else if (s == "--verbose")
      a.verbose = true;
    else if (s.find('=') != std::string::npos)
      a.settings.push_back(s);
    else
      throw InvalidInput(fmt::format("unknown argument '{}' (see the file comment)", s));
  }
  if (a.agents < 2) throw InvalidInput("--agents: at least 2");
  return a;
}

// Every agent holds a few files and sockets, and a round's fan-out one connection per request:
// the soft limit goes up to the hard one.
void raiseFileLimit(size_t agents) {
  rlimit l{};
  getrlimit(RLIMIT_NOFILE, &l);
  l.rlim_cur = l.rlim_max;
  setrlimit(RLIMIT_NOFILE, &l);
  const rlim_t need = 16 * static_cast<rlim_t>(agents) + 1024;
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

// A counter of the agent's Prometheus text without labels (0 when absent).
double metric(agent::Daemon& d, const std::string& name) {
  std::string text = d.renderMetrics();
  size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + name.size() + 2));
}

struct Bed {
  testing::TempDir dir;
  std::vector<Host> hosts;                           // the hosts list: every agent, dead or live
  std::vector<std::unique_ptr<agent::Daemon>> live;  // by host index; null for a dead host
};

// Starts an agent for every live host of `dc` (threads: 8 at once, each agent constructing its
// store and binding its ports).
void startAgents(Bed& bed, sim::Datacenter& dc, sim::HollowNetwork& net) {
  const size_t n = dc.hosts();
  const std::string key = bed.dir.write("key", std::string(64, 'k') + "\n");
  const std::string token = bed.dir.write("token", std::string(32, 't') + "\n");
  bed.live.resize(n);
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string failure;
  auto worker = [&] {
    for (size_t h; (h = next++) < n;) {
      if (!dc.alive(static_cast<int>(h))) continue;
      try {
        agent::AgentConfig c;
        c.name = bed.hosts[h].name;
        c.listen = {"127.0.0.1", 0};
        c.probeListen = {"127.0.0.1", 0};
        c.stateDir = bed.dir.file("state-" + c.name);
        c.keyFile = key;
        c.tokenFile = token;
        c.probe.roundTimeout = std::chrono::seconds(1800);
        agent::ProbeService::Measure m;
        const int self = static_cast<int>(h);
        m.latency = [&net, self](const Host& p, const probe::LatencyOptions& o, Deadline d) {
          return net.latency(self, p, o, d);
        };
        m.bulk = [&net, self](const Host& p, const probe::BandwidthOptions& o, bool send,
                              Deadline d) { return net.bulk(self, p, o, send, d); };
        auto a = std::make_unique<agent::Daemon>(c, std::move(m));
        a->start();
        bed.hosts[h].address = fmt::format("127.0.0.1:{}", a->probePort());
        bed.live[h] = std::move(a);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failure = fmt::format("agent {}: {}", bed.hosts[h].name, e.what());
        next = n;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  if (!failure.empty()) throw IoError(failure);
}

int run(const Args& args) {
  std::vector<std::string> settings = args.settings;
  settings.push_back(fmt::format("hosts={}", args.agents));
  const sim::Scenario sc = sim::Scenario::parse(settings);
  sim::Datacenter dc(sc.spec());
  raiseFileLimit(dc.hosts());

  Bed bed;
  for (size_t h = 0; h < dc.hosts(); ++h)
    // Until its agent binds: an address of the loopback network where nothing listens (a dead
    // host keeps it, and refuses connections).
    bed.hosts.push_back({fmt::format("h{:04}", h),
                         fmt::format("127.1.{}.{}:1", h / 256 % 256, h % 256)});
  sim::HollowNetwork net(dc, bed.hosts);
  const auto t0 = Clock::now();
  startAgents(bed, dc, net);
  const double startS = secondsSince(t0);
  size_t coordIndex = 0;
  while (!bed.live[coordIndex]) ++coordIndex;
  agent::Daemon& coord = *bed.live[coordIndex];
  size_t liveCount = 0;
  for (const auto& a : bed.live) liveCount += a != nullptr;

  // The round, with what it spends.
  const std::string state = coord.config().stateDir;
  const uint64_t storeBefore = dirBytes(state);
  const double cpuBefore = metric(coord, "rankmap_probe_round_cpu_seconds_total");
  const double requestsBefore = metric(coord, "rankmap_probe_requests_total");
  std::ofstream("/proc/self/clear_refs") << "5";  // peak resident memory from now
  const double rssBefore = statusKb("VmRSS");
  const auto started = Clock::now();
  auto res = coord.startRound(bed.hosts, std::nullopt, "hollow agents bench");
  if (!res.id) throw IoError("the coordinator is busy");
  std::map<std::string, double> phases;
  std::string phase = "starting";
  auto phaseFrom = started;
  const Deadline until = Deadline::after(std::chrono::seconds(args.timeoutS));
  for (;;) {
    const bool ended = coord.waitRound(*res.id, Deadline::after(std::chrono::milliseconds(50)));
    std::string now = "finish";
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
  const double roundS = secondsSince(started);
  const double peakKb = statusKb("VmHWM");
  auto record = coord.roundStatus(*res.id);
  const Json rec = record ? *record : Json::object();

  // What every agent holds.
  auto latest = coord.store().latestTopology();
  size_t present = 0, pushed = 0;
  uint64_t storeMax = 0;
  std::set<std::string> inTopology;
  if (latest)
    for (const auto& h : latest->hosts) inTopology.insert(h.name);
  for (size_t h = 0; h < bed.live.size(); ++h) {
    if (!bed.live[h]) continue;
    present += inTopology.count(bed.hosts[h].name);
    auto v = bed.live[h]->store().topologies(1);
    pushed += latest && !v.empty() && v.front().version == latest->version;
    storeMax = std::max(storeMax, dirBytes(bed.live[h]->config().stateDir));
  }
  Json out = {{"agents", dc.hosts()},
              {"live", liveCount},
              {"present", present},
              {"dropped", liveCount - present},
              {"pushed", pushed},
              {"status", rec.value("status", std::string("unknown"))},
              {"round_s", roundS},
              {"phases_s", phases},
              {"coordinator_cpu_s",
               metric(coord, "rankmap_probe_round_cpu_seconds_total") - cpuBefore},
              {"coordinator_peak_mib", std::max(0.0, peakKb - rssBefore) / 1024},
              {"store_mib", static_cast<double>(dirBytes(state) - storeBefore) / (1 << 20)},
              {"store_max_mib", static_cast<double>(storeMax) / (1 << 20)},
              {"requests", metric(coord, "rankmap_probe_requests_total") - requestsBefore},
              {"start_s", startS}};
  fmt::print("{}\n", out.dump());
  std::fflush(stdout);

  // Stop them all (8 at once: each joins its threads).
  std::atomic<size_t> next{0};
  std::vector<std::thread> stoppers;
  for (int t = 0; t < 8; ++t)
    stoppers.emplace_back([&] {
      for (size_t h; (h = next++) < bed.live.size();)
        if (bed.live[h]) bed.live[h]->stop();
    });
  for (auto& t : stoppers) t.join();
  const bool ok = latest && present == liveCount && pushed == liveCount &&
                  rec.value("status", std::string()) != "failed";
  return ok ? 0 : 1;
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
