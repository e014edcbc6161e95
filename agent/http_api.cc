#include "agent/http_api.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <regex>
#include <unordered_map>

#include "agent/daemon.h"
#include "common/error.h"
#include "common/log.h"
#include "probe/hosts.h"
#include "reorder/mesh.h"
#include "reorder/planner.h"

namespace rankmap::agent {
namespace {

constexpr size_t kMaxListLimit = 1000;
constexpr const char* kJson = "application/json";

// Strings that are not UTF-8 (a request's path or query echoed in an error) are dumped with
// U+FFFD in place of the bad bytes: dump() would throw instead, and out of the error handler that
// ended rankmapd (found by tests/fuzz/fuzz_http_api.cc).
void sendJson(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(1, ' ', false, Json::error_handler_t::replace) + "\n", kJson);
}

void sendError(httplib::Response& res, int status, const std::string& msg) {
  res.status = status;
  res.set_content(errorBody(status, msg), kJson);
}

// Whether every query parameter of `req` is one of `known`; if not, sends 400 naming the first
// unknown one (a misspelt `ranks_per_hosts=4` would otherwise give a plan for 1 rank per host).
bool knownParams(const httplib::Request& req, httplib::Response& res,
                 std::initializer_list<std::string_view> known) {
  for (const auto& [name, value] : req.params) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string list;
    for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    sendError(res, 400, fmt::format("query parameter {:.40}: unknown (expected {})", name, list));
    return false;
  }
  return true;
}

// A non-negative integer query parameter, or `def`; nullopt (and a 400 sent) if malformed.
std::optional<int64_t> intParam(const httplib::Request& req, httplib::Response& res,
                                const char* name, int64_t def, int64_t hi) {
  if (!req.has_param(name)) return def;
  std::string v = req.get_param_value(name);
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || out < 0 || out > hi) {
    sendError(res, 400,
              fmt::format("query parameter {}: expected an integer in [0, {}], got '{:.40}'", name,
                          hi, v));
    return std::nullopt;
  }
  return out;
}

std::vector<Host> hostsFromJson(const JsonReader& r) {
  std::vector<Host> hosts;
  size_t n = r.arraySize();
  if (n == 0) r.fail("a non-empty array of hosts");
  if (n > kMaxHosts) r.fail(fmt::format("at most {} hosts", kMaxHosts));
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    auto h = r.at(i);
    if (h.json().is_string()) {
      text += h.str() + "\n";
    } else {
      text += h.at("name", "a host name").nonEmptyStr() + " " +
              h.at("address", "an address").nonEmptyStr() + "\n";
    }
  }
  return probe::parseHosts(text, fmt::format("{}: at {}", r.source(), r.path()));
}

// "10.0.0.1" of "10.0.0.1:7411" (or of "[::1]:7411"); "" if it is not an address.
std::string addressOnly(const std::string& address) {
  try {
    return probe::parseEndpoint(address, probe::kDefaultProbePort, "address").host;
  } catch (const InvalidInput&) {
    return "";
  }
}

// Whether the request carries the configured bearer token; if not, sends 403 (no token
// configured: `what` is refused to everyone) or 401 and returns false.
bool authorized(Daemon& d, const httplib::Request& req, httplib::Response& res,
                std::string_view what) {
  if (!d.hasToken()) {
    sendError(res, 403,
              fmt::format("{} refused: no token configured (start rankmapd with "
                          "--token-file)",
                          what));
    return false;
  }
  std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() <= kBearer.size() || auth.compare(0, kBearer.size(), kBearer) != 0 ||
      !d.checkToken(std::string_view(auth).substr(kBearer.size()))) {
    res.set_header("WWW-Authenticate", "Bearer realm=\"rankmapd\"");
    sendError(res, 401,
              fmt::format("{} refused: {} bearer token", what, auth.empty() ? "missing" : "wrong"));
    return false;
  }
  return true;
}

