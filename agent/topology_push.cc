#include "agent/topology_push.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "common/error.h"
#include "common/log.h"
#include "probe/fanout.h"
#include "probe/hosts.h"

namespace rankmap::agent {
namespace {

// Time a relay keeps for its own answer after forwarding: what is left of the coordinator's
// deadline when it builds the request, less this, is the relay's budget ("timeout_ms").
constexpr std::chrono::milliseconds kRelayAnswerMargin{300};

Json pushBody(const Json& topology) { return Json{{"op", "topology"}, {"topology", topology}}; }

Json hostsJson(const std::vector<Host>& hosts) {
  Json a = Json::array();
  for (const auto& h : hosts) a.push_back({{"name", h.name}, {"address", h.address}});
  return a;
}

}  // namespace

std::vector<PushRoute> pushRoutes(const Topology& t, const std::vector<Host>& hosts,
                                  std::string_view self) {
  std::vector<std::vector<Host>> groups;
  std::vector<Host> direct;  // the coordinator's own group, and hosts no group places
  if (!t.groups.empty()) {
    std::map<std::string, size_t> groupOf;
    const auto& level = t.groups.front().groups;
    for (size_t g = 0; g < level.size(); ++g)
      for (const auto& name : level[g]) groupOf[name] = g;
    auto own = groupOf.find(std::string(self));
    groups.resize(level.size());
    for (const auto& h : hosts) {
      if (h.name == self) continue;
      auto it = groupOf.find(h.name);
      if (it == groupOf.end() || (own != groupOf.end() && it->second == own->second))
        direct.push_back(h);
      else
        groups[it->second].push_back(h);
    }
  } else {
    std::vector<Host> others;
    for (const auto& h : hosts)
      if (h.name != self) others.push_back(h);
    size_t chunk = std::max<size_t>(
        1, static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(others.size())))));
    for (size_t i = 0; i < others.size(); i += chunk)
      groups.emplace_back(others.begin() + static_cast<long>(i),
                          others.begin() + static_cast<long>(std::min(others.size(), i + chunk)));
  }
  std::vector<PushRoute> routes;
  for (auto& h : direct) routes.push_back({std::move(h), {}});
  for (auto& g : groups) {
    if (g.empty()) continue;
    PushRoute r{g.front(), {}};
    r.relay.assign(g.begin() + 1, g.end());
    routes.push_back(std::move(r));
  }
  return routes;
}

PushReport pushTopology(const Json& topology, const std::vector<PushRoute>& routes,
                        const probe::ProbeKey& key, const std::string& self, Deadline relayWave,
                        Deadline end) {
  PushReport rep;
  const Json body = pushBody(topology);
  std::vector<probe::PendingRequest> wave;
  std::vector<Host> second;  // hosts for the direct wave
  auto request = [&](const Host& h, Deadline d) -> bool {
    probe::PendingRequest r;
    try {
      r.agent = probe::hostEndpoint(h);
    } catch (const std::exception& e) {
      rep.failed.emplace_back(h.name, e.what());
      return false;
    }
    r.body = body;
    r.deadline = d;
    wave.push_back(std::move(r));
    return true;
  };
  std::vector<const PushRoute*> first;
  for (const auto& route : routes) {
    rep.agents += 1 + route.relay.size();
    if (!request(route.to, relayWave)) {
      second.insert(second.end(), route.relay.begin(), route.relay.end());
      continue;
    }
    if (!route.relay.empty()) {
      wave.back().body["relay"] = hostsJson(route.relay);
      wave.back().answerMargin = kRelayAnswerMargin;
      ++rep.relays;
    }
    first.push_back(&route);
  }
  auto out = probe::requestAll(wave, key, self);
  for (size_t k = 0; k < out.size(); ++k) {
    const PushRoute& route = *first[k];
    if (!out[k].reply) {
      // The relay itself failed: everyone it should have served gets it directly.
      second.push_back(route.to);
      second.insert(second.end(), route.relay.begin(), route.relay.end());
      continue;
    }
    ++rep.reached;
    if (route.relay.empty()) continue;
    std::set<std::string> missed;
    try {
      JsonReader r(*out[k].reply, fmt::format("push reply from {}", route.to.name));
      auto rel = r.at("relay", "what the relay forwarded");
      auto failed = rel.at("failed", "the hosts it could not reach");
      for (size_t i = 0; i < failed.arraySize(); ++i)
        missed.insert(failed.at(i).at("name", "a host name").str());
    } catch (const std::exception& e) {
      RANKMAP_WARN(Agent, "topology push: relay {}: {}; pushing to its group directly",
                   route.to.name, e.what());
      for (const auto& h : route.relay) missed.insert(h.name);
    }
    for (const auto& h : route.relay)
      if (missed.count(h.name))
        second.push_back(h);
      else
        ++rep.reached;
  }
  if (second.empty()) return rep;
  wave.clear();
  std::vector<Host> sent;
  for (const auto& h : second)
    if (request(h, end)) sent.push_back(h);
  rep.direct = wave.size();
  out = probe::requestAll(wave, key, self);
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k].reply)
      ++rep.reached;
    else
      rep.failed.emplace_back(sent[k].name, out[k].error);
  }
  return rep;
}

Json relayTopology(const Json& topology, const Json& list, std::string_view source,
                   const probe::ProbeKey& key, const std::string& self, Deadline d) {
  JsonReader r(list, source, "/relay");
  size_t n = r.arraySize();
  if (n > probe::kMaxHosts) r.fail(fmt::format("at most {} hosts", probe::kMaxHosts));
  std::vector<Host> hosts;
  for (size_t i = 0; i < n; ++i) {
    auto e = r.at(i);
    e.expectObject();
    hosts.push_back({e.at("name", "a host name").nonEmptyStr(),
                     e.at("address", "a numeric address").nonEmptyStr()});
  }
  if (!hosts.empty()) probe::validateHosts(hosts, fmt::format("{} /relay", source));
  const Json body = pushBody(topology);
  std::vector<probe::PendingRequest> wave;
  std::vector<const Host*> to;
  for (const auto& h : hosts) {
    if (h.name == self) continue;
    probe::PendingRequest p;
    p.agent = probe::hostEndpoint(h);
    p.body = body;
    p.deadline = d;
    wave.push_back(std::move(p));
    to.push_back(&h);
  }
  auto out = probe::requestAll(wave, key, self);
  Json failed = Json::array();
  size_t sent = 0;
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k].reply)
      ++sent;
    else
      failed.push_back({{"name", to[k]->name}, {"error", out[k].error}});
  }
  RANKMAP_DEBUG(Agent, "agent {}: relayed a topology to {} of {} hosts", self, sent, out.size());
  return Json{{"sent", sent}, {"failed", std::move(failed)}};
}

}  // namespace rankmap::agent
