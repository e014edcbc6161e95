#include "agent/probe_service.h"

#include <thread>

#include "agent/topology_push.h"
#include "common/build_config.h"
#include "common/error.h"
#include "common/log.h"
#include "probe/fanout.h"
#include "probe/hosts.h"
#include "probe/measure.h"

namespace rankmap::agent {
namespace {

constexpr int kMaxLatencySamples = 100000;

}  // namespace

namespace {

probe::LatencyOptions latencyOptions(const JsonReader& r) {
  probe::LatencyOptions lo;
  if (auto v = r.find("warmup")) lo.warmup = static_cast<int>(v->integerIn(0, kMaxLatencySamples));
  if (auto v = r.find("samples"))
    lo.samples = static_cast<int>(v->integerIn(1, kMaxLatencySamples));
  return lo;
}

}  // namespace

// {"op": "latency", "peers": [{name, address}, ...]}: round trips to each peer in turn, each on
// its own connection and under its share of the deadline, so that one silent peer costs only
// its own; the reply lists, in the same order, the statistics or the error.
Json ProbeService::latencyList(const JsonReader& r, const std::string& source, Deadline d,
                               const std::function<void(const std::string&)>& count) {
  const auto lo = latencyOptions(r);
  auto list = r.at("peers", "an array of {name, address}");
  const size_t m = list.arraySize();
  if (m > kMaxLatencyPeers) list.fail(fmt::format("at most {} peers", kMaxLatencyPeers));
  std::vector<Host> peers;
  for (size_t i = 0; i < m; ++i) {
    auto e = list.at(i);
    peers.push_back(
        {e.at("name", "a host name").nonEmptyStr(), e.at("address", "an address").nonEmptyStr()});
  }
  Json out = Json::array();
  for (size_t i = 0; i < peers.size(); ++i) {
    // The time left, shared by the peers still to go.
    const auto share = d.remaining() / static_cast<int64_t>(peers.size() - i);
    const Deadline pd = Deadline::after(share).min(d);
    try {
      LatencyStats s = latency(peers[i], lo, pd);
      count("ok");
      out.push_back({{"min", s.minUs}, {"median", s.medianUs}, {"p90", s.p90Us}, {"p99", s.p99Us}});
    } catch (const InvalidInput&) {
      throw;
    } catch (const std::exception& e) {
      count("failed");
      RANKMAP_DEBUG(Agent, "latency to {} for {} failed: {}", peers[i].name, source, e.what());
      out.push_back({{"error", fmt::format("latency {} -> {}: {}", self_, peers[i].name, e.what())},
                     {"reason", std::string(probe::requestFailureName(probe::failureOf(e)))}});
    }
  }
  return {{"latencies", std::move(out)}};
}

ProbeService::ProbeService(const probe::ProbeKey& key, std::string self, Hooks hooks,
                           Metrics* metrics, Measure measure)
    : key_(key),
      self_(std::move(self)),
      hooks_(std::move(hooks)),
      metrics_(metrics),
      measure_(std::move(measure)) {}

LatencyStats ProbeService::latency(const Host& peer, const probe::LatencyOptions& lo, Deadline d) {
  if (measure_.latency) return measure_.latency(peer, lo, d);
  return probe::measureLatency(probe::hostEndpoint(peer), key_, self_, lo, d);
}

probe::BulkResult ProbeService::bulk(const Host& peer, const probe::BandwidthOptions& bo, bool send,
                                     const std::vector<Host>& pings,
                                     std::vector<std::optional<double>>& pingsUs, Deadline d) {
  pingsUs.assign(pings.size(), std::nullopt);
  if (measure_.bulk) return measure_.bulk(peer, bo, send, pings, pingsUs, d);
  const probe::Endpoint ep = probe::hostEndpoint(peer);
  if (!send) return probe::measureReceiveFrom(ep, key_, self_, bo, d);
  if (pings.empty()) return probe::measureSendTo(ep, key_, self_, bo, d);
  // The round trips beside the flow, on a thread of their own, done by the flow's end.
  const auto start = std::chrono::steady_clock::now() + std::chrono::milliseconds(bo.startInMs);
  const auto at = start + std::chrono::milliseconds(static_cast<int64_t>(
                              probe::kLoadedPingAt * static_cast<double>(bo.maxMs)));
  const Deadline pd = d.min(Deadline::at(probe::bulkEnd(start, bo)));
  std::vector<probe::Endpoint> eps;
  for (const auto& h : pings) eps.push_back(probe::hostEndpoint(h));
  std::thread pinger;
  try {
    pinger = std::thread([&] { pingsUs = probe::loadedRoundTrips(eps, key_, self_, at, pd); });
  } catch (const std::system_error& e) {
    RANKMAP_WARN(Agent, "loaded round trips not taken: no thread ({})", e.what());
  }
  struct Join {
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();
    }
  } join{pinger};
  return probe::measureSendTo(ep, key_, self_, bo, d);
}

