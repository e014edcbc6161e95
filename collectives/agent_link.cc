#include "collectives/agent_link.h"

#include <random>

#include "common/error.h"
#include "common/files.h"
#include "common/http_client.h"
#include "common/json.h"
#include "common/log.h"
#include "common/plan_agreement.h"

namespace rankmap::coll {
namespace {

constexpr int kMaxBackoffShift = 4;  // reportEvery x 16 at most ...
constexpr int64_t kMaxBackoffNs = 60'000'000'000;  // ... and a minute

int64_t ms(std::chrono::milliseconds d) { return static_cast<int64_t>(d.count()); }

}  // namespace

std::unique_ptr<AgentLink> AgentLink::make(const AgentLinkOptions& o, int rank, int worldSize,
                                           const Plan& startPlan) {
  if ((!o.reports && !o.plans) || o.agentUrl.empty() || o.reportEvery.count() <= 0)
    return nullptr;
  if (o.tokenFile.empty()) {
    RANKMAP_DEBUG(Coll, "rank {}: no RANKMAP_TOKEN_FILE: no passive reports to and no plans from "
                        "the agent",
                  rank);
    return nullptr;
  }
  if (startPlan.worldSize() != static_cast<size_t>(worldSize)) return nullptr;
  std::string token;
  try {
    token = readSecretFile(o.tokenFile, 1, "RANKMAP_TOKEN_FILE");
    HttpClient check(o.agentUrl);  // validates the URL
  } catch (const Error& e) {
    RANKMAP_WARN(Coll, "rank {}: no link to the agent: {}", rank, e.what());
    return nullptr;
  }
  return std::unique_ptr<AgentLink>(new AgentLink(o, std::move(token), rank, worldSize, startPlan));
}

AgentLink::AgentLink(AgentLinkOptions o, std::string token, int rank, int worldSize,
                     const Plan& start)
    : o_(std::move(o)),
      token_(std::move(token)),
      rank_(rank),
      worldSize_(worldSize),
      hosts_(start.hosts),
      ranksPerHost_(start.ranksPerHost) {
  for (int r = 0; r < worldSize_; ++r)
    rankHost_.push_back(hosts_.at(static_cast<size_t>(r / ranksPerHost_)));
  std::random_device rd;
  reporter_ = fmt::format("{:08x}{:08x}-{}", rd(), rd(), rank_);
  const int64_t now = PassiveMeter::nowNs();
  nextOfferNs_ = now + ms(o_.reportEvery) * 1'000'000;
  pendingNs_ = now;
  // The job's first report, empty and at once: the agents then know a job runs (and hold their
  // light checks: agent/passive.h) before its first window of traffic is reported. Its plan
  // fetch follows, as after every report.
  pending_ = std::vector<PeerTraffic>(static_cast<size_t>(worldSize_));
  pendingPlan_ = start.hash;
  pendingEpoch_ = start.epoch;
  pendingOrder_ = start.order;
  thread_ = std::thread([this] { main(); });  // the first window starts now
}

AgentLink::~AgentLink() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AgentLink::offer(const std::vector<PeerTraffic>& totals, uint64_t collectiveNs,
                      const Plan* inUse, int64_t nowNs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = totals;
    pendingCollectiveNs_ = collectiveNs;
    pendingPlan_ = inUse ? inUse->hash : "";
    pendingEpoch_ = inUse ? inUse->epoch : 0;
    if (inUse == nullptr)
      pendingOrder_.clear();
    else if (pendingOrder_ != inUse->order)
      pendingOrder_ = inUse->order;
    pendingNs_ = nowNs;
    const int shift = std::min(kMaxBackoffShift, failStreak_);
    nextOfferNs_ = nowNs + std::min(kMaxBackoffNs, (ms(o_.reportEvery) * 1'000'000) << shift);
  }
  cv_.notify_all();
}

