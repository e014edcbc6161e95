#include "probe/agent_fleet.h"

#include <algorithm>
#include <map>
#include <random>

#include "common/log.h"
#include "probe/fanout.h"
#include "probe/hosts.h"
#include "probe/measure.h"

namespace rankmap::probe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kAnswerMarginMs = 500;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

AgentFleet::AgentFleet(std::vector<Host> hosts, const ProbeKey& key, std::string self,
                       AgentFleetOptions opts)
    : hosts_(std::move(hosts)),
      key_(key),
      self_(std::move(self)),
      opts_(std::move(opts)),
      pool_(key, self_),
      // Trials of two coordinators, or of two rounds, do not share numbers in the agents' logs.
      lastTrial_(static_cast<int64_t>(std::random_device{}() % (1u << 30)) << 20) {
  validateHosts(hosts_, "probe round");
}

Json AgentFleet::peerJson(int h) const {
  const Host& host = hosts_[static_cast<size_t>(h)];
  return {{"name", host.name}, {"address", host.address}};
}

Deadline AgentFleet::latencyDeadline(Deadline round, const LatencyOptions& lo, size_t peers) const {
  // A round trip under a few ms is normal; allow 20 ms each, and a connection's handshake,
  // before calling a pair slow. The peers of one request are measured one after the other.
  auto expected = std::chrono::milliseconds(20 * (lo.warmup + lo.samples + 3)) *
                  static_cast<int64_t>(std::max<size_t>(1, peers));
  return Deadline::after(expected + opts_.taskSlack).min(round);
}

Deadline AgentFleet::bandwidthDeadline(Deadline round, const BandwidthOptions& bo,
                                       std::chrono::milliseconds barrier) const {
  // Every transfer is over by bulkEnd() after its start (probe/measure.h).
  auto expected = barrier + std::chrono::milliseconds(2 * bo.maxMs + kBulkGraceMs);
  return Deadline::after(expected + opts_.taskSlack).min(round);
}

void AgentFleet::runTasks(std::vector<Task>& tasks) {
  // Every task at once, multiplexed on this thread (probe/fanout.h). The agent bounds its own
  // work a little inside our deadline ("timeout_ms", stamped when the request is sent), so that
  // its answer (even "the peer timed out") arrives before we give up on it.
  std::vector<PendingRequest> requests;
  std::vector<size_t> which;  // requests[k] is tasks[which[k]]
  for (size_t i = 0; i < tasks.size(); ++i) {
    Task& t = tasks[i];
    PendingRequest r;
    try {
      r.agent = hostEndpoint(hosts_[static_cast<size_t>(t.host)]);
    } catch (const std::exception& e) {
      t.error = e.what();
      t.reason = requestFailureName(failureOf(e));
      t.agentFailed = true;
      continue;
    }
    r.body = t.request;
    r.deadline = t.deadline;
    r.answerMargin = std::chrono::milliseconds(kAnswerMarginMs);
    r.startAt = t.startAt;
    requests.push_back(std::move(r));
    which.push_back(i);
  }
  RetryPolicy retry;
  retry.connectTimeout = opts_.connectTimeout;
  cost_.requests += requests.size();
  auto outcomes = requestAll(requests, pool_, retry);
  for (size_t k = 0; k < outcomes.size(); ++k) {
    Task& t = tasks[which[k]];
    RequestOutcome& o = outcomes[k];
    if (!o.reply) {
      t.error = std::move(o.error);
      t.reason = requestFailureName(o.failure);
      t.agentFailed = true;
    } else if (o.reply->is_object() && o.reply->contains("error")) {
      t.error = o.reply->value("error", std::string("failed"));
      t.reason = o.reply->value("reason", std::string("peer"));
    } else {
      t.reply = std::move(*o.reply);
    }
  }
}

