#include "launch/plan_source.h"

#include <curl/curl.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "reorder/planner.h"

namespace rankmap::launch {
namespace {

constexpr size_t kMaxBodyBytes = 64u << 20;  // a plan for 4096 hosts is far smaller

std::string absolutePath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return path;
  return buf;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};

size_t appendBody(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<std::string*>(user);
  if (body->size() + size * n > kMaxBodyBytes) return 0;  // aborts the transfer
  body->append(data, size * n);
  return size * n;
}

std::string firstLine(const std::string& s) {
  auto nl = s.find('\n');
  std::string line = s.substr(0, std::min<size_t>(nl, 200));
  return line;
}

}  // namespace

std::string urlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string httpGet(const std::string& url, Deadline deadline) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) RANKMAP_THROW(IoError, "GET {}: cannot create a curl handle", url);
  std::string body;
  auto ms = std::max<long>(1, static_cast<long>(deadline.pollTimeoutMs()));
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl.get(), CURLOPT_NOPROXY, "*");  // the agent is local: never a proxy
  curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, ms);
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT_MS, ms);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, appendBody);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  CURLcode rc = curl_easy_perform(curl.get());
  if (rc == CURLE_OPERATION_TIMEDOUT)
    RANKMAP_THROW(TimeoutError, "GET {}: no answer within {} ms", url, ms);
  if (rc != CURLE_OK) RANKMAP_THROW(IoError, "GET {}: {}", url, curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status != 200)
    RANKMAP_THROW(IoError, "GET {}: HTTP {}: {}", url, status, firstLine(body));
  return body;
}

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

PlanResult planFromTopology(const std::string& topologyPath, const Job& job) {
  PlanResult r;
  r.source.description = "topology " + topologyPath;
  r.source.madeForJob = true;
  try {
    Topology t = Topology::load(topologyPath);
    r.known = t.hosts;
    // The job's hosts by name or address, in launcher order: that order is the plan's input order.
    std::vector<reorder::HostEntry> entries;
    for (size_t i = 0; i < job.hosts.size(); ++i) {
      std::string s = job.hosts[i].spelling.substr(job.hosts[i].spelling.find('@') + 1);
      std::string name;
      if (t.indexOf(s) >= 0) name = s;
      for (const auto& h : t.hosts)
        if (name.empty() && (h.address == s || h.address.substr(0, h.address.find(':')) == s))
          name = h.name;
      if (name.empty())
        RANKMAP_THROW(InvalidInput, "job host {} is neither a host name nor an address in {}",
                      job.hosts[i].spelling, topologyPath);
      entries.push_back({name, "", static_cast<int>(i + 1)});
    }
    reorder::PlanOptions opts;
    opts.ranksPerHost = job.uniformRanksPerHost().value_or(1);
    opts.source = topologyPath;
    r.plan = reorder::makePlan(reorder::selectHosts(t, entries, "the job's hosts", topologyPath), opts);
  } catch (const std::exception& e) {
    r.plan.reset();
    r.error = e.what();
  }
  return r;
}

PlanResult planForFramework(const std::string& planPath, const std::string& topologyPath,
                            const std::function<Job()>& makeJob, const std::string& missing) {
  if (!planPath.empty()) return planFromFile(planPath, topologyPath);
  PlanResult r;
  if (!topologyPath.empty()) {
    try {
      return planFromTopology(topologyPath, makeJob());
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

PlanResult planFromAgent(const std::string& url, const Job& job, Deadline deadline) {
  PlanResult r;
  r.source.description = "agent " + url;
  r.source.madeForJob = true;
  std::string base = url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string hosts;
  for (const auto& h : job.hosts) hosts += (hosts.empty() ? "" : ",") + urlEncode(h.spelling);
  std::string query = base + "/v1/plan?hosts=" + hosts;
  if (auto k = job.uniformRanksPerHost()) query += fmt::format("&ranks_per_host={}", *k);
  try {
    r.plan = Plan::parse(httpGet(query, deadline), "agent plan");
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
      r.known = Topology::parse(httpGet(base + "/v1/topology", deadline), "agent topology").hosts;
    } catch (const std::exception& e) {
      // Matching will name the host it cannot place; keep the reason for the log.
      r.error = e.what();
    }
  }
  return r;
}

}  // namespace rankmap::launch
