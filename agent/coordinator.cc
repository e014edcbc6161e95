#include "agent/coordinator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "common/log.h"
#include "probe/fanout.h"
#include "probe/hosts.h"
#include "probe/measure.h"
#include "probe/schedule.h"

namespace rankmap::agent {
namespace {

using Clock = std::chrono::steady_clock;
// A flow below this fraction of what the model predicts for it alone is measured again.
constexpr double kRemeasureFraction = 0.9;
// From the second pass, against the median of the flows between the same two groups: a flow
// this far below or above it is retried. Below is tighter than the model's 0.9 because a class
// median is a clean rate; it catches an in-rack flow held back by a busy sender.
constexpr double kClassLowFraction = 0.93;
constexpr double kHighFraction = 1.08;
// A flow whose reverse direction reads this many times its rate is retried: the planner drops
// pairs beyond kMaxDirectionRatio (common/topology.h), so the probe retries well before that, and
// a lopsided pair is nearly always one reading taken while its sender or receiver was
// descheduled.
constexpr double kLopsided = 2.0;
static_assert(kLopsided < kMaxDirectionRatio, "retry lopsided pairs before the planner drops them");
constexpr int64_t kAnswerMarginMs = 500;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string reasonOf(const std::exception& e) {
  if (dynamic_cast<const probe::AuthError*>(&e)) return "auth";
  if (dynamic_cast<const TimeoutError*>(&e)) return "timeout";
  std::string what = e.what();
  if (what.find("refused:") != std::string::npos) return "refused";
  if (what.find("connect to") != std::string::npos) return "connect";
  return "peer";
}

}  // namespace

std::string RoundResult::status() const {
  size_t hosts = topology.size();
  if (cancelled || (hosts >= 2 && pairsMissing == pairsTotal)) return "failed";
  if (pairsMissing > 0 || flowsMissing > 0 || !deadHosts.empty()) return "partial";
  return "ok";
}

double relativeChange(double a, double b) {
  if (a <= 0) return b > 0 ? std::numeric_limits<double>::infinity() : 0;
  return std::fabs(b - a) / a;
}

size_t changedPairs(const Topology& a, const Topology& b, double threshold) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a.size(); ++j) {
      if (i == j) continue;
      int bi = b.indexOf(a.hosts[i].name), bj = b.indexOf(a.hosts[j].name);
      if (bi < 0 || bj < 0) continue;
      auto x = a.bandwidthMbps.at(i, j);
      auto y = b.bandwidthMbps.at(static_cast<size_t>(bi), static_cast<size_t>(bj));
      if (x && y && relativeChange(*x, *y) > threshold) ++n;
    }
  return n;
}

Coordinator::Coordinator(std::vector<Host> hosts, const probe::ProbeKey& key, std::string self,
                         ProbeOptions opts)
    : hosts_(std::move(hosts)), key_(key), self_(std::move(self)), opts_(std::move(opts)) {
  probe::validateHosts(hosts_, "probe round");
}

Json Coordinator::peerJson(int h) const {
  const Host& host = hosts_[static_cast<size_t>(h)];
  return {{"name", host.name}, {"address", host.address}};
}

Deadline Coordinator::latencyDeadline(Deadline round) const {
  // A round trip under a few ms is normal; allow 20 ms each before calling the pair slow.
  auto expected = std::chrono::milliseconds(20 * (opts_.latency.warmup + opts_.latency.samples));
  return Deadline::after(expected + opts_.taskSlack).min(round);
}

Deadline Coordinator::bandwidthDeadline(Deadline round, const probe::BandwidthOptions& bo) const {
  auto expected = std::chrono::milliseconds(2 * bo.maxMs);
  return Deadline::after(expected + opts_.taskSlack).min(round);
}