std::optional<Plan> AgentLink::latestPlan(std::optional<OrderPricing>* pricing) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pricing != nullptr) *pricing = fetchedPricing_;
  return fetched_;
}

std::optional<OrderPricing> AgentLink::priceAgainstInUse(HttpClient& client, const Plan& candidate,
                                                         const std::vector<std::string>& inUse) {
  // Nothing to price: no plan in use, the same order, or the candidate prices itself (its
  // input order is the order in use: judgeSwitch reads its own prediction).
  if (inUse.empty() || candidate.order == inUse || candidate.hosts == inUse) return std::nullopt;
  // One pricing per (candidate, order in use): the next cycles offer the same pair.
  if (pricedHash_ == candidate.hash && pricedAgainst_ == inUse) return priced_;
  priced_ = fetchPricing(client, candidate, inUse);
  if (priced_) {
    pricedHash_ = candidate.hash;
    pricedAgainst_ = inUse;
  }
  return priced_;
}

std::optional<OrderPricing> AgentLink::fetchPricing(HttpClient& client, const Plan& candidate,
                                                    const std::vector<std::string>& inUse) {
  try {
    HttpResponse r = client.get(agentPlanPath(inUse, ranksPerHost_),
                                Deadline::after(kRequestTimeout), 64u << 20);
    std::optional<Plan> from;
    if (r.status == 200)
      from = Plan::fromJson(parseJson(r.body, "agent plan"), "plan from agent " + o_.agentUrl);
    if (!from) {
      RANKMAP_DEBUG(Coll, "rank {}: pricing plan {} against the order in use: HTTP {}: {}", rank_,
                    shortPlanHash(candidate.hash), r.status, r.errorText());
      return std::nullopt;
    }
    const Prediction& pd = from->predicted;
    const Prediction& cd = candidate.predicted;
    // The same topology version (the agents share the coordinator's versions; the topology
    // hash is of the job's hosts in the query's order, so it differs) and the same basis: the
    // candidate's ring time is its own prediction, the order in use's is this plan's input
    // order's.
    if (from->epoch <= 0 || from->epoch != candidate.epoch ||
        from->ranksPerHost != candidate.ranksPerHost || pd.basis != cd.basis ||
        pd.inputOrderUs <= 0 || cd.planUs <= 0)
      return std::nullopt;  // another topology version meanwhile, or no prediction
    return OrderPricing{from->epoch, inUse, cd.basis, cd.engineRingUs(), pd.inputOrderUs};
  } catch (const std::exception& e) {
    RANKMAP_DEBUG(Coll, "rank {}: pricing plan {} against the order in use: {}", rank_,
                  shortPlanHash(candidate.hash), e.what());
    return std::nullopt;
  }
}

AgentLink::Counters AgentLink::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

std::string AgentLink::reportBody(const std::string& reporter,
                                  const std::vector<std::string>& rankHost, int rank,
                                  const std::string& planHash, int64_t epoch, double windowSeconds,
                                  double collectiveSeconds, const std::vector<PeerTraffic>& before,
                                  const std::vector<PeerTraffic>& now) {
  const std::string& self = rankHost.at(static_cast<size_t>(rank));
  std::map<std::string, PeerTraffic> byHost;
  for (size_t p = 0; p < now.size() && p < rankHost.size(); ++p) {
    if (rankHost[p] == self) continue;
    const PeerTraffic& a = p < before.size() ? before[p] : PeerTraffic{};
    const PeerTraffic& b = now[p];
    PeerTraffic& d = byHost[rankHost[p]];
    d.sentBytes += b.sentBytes - a.sentBytes;
    d.sendBusyNs += b.sendBusyNs - a.sendBusyNs;
    d.recvBytes += b.recvBytes - a.recvBytes;
    d.recvBusyNs += b.recvBusyNs - a.recvBusyNs;
  }
  Json peers = Json::array();
  for (const auto& [host, d] : byHost) {
    if (d.sentBytes == 0 && d.recvBytes == 0) continue;
    peers.push_back({{"host", host},
                     {"sent_bytes", d.sentBytes},
                     {"send_busy_s", static_cast<double>(d.sendBusyNs) * 1e-9},
                     {"recv_bytes", d.recvBytes},
                     {"recv_busy_s", static_cast<double>(d.recvBusyNs) * 1e-9}});
  }
  Json body = {{"reporter", reporter},
               {"host", self},
               {"rank", rank},
               {"plan", planHash},
               {"epoch", epoch},
               {"window_s", windowSeconds},
               {"collective_s", collectiveSeconds},
               {"peers", std::move(peers)}};
  return body.dump();
}