std::vector<bool> AgentFleet::alive(Deadline d) {
  std::vector<bool> out(hosts_.size(), false);
  std::vector<std::string> why(hosts_.size());
  // Two tries: an agent busy or restarting answers the second.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<Task> tasks;
    for (size_t h = 0; h < hosts_.size(); ++h) {
      if (out[h]) continue;
      Task t;
      t.host = static_cast<int>(h);
      t.request = {{"op", "hello"}};
      t.deadline = Deadline::after(opts_.connectTimeout).min(d);
      tasks.push_back(std::move(t));
    }
    if (tasks.empty() || d.expired()) break;
    runTasks(tasks);
    for (const auto& t : tasks) {
      out[static_cast<size_t>(t.host)] = t.error.empty();
      why[static_cast<size_t>(t.host)] = t.error;
    }
  }
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (!out[h])
      RANKMAP_WARN(Probe, "agent {} ({}) is not answering: {}", hosts_[h].name, hosts_[h].address,
                   why[h]);
  return out;
}

std::vector<std::optional<Json>> AgentFleet::ask(const Json& request, Deadline d) {
  std::vector<Task> tasks(hosts_.size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    tasks[h].host = static_cast<int>(h);
    tasks[h].request = request;
    tasks[h].deadline = d;
  }
  runTasks(tasks);
  std::vector<std::optional<Json>> out(hosts_.size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (tasks[h].error.empty())
      out[h] = std::move(tasks[h].reply);
    else
      RANKMAP_DEBUG(Probe, "agent {}: {}: {}", hosts_[h].name, request.value("op", "?"),
                    tasks[h].error);
  }
  return out;
}

FleetCost AgentFleet::cost() const {
  FleetCost c = cost_;
  c.seconds = since(made_);
  return c;
}

std::vector<Outcome<LatencyStats>> AgentFleet::latency(const std::vector<HostPair>& pairs,
                                                       const LatencyOptions& lo, Deadline d) {
  std::vector<Outcome<LatencyStats>> out(pairs.size());
  // One request per pinging agent, with every peer it is to ping ("peers"): the round's
  // requests grow with the agents, not with the pairs. Each request's deadline is its own,
  // sized by its peers.
  std::map<int, std::vector<size_t>> byPinger;
  for (size_t k = 0; k < pairs.size(); ++k) byPinger[pairs[k].first].push_back(k);
  std::vector<Task> tasks;
  std::vector<const std::vector<size_t>*> which;
  for (const auto& [host, ks] : byPinger) {
    Task t;
    t.host = host;
    Json peers = Json::array();
    for (size_t k : ks) peers.push_back(peerJson(pairs[k].second));
    t.request = {{"op", "latency"},
                 {"peers", std::move(peers)},
                 {"warmup", lo.warmup},
                 {"samples", lo.samples}};
    t.deadline = latencyDeadline(d, lo, ks.size());
    tasks.push_back(std::move(t));
    which.push_back(&ks);
  }
  runTasks(tasks);
  cost_.latencyPairs += pairs.size();
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    const auto& ks = *which[i];
    if (!t.error.empty()) {
      for (size_t k : ks) {
        auto& o = out[k];
        o.culprit = t.agentFailed ? pairs[k].first : pairs[k].second;
        o.asked = t.agentFailed;
        o.reason = t.reason;
        o.message = t.error;
      }
      continue;
    }
    try {
      JsonReader r(t.reply, "latency reply");
      auto list = r.at("latencies", "one entry per peer asked");
      list.arraySize(ks.size());
      for (size_t j = 0; j < ks.size(); ++j) {
        auto& o = out[ks[j]];
        auto l = list.at(j);
        if (auto err = l.find("error")) {
          o.culprit = pairs[ks[j]].second;
          o.reason = l.at("reason", "a failure reason").str();
          o.message = err->str();
          continue;
        }
        o.value = LatencyStats{l.at("min").nonNegative(), l.at("median").nonNegative(),
                               l.at("p90").nonNegative(), l.at("p99").nonNegative()};
      }
    } catch (const std::exception& e) {
      for (size_t k : ks) {
        if (out[k].value) continue;
        out[k].culprit = pairs[k].first;
        out[k].reason = "peer";
        out[k].message = fmt::format("bad reply: {}", e.what());
      }
    }
  }
  return out;
}