void Coordinator::runTasks(std::vector<Task>& tasks) {
  // Every task at once, multiplexed on this thread (probe/fanout.h). The agent bounds its own
  // work a little inside our deadline ("timeout_ms", stamped when the request is sent), so that
  // its answer (even "the peer timed out") arrives before we give up on it.
  std::vector<probe::PendingRequest> requests;
  std::vector<size_t> which;  // requests[k] is tasks[which[k]]
  for (size_t i = 0; i < tasks.size(); ++i) {
    Task& t = tasks[i];
    probe::PendingRequest r;
    try {
      r.agent = probe::hostEndpoint(hosts_[static_cast<size_t>(t.host)]);
    } catch (const std::exception& e) {
      t.error = e.what();
      t.reason = reasonOf(e);
      t.agentFailed = true;
      continue;
    }
    r.body = t.request;
    r.deadline = t.deadline;
    r.answerMargin = std::chrono::milliseconds(kAnswerMarginMs);
    requests.push_back(std::move(r));
    which.push_back(i);
  }
  probe::RetryPolicy retry;
  retry.connectTimeout = opts_.connectTimeout;
  auto outcomes = probe::requestAll(requests, key_, self_, retry);
  for (size_t k = 0; k < outcomes.size(); ++k) {
    Task& t = tasks[which[k]];
    probe::RequestOutcome& o = outcomes[k];
    if (!o.reply) {
      t.error = std::move(o.error);
      t.reason = probe::requestFailureName(o.failure);
      t.agentFailed = true;
    } else if (o.reply->is_object() && o.reply->contains("error")) {
      t.error = o.reply->value("error", std::string("failed"));
      t.reason = o.reply->value("reason", std::string("peer"));
    } else {
      t.reply = std::move(*o.reply);
    }
  }
}

std::vector<bool> Coordinator::alive(Deadline d) {
  std::vector<Task> tasks(hosts_.size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    tasks[h].host = static_cast<int>(h);
    tasks[h].request = {{"op", "hello"}};
    tasks[h].deadline = d;
  }
  runTasks(tasks);
  std::vector<bool> out(hosts_.size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    out[h] = tasks[h].error.empty();
    if (!out[h])
      RANKMAP_WARN(Probe, "agent {} ({}) is not answering: {}", hosts_[h].name, hosts_[h].address,
                   tasks[h].error);
  }
  return out;
}

std::vector<std::optional<double>> Coordinator::runFlows(
    const std::vector<probe::HostPair>& flows, const probe::BandwidthOptions& bo, Deadline round,
    std::vector<bool>& dead, std::map<std::string, uint64_t>& failures) {
  std::vector<std::optional<double>> out(flows.size());
  std::vector<Task> tasks;
  std::vector<size_t> which;
  Deadline d = bandwidthDeadline(round, bo);
  for (size_t k = 0; k < flows.size(); ++k) {
    auto [s, t] = flows[k];
    if (dead[static_cast<size_t>(s)] || dead[static_cast<size_t>(t)]) continue;
    Task task;
    task.host = s;
    task.request = {
        {"op", "bandwidth"}, {"direction", "send"}, {"peer", peerJson(t)}, {"bulk", bo.toJson()}};
    task.deadline = d;
    tasks.push_back(std::move(task));
    which.push_back(k);
  }
  if (tasks.empty()) return out;
  runTasks(tasks);
  for (size_t i = 0; i < tasks.size(); ++i) {
    auto [s, t] = flows[which[i]];
    const Task& task = tasks[i];
    if (task.error.empty()) {
      try {
        out[which[i]] = probe::BulkResult::fromJson(task.reply, "bandwidth reply").mbps;
        continue;
      } catch (const std::exception& e) {
        failures["peer"]++;
        RANKMAP_WARN(Probe, "flow {} -> {}: bad reply: {}", hosts_[static_cast<size_t>(s)].name,
                     hosts_[static_cast<size_t>(t)].name, e.what());
        continue;
      }
    }
    failures[task.reason]++;
    int culprit = task.agentFailed ? s : t;
    if (!dead[static_cast<size_t>(culprit)])
      RANKMAP_WARN(Probe, "flow {} -> {} failed ({}): {}; {} is out of this round",
                   hosts_[static_cast<size_t>(s)].name, hosts_[static_cast<size_t>(t)].name,
                   task.reason, task.error, hosts_[static_cast<size_t>(culprit)].name);
    dead[static_cast<size_t>(culprit)] = true;
  }
  return out;
}

