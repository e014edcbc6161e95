#include "agent/topology_push.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "probe/fanout.h"
#include "probe/hosts.h"

namespace rankmap::agent {
namespace {

// Time a relay keeps for its own answer after forwarding: what is left of the coordinator's
// deadline when it builds the request, less this, is the relay's budget ("timeout_ms").
constexpr std::chrono::milliseconds kRelayAnswerMargin{300};

// A push request to `to`: {"op": "topology", "topology": the document}, whose text is made once
// for all the requests of a push.
probe::PendingRequest pushRequest(const Host& to, const std::shared_ptr<const std::string>& doc,
                                  Deadline d) {
  probe::PendingRequest r;
  r.agent = probe::hostEndpoint(to);
  r.body = Json{{"op", "topology"}};
  r.shared = {{"topology", doc}};
  r.deadline = d;
  return r;
}

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
  const size_t others = hosts.size() - static_cast<size_t>(std::count_if(
                                           hosts.begin(), hosts.end(),
                                           [&](const Host& h) { return h.name == self; }));
  const size_t chunk =
      std::max<size_t>(1, static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(others)))));
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
    for (const auto& h : hosts)
      if (h.name != self) direct.push_back(h);
  }
  // No sender sends more than ~2 sqrt(N) copies: the hosts to reach directly, when more than a
  // chunk, and every group larger than a chunk are relayed in chunks (with the found groups of
  // a weak structure, one group can hold most of the hosts).
  std::vector<PushRoute> routes;
  if (direct.size() > chunk) {
    groups.insert(groups.begin(), std::move(direct));
    direct.clear();
  }
  for (auto& h : direct) routes.push_back({std::move(h), {}});
  for (auto& g : groups)
    for (size_t i = 0; i < g.size(); i += chunk) {
      PushRoute r{g[i], {}};
      r.relay.assign(g.begin() + static_cast<long>(i + 1),
                     g.begin() + static_cast<long>(std::min(g.size(), i + chunk)));
      routes.push_back(std::move(r));
    }
  return routes;
}

namespace {

// Sealed copies of a document held at once: about this many bytes. A direct wave to every agent
// held one per agent (256 hosts with matrices: 252 copies of 4.9 MB, 2 GiB in the coordinator).
constexpr size_t kPushBytesInFlight = 256 << 20;

std::vector<probe::RequestOutcome> sendAll(const std::vector<probe::PendingRequest>& wave,
                                           size_t bytes, const probe::ProbeKey& key,
                                           const std::string& self) {
  probe::RetryPolicy policy;
  const size_t cap = std::max<size_t>(16, kPushBytesInFlight / std::max<size_t>(bytes, 1));
  if (cap < wave.size()) policy.maxOpenSockets = cap;  // else the descriptors' budget
  return probe::requestAll(wave, key, self, policy);
}

}  // namespace

PushDeadlines pushDeadlines(const std::vector<PushRoute>& routes, size_t bytes) {
  size_t busiest = routes.size(), agents = 0;  // copies the coordinator sends in the first wave
  for (const auto& r : routes) {
    busiest = std::max(busiest, r.relay.size());
    agents += 1 + r.relay.size();
  }
  auto sending = [&](size_t copies) {
    return std::chrono::milliseconds(static_cast<int64_t>(
        static_cast<double>(copies) * static_cast<double>(bytes) * 8 / (kPushFloorMbps * 1e3)));
  };
  const auto relayWave = kPushRelayWave + sending(busiest);
  return {Deadline::after(relayWave), Deadline::after(relayWave + kPushDirectWave + sending(agents))};
}

PushReport pushTopology(std::shared_ptr<const std::string> doc,
                        const std::vector<PushRoute>& routes, const probe::ProbeKey& key,
                        const std::string& self, Deadline relayWave, Deadline end) {
  PushReport rep;
  std::vector<probe::PendingRequest> wave;
  std::vector<Host> second;  // hosts for the direct wave
  auto request = [&](const Host& h, Deadline d) -> bool {
    try {
      wave.push_back(pushRequest(h, doc, d));
    } catch (const std::exception& e) {
      rep.failed.emplace_back(h.name, e.what());
      return false;
    }
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
  auto out = sendAll(wave, doc->size(), key, self);
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
  // The direct wave, then again for agents whose failure may pass (no connection, no answer in
  // time, a handshake or exchange cut short: a VM stalled for seconds; 4096 hollow agents on
  // two cores closed 297 handshakes unanswered while they stored the document), after a pause,
  // while the push's deadline leaves room: at most kPushRetryWaves waves after the first. An
  // agent that answered with an error (it refused the document) is not asked again.
  for (int w = 0; !second.empty(); ++w) {
    wave.clear();
    std::vector<Host> sent;
    for (const auto& h : second)
      if (request(h, end)) sent.push_back(h);
    rep.direct += wave.size();
    if (w > 0) rep.retried += wave.size();
    out = sendAll(wave, doc->size(), key, self);
    second.clear();
    const bool more = w < kPushRetryWaves && end.remaining() > 2 * kPushRetryPause;
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k].reply)
        ++rep.reached;
      else if (more && out[k].failure != probe::RequestFailure::kRefused)
        second.push_back(sent[k]);
      else
        rep.failed.emplace_back(sent[k].name, out[k].error);
    }
    if (!second.empty()) {
      RANKMAP_INFO(Agent, "topology push: {} agents not reached yet; asking them again in {} ms",
                   second.size(), kPushRetryPause.count());
      std::this_thread::sleep_for(kPushRetryPause);
    }
  }
  return rep;
}

Json relayTopology(const Json& topology, const Json& list, std::string_view source,
                   const probe::ProbeKey& key, const std::string& self, Deadline d) {
  JsonReader r(list, source, "/relay");
  size_t n = r.arraySize();
  if (n > kMaxHosts) r.fail(fmt::format("at most {} hosts", kMaxHosts));
  std::vector<Host> hosts;
  for (size_t i = 0; i < n; ++i) {
    auto e = r.at(i);
    e.expectObject();
    hosts.push_back({e.at("name", "a host name").nonEmptyStr(),
                     e.at("address", "a numeric address").nonEmptyStr()});
  }
  if (!hosts.empty()) probe::validateHosts(hosts, fmt::format("{} /relay", source));
  const auto doc = std::make_shared<const std::string>(topology.dump());
  std::vector<probe::PendingRequest> wave;
  std::vector<const Host*> to;
  for (const auto& h : hosts) {
    if (h.name == self) continue;
    wave.push_back(pushRequest(h, doc, d));
    to.push_back(&h);
  }
  auto out = sendAll(wave, doc->size(), key, self);
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