void AgentLink::fail(const std::string& what) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = counters_.reportsFailed == 0 && counters_.plansRejected == 0;
    ++counters_.reportsFailed;
    ++failStreak_;
  }
  if (first)
    RANKMAP_WARN(Coll, "rank {}: agent {}: {} (further failures are counted, logged at debug; "
                       "the job goes on)",
                 rank_, o_.agentUrl, what);
  else
    RANKMAP_DEBUG(Coll, "rank {}: agent {}: {}", rank_, o_.agentUrl, what);
}

void AgentLink::main() {
  HttpClient client(o_.agentUrl, token_);
  std::vector<PeerTraffic> last(static_cast<size_t>(worldSize_));
  uint64_t lastCollectiveNs = 0;
  int64_t lastNs = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lastNs = pendingNs_;
  }
  const std::string planQuery = agentPlanPath(hosts_, ranksPerHost_);
  int64_t triedVersion = 0;  // the topology version whose plan the last version poll fetched
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto woken = [&] { return stop_ || pending_.has_value(); };
    // Between reports the agent's topology version is polled (not while backing off).
    if (o_.plans && failStreak_ == 0) {
      if (!cv_.wait_for(lock, kVersionPollEvery, woken)) {
        const int64_t have = std::max(triedVersion, fetched_ ? fetched_->epoch : int64_t{0});
        const std::vector<std::string> inUseOrder = pendingOrder_;
        lock.unlock();
        bool ok = true;
        if (std::optional<int64_t> v = topologyVersion(client, ok); v && *v > have) {
          triedVersion = *v;
          if (!stopping()) ok = fetchPlan(client, planQuery, inUseOrder);
        }
        lock.lock();  // a failure raised failStreak_: no polls until a report cycle succeeds
        continue;
      }
    } else {
      cv_.wait(lock, woken);
    }
    if (stop_) return;
    std::vector<PeerTraffic> totals = std::move(*pending_);
    pending_.reset();
    const uint64_t collectiveNs = pendingCollectiveNs_;
    const std::string planHash = pendingPlan_;
    const int64_t epoch = pendingEpoch_;
    const std::vector<std::string> inUseOrder = pendingOrder_;
    const int64_t nowNs = pendingNs_;
    lock.unlock();
    bool ok = true;
    bool answered = true;  // the agent answered (an HTTP status, whatever it was)
    if (o_.reports) {
      const double window = static_cast<double>(nowNs - lastNs) * 1e-9;
      const double inCollectives = static_cast<double>(collectiveNs - lastCollectiveNs) * 1e-9;
      std::string body = reportBody(reporter_, rankHost_, rank_, planHash, epoch, window,
                                    inCollectives, last, totals);
      try {
        HttpResponse r =
            client.post("/v1/observations", body, Deadline::after(kRequestTimeout), 64 << 10);
        if (r.status / 100 != 2) {  // refused: counted and warned, no backoff (it answered)
          fail(fmt::format("POST /v1/observations: HTTP {}: {}", r.status, r.errorText()));
        } else {
          std::lock_guard<std::mutex> g(mu_);
          ++counters_.reportsSent;
        }
      } catch (const std::exception& e) {
        ok = answered = false;
        fail(e.what());
      }
      last = std::move(totals);
      lastCollectiveNs = collectiveNs;
      lastNs = nowNs;
    }
    // A report the agent refused (4xx/5xx) does not keep the plans away; an agent that did not
    // answer at all is not asked again in this cycle. Between requests it looks whether it is
    // stopping (stopping()).
    if (o_.plans && answered && !stopping()) ok = fetchPlan(client, planQuery, inUseOrder) && ok;
    lock.lock();
    if (ok) failStreak_ = 0;
  }
}