RoundResult Coordinator::runFull(Deadline d, const ProgressFn& progress,
                                 const std::atomic<bool>* cancel) {
  auto t0 = Clock::now();
  size_t n = hosts_.size();
  RoundResult res;
  res.topology = Topology::empty(hosts_);
  res.topology.probe.latencySamples = opts_.latency.samples;
  res.topology.probe.bandwidthMaxMs = opts_.bandwidthEnabled ? opts_.bandwidth.maxMs : 0;
  res.topology.probe.bandwidthMaxBytes =
      opts_.bandwidthEnabled ? static_cast<int64_t>(opts_.bandwidth.maxBytes) : 0;
  res.topology.probe.contention = opts_.contention && opts_.bandwidthEnabled;
  res.topology.time = utcNow();
  res.pairsTotal = n * (n - 1) / 2;
  auto cancelled = [&] { return (cancel && cancel->load()) || d.expired(); };

  auto rounds = probe::roundRobin(static_cast<int>(n));
  int contentionCount =
      opts_.contentionTrials > 0 ? opts_.contentionTrials : 2 * (static_cast<int>(n) - 1);
  bool contention = res.topology.probe.contention && n >= 3;
  size_t bwSteps = opts_.bandwidthEnabled ? rounds.size() * (opts_.bidirectional ? 1 : 2) : 0;
  RoundProgress prog{
      "liveness", 0,
      1 + rounds.size() + bwSteps + (contention ? static_cast<size_t>(contentionCount) : 0)};
  auto step = [&](const std::string& phase) {
    prog.phase = phase;
    ++prog.done;
    if (progress) progress(prog);
  };
  auto phaseStart = Clock::now();
  auto endPhase = [&](const std::string& name) {
    res.phaseSeconds[name] = since(phaseStart);
    phaseStart = Clock::now();
  };

  // 1. Liveness.
  std::vector<bool> dead(n, false);
  {
    auto up = alive(Deadline::after(opts_.connectTimeout).min(d));
    for (size_t h = 0; h < n; ++h)
      if (!up[h]) {
        dead[h] = true;
        res.failures["connect"]++;
      }
  }
  step("latency");
  endPhase("liveness");

  // 2. Latency.
  for (const auto& round : rounds) {
    if (cancelled()) break;
    std::vector<Task> tasks;
    std::vector<int> peers;
    Deadline ld = latencyDeadline(d);
    for (auto [a, b] : round) {
      if (dead[static_cast<size_t>(a)] || dead[static_cast<size_t>(b)]) continue;
      peers.push_back(b);
      Task t;
      t.host = a;
      t.request = {{"op", "latency"},
                   {"peer", peerJson(b)},
                   {"warmup", opts_.latency.warmup},
                   {"samples", opts_.latency.samples}};
      t.deadline = ld;
      tasks.push_back(std::move(t));
    }
    runTasks(tasks);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const Task& t = tasks[i];
      int a = t.host, b = peers[i];
      auto ai = static_cast<size_t>(a), bi = static_cast<size_t>(b);
      if (!t.error.empty()) {
        res.failures[t.reason]++;
        int culprit = t.agentFailed ? a : b;
        RANKMAP_WARN(Probe, "latency {} -> {} failed ({}): {}; {} is out of this round",
                     hosts_[ai].name, hosts_[bi].name, t.reason, t.error,
                     hosts_[static_cast<size_t>(culprit)].name);
        dead[static_cast<size_t>(culprit)] = true;
        continue;
      }
      try {
        JsonReader r(t.reply, "latency reply");
        auto l = r.at("latency");
        LatencyStats s{l.at("min").nonNegative(), l.at("median").nonNegative(),
                       l.at("p90").nonNegative(), l.at("p99").nonNegative()};
        res.topology.latencyUs.at(ai, bi) = s;
        res.topology.latencyUs.at(bi, ai) = s;
        res.measurements.push_back(
            {hosts_[ai].name, hosts_[bi].name, "latency", s.medianUs, "round", l.json()});
      } catch (const std::exception& e) {
        res.failures["peer"]++;
        RANKMAP_WARN(Probe, "latency {} -> {}: bad reply: {}", hosts_[ai].name, hosts_[bi].name,
                     e.what());
      }
    }
    step("latency");
  }
  endPhase("latency");

  // Live hosts, renumbered 0..L-1 for the inference (dead hosts have no data to place them).
  std::vector<int> liveIndex(n, -1);
  std::vector<int> liveHosts;
  auto refreshLive = [&] {
    liveHosts.clear();
    std::fill(liveIndex.begin(), liveIndex.end(), -1);
    for (size_t h = 0; h < n; ++h)
      if (!dead[h]) {
        liveIndex[h] = static_cast<int>(liveHosts.size());
        liveHosts.push_back(static_cast<int>(h));
      }
  };

  // 3. Bandwidth rounds; 4. contention trials. Every trial is evidence for the inference.
  std::vector<std::vector<std::pair<probe::HostPair, double>>> trials;
  auto record = [&](const std::vector<probe::HostPair>& flows,
                    const std::vector<std::optional<double>>& rates, const std::string& phase) {
    std::vector<std::pair<probe::HostPair, double>> t;
    for (size_t k = 0; k < flows.size(); ++k) {
      if (!rates[k]) continue;
      auto [s, dd] = flows[k];
      t.emplace_back(flows[k], *rates[k]);
      res.measurements.push_back({hosts_[static_cast<size_t>(s)].name,
                                  hosts_[static_cast<size_t>(dd)].name, "bandwidth", *rates[k],
                                  phase, nullptr});
      if (phase == "round")
        res.topology.bandwidthMbps.at(static_cast<size_t>(s), static_cast<size_t>(dd)) = *rates[k];
    }
    trials.push_back(std::move(t));
  };
  // The round-robin rounds discover the structure; flows that got their single-flow rate there
  // are final, the others are measured again with the full window (step 6).
  probe::BandwidthOptions discovery = opts_.bandwidth;
  if (opts_.discoveryMs > 0) discovery.maxMs = std::min(opts_.discoveryMs, opts_.bandwidth.maxMs);
  const probe::BandwidthOptions& full = opts_.bandwidth;
  if (opts_.bandwidthEnabled) {
    for (const auto& round : rounds) {
      if (cancelled()) break;
      std::vector<probe::HostPair> fwd, back;
      for (auto [a, b] : round) {
        fwd.emplace_back(a, b);
        back.emplace_back(b, a);
      }
      if (opts_.bidirectional) {
        fwd.insert(fwd.end(), back.begin(), back.end());
        record(fwd, runFlows(fwd, discovery, d, dead, res.failures), "round");
        step("bandwidth");
      } else {
        record(fwd, runFlows(fwd, discovery, d, dead, res.failures), "round");
        step("bandwidth");
        if (cancelled()) break;
        record(back, runFlows(back, discovery, d, dead, res.failures), "round");
        step("bandwidth");
      }
    }
    endPhase("bandwidth");
    if (contention) {
      refreshLive();
      auto ct = probe::contentionTrials(static_cast<int>(liveHosts.size()), contentionCount, 12345);
      for (const auto& trial : ct) {
        if (cancelled()) break;
        std::vector<probe::HostPair> flows;
        for (auto [s, t] : trial)
          flows.emplace_back(liveHosts[static_cast<size_t>(s)], liveHosts[static_cast<size_t>(t)]);
        record(flows, runFlows(flows, discovery, d, dead, res.failures), "contention");
        step("contention");
      }
      endPhase("contention");
    }
  }

  // 5. Inference over live hosts.
  refreshLive();
  std::vector<int> groupOfHost(n, -1);  // global index -> group (live hosts only)
  if (opts_.bandwidthEnabled && liveHosts.size() >= 2 && !cancelled()) {
    std::vector<probe::ObservedTrial> obs;
    for (const auto& t : trials) {
      probe::ObservedTrial o;
      for (const auto& [f, rate] : t) {
        int s = liveIndex[static_cast<size_t>(f.first)],
            dd = liveIndex[static_cast<size_t>(f.second)];
        if (s >= 0 && dd >= 0) o.push_back({s, dd, rate});
      }
      if (!o.empty()) obs.push_back(std::move(o));
    }
    if (!obs.empty()) {
      if (log::enabled(log::Subsys::Probe, log::Level::Debug)) {
        Json dump = Json::array();
        for (const auto& t : obs) {
          Json tj = Json::array();
          for (const auto& f : t) tj.push_back({f.src, f.dst, f.mbps});
          dump.push_back(std::move(tj));
        }
        RANKMAP_DEBUG(Probe,
                      "probe round: inference input ({} live hosts, [src, dst, Mbit/s] per "
                      "trial): {}",
                      liveHosts.size(), dump.dump());
      }
      probe::InferOptions io;
      io.timeBudget = std::min<std::chrono::milliseconds>(
          io.timeBudget, std::chrono::duration_cast<std::chrono::milliseconds>(d.remaining() / 4));
      res.inference = probe::inferGroups(static_cast<int>(liveHosts.size()), obs, io);
      for (size_t i = 0; i < liveHosts.size(); ++i)
        groupOfHost[static_cast<size_t>(liveHosts[i])] = res.inference->model.groupOf[i];
    }
    endPhase("inference");
  }

  // 6. Re-measure flows that ran below what they would get alone, or failed while both ends
  // stayed alive, packed so that no uplink carries two of them. A measurement apart replaces a
  // discovery one; among measurements apart a flow keeps the best (interference only ever
  // lowers a rate). Passes repeat for flows still low (a loaded host, a burst of cross
  // traffic, a reverse direction more than kLopsided times faster) up to remeasurePasses, and
  // from the second pass also retry flows that read high against their class (a short window's
  // noise) and take the new reading as it is.
  if (opts_.bandwidthEnabled && opts_.remeasure && res.inference && !cancelled()) {
    const auto& m = res.inference->model;
    std::vector<char> apart(n * n, 0);  // measured apart (full window, no shared uplink)
    std::set<probe::HostPair> high;     // this pass: retried because they read high
    std::vector<int> groupsForPacking(n);
    for (size_t h = 0; h < n; ++h)
      groupsForPacking[h] = groupOfHost[h] >= 0 ? groupOfHost[h] : static_cast<int>(n + h);
    for (int pass = 0; pass < opts_.remeasurePasses && !cancelled(); ++pass) {
      // From the second pass on, every flow has a clean rate (measured apart in the first pass,
      // or already at its model rate in discovery), so the flows between the same two groups
      // show what such a flow gets alone: a later pass retries a flow only when it is also low
      // against their median. The model's rate alone comes from aggregates of concurrent short
      // windows and runs a few percent high (260 for a 250 Mbit/s uplink), which otherwise sent
      // a fifth of the flows, measured correctly, through another full-window pass.
      std::map<std::pair<int, int>, double> classMedian;
      if (pass > 0) {
        std::map<std::pair<int, int>, std::vector<double>> byClass;
        for (int s : liveHosts)
          for (int t : liveHosts) {
            auto v = res.topology.bandwidthMbps.at(static_cast<size_t>(s), static_cast<size_t>(t));
            if (s != t && v)
              byClass[{groupOfHost[static_cast<size_t>(s)], groupOfHost[static_cast<size_t>(t)]}]
                  .push_back(*v);
          }
        for (auto& [cls, rates] : byClass) {
          if (rates.size() < 3) continue;
          std::nth_element(rates.begin(), rates.begin() + static_cast<long>(rates.size() / 2),
                           rates.end());
          classMedian[cls] = rates[rates.size() / 2];
        }
      }
      std::vector<probe::HostPair> again;
      high.clear();
      for (int s : liveHosts)
        for (int t : liveHosts) {
          if (s == t || dead[static_cast<size_t>(s)] || dead[static_cast<size_t>(t)]) continue;
          int si = liveIndex[static_cast<size_t>(s)], ti = liveIndex[static_cast<size_t>(t)];
          double single = probe::maxMinRates(m, {{si, ti}})[0];
          auto cm = classMedian.find(
              {groupOfHost[static_cast<size_t>(s)], groupOfHost[static_cast<size_t>(t)]});
          double lowFraction = kRemeasureFraction;
          if (cm != classMedian.end()) {
            single = std::min(single, cm->second);
            lowFraction = kClassLowFraction;
          }
          auto v = res.topology.bandwidthMbps.at(static_cast<size_t>(s), static_cast<size_t>(t));
          auto rv = res.topology.bandwidthMbps.at(static_cast<size_t>(t), static_cast<size_t>(s));
          const bool lopsided = v && rv && *v * kLopsided < *rv;
          if (!v || (std::isfinite(single) && *v < lowFraction * single) || lopsided) {
            again.emplace_back(s, t);
          } else if (cm != classMedian.end() && *v > kHighFraction * cm->second) {
            again.emplace_back(s, t);
            high.insert({s, t});
          }
        }
      if (again.empty()) break;
      auto slots = probe::packFlows(again, groupsForPacking, opts_.maxParallelFlows);
      prog.total += slots.size();
      RANKMAP_INFO(Probe, "probe round: pass {}: re-measuring {} flows in {} slots", pass + 1,
                   again.size(), slots.size());
      for (const auto& slot : slots) {
        if (cancelled()) break;
        auto rates = runFlows(slot, full, d, dead, res.failures);
        for (size_t k = 0; k < slot.size(); ++k) {
          if (!rates[k]) continue;
          auto [s, t] = slot[k];
          auto& cell =
              res.topology.bandwidthMbps.at(static_cast<size_t>(s), static_cast<size_t>(t));
          char& wasApart = apart[static_cast<size_t>(s) * n + static_cast<size_t>(t)];
          cell = wasApart && !high.count({s, t}) ? std::max(cell.value_or(0), *rates[k])
                                                 : *rates[k];
          wasApart = 1;
          res.measurements.push_back({hosts_[static_cast<size_t>(s)].name,
                                      hosts_[static_cast<size_t>(t)].name, "bandwidth", *rates[k],
                                      "remeasure", nullptr});
        }
        step("remeasure");
      }
    }
    endPhase("remeasure");
  }

  // Assemble: shared links and groups from the inference.
  if (res.inference) {
    for (const auto& g : res.inference->sharedGroups()) {
      SharedLink link;
      for (int i : g)
        link.hosts.push_back(hosts_[static_cast<size_t>(liveHosts[static_cast<size_t>(i)])].name);
      int group = res.inference->model.groupOf[static_cast<size_t>(g.front())];
      link.capacityMbps = res.inference->uplinkCapacity(group);
      res.topology.sharedLinks.push_back(std::move(link));
    }
    if (!res.topology.sharedLinks.empty()) {
      HierarchyLevel level;
      level.name = "rack";
      level.confidence = res.inference->confidence();
      std::map<int, std::vector<std::string>> byGroup;
      for (size_t h = 0; h < n; ++h) {
        int g = groupOfHost[h] >= 0 ? groupOfHost[h] : static_cast<int>(n + h);
        byGroup[g].push_back(hosts_[h].name);
      }
      for (auto& [g, members] : byGroup) level.groups.push_back(std::move(members));
      res.topology.groups.push_back(std::move(level));
    }
  }

  // Missing: pairs with nothing at all; flows without bandwidth.
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      bool any = res.topology.latencyUs.at(a, b).has_value() ||
                 res.topology.bandwidthMbps.at(a, b).has_value() ||
                 res.topology.bandwidthMbps.at(b, a).has_value();
      if (!any) ++res.pairsMissing;
      if (opts_.bandwidthEnabled) {
        res.flowsMissing += !res.topology.bandwidthMbps.at(a, b).has_value();
        res.flowsMissing += !res.topology.bandwidthMbps.at(b, a).has_value();
      }
    }
  for (size_t h = 0; h < n; ++h)
    if (dead[h]) res.deadHosts.push_back(hosts_[h].name);
  res.cancelled = cancel && cancel->load();
  res.seconds = since(t0);
  prog.phase = "done";
  prog.done = prog.total;
  if (progress) progress(prog);
  std::string phases;
  for (const auto& [name, secs] : res.phaseSeconds) phases += fmt::format(" {} {:.2f}", name, secs);
  RANKMAP_INFO(Probe, "probe round: {} hosts, {} of {} pairs missing, {} dead, {:.2f} s ({});{}", n,
               res.pairsMissing, res.pairsTotal, res.deadHosts.size(), res.seconds, res.status(),
               phases);
  return res;
}