BandwidthReply parseBandwidthReply(const Json& reply, size_t pings) {
  BandwidthReply out{BulkResult::fromJson(reply, "bandwidth reply"), {}};
  if (pings == 0) return out;
  JsonReader r(reply, "bandwidth reply");
  auto list = r.at("pings_us", "a round trip (or null) per peer pinged");
  list.arraySize(pings);
  out.pingsUs.resize(pings);
  for (size_t j = 0; j < pings; ++j)
    if (!list.at(j).json().is_null()) out.pingsUs[j] = list.at(j).nonNegative();
  return out;
}

std::vector<Outcome<double>> AgentFleet::bandwidth(const std::vector<HostPair>& flows,
                                                   const BandwidthOptions& bo, Deadline d,
                                                   LoadedPings* pings) {
  std::vector<Outcome<double>> out(flows.size());
  std::vector<Task> tasks(flows.size());
  // Every flow connects first, then all start together (probe/measure.h): the barrier is what
  // the fan-out of the requests and the agents' handshakes take.
  auto barrier = trialBarrier(flows.size());
  Deadline bd = bandwidthDeadline(d, bo, barrier);
  auto startAt = Clock::now() + barrier;
  BandwidthOptions tagged = bo;
  tagged.trial = ++lastTrial_;
  tagged.trialFlows = static_cast<int64_t>(flows.size());
  const Json opts = tagged.toJson();
  // Loaded round trips ride on their pinger's (first) flow: pingsOf[k], the pairs of flow k's.
  std::vector<std::vector<size_t>> pingsOf(flows.size());
  if (pings) {
    pings->us.assign(pings->pairs.size(), std::nullopt);
    std::map<int, size_t> flowOf;
    for (size_t k = flows.size(); k-- > 0;) flowOf[flows[k].first] = k;
    for (size_t p = 0; p < pings->pairs.size(); ++p) {
      auto it = flowOf.find(pings->pairs[p].first);
      if (it != flowOf.end() && pingsOf[it->second].size() < kMaxLoadedPings)
        pingsOf[it->second].push_back(p);
    }
  }
  for (size_t k = 0; k < flows.size(); ++k) {
    tasks[k].startAt = startAt;
    tasks[k].host = flows[k].first;
    tasks[k].request = {{"op", "bandwidth"},
                        {"direction", "send"},
                        {"peer", peerJson(flows[k].second)},
                        {"bulk", opts}};
    if (!pingsOf[k].empty()) {
      Json peers = Json::array();
      for (size_t p : pingsOf[k]) peers.push_back(peerJson(pings->pairs[p].second));
      tasks[k].request["pings"] = std::move(peers);
      cost_.latencyPairs += pingsOf[k].size();
    }
    tasks[k].deadline = bd;
  }
  auto started = Clock::now();
  runTasks(tasks);
  RANKMAP_DEBUG(Probe, "probe round: trial of {} flows took {:.2f} s", flows.size(),
                since(started));
  ++cost_.trials;
  cost_.bandwidthFlows += flows.size();
  for (size_t k = 0; k < flows.size(); ++k) {
    const Task& t = tasks[k];
    auto& o = out[k];
    if (!t.error.empty()) {
      o.culprit = t.agentFailed ? flows[k].first : flows[k].second;
      o.asked = t.agentFailed;
      o.reason = t.reason;
      o.message = t.error;
      continue;
    }
    try {
      auto r = parseBandwidthReply(t.reply, pingsOf[k].size());
      o.value = r.bulk.mbps;
      cost_.bulkBytes += static_cast<double>(r.bulk.totalBytes);
      for (size_t j = 0; j < r.pingsUs.size(); ++j) pings->us[pingsOf[k][j]] = r.pingsUs[j];
    } catch (const std::exception& e) {
      o.culprit = flows[k].first;
      o.reason = "peer";
      o.message = fmt::format("bad reply: {}", e.what());
    }
  }
  return out;
}

}  // namespace rankmap::probe
