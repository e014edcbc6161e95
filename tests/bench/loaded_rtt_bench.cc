// Loaded round trips on real agents (issue 43; docs/performance.md, "Simulator against the
// emulated cloud"): runs the same trial N times through probe::AgentFleet, each time bulk flows
// between named hosts and, while they run, the loaded round trips of named pairs (the pinger a
// sender), then those pairs' idle round trips. One JSON line: per flow its readings, per ping its
// loaded and idle readings (µs), medians first. Run where the agents are reachable (inside an
// emulated VM: tests/emucloud/loaded_rtt_bench.py).
//
//   loaded_rtt_bench --hosts FILE --key FILE --flows A>B,... (--pings A>B,... | --cost K,...)
//                    [--trials N]
//
//   --cost K,...  what round trips cost a trial (the simulator's SimTiming): the flows' trial
//                 without round trips and with K per sender (to the K hosts after it in the hosts
//                 file) for each K, interleaved; per arm the trials' wall times and CPU times, no
//                 readings. CPU: this process's (the coordinator's side: AgentFleet's requests
//                 and replies) and every rankmapd process's on the machine (the agents': the
//                 testbed's VMs share one process table), summed and the busiest agent's
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "probe/agent_fleet.h"
#include "probe/hosts.h"
#include "probe/wire.h"
#include "tests/bench/cpu_time.h"

namespace rankmap {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "a>b,c>d" over host names: pairs of indexes.
std::vector<probe::HostPair> pairsOf(const std::string& spec, const std::vector<Host>& hosts,
                                     const std::string& option) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < hosts.size(); ++i) index[hosts[i].name] = static_cast<int>(i);
  std::vector<probe::HostPair> out;
  size_t at = 0;
  while (at < spec.size()) {
    size_t end = spec.find(',', at);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(at, end - at);
    const size_t gt = item.find('>');
    if (gt == std::string::npos || !index.count(item.substr(0, gt)) ||
        !index.count(item.substr(gt + 1)))
      throw InvalidInput(fmt::format("{} '{}': expected FROM>TO with host names of the hosts file",
                                     option, item));
    out.emplace_back(index[item.substr(0, gt)], index[item.substr(gt + 1)]);
    at = end + 1;
  }
  return out;
}

// A whole number of at least 1 from an option's value.
int countOf(const std::string& option, const std::string& text) {
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 1)
    throw InvalidInput(fmt::format("{} '{}': expected a whole number of at least 1", option, text));
  return v;
}

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// CPU milliseconds (user + system) of every process named rankmapd, by pid.
std::map<int, double> agentCpuMs() {
  static const double msPerTick = 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::map<int, double> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = e.path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t open = text.find('('), close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open ||
        text.substr(open + 1, close - open - 1) != "rankmapd")
      continue;
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    double ticks = 0;
    for (int i = 0; i < 13 && rest >> field; ++i)
      if (i >= 11) ticks += std::stod(field);  // utime, stime (fields 14 and 15 of stat)
    out[std::stoi(pid)] = ticks * msPerTick;
  }
  return out;
}

// --cost: the flows' trial without round trips and with K per sender for each K, the arms
// interleaved (each trial starts at another arm); per arm the trials' wall and CPU times.
Json costRun(probe::AgentFleet& fleet, const std::vector<Host>& hosts,
             const std::vector<probe::HostPair>& flows, const std::vector<int>& perSender,
             int trials) {
  std::vector<int> arms{0};
  arms.insert(arms.end(), perSender.begin(), perSender.end());
  std::vector<std::vector<probe::HostPair>> pings(arms.size());
  const int n = static_cast<int>(hosts.size());
  for (size_t a = 0; a < arms.size(); ++a)
    for (const auto& f : flows)
      for (int j = 1; j <= std::min({arms[a], n - 1, static_cast<int>(probe::kMaxLoadedPings)});
           ++j)
        pings[a].emplace_back(f.first, (f.first + j) % n);
  std::vector<std::vector<double>> ms(arms.size()), coordMs(arms.size()), agentsMs(arms.size()),
      busiestMs(arms.size());
  probe::BandwidthOptions bo;
  bo.startInMs = 200;
  for (int t = 0; t < trials; ++t)
    for (size_t i = 0; i < arms.size(); ++i) {
      const size_t a = (static_cast<size_t>(t) + i) % arms.size();
      probe::LoadedPings lp;
      lp.pairs = pings[a];
      const auto agentsBefore = agentCpuMs();
      const double ownBefore = 1000 * bench::processCpuSeconds();
      const auto start = std::chrono::steady_clock::now();
      fleet.bandwidth(flows, bo, Deadline::after(std::chrono::seconds(20)),
                      lp.pairs.empty() ? nullptr : &lp);
      ms[a].push_back(msSince(start));
      coordMs[a].push_back(1000 * bench::processCpuSeconds() - ownBefore);
      double sum = 0, busiest = 0;
      for (const auto& [pid, cpu] : agentCpuMs()) {
        auto it = agentsBefore.find(pid);
        const double used = cpu - (it == agentsBefore.end() ? 0 : it->second);
        sum += used;
        busiest = std::max(busiest, used);
      }
      agentsMs[a].push_back(sum);
      busiestMs[a].push_back(busiest);
    }
  Json out = {{"trials", trials}, {"flows", flows.size()}, {"arms", Json::array()}};
  for (size_t a = 0; a < arms.size(); ++a)
    out["arms"].push_back({{"pings_per_sender", arms[a]},
                           {"pings", pings[a].size()},
                           {"trial_ms_median", median(ms[a])},
                           {"trial_ms", ms[a]},
                           {"coordinator_cpu_ms_median", median(coordMs[a])},
                           {"agents_cpu_ms_median", median(agentsMs[a])},
                           {"busiest_agent_cpu_ms_median", median(busiestMs[a])},
                           {"agents_cpu_ms", agentsMs[a]}});
  return out;
}