CheckResult Coordinator::runCheck(const Topology& current, int checkIndex, int roundsWanted,
                                  double threshold, Deadline d) {
  auto t0 = Clock::now();
  CheckResult res;
  size_t n = hosts_.size();
  // Hosts of `current` by our index.
  std::vector<int> cur(n, -1);
  for (size_t h = 0; h < n; ++h) cur[h] = current.indexOf(hosts_[h].name);
  auto rounds = probe::roundRobin(static_cast<int>(n));
  if (rounds.empty()) return res;
  std::vector<probe::HostPair> flows;
  int count = std::min<int>(roundsWanted, static_cast<int>(rounds.size()));
  for (int k = 0; k < count; ++k) {
    // Spread the sampled rounds over the schedule; successive checks shift by one.
    size_t r = static_cast<size_t>((checkIndex + k * static_cast<int>(rounds.size()) / count) %
                                   static_cast<int>(rounds.size()));
    for (auto [a, b] : rounds[r]) {
      flows.emplace_back(a, b);
      flows.emplace_back(b, a);
    }
  }
  // Flows apart from each other: no host and no shared-link group twice per slot.
  std::vector<int> groupOf(n);
  for (size_t h = 0; h < n; ++h) groupOf[h] = static_cast<int>(1000000 + h);
  for (size_t g = 0; g < current.sharedLinks.size(); ++g)
    for (const auto& name : current.sharedLinks[g].hosts)
      for (size_t h = 0; h < n; ++h)
        if (hosts_[h].name == name) groupOf[h] = static_cast<int>(g);
  std::vector<bool> dead(n, false);
  auto expected = [&](probe::HostPair f) -> std::optional<double> {
    int a = cur[static_cast<size_t>(f.first)], b = cur[static_cast<size_t>(f.second)];
    if (a < 0 || b < 0) return std::nullopt;
    return current.bandwidthMbps.at(static_cast<size_t>(a), static_cast<size_t>(b));
  };
  std::vector<probe::HostPair> suspects;
  for (const auto& slot : probe::packFlows(flows, groupOf, opts_.maxParallelFlows)) {
    if (d.expired()) break;
    auto rates = runFlows(slot, opts_.bandwidth, d, dead, res.failures);
    for (size_t k = 0; k < slot.size(); ++k) {
      if (!rates[k]) continue;
      ++res.flows;
      auto [s, t] = slot[k];
      res.measurements.push_back({hosts_[static_cast<size_t>(s)].name,
                                  hosts_[static_cast<size_t>(t)].name, "bandwidth", *rates[k],
                                  "check", nullptr});
      auto e = expected(slot[k]);
      if (e && relativeChange(*e, *rates[k]) > threshold) suspects.push_back(slot[k]);
    }
  }
  // Confirmation: one flow at a time, so a burst of noise or a neighbour's flow in the same
  // slot does not start a full round.
  for (auto f : suspects) {
    if (d.expired()) break;
    auto rate = runFlows({f}, opts_.bandwidth, d, dead, res.failures)[0];
    if (!rate) continue;
    auto e = expected(f);
    double change = relativeChange(*e, *rate);
    res.measurements.push_back({hosts_[static_cast<size_t>(f.first)].name,
                                hosts_[static_cast<size_t>(f.second)].name, "bandwidth", *rate,
                                "check", nullptr});
    if (change > threshold) {
      ++res.changed;
      res.maxChange = std::max(res.maxChange, change);
      res.changedFlows.push_back(
          fmt::format("{}->{} {:.0f} -> {:.0f} Mbit/s", hosts_[static_cast<size_t>(f.first)].name,
                      hosts_[static_cast<size_t>(f.second)].name, *e, *rate));
    }
  }
  res.seconds = since(t0);
  return res;
}

}  // namespace rankmap::agent