Json ProbeService::handle(const Json& request, const std::string& peer, Deadline d) {
  std::string source = fmt::format("request from agent {}", peer);
  JsonReader r(request, source);
  r.expectObject();
  std::string op = r.at("op", "an operation name").str();
  if (auto t = r.find("timeout_ms")) d = d.min(Deadline::afterMs(t->integerIn(1, 3600000)));
  auto count = [&](const std::string& result) {
    if (metrics_)
      metrics_->add("rankmap_probe_tasks_total",
                    fmt::format("op=\"{}\",result=\"{}\"", op, result));
  };

  if (op == "hello") {
    Json j = {{"name", self_}, {"version", RANKMAP_VERSION}};
    auto v = hooks_.topologyVersion ? hooks_.topologyVersion() : std::nullopt;
    j["topology_version"] = v ? Json(*v) : Json(nullptr);
    return j;
  }
  if (op == "passive") {
    bool rebase = false;
    if (auto v = r.find("rebase")) rebase = v->boolean();
    std::optional<Hooks::ProbedAgo> probed;
    if (auto v = r.find("probed_s")) {
      v->arraySize(2);
      probed = Hooks::ProbedAgo{v->at(0).nonNegative(), v->at(1).nonNegative()};
      if (probed->from < probed->to || probed->from > 86400)
        v->fail("[from, to]: seconds ago, from >= to, at most 86400");
    }
    if (!hooks_.passiveSummary)
      return {{"fresh", false}, {"series", 0}, {"baselined", 0}, {"drifting", Json::array()}};
    return hooks_.passiveSummary(rebase, probed);
  }
  if (op == "topology") {
    const Json& doc = r.at("topology", "a topology document").json();
    // The version this agent stored last, pushed again (a direct retry after its relay answered
    // late): known without reading the document again, a push's main cost on every agent.
    const int64_t latest = hooks_.topologyVersion ? hooks_.topologyVersion().value_or(0) : 0;
    const auto v = doc.is_object() ? doc.find("version") : doc.end();
    bool stored = false;
    int64_t version = 0;
    if (latest > 0 && v != doc.end() && v->is_number_integer() && v->get<int64_t>() == latest) {
      version = latest;
    } else {
      Topology t = Topology::fromJson(doc, source);
      if (t.version <= 0) r.at("topology").at("version").fail("a positive version");
      stored = hooks_.storeTopology && hooks_.storeTopology(t);
      version = t.version;
    }
    count(stored ? "stored" : "known");
    Json reply = {{"stored", stored}, {"version", version}};
    // A relay (agent/topology_push.h): forward to the group the coordinator named.
    if (auto list = r.find("relay"))
      reply["relay"] = relayTopology(doc, list->json(), source, key_, self_, d);
    return reply;
  }
  if (op == "latency" && r.find("peers")) return latencyList(r, source, d, count);
  if (op != "latency" && op != "bandwidth")
    throw InvalidInput(
        fmt::format("{}: unknown op '{}' (expected hello, passive, latency, bandwidth or "
                    "topology)",
                    source, op));

  auto pr = r.at("peer", "{name, address}");
  Host target{pr.at("name", "a host name").nonEmptyStr(),
              pr.at("address", "an address").nonEmptyStr()};
  probe::Endpoint ep = probe::hostEndpoint(target);
  try {
    if (op == "latency") {
      const auto lo = latencyOptions(r);
      LatencyStats s = latency(target, lo, d);
      count("ok");
      return {{"latency",
               {{"min", s.minUs}, {"median", s.medianUs}, {"p90", s.p90Us}, {"p99", s.p99Us}}}};
    }
    auto bo = probe::BandwidthOptions::fromJson(r.at("bulk", "bulk options").json(), source);
    if (auto v = r.find("start_in_ms")) bo.startInMs = v->integerIn(0, probe::kMaxBulkStartMs);
    std::string dir = r.at("direction", "\"send\" or \"recv\"").str();
    if (dir != "send" && dir != "recv") r.at("direction").fail("\"send\" or \"recv\"");
    // Loaded round trips beside a sent flow ("pings": [{name, address}, ...]).
    std::vector<Host> pings;
    if (auto list = r.find("pings")) {
      if (dir != "send") list->fail("no pings with direction \"recv\"");
      const size_t m = list->arraySize();
      if (m > probe::kMaxLoadedPings)
        list->fail(fmt::format("at most {} peers", probe::kMaxLoadedPings));
      for (size_t i = 0; i < m; ++i) {
        auto e = list->at(i);
        pings.push_back({e.at("name", "a host name").nonEmptyStr(),
                         e.at("address", "an address").nonEmptyStr()});
      }
    }
    std::vector<std::optional<double>> pingsUs;
    probe::BulkResult b = bulk(target, bo, dir == "send", pings, pingsUs, d);
    count("ok");
    Json reply = b.toJson();
    if (!pings.empty()) {
      Json us = Json::array();
      for (const auto& v : pingsUs) us.push_back(v ? Json(*v) : Json(nullptr));
      reply["pings_us"] = std::move(us);
    }
    return reply;
  } catch (const InvalidInput&) {
    throw;
  } catch (const std::exception& e) {
    count("failed");
    RANKMAP_DEBUG(Agent, "{} to {} ({}) for {} failed: {}", op, target.name, ep.text(), peer,
                  e.what());
    return {{"error", fmt::format("{} {} -> {}: {}", op, self_, target.name, e.what())},
            {"reason", std::string(probe::requestFailureName(probe::failureOf(e)))}};
  }
}

}  // namespace rankmap::agent
