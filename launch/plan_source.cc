#include "launch/plan_source.h"

#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/http_client.h"
#include "reorder/mesh.h"
#include "reorder/planner.h"

namespace rankmap::launch {
namespace {

constexpr size_t kMaxBodyBytes = 64u << 20;  // a plan for 4096 hosts is far smaller

std::string absolutePath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return path;
  return buf;
}

// GET `path` from the agent: the body of a 200 answer. IoError naming the URL and the status with
// the agent's message otherwise; TimeoutError when `deadline` passes.
std::string getOk(const HttpClient& agent, const std::string& path, Deadline deadline) {
  HttpResponse r = agent.get(path, deadline, kMaxBodyBytes);
  if (r.status != 200)
    RANKMAP_THROW(IoError, "GET {}{}: HTTP {}: {}", agent.baseUrl(), path, r.status,
                  r.errorText());
  return r.body;
}

}  // namespace

PlanResult planFromFile(const std::string& planPath, const std::string& topologyPath) {
  PlanResult r;
  r.source.description = planPath;
  try {
    r.plan = Plan::load(planPath);
    r.planPath = absolutePath(planPath);
  } catch (const std::exception& e) {
    r.plan.reset();
    r.error = e.what();
    return r;
  }
  if (!topologyPath.empty()) {
    try {
      r.known = Topology::load(topologyPath).hosts;
    } catch (const std::exception& e) {
      r.plan.reset();
      r.error = fmt::format("topology {} (for host addresses): {}", topologyPath, e.what());
    }
  }
  return r;
}

PlanResult planFromTopology(const std::string& topologyPath, const Job& job,
                            const std::vector<MeshDim>& mesh) {
  PlanResult r;
  r.source.description = "topology " + topologyPath;
  r.source.madeForJob = true;
  try {
    Topology t = Topology::load(topologyPath);
    r.known = t.hosts;
    // The job's hosts by name or address, in launcher order: that order is the plan's input order.
    std::vector<HostsEntry> entries;
    for (size_t i = 0; i < job.hosts.size(); ++i) {
      std::string s = job.hosts[i].spelling.substr(job.hosts[i].spelling.find('@') + 1);
      std::string name;
      if (t.indexOf(s) >= 0) name = s;
      for (const auto& h : t.hosts)
        if (name.empty() && (h.address == s || h.ip() == s))
          name = h.name;
      if (name.empty())
        RANKMAP_THROW(InvalidInput, "job host {} is neither a host name nor an address in {}",
                      job.hosts[i].spelling, topologyPath);
      entries.push_back({name, "", static_cast<int>(i + 1)});
    }
    reorder::PlanOptions opts;
    opts.ranksPerHost = job.uniformRanksPerHost().value_or(1);
    opts.source = topologyPath;
    opts.mesh = mesh;
    r.plan = reorder::makePlan(reorder::selectHosts(t, entries, "the job's hosts", topologyPath), opts);
  } catch (const std::exception& e) {
    r.plan.reset();
    r.error = e.what();
  }
  return r;
}

PlanResult planForFramework(const std::string& planPath, const std::string& topologyPath,
                            const std::function<Job()>& makeJob, const std::string& missing,
                            const PlanChecks& checks, const std::vector<MeshDim>& mesh) {
  PlanResult r;
  if (!planPath.empty()) {
    r = planFromFile(planPath, topologyPath);
    dropStalePlan(r, checks);
  } else if (!topologyPath.empty()) {
    try {
      r = planFromTopology(topologyPath, makeJob(), mesh);
      dropStalePlan(r, checks);
    } catch (const Error& e) {
      r.error = e.what();
      r.source.description = "topology " + topologyPath;
    }
  } else {
    r.error = missing;
    r.source.description = "the command line";
  }
  return r;
}

PlanResult planFromAgent(const std::string& url, const Job& job, Deadline deadline,
                         const std::string& token, const std::vector<MeshDim>& mesh) {
  PlanResult r;
  r.source.description = "agent " + url;
  r.source.madeForJob = true;
  std::vector<std::string> spellings;
  for (const auto& h : job.hosts) spellings.push_back(h.spelling);
  const std::string query = agentPlanPath(spellings, job.uniformRanksPerHost(),
                                          mesh.empty() ? "" : reorder::meshText(mesh),
                                          mesh.empty() ? "" : reorder::meshTrafficText(mesh));
  std::optional<HttpClient> agent;
  try {
    agent.emplace(url, token);
    r.plan = Plan::parse(getOk(*agent, query, deadline), "agent plan");
  } catch (const std::exception& e) {
    r.plan.reset();
    r.error = e.what();
    return r;
  }
  // Hosts spelled as addresses: the agent's topology knows them.
  std::set<std::string> names(r.plan->hosts.begin(), r.plan->hosts.end());
  bool allNamed = std::all_of(job.hosts.begin(), job.hosts.end(),
                              [&](const JobHost& h) { return names.count(h.spelling) > 0; });
  if (!allNamed) {
    try {
      r.known = Topology::parse(getOk(*agent, "/v1/topology", deadline), "agent topology").hosts;
    } catch (const std::exception& e) {
      // Matching will name the host it cannot place; keep the reason for the log.
      r.error = e.what();
    }
  }
  return r;
}

void dropStalePlan(PlanResult& result, const PlanChecks& checks) {
  if (!result.plan) return;
  if (std::optional<std::string> why = staleReason(*result.plan, checks)) {
    result.error = fmt::format("plan from {} is stale: {}", result.source.description, *why);
    result.plan.reset();
    result.planPath.clear();
  }
}

}  // namespace rankmap::launch