// GET /v1/plan?hosts=a,b,c[&ranks_per_host=K][&mesh=pp=2,dp=4[&traffic=...]]: the planner
// (reorder::makePlan; with a mesh, for the job's groups: reorder/mesh.h) over the
// latest topology restricted to the job's hosts, in the job's order. Hosts may be spelled as
// topology names or addresses (with or without the probe port). Plans are stored by host set
// (and by the configured prior's content: with one, each plan records how it compares).
void getPlan(Daemon& d, const httplib::Request& req, httplib::Response& res) {
  if (!knownParams(req, res, {"hosts", "ranks_per_host", "mesh", "traffic"})) return;
  std::string list = req.has_param("hosts") ? req.get_param_value("hosts") : "";
  if (list.empty())
    return sendError(res, 400, "query parameter hosts: expected a,b,c (job hosts in rank order)");
  auto rph = intParam(req, res, "ranks_per_host", 1, 4096);
  if (!rph) return;
  if (*rph < 1) return sendError(res, 400, "query parameter ranks_per_host: expected >= 1");
  std::vector<MeshDim> mesh;
  try {
    std::string meshText = req.has_param("mesh") ? req.get_param_value("mesh") : "";
    std::string traffic = req.has_param("traffic") ? req.get_param_value("traffic") : "";
    if (meshText.empty() && !traffic.empty())
      return sendError(res, 400, "query parameter traffic: expected together with mesh");
    if (!meshText.empty()) {
      mesh = reorder::parseMesh(meshText, "query parameter mesh");
      reorder::meshTraffic(mesh, traffic, "query parameter traffic");
    }
  } catch (const InvalidInput& e) {
    return sendError(res, 400, e.what());
  }
  auto topo = d.store().latestTopology();
  if (!topo)
    return sendError(res, 404, "no topology yet: POST /v1/probe or wait for the coordinator");
  // Every spelling of each topology host, built once: the lookup below costs O(1) per job host
  // whatever the sizes (a name wins over another host's equal address).
  std::unordered_map<std::string, std::string> spelled;
  for (auto it = topo->hosts.rbegin(); it != topo->hosts.rend(); ++it) {
    spelled[addressOnly(it->address)] = it->name;
    spelled[it->address] = it->name;
  }
  for (auto it = topo->hosts.rbegin(); it != topo->hosts.rend(); ++it) spelled[it->name] = it->name;
  spelled.erase("");
  std::vector<HostsEntry> entries;
  std::string key;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string h = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
    if (h.empty()) return sendError(res, 400, "query parameter hosts: empty host name");
    if (entries.size() >= topo->hosts.size())
      return sendError(res, 400,
                       fmt::format("query parameter hosts: more than the {} hosts of topology "
                                   "version {}",
                                   topo->hosts.size(), topo->version));
    // By name, else by address (the topology's may carry the probe port).
    auto found = spelled.find(h);
    std::string name = found == spelled.end() ? "" : found->second;
    if (name.empty())
      return sendError(
          res, 400, fmt::format("host '{:.100}' is not in topology version {}", h, topo->version));
    entries.push_back({name, "", static_cast<int>(entries.size() + 1)});
    key += (key.empty() ? "" : ",") + name;
  }
  key += fmt::format("/{}", *rph) + d.priorKey();
  if (!mesh.empty())
    key += "/mesh=" + reorder::meshText(mesh) + ";" + reorder::meshTrafficText(mesh);
  if (auto cached = d.store().latestPlan(key); cached && cached->epoch == topo->version) {
    res.status = 200;
    return res.set_content(cached->dump(), kJson);
  }
  // Planning is work (the planner over up to the whole topology): only for token holders.
  if (!authorized(d, req, res, "planning (a plan not made yet for these hosts)")) return;
  try {
    Topology sub = reorder::selectHosts(*topo, entries, "hosts parameter", "agent topology");
    sub.version = topo->version;
    reorder::PlanOptions po;
    po.ranksPerHost = static_cast<int>(*rph);
    po.prior = d.prior();
    po.mesh = mesh;
    po.meshSource = "query parameter mesh";
    Plan plan = reorder::makePlan(sub, po);
    d.store().addPlan(plan, key);
    res.status = 200;
    res.set_content(plan.dump(), kJson);
  } catch (const InvalidInput& e) {
    sendError(res, 400, e.what());
  }
}

void postProbe(Daemon& d, const httplib::Request& req, httplib::Response& res) {
  if (!authorized(d, req, res, "writes")) return;
  std::optional<std::vector<Host>> hosts;
  std::optional<ProbeOptions> opts;
  bool wait = false;
  try {
    if (!req.body.empty()) {
      Json body = parseJson(req.body, "request body");
      JsonReader r(body, "request body");
      r.expectObject();
      for (auto it = body.begin(); it != body.end(); ++it)
        if (it.key() != "hosts" && it.key() != "contention" && it.key() != "probe" &&
            it.key() != "wait")
          throw InvalidInput(
              fmt::format("request body: unknown key '{:.40}' (expected hosts, "
                          "contention, probe, wait)",
                          it.key()));
      if (auto h = r.find("hosts")) hosts = hostsFromJson(*h);
      if (auto p = r.find("probe")) {
        opts = d.config().probe;
        applyProbeOptions(*p, *opts);
      }
      if (auto c = r.find("contention")) {
        c->boolean();  // still validated: old clients send it
        RANKMAP_WARN(Agent, "POST /v1/probe: \"contention\" is ignored: the structure-first "
                     "probe loads uplinks in every round (docs/probing.md)");
      }
      if (auto w = r.find("wait")) wait = w->boolean();
    }
  } catch (const InvalidInput& e) {
    sendError(res, 400, e.what());
    return;
  }
  Daemon::StartResult started;
  try {
    started = d.startRound(std::move(hosts), std::move(opts), "requested over HTTP");
  } catch (const InvalidInput& e) {
    sendError(res, 400, e.what());
    return;
  }
  if (!started.id) {
    Json body = parseJson(errorBody(409, "a probe round is already running"), "error body");
    body["round_id"] = *started.busyId;
    body["status_url"] = fmt::format("/v1/rounds/{}", *started.busyId);
    sendJson(res, 409, body);
    return;
  }
  int64_t id = *started.id;
  if (wait) {
    auto limit = d.config().probe.roundTimeout + std::chrono::seconds(30);
    d.waitRound(id, Deadline::after(limit));
    auto st = d.roundStatus(id);
    sendJson(res, 200, Json{{"round", st ? *st : Json(nullptr)}});
    return;
  }
  res.set_header("Location", fmt::format("/v1/rounds/{}", id));
  sendJson(res, 202, Json{{"round_id", id}, {"status_url", fmt::format("/v1/rounds/{}", id)}});
}

