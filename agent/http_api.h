// rankmapd's HTTP API (cpp-httplib). JSON in and out; errors are {"error": "..."}. A path served
// with other methods answers 405 with Allow; unknown paths 404.
//
//   GET  /v1/health                 200 {status, name, version, hosts, topology_version, round,
//                                        store, store_recovered_from}: liveness, whatever the state
//   GET  /v1/ready                  200 | 503 {ready, reasons, topology_version}: not ready while
//                                   there is no topology, the last finished round failed, or the
//                                   store cannot be written
//   GET  /v1/topology[?version=V]   200 topology.json (docs/formats.md) | 404
//   GET  /v1/topologies[?limit=N]   200 {"versions": [{version, created_at, round_id, hash,
//                                                     hosts}]}
//   POST /v1/probe                  bearer token; body (optional: none is {}; <= http.max_body_bytes):
//                                   {"hosts": [{"name", "address"}] | ["name address", ...],
//                                    "contention": bool, "probe": {probe options}, "wait": bool}
//                                   202 {"round_id", "status_url"} | 200 {"round": status} (wait)
//                                   | 400 bad body | 401 bad/missing token | 403 no token
//                                   configured | 409 {"error", "round_id"} busy | 413 too large
//   GET  /v1/rounds[?limit=N]       200 {"rounds": [round records]}
//   GET  /v1/rounds/ID              200 {id, kind, status, phase, done, total, ...} | 404
//   GET  /v1/plan?hosts=a,b,...[&ranks_per_host=K]
//                                   200 plan.json for exactly these hosts in this order (names
//                                   or addresses), planned by reorder::makePlan from the latest
//                                   topology | 400 unknown host/bad query | 404 no topology
//                                   A plan already made for these hosts, options and topology
//                                   version is served to anyone (a store read); making a new one
//                                   needs the bearer token (401/403 as POST /v1/probe).
//   GET  /metrics                   200 Prometheus text format 0.0.4
//
// Whatever changes state or makes the agent work needs the bearer token, compared in constant
// time; no endpoint runs commands. Connection limits (request deadline, head size, header count,
// target length, open connections) are agent/api_server.h's; the body limit is set here. The
// server listens on loopback unless configured otherwise.
#pragma once

namespace httplib {
class Server;
}

namespace rankmap::agent {

class Daemon;

// Which routes a server gets: the whole API, or GET /metrics alone (rankmapd's metrics_listen,
// for a Prometheus that cannot reach the API's address; nothing else is served there).
enum class ApiRoutes { kAll, kMetricsOnly };

// Installs the routes, the body limit and the handlers on `s` (rankmapd's is an ApiServer, any
// httplib::Server works, e.g. a fuzz target's); `d` must outlive the server.
void installApi(httplib::Server& s, Daemon& d, ApiRoutes which = ApiRoutes::kAll);

}  // namespace rankmap::agent
