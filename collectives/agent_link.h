// The engine's link to the local agent (rankmapd's HTTP API at RANKMAP_AGENT, authenticated with
// the token of RANKMAP_TOKEN_FILE). One per communicator, with a thread of its own so that no
// collective ever waits on HTTP:
// - Passive reports. A first, empty report as the link starts (the agents then know a job runs:
//   agent/passive.h); then every RANKMAP_PASSIVE_REPORT, at a collective boundary, the
//   communicator hands over its meter's totals (offer()), and the thread posts the difference
//   since its last report, summed per peer host (peers on this rank's own host left out), to
//   POST /v1/observations: {"reporter", "host", "rank", "plan", "epoch", "window_s",
//   "collective_s" (time inside collectives in the window), "peers": [{"host", "sent_bytes",
//   "send_busy_s", "recv_bytes", "recv_busy_s"}]}. The agent
//   folds them into its drift detection (agent/passive.h).
// - Plans (AgentPlanSource, with RANKMAP_PLAN_FROM_AGENT): after each report, and between
//   reports as soon as the agent's topology version (polled every kVersionPollEvery) is newer
//   than the plan fetched, it asks GET /v1/plan?hosts=...&ranks_per_host=K for the job's hosts
//   in launch order and keeps the newest plan that passes the start-up checks (world size,
//   age); the vote reads it. When that
//   plan has another order than the plan in use, it asks once more with the hosts in the order
//   in use: that plan's prediction prices the order in use (OrderPricing, collectives/live_plan.h),
//   so that judgeSwitch keeps out a newer plan no faster than the order in use.
// Host names come from the communicator's starting plan (Plan::hosts, launch order); without
// one there is no link. Every request is bounded (kRequestTimeout); a failure is a warning the
// first time, a debug line after, a counter always, and, when the agent did not answer or its
// plan could not be had, a backoff (doubling up to a minute): an agent that is down costs the job
// nothing. A report the agent refuses (an HTTP error) does not keep its plans away.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/live_plan.h"
#include "collectives/passive.h"
#include "common/http_client.h"
#include "common/plan.h"

namespace rankmap::coll {

struct AgentLinkOptions {
  std::string agentUrl;   // RANKMAP_AGENT
  std::string tokenFile;  // RANKMAP_TOKEN_FILE; empty = no link (the agent wants the token)
  std::chrono::milliseconds reportEvery{5000};  // RANKMAP_PASSIVE_REPORT
  bool reports = true;                           // RANKMAP_PASSIVE
  bool plans = false;                            // RANKMAP_PLAN_FROM_AGENT (with live plans)
  std::chrono::milliseconds maxAge{0};           // RANKMAP_PLAN_MAX_AGE for fetched plans
};

class AgentLink {
 public:
  struct Counters {
    uint64_t reportsSent = 0;
    uint64_t reportsFailed = 0;  // transport errors and non-2xx answers
    uint64_t plansFetched = 0;   // answers that parsed and passed the checks
    uint64_t plansRejected = 0;  // answers that did not (bad document, wrong size, stale)
  };

  // Null when the link cannot run: no token file (or one that does not read: a warning), no
  // agent URL, or `hosts` (launch order, the plan's) does not give every rank a host. `rank` and
  // `worldSize` are this communicator's.
  static std::unique_ptr<AgentLink> make(const AgentLinkOptions& o, int rank, int worldSize,
                                         const Plan& startPlan);
  // Stops the thread: waits for the request in flight, if any (at most kRequestTimeout).
  ~AgentLink();
  AgentLink(const AgentLink&) = delete;
  AgentLink& operator=(const AgentLink&) = delete;

  // Communicator thread, after a collective: whether a report is due at `nowNs`.
  bool due(int64_t nowNs) const { return nowNs >= nextOfferNs_; }
  // Communicator thread: hands over the meter's totals and the plan in use; returns at once.
  void offer(const std::vector<PeerTraffic>& totals, uint64_t collectiveNs, const Plan* inUse,
             int64_t nowNs);
  // The newest valid plan fetched from the agent (a copy), or nullopt; with `pricing`, also
  // its pricing against the order in use at the fetch (priceAgainstInUse), when there is one.
  std::optional<Plan> latestPlan(std::optional<OrderPricing>* pricing = nullptr) const;
  Counters counters() const;
  bool fetchesPlans() const { return o_.plans; }

