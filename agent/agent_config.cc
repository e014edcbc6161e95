#include "agent/agent_config.h"

#include <unistd.h>

#include <cctype>
#include <set>

#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/log.h"

namespace rankmap::agent {
namespace {

constexpr size_t kMaxConfigBytes = 1 << 20;

void checkKeys(const JsonReader& r, std::initializer_list<std::string_view> known) {
  r.expectObject();
  std::set<std::string_view> k(known);
  for (auto it = r.json().begin(); it != r.json().end(); ++it)
    if (!k.count(it.key()))
      throw InvalidInput(fmt::format("{}: at {}/{}: unknown key (expected one of: {})", r.source(),
                                     r.path(), it.key(), fmt::join(known, ", ")));
}

std::chrono::milliseconds durationOf(const JsonReader& r) {
  if (r.json().is_number()) {
    double s = r.nonNegative();
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  auto d = parseDuration(r.str());
  if (!d) r.fail("a duration such as \"250ms\", \"10s\" or \"5m\"");
  return *d;
}

uint64_t sizeOf(const JsonReader& r) {
  if (r.json().is_number()) return r.unsignedInt();
  auto s = parseSize(r.str());
  if (!s) r.fail("a size such as \"64M\" or a number of bytes");
  return *s;
}

double fraction(const JsonReader& r, double hi) {
  double v = r.nonNegative();
  if (v > hi) r.fail(fmt::format("a number in [0, {}]", hi));
  return v;
}

std::string durationText(std::chrono::milliseconds d) { return fmt::format("{}ms", d.count()); }

}  // namespace

void applyProbeOptions(const JsonReader& r, ProbeOptions& p) {
  checkKeys(r, {"latency_samples", "latency_warmup", "bandwidth", "bandwidth_max_ms",
                "bandwidth_max_bytes", "bandwidth_warmup", "bidirectional", "contention",
                "contention_trials", "discovery_ms", "remeasure", "remeasure_passes",
                "max_parallel_flows", "connect_timeout", "task_slack", "round_timeout"});
  if (auto v = r.find("latency_samples"))
    p.round.latency.samples = static_cast<int>(v->integerIn(1, 100000));
  if (auto v = r.find("latency_warmup"))
    p.round.latency.warmup = static_cast<int>(v->integerIn(0, 10000));
  if (auto v = r.find("bandwidth")) p.round.bandwidthEnabled = v->boolean();
  if (auto v = r.find("bandwidth_max_ms")) p.round.bandwidth.maxMs = v->integerIn(1, 60000);
  if (auto v = r.find("bandwidth_max_bytes")) {
    p.round.bandwidth.maxBytes = sizeOf(*v);
    if (p.round.bandwidth.maxBytes == 0 || p.round.bandwidth.maxBytes > (4ull << 30))
      v->fail("a size in 1..4G");
  }
  if (auto v = r.find("bandwidth_warmup")) p.round.bandwidth.warmupFraction = fraction(*v, 0.9);
  for (const char* key : kRetiredProbeKeys)
    if (r.find(key))
      RANKMAP_WARN(Agent, "{}: probe option \"{}\" is ignored: the structure-first probe has no "
                   "such step (docs/probing.md)", r.source(), key);
  if (auto v = r.find("max_parallel_flows"))
    p.round.maxFlowsPerTrial = static_cast<size_t>(v->integerIn(0, 1 << 20));
  if (auto v = r.find("connect_timeout")) p.fleet.connectTimeout = durationOf(*v);
  if (auto v = r.find("task_slack")) p.fleet.taskSlack = durationOf(*v);
  if (auto v = r.find("round_timeout")) p.roundTimeout = durationOf(*v);
}

Json probeOptionsToJson(const ProbeOptions& p) {
  return {{"latency_samples", p.round.latency.samples},
          {"latency_warmup", p.round.latency.warmup},
          {"bandwidth", p.round.bandwidthEnabled},
          {"bandwidth_max_ms", p.round.bandwidth.maxMs},
          {"bandwidth_max_bytes", p.round.bandwidth.maxBytes},
          {"bandwidth_warmup", p.round.bandwidth.warmupFraction},
          {"max_parallel_flows", p.round.maxFlowsPerTrial},
          {"connect_timeout", durationText(p.fleet.connectTimeout)},
          {"task_slack", durationText(p.fleet.taskSlack)},
          {"round_timeout", durationText(p.roundTimeout)}};
}

AgentConfig AgentConfig::fromJson(const Json& doc, std::string_view source) {
  JsonReader r(doc, source);
  checkKeys(r, {"name", "listen", "probe_listen", "metrics_listen", "hosts_file", "hosts_watch",
                "state_dir", "token_file", "key_file", "coordinator", "prior", "prior_labels",
                "probe", "reprobe", "http"});
  AgentConfig c;
  if (auto v = r.find("name")) c.name = v->str();
  if (auto v = r.find("listen"))
    c.listen = probe::parseEndpoint(v->nonEmptyStr(), 7410, fmt::format("{}: listen", source));
  if (auto v = r.find("probe_listen"))
    c.probeListen = probe::parseEndpoint(v->nonEmptyStr(), probe::kDefaultProbePort,
                                         fmt::format("{}: probe_listen", source));
  if (auto v = r.find("metrics_listen"); v && !v->str().empty())
    c.metricsListen = probe::parseEndpoint(v->str(), kDefaultMetricsPort,
                                           fmt::format("{}: metrics_listen", source));
  if (auto v = r.find("hosts_file")) c.hostsFile = v->str();
  if (auto v = r.find("hosts_watch")) c.hostsWatch = durationOf(*v);
  if (auto v = r.find("state_dir")) c.stateDir = v->nonEmptyStr();
  if (auto v = r.find("token_file")) c.tokenFile = v->str();
  if (auto v = r.find("key_file")) c.keyFile = v->str();
  if (auto v = r.find("coordinator")) c.coordinator = v->str();
  if (auto v = r.find("prior")) c.priorFile = v->str();
  if (auto v = r.find("prior_labels")) c.priorLabels = v->str();
  if (auto p = r.find("probe")) applyProbeOptions(*p, c.probe);
  if (auto p = r.find("reprobe")) {
    checkKeys(*p, {"interval", "jitter", "sample_rounds", "change_threshold", "publish_threshold",
                   "passive_hold"});
    if (auto v = p->find("interval")) c.reprobe.interval = durationOf(*v);
    if (auto v = p->find("jitter")) c.reprobe.jitter = fraction(*v, 0.5);
    for (const char* key : kRetiredReprobeKeys)
      if (p->find(key))
        RANKMAP_WARN(Agent, "{}: reprobe option \"{}\" is ignored: the light check measures "
                     "representatives of every link, not a sample (docs/probing.md)", source, key);
    if (auto v = p->find("change_threshold")) c.reprobe.changeThreshold = fraction(*v, 10);
    if (auto v = p->find("publish_threshold")) c.reprobe.publishThreshold = fraction(*v, 10);
    if (auto v = p->find("passive_hold")) c.reprobe.passiveHold = durationOf(*v);
  }
  if (auto p = r.find("http")) {
    checkKeys(*p, {"max_body_bytes", "timeout", "max_connections"});
    if (auto v = p->find("max_body_bytes")) {
      c.maxBodyBytes = sizeOf(*v);
      if (c.maxBodyBytes < 1024 || c.maxBodyBytes > (64u << 20)) v->fail("a size in 1K..64M");
    }
    if (auto v = p->find("timeout")) {
      c.httpTimeout = durationOf(*v);
      if (c.httpTimeout < std::chrono::milliseconds(100) ||
          c.httpTimeout > std::chrono::minutes(10))
        v->fail("a duration in 100ms..10m");
    }
    if (auto v = p->find("max_connections"))
      c.maxConnections = static_cast<size_t>(v->integerIn(1, 65536));
  }
  return c;
}

AgentConfig AgentConfig::load(const std::string& path) {
  std::string text = readFile(path, kMaxConfigBytes);
  Json doc;
  try {
    doc = Json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw InvalidInput(fmt::format("{}: not valid JSON: {}", path, jsonErrorText(e)));
  }
  return fromJson(doc, path);
}

Json AgentConfig::toJson() const {
  return {{"name", name},
          {"listen", listen.text()},
          {"probe_listen", probeListen.text()},
          {"metrics_listen", metricsListen ? metricsListen->text() : ""},
          {"hosts_file", hostsFile},
          {"hosts_watch", durationText(hostsWatch)},
          {"state_dir", stateDir},
          {"token_file", tokenFile},
          {"key_file", keyFile},
          {"coordinator", coordinator},
          {"prior", priorFile},
          {"prior_labels", priorLabels},
          {"probe", probeOptionsToJson(probe)},
          {"reprobe",
           {{"interval", durationText(reprobe.interval)},
            {"jitter", reprobe.jitter},
            {"change_threshold", reprobe.changeThreshold},
            {"publish_threshold", reprobe.publishThreshold},
            {"passive_hold", durationText(reprobe.passiveHold)}}},
          {"http",
           {{"max_body_bytes", maxBodyBytes},
            {"timeout", durationText(httpTimeout)},
            {"max_connections", maxConnections}}}};
}

}  // namespace rankmap::agent