// The routes as they are added, with their methods: a path that a route serves with other
// methods is answered 405 with Allow (RFC 9110), not 404. The error handler shares the table.
class Routes {
 public:
  using Table = std::vector<std::pair<std::regex, std::string>>;

  explicit Routes(httplib::Server& s) : s_(s), table_(std::make_shared<Table>()) {}
  void get(const std::string& pattern, httplib::Server::Handler h) {
    s_.Get(pattern, std::move(h));
    table_->emplace_back(std::regex(pattern), "GET, HEAD");  // httplib answers HEAD with GET's
  }
  void post(const std::string& pattern, httplib::Server::Handler h) {
    s_.Post(pattern, std::move(h));
    table_->emplace_back(std::regex(pattern), "POST");
  }
  std::shared_ptr<const Table> table() const { return table_; }

  // The methods some route of `table` serves `path` with ("GET, HEAD, POST"; "" for none).
  static std::string allowed(const Table& table, const std::string& path) {
    std::string out;
    for (const auto& [re, methods] : table)
      if (std::regex_match(path, re)) out += (out.empty() ? "" : ", ") + methods;
    return out;
  }

 private:
  httplib::Server& s_;
  std::shared_ptr<Table> table_;
};

// Every route but /metrics: health, readiness, topologies, rounds, plans, observations.
void addApiRoutes(Routes& r, Daemon& d) {
  // Liveness and readiness apart, as Kubernetes' probes expect: /v1/health answers 200 whenever
  // the agent answers at all; /v1/ready answers 503 with the reasons while it cannot serve a plan.
  r.get("/v1/health",
        [&d](const httplib::Request&, httplib::Response& res) { sendJson(res, 200, d.health()); });
  r.get("/v1/ready", [&d](const httplib::Request&, httplib::Response& res) {
    Json j = d.readiness();
    sendJson(res, j["ready"].get<bool>() ? 200 : 503, j);
  });
  r.get("/v1/topology", [&d](const httplib::Request& req, httplib::Response& res) {
    if (!knownParams(req, res, {"version"})) return;
    std::optional<Topology> t;
    if (req.has_param("version")) {
      auto v = intParam(req, res, "version", 0, INT64_MAX);
      if (!v) return;
      t = d.store().topology(*v);
      if (!t) return sendError(res, 404, fmt::format("no topology version {}", *v));
    } else {
      t = d.store().latestTopology();
      if (!t)
        return sendError(res, 404, "no topology yet: POST /v1/probe or wait for the coordinator");
    }
    res.status = 200;
    res.set_content(t->dump(), kJson);
  });
  r.get("/v1/topologies", [&d](const httplib::Request& req, httplib::Response& res) {
    if (!knownParams(req, res, {"limit"})) return;
    auto limit = intParam(req, res, "limit", 50, kMaxListLimit);
    if (!limit) return;
    Json arr = Json::array();
    for (const auto& t : d.store().topologies(static_cast<size_t>(*limit)))
      arr.push_back(t.toJson());
    sendJson(res, 200, Json{{"versions", arr}});
  });
  r.post("/v1/probe",
         [&d](const httplib::Request& req, httplib::Response& res) { postProbe(d, req, res); });
  r.get("/v1/rounds", [&d](const httplib::Request& req, httplib::Response& res) {
    if (!knownParams(req, res, {"limit"})) return;
    auto limit = intParam(req, res, "limit", 20, kMaxListLimit);
    if (!limit) return;
    Json arr = Json::array();
    for (const auto& r : d.store().rounds(static_cast<size_t>(*limit))) {
      auto st = d.roundStatus(r.id);
      arr.push_back(st ? *st : r.toJson());
    }
    sendJson(res, 200, Json{{"rounds", arr}});
  });
  r.get(R"(/v1/rounds/(\d{1,18}))", [&d](const httplib::Request& req, httplib::Response& res) {
    int64_t id = std::stoll(req.matches[1]);
    auto st = d.roundStatus(id);
    if (!st) return sendError(res, 404, fmt::format("no round {}", id));
    sendJson(res, 200, *st);
  });
  r.get("/v1/plan",
        [&d](const httplib::Request& req, httplib::Response& res) { getPlan(d, req, res); });
  // Engine ranks on this host report their traffic (collectives/agent_link.h); it can make the
  // coordinator probe, so it needs the token. The summary is read-only, like /metrics.
  r.post("/v1/observations", [&d](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(d, req, res, "observations")) return;
    try {
      Json body = parseJson(req.body, "POST /v1/observations body");
      uint64_t bytes = d.addObservations(body, "POST /v1/observations body");
      sendJson(res, 200, Json{{"accepted", true}, {"bytes", bytes}});
    } catch (const InvalidInput& e) {
      sendError(res, 400, e.what());
    }
  });
  r.get("/v1/observations", [&d](const httplib::Request&, httplib::Response& res) {
    sendJson(res, 200, d.passiveSummary(false));
  });
}

}  // namespace

