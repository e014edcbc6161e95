// Telling the user that a running job's plan has gone stale.
//
// A job that `rankmap run` launched in plan order (mpirun's hostfile, torchrun's node ranks, the
// MPI shim's reordered world) keeps that order until it ends: nothing can move ranks underneath
// MPI. When the network changes meanwhile (the agent publishes a new topology version), the
// user should know that a relaunch would run in another, faster order. So, while the job runs, a
// StalePlanWatch thread asks the plan's source every RANKMAP_RUN_STALE_CHECK for the plan it
// would give now, and judgeStale() (pure) compares it with the plan the job was launched with.
// When it is stale, one line goes to stderr (once per new plan, not once per check) and a
// Prometheus textfile (node-exporter's textfile collector convention: a `.prom` file written
// atomically into RANKMAP_RUN_METRICS_DIR) says so.
//
// Sources (StalePlanSource):
// - the agent (rankmapd): GET /v1/plan?hosts=<the job's hosts in the launched plan's order>
//   &ranks_per_host=K. Asking with the launched order as the input order makes the answer's own
//   prediction (Plan::predicted: plan vs input order, on the newest topology) the predicted gain
//   of the new plan over the order the job runs in.
// - the plan file: re-read when its identity (inode, size, mtime) changes; its prediction is a
//   gain over the job's order only when its input order is the job's order.
//
// Contract: the watch never blocks or delays the job: it runs on its own thread, every request
// is bounded (RANKMAP_RUN_AGENT_TIMEOUT, and never longer than the interval), failures are
// counted and logged at debug level, and stop() (the job ended) wakes it at once; it returns
// after at most one request in flight has hit its deadline. The metrics file is removed at
// stop(). Nothing goes to stdout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/deadline.h"
#include "common/files.h"
#include "common/plan.h"

namespace rankmap::launch {

// Whether `current` (the plan the source gives now) makes `launched` stale. Pure.
// 1. Same hash, or not from a newer topology (epoch <= launched's): not stale. Two plans of one
//    measurement never flap; the agent's hysteresis decides when a new version is published.
// 2. Same host order: not stale (the job already runs in it).
// 3. `current`'s input order is the launched order (`hosts` == launched `order`, same ranks per
//    host) and it predicts both times: gain = inputOrderUs / planUs; stale iff
//    planUs < inputOrderUs x (1 - margin).
// 4. Otherwise its gain over the job's order is not predicted: stale (a newer topology gives
//    another order), gain unknown.
struct StaleVerdict {
  bool stale = false;
  std::optional<double> gain;  // predicted speedup over the job's order, when known
  std::string reason;          // one line
};
StaleVerdict judgeStale(const Plan& launched, const Plan& current, double margin);

// The plan the job's source would give now; throws on any failure (counted by the watch).
// Called on the watch's thread only.
using StalePlanSource = std::function<Plan(Deadline)>;

// The agent at `url`: GET /v1/plan for the launched plan's hosts in its order (see above).
StalePlanSource agentStaleSource(const std::string& url, const std::string& token,
                                 const Plan& launched);
// The plan file at `path`: read when its identity differs from the last one read (the first
// call compares with `launchedIdentity`, the file as the job was launched from it); otherwise
// the last plan read (or `launched`).
StalePlanSource fileStaleSource(const std::string& path, FileIdentity launchedIdentity,
                                const Plan& launched);

struct StalePlanOptions {
  std::chrono::milliseconds every{60000};           // RANKMAP_RUN_STALE_CHECK; 0 = no watch
  std::chrono::milliseconds requestTimeout{5000};   // RANKMAP_RUN_AGENT_TIMEOUT
  double margin = 0.1;                              // RANKMAP_RUN_STALE_MARGIN
  std::string metricsDir;                           // RANKMAP_RUN_METRICS_DIR; empty = none
  std::string sourceName;                           // "agent http://..." for the log line
};

class StalePlanWatch {
 public:
  using Say = std::function<void(const std::string&)>;  // one line for the user (stderr)
  // Starts the thread (when options.every > 0) and writes the metrics file (when a directory is
  // given; a directory that cannot be written is one warning, and no file).
  StalePlanWatch(Plan launched, StalePlanSource source, StalePlanOptions options, Say say);
  ~StalePlanWatch();
  StalePlanWatch(const StalePlanWatch&) = delete;
  StalePlanWatch& operator=(const StalePlanWatch&) = delete;

  // Ends the thread (waking it now) and removes the metrics file. Idempotent.
  void stop();

  uint64_t checks() const;
  uint64_t failures() const;
  uint64_t notices() const;
  // The metrics file's path ("" without a directory).
  const std::string& metricsPath() const { return metricsPath_; }

 private:
  void run();
  void check();
  void writeMetrics();

  const Plan launched_;
  StalePlanSource source_;
  const StalePlanOptions options_;
  Say say_;
  std::string metricsPath_;
  bool metricsOk_ = true;  // written by the thread, or before it starts

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  uint64_t checks_ = 0;
  uint64_t failures_ = 0;
  uint64_t notices_ = 0;
  std::string notifiedHash_;  // the last stale plan told to the user
  StaleVerdict last_;
  std::string currentHash_;
  std::thread thread_;
};

}  // namespace rankmap::launch