  // The report body for the window between two totals (exposed for tests).
  static std::string reportBody(const std::string& reporter, const std::vector<std::string>& rankHost,
                                int rank, const std::string& planHash, int64_t epoch,
                                double windowSeconds, double collectiveSeconds,
                                const std::vector<PeerTraffic>& before,
                                const std::vector<PeerTraffic>& now);

  static constexpr auto kRequestTimeout = std::chrono::milliseconds(2000);
  // With plans from the agent, between reports: how often the thread asks the agent for its
  // topology version (GET /v1/health, one row of its store), fetching the plan when it is newer
  // than the plan fetched. Reports are offered at collective boundaries only, so without this a
  // plan published during a long collective waited for the next boundary to be fetched and for
  // the one after it to be voted on (on the testbed after a migration, two 5-second calls).
  static constexpr auto kVersionPollEvery = std::chrono::milliseconds(1000);

 private:
  AgentLink(AgentLinkOptions o, std::string token, int rank, int worldSize, const Plan& start);
  void main();
  void fail(const std::string& what);
  // Whether the destructor asked the thread to stop: looked at between requests, so that the
  // destructor waits for one request (kRequestTimeout) at most, not a cycle's.
  bool stopping() const;
  // Thread only. The agent's latest topology version (nullopt: none yet, or an answer that does
  // not read: a debug line); a transport or HTTP failure is fail()ed and clears `ok`.
  std::optional<int64_t> topologyVersion(HttpClient& client, bool& ok);
  // Thread only. GET /v1/plan (`planQuery`) and, when it passes the checks, keeps it as
  // fetched_ with its pricing against `inUseOrder`; false on a transport or HTTP failure
  // (fail()ed).
  bool fetchPlan(HttpClient& client, const std::string& planQuery,
                 const std::vector<std::string>& inUseOrder);
  // Thread only. When `candidate` has another order than `inUse` (the plan in use's, empty for
  // none) and is not itself planned from it: GET /v1/plan for the job's hosts in the order in
  // use, whose prediction's input order is the order in use; with the candidate's own
  // prediction, both rings priced on one topology version (kept only when the two plans are of
  // the same version and basis). Any failure is a debug line and no pricing (the ranks then
  // disagree or judge without).
  std::optional<OrderPricing> priceAgainstInUse(HttpClient& client, const Plan& candidate,
                                                const std::vector<std::string>& inUse);
  std::optional<OrderPricing> fetchPricing(HttpClient& client, const Plan& candidate,
                                           const std::vector<std::string>& inUse);

  AgentLinkOptions o_;
  std::string token_;
  int rank_;
  int worldSize_;
  std::vector<std::string> rankHost_;  // rank -> host name (launch order)
  std::vector<std::string> hosts_;     // the plan's hosts, launch order
  int ranksPerHost_;
  std::string reporter_;  // random, names this rank's series at the agent
  int64_t nextOfferNs_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  // Handed over by offer(), taken by the thread.
  std::optional<std::vector<PeerTraffic>> pending_;
  uint64_t pendingCollectiveNs_ = 0;
  std::string pendingPlan_;
  int64_t pendingEpoch_ = 0;
  std::vector<std::string> pendingOrder_;  // the plan in use's order (empty: none)
  int64_t pendingNs_ = 0;
  std::optional<Plan> fetched_;
  std::optional<OrderPricing> fetchedPricing_;  // of fetched_, against the order then in use
  // Thread only: the last pricing that succeeded and what it priced.
  std::string pricedHash_;
  std::vector<std::string> pricedAgainst_;
  std::optional<OrderPricing> priced_;
  Counters counters_;
  int failStreak_ = 0;  // failed cycles in a row: the backoff's exponent
  std::thread thread_;
};

// PlanSource over an AgentLink's fetched plans.
class AgentPlanSource : public PlanSource {
 public:
  explicit AgentPlanSource(const AgentLink& link) : link_(link) {}
  const Plan* poll(std::chrono::steady_clock::time_point now) override;
  uint64_t rejected() const override { return link_.counters().plansRejected; }
  const OrderPricing* pricing() const override { return pricing_ ? &*pricing_ : nullptr; }

 private:
  const AgentLink& link_;
  std::optional<Plan> candidate_;
  std::optional<OrderPricing> pricing_;
};

}  // namespace rankmap::coll