void installApi(httplib::Server& s, Daemon& d, ApiRoutes which) {
  const AgentConfig& cfg = d.config();
  // Threads and connection limits are the server's (ApiServer gives each connection a thread);
  // the timeouts below bound each read and write of a plain httplib::Server.
  s.set_payload_max_length(cfg.maxBodyBytes);
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(cfg.httpTimeout).count();
  s.set_read_timeout(std::max<int64_t>(1, secs), 0);
  s.set_write_timeout(std::max<int64_t>(1, secs), 0);
  s.set_keep_alive_max_count(100);
  s.set_keep_alive_timeout(5);
  Routes r(s);

  r.get("/metrics", [&d](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(d.renderMetrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (which == ApiRoutes::kAll) addApiRoutes(r, d);
  // Range headers are ignored, as RFC 9110 allows: an answer is one JSON document, and httplib
  // cuts any answer to the requested bytes, a 404 included (tests/fuzz: `Range: bytes=0-10` gave
  // truncated JSON under Content-Type: application/json). httplib's Request is its own non-const
  // object, handed to this handler as const.
  // A Range header httplib cannot read is answered 416 before routing, with the ranges read so
  // far: the error handler clears them too.
  s.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    const_cast<httplib::Request&>(req).ranges.clear();
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        RANKMAP_ERROR(Agent, "HTTP handler failed: {}", what);
        sendError(res, 500, what);
      });
  s.set_error_handler([table = r.table()](const httplib::Request& req, httplib::Response& res) {
    const_cast<httplib::Request&>(req).ranges.clear();
    if (!res.body.empty()) return;  // a handler already explained itself
    if (res.status == 404) {
      if (std::string allow = Routes::allowed(*table, req.path); !allow.empty()) {
        res.status = 405;
        res.set_header("Allow", allow);
        return sendError(res, 405,
                         fmt::format("method {:.20} not allowed on {:.100} (allowed: {})",
                                     req.method, req.path, allow));
      }
    }
    std::string msg = res.status == 404   ? fmt::format("no such endpoint: {:.100}", req.path)
                      : res.status == 413 ? "request body too large"
                      : res.status == 405 ? "method not allowed"
                      : res.status == 416 ? "Range header: expected none (answers are whole)"
                                          : fmt::format("HTTP {}", res.status);
    sendError(res, res.status, msg);
  });
  // Requests refused for their token are logged with the client's address, at most a line per
  // status every 10 s (a client retrying a wrong token must not flood the log).
  auto refusedLog = std::make_shared<std::map<int, log::RateLimit>>();
  (*refusedLog)[401];
  (*refusedLog)[403];
  s.set_logger([&d, refusedLog](const httplib::Request& req, const httplib::Response& res) {
    d.metrics().add("rankmap_http_requests_total", fmt::format("code=\"{}\"", res.status));
    auto it = refusedLog->find(res.status);
    if (uint64_t left = 0; it != refusedLog->end() && it->second.allow(left)) {
      const Json body = Json::parse(res.body, nullptr, false);  // discarded, not thrown
      const std::string why = body.is_object() ? body.value("error", std::string()) : "";
      RANKMAP_WARN(Agent, "HTTP {} to {} for {:.10} {:.100}: {}{}", res.status, req.remote_addr,
                   req.method, req.path, why,
                   left ? fmt::format(" ({} more since the last line of this kind)", left) : "");
    }
  });
}

}  // namespace rankmap::agent
