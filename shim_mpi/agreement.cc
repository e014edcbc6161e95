#include "shim_mpi/agreement.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "common/config.h"

namespace rankmap::shim_mpi {
namespace {

constexpr std::string_view kIdentity = "identity order (MPI_COMM_WORLD unchanged): ";

std::string shortHash(const std::string& hash) {
  return hash.substr(0, std::min<size_t>(hash.size(), 19));
}

// "0-3,5,7" for a sorted list of ranks, at most six items.
std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  int items = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (++items > 6) {
      out += ",...";
      break;
    }
    if (!out.empty()) out += ',';
    out += j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]);
    i = j + 1;
  }
  return out;
}

Decision identity(const std::string& why) { return {false, std::string(kIdentity) + why}; }

}  // namespace

std::string shortHostName(const std::string& host) { return host.substr(0, host.find('.')); }

Decision decide(const std::vector<RankView>& views, const std::optional<Plan>& plan) {
  if (views.empty()) return identity("no ranks");
  std::vector<int> without;
  for (size_t r = 0; r < views.size(); ++r)
    if (views[r].status != PlanStatus::kOk) without.push_back(static_cast<int>(r));
  if (!without.empty()) {
    const RankView& v = views[static_cast<size_t>(without[0])];
    std::string who = without.size() == views.size()
                          ? std::string("no rank has a usable plan")
                          : fmt::format("rank(s) {} have no usable plan", rankList(without));
    return identity(fmt::format("{} (rank {}: {})", who, without[0], v.reason));
  }
  std::map<std::string, std::vector<int>> byHash;
  for (size_t r = 0; r < views.size(); ++r) byHash[views[r].hash].push_back(static_cast<int>(r));
  if (byHash.size() > 1) {
    std::string parts;
    for (const auto& [h, ranks] : byHash)
      parts += fmt::format("{}{} on rank(s) {}", parts.empty() ? "" : "; ", shortHash(h),
                           rankList(ranks));
    return identity("ranks disagree on the plan: " + parts);
  }
  if (!plan || plan->hash != views[0].hash)
    return identity("internal error: this rank's plan does not match the agreed hash");
  if (plan->worldSize() != views.size())
    return identity(fmt::format("plan {} is for {} ranks, the job has {}", shortHash(plan->hash),
                                plan->worldSize(), views.size()));
  // A plan for another launch order would reorder the wrong ranks: where every rank's hostname
  // is a plan host, old rank r must run on hosts[r / ranksPerHost].
  bool check = std::all_of(views.begin(), views.end(), [](const RankView& v) { return v.checkHosts; });
  std::map<std::string, std::string> planHosts;
  for (const auto& h : plan->hosts) planHosts[shortHostName(h)] = h;
  bool allKnown = std::all_of(views.begin(), views.end(),
                              [&](const RankView& v) { return planHosts.count(v.host) > 0; });
  bool checked = check && allKnown;
  if (checked) {
    for (size_t r = 0; r < views.size(); ++r) {
      const std::string& expect = plan->hosts[r / static_cast<size_t>(plan->ranksPerHost)];
      if (shortHostName(expect) != views[r].host)
        return identity(fmt::format("plan {} expects rank {} on {}, the launcher put it on {} "
                                    "(a plan for another launch order)",
                                    shortHash(plan->hash), r, expect, views[r].host));
    }
  }
  std::string pred = plan->predicted.speedup > 0 && !plan->predicted.basis.empty()
                         ? fmt::format("predicted {:.2f}x for {}", plan->predicted.speedup,
                                       plan->predicted.basis)
                         : std::string("no prediction in the plan");
  return {true, fmt::format("MPI_COMM_WORLD reordered by plan {} ({} ranks, {} per host; {}; "
                            "hosts {})",
                            shortHash(plan->hash), views.size(), plan->ranksPerHost, pred,
                            checked ? "checked" : "not checked (hostnames are not plan hosts)")};
}

RankView loadLocalView(const Config& cfg, int worldSize, const std::string& host,
                       std::optional<Plan>& plan) {
  RankView v;
  v.host = shortHostName(host);
  plan.reset();
  try {
    v.checkHosts = cfg.get(settings::kMpiCheckHosts);
    const std::string& path = cfg.get(settings::kPlan);
    if (path.empty()) {
      v.status = PlanStatus::kNone;
      v.reason = "RANKMAP_PLAN is not set";
      return v;
    }
    Plan p = Plan::load(path);
    if (p.worldSize() != static_cast<size_t>(worldSize)) {
      v.status = PlanStatus::kInvalid;
      v.reason = fmt::format("plan {} is for {} ranks, the job has {}", path, p.worldSize(),
                             worldSize);
      return v;
    }
    v.status = PlanStatus::kOk;
    v.hash = p.hash;
    plan = std::move(p);
  } catch (const std::exception& e) {
    v.status = PlanStatus::kInvalid;
    v.reason = e.what();
    plan.reset();
  }
  return v;
}

}  // namespace rankmap::shim_mpi