bool AgentLink::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

std::optional<int64_t> AgentLink::topologyVersion(HttpClient& client, bool& ok) {
  try {
    HttpResponse r = client.get("/v1/health", Deadline::after(kRequestTimeout), 64u << 10);
    if (r.status != 200) {
      ok = false;
      fail(fmt::format("GET /v1/health: HTTP {}: {}", r.status, r.errorText()));
      return std::nullopt;
    }
    const Json doc = parseJson(r.body, "agent health");
    const std::string source = "GET /v1/health of agent " + o_.agentUrl;
    JsonReader j(doc, source);
    j.expectObject();
    std::optional<JsonReader> v = j.find("topology_version");  // null: no topology yet
    if (!v) return std::nullopt;
    return v->integerIn(0, INT64_MAX);
  } catch (const InvalidInput& e) {
    RANKMAP_DEBUG(Coll, "rank {}: agent health does not load: {}", rank_, e.what());
    return std::nullopt;
  } catch (const std::exception& e) {
    ok = false;
    fail(e.what());
    return std::nullopt;
  }
}

bool AgentLink::fetchPlan(HttpClient& client, const std::string& planQuery,
                          const std::vector<std::string>& inUseOrder) {
  bool ok = true;
  try {
    HttpResponse r = client.get(planQuery, Deadline::after(kRequestTimeout), 64u << 20);
    if (r.status == 200) {
      std::optional<Plan> plan =
          Plan::fromJson(parseJson(r.body, "agent plan"), "plan from agent " + o_.agentUrl);
      PlanChecks checks;
      checks.maxAge = o_.maxAge;
      PlanVote v = planVote(plan, rank_, worldSize_, checks);
      std::optional<OrderPricing> pricing;
      if (v.status == PlanStatus::kOk && !stopping())
        pricing = priceAgainstInUse(client, *plan, inUseOrder);
      std::lock_guard<std::mutex> g(mu_);
      if (v.status == PlanStatus::kOk) {
        if (!fetched_ || fetched_->hash != plan->hash)
          RANKMAP_DEBUG(Coll, "rank {}: the agent offers plan {} (epoch {})", rank_,
                        shortPlanHash(plan->hash), plan->epoch);
        fetched_ = std::move(plan);
        fetchedPricing_ = std::move(pricing);
        ++counters_.plansFetched;
      } else {
        ++counters_.plansRejected;
        RANKMAP_DEBUG(Coll, "rank {}: plan from the agent not offered: {}", rank_, v.reason);
      }
    } else {
      ok = false;
      fail(fmt::format("GET /v1/plan: HTTP {}: {}", r.status, r.errorText()));
    }
  } catch (const InvalidInput& e) {
    std::lock_guard<std::mutex> g(mu_);
    ++counters_.plansRejected;
    RANKMAP_DEBUG(Coll, "rank {}: plan from the agent does not load: {}", rank_, e.what());
  } catch (const std::exception& e) {
    ok = false;
    fail(e.what());
  }
  return ok;
}

const Plan* AgentPlanSource::poll(std::chrono::steady_clock::time_point) {
  std::optional<OrderPricing> pricing;
  std::optional<Plan> p = link_.latestPlan(&pricing);
  if (!p) return candidate_ ? &*candidate_ : nullptr;
  if (!candidate_ || candidate_->hash != p->hash) candidate_ = std::move(p);
  pricing_ = std::move(pricing);
  return &*candidate_;
}

}  // namespace rankmap::coll