int run(int argc, char** argv) {
  std::string hostsPath, keyPath, flowSpec, pingSpec;
  int trials = 5;
  std::vector<int> cost;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw InvalidInput(fmt::format("{}: expected a value", a));
      return argv[++i];
    };
    if (a == "--hosts") {
      hostsPath = next();
    } else if (a == "--key") {
      keyPath = next();
    } else if (a == "--flows") {
      flowSpec = next();
    } else if (a == "--pings") {
      pingSpec = next();
    } else if (a == "--trials") {
      trials = countOf(a, next());
    } else if (a == "--cost") {
      const std::string list = next();
      for (size_t at = 0; at <= list.size();) {
        size_t end = list.find(',', at);
        if (end == std::string::npos) end = list.size();
        cost.push_back(countOf(a, list.substr(at, end - at)));
        at = end + 1;
      }
    } else {
      throw InvalidInput(fmt::format("unknown argument {}", a));
    }
  }
  if (hostsPath.empty() || keyPath.empty() || flowSpec.empty() || pingSpec.empty() == cost.empty())
    throw InvalidInput("--hosts, --key, --flows and one of --pings and --cost are required");
  const std::vector<Host> hosts = probe::loadHostsFile(hostsPath);
  const auto flows = pairsOf(flowSpec, hosts, "--flows");
  const probe::ProbeKey key = probe::ProbeKey::load(keyPath);
  probe::AgentFleet fleet(hosts, key, "loaded_rtt_bench");
  if (!cost.empty()) {
    std::cout << costRun(fleet, hosts, flows, cost, trials).dump() << std::endl;
    return 0;
  }
  const auto pings = pairsOf(pingSpec, hosts, "--pings");
  std::vector<std::vector<double>> rates(flows.size()), loaded(pings.size()), idle(pings.size());
  probe::BandwidthOptions bo;
  bo.startInMs = 200;
  for (int t = 0; t < trials; ++t) {
    probe::LoadedPings lp;
    lp.pairs = pings;
    auto got = fleet.bandwidth(flows, bo, Deadline::after(std::chrono::seconds(20)), &lp);
    for (size_t k = 0; k < flows.size(); ++k)
      if (got[k].value) rates[k].push_back(*got[k].value);
    for (size_t k = 0; k < pings.size(); ++k)
      if (lp.us[k]) loaded[k].push_back(*lp.us[k]);
    probe::LatencyOptions lo;
    lo.warmup = 2;
    lo.samples = 3;
    auto quiet = fleet.latency(pings, lo, Deadline::after(std::chrono::seconds(10)));
    for (size_t k = 0; k < pings.size(); ++k)
      if (quiet[k].value) idle[k].push_back(quiet[k].value->minUs);
  }
  Json out = {{"trials", trials}, {"flows", Json::array()}, {"pings", Json::array()}};
  for (size_t k = 0; k < flows.size(); ++k)
    out["flows"].push_back({{"from", hosts[static_cast<size_t>(flows[k].first)].name},
                            {"to", hosts[static_cast<size_t>(flows[k].second)].name},
                            {"median_mbps", median(rates[k])},
                            {"mbps", rates[k]}});
  for (size_t k = 0; k < pings.size(); ++k)
    out["pings"].push_back({{"from", hosts[static_cast<size_t>(pings[k].first)].name},
                            {"to", hosts[static_cast<size_t>(pings[k].second)].name},
                            {"loaded_median_us", median(loaded[k])},
                            {"idle_median_us", median(idle[k])},
                            {"loaded_us", loaded[k]},
                            {"idle_us", idle[k]}});
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace
}  // namespace rankmap

int main(int argc, char** argv) {
  try {
    return rankmap::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "loaded_rtt_bench: " << e.what() << "\n";
    return 2;
  }
}
