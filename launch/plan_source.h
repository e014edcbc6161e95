// Where `rankmap run` gets its plan: a plan file, a topology file planned on the spot, or the
// local agent's `GET /v1/plan?hosts=...`.
//
// Contract: these functions never throw for a bad source: a missing or unreadable file, an
// invalid document, an agent that is down, slow (bounded by the Deadline) or answers an error
// all give a PlanResult without a plan and with `error` naming the source and the reason, so the
// job runs unchanged. `known` carries host addresses (from a topology) for matching job hosts
// given as addresses.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/plan.h"
#include "common/plan_agreement.h"
#include "common/topology.h"
#include "launch/launch.h"

namespace rankmap::launch {

struct PlanResult {
  std::optional<Plan> plan;
  std::string error;               // why there is no plan
  PlanSource source;
  std::vector<Host> known;         // hosts with addresses, when a topology was read
  std::string planPath;            // absolute path of a plan file usable as is; else empty
};

// Reads a plan file; `topologyPath` (may be empty) only supplies host addresses.
PlanResult planFromFile(const std::string& planPath, const std::string& topologyPath);

// Plans for exactly the job's hosts (named or addressed as in `job`, in launcher order) from a
// topology file with the planner (reorder::makePlan), for the job's ranks per host.
// With `mesh` (reorder/mesh.h; empty = the world ring), the order is chosen for its groups.
PlanResult planFromTopology(const std::string& topologyPath, const Job& job,
                            const std::vector<MeshDim>& mesh = {});

// For a launcher whose command line does not name the job's hosts (torchrun, XGBoost): the plan
// file when `planPath` is set; else a plan from `topologyPath` for the job that `makeJob` gives
// (it may read the topology; an Error it throws becomes the error, with the topology as the
// source); else no plan, with `missing` as the error and the command line as the source. A stale
// plan is dropped as by dropStalePlan().
PlanResult planForFramework(const std::string& planPath, const std::string& topologyPath,
                            const std::function<Job()>& makeJob, const std::string& missing,
                            const PlanChecks& checks, const std::vector<MeshDim>& mesh = {});

// Asks the agent at `url` (e.g. http://127.0.0.1:7410) for a plan for exactly the job's hosts:
// GET <url>/v1/plan?hosts=<h1>,<h2>,...&ranks_per_host=<K> (hosts as the job spells them, in
// launcher order). When a job host is not a plan host name, GET <url>/v1/topology supplies the
// addresses. Every request (common/http_client.h) is bounded by `deadline`. The agent serves a
// plan it already made to anyone; making a new one needs its bearer `token` (HTTP 401/403
// otherwise, which becomes the error: the job then runs unchanged).
// With `mesh`, the query carries it (&mesh=...&traffic=...: the agent plans for its groups).
PlanResult planFromAgent(const std::string& url, const Job& job, Deadline deadline,
                         const std::string& token = "", const std::vector<MeshDim>& mesh = {});

// The same local check every rank of an engine or shim job makes (common/plan_agreement.h): a
// plan older than checks.maxAge (counted from its topology_time) is dropped, and `error` says
// it is stale and by how much, so the job runs unchanged. A result without a plan is left as is.
void dropStalePlan(PlanResult& result, const PlanChecks& checks);

}  // namespace rankmap::launch
