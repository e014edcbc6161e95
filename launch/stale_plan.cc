#include "launch/stale_plan.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "common/error.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/plan_agreement.h"
#include "reorder/mesh.h"

namespace rankmap::launch {

StaleVerdict judgeStale(const Plan& launched, const Plan& current, double margin) {
  const std::string to = shortPlanHash(current.hash);
  if (current.hash == launched.hash) return {false, std::nullopt, "same plan"};
  if (current.epoch <= launched.epoch)
    return {false, std::nullopt,
            fmt::format("{} is from topology version {}, not newer than the job's {}", to,
                        current.epoch, launched.epoch)};
  if (current.order == launched.order)
    return {false, std::nullopt,
            fmt::format("{} (topology version {}) keeps the job's host order", to, current.epoch)};
  // A plan for a job's mesh gains by its step (every group's traffic), not by the world ring.
  const Prediction& pr = current.predicted;
  double planUs = pr.planUs, inputUs = pr.inputOrderUs;
  std::string basis = pr.basis;
  if (current.mesh && current.mesh->stepUs > 0 && current.mesh->inputStepUs > 0) {
    planUs = current.mesh->stepUs;
    inputUs = current.mesh->inputStepUs;
    basis = "step for mesh " + reorder::meshText(current.mesh->dims);
  }
  if (current.hosts == launched.order && current.ranksPerHost == launched.ranksPerHost &&
      planUs > 0 && inputUs > 0) {
    const double gain = inputUs / planUs;
    const bool stale = planUs < inputUs * (1 - margin);
    return {stale, gain,
            fmt::format("{} (topology version {}): {} {:.1f} us vs {:.1f} us in the job's order, "
                        "margin {:.0f}%",
                        to, current.epoch, basis, planUs, inputUs, margin * 100)};
  }
  return {true, std::nullopt,
          fmt::format("{} is from a newer topology (version {} > {}) with another order; its "
                      "gain over the job's order is not predicted (its input order is not the "
                      "job's)",
                      to, current.epoch, launched.epoch)};
}

StalePlanSource agentStaleSource(const std::string& url, const std::string& token,
                                 const Plan& launched) {
  // A plan for a job's mesh is re-planned for the same mesh and traffic.
  std::vector<MeshDim> mesh;
  if (launched.mesh) mesh = launched.mesh->dims;
  const std::string query = agentPlanPath(launched.order, launched.ranksPerHost,
                                          mesh.empty() ? "" : reorder::meshText(mesh),
                                          mesh.empty() ? "" : reorder::meshTrafficText(mesh));
  auto client = std::make_shared<HttpClient>(url, token);
  return [client, query](Deadline deadline) {
    HttpResponse r = client->get(query, deadline, 64u << 20);
    if (r.status != 200)
      RANKMAP_THROW(IoError, "GET {}{}: HTTP {}: {}", client->baseUrl(), query, r.status,
                    r.errorText());
    return Plan::parse(r.body, "agent plan");
  };
}

StalePlanSource fileStaleSource(const std::string& path, FileIdentity launchedIdentity,
                                const Plan& launched) {
  struct State {
    FileIdentity seen;
    Plan last;
  };
  auto st = std::make_shared<State>(State{launchedIdentity, launched});
  return [path, st](Deadline) {
    FileIdentity id = fileIdentity(path);
    if (id == st->seen) return st->last;
    if (!id.exists) RANKMAP_THROW(IoError, "plan file {} is gone", path);
    // Seen even when it fails: a corrupt file is reported once, and read again when replaced.
    st->seen = id;
    st->last = Plan::load(path);
    return st->last;
  };
}

StalePlanWatch::StalePlanWatch(Plan launched, StalePlanSource source, StalePlanOptions options,
                               Say say)
    : launched_(std::move(launched)),
      source_(std::move(source)),
      options_(std::move(options)),
      say_(std::move(say)),
      currentHash_(launched_.hash) {
  if (options_.every.count() <= 0) return;
  if (!options_.metricsDir.empty()) {
    metricsPath_ = fmt::format("{}/rankmap_run_{}.prom", options_.metricsDir, ::getpid());
    writeMetrics();
  }
  thread_ = std::thread([this] { run(); });
}

StalePlanWatch::~StalePlanWatch() { stop(); }

void StalePlanWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!metricsPath_.empty() && metricsOk_) ::unlink(metricsPath_.c_str());
}

uint64_t StalePlanWatch::checks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checks_;
}
uint64_t StalePlanWatch::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}
uint64_t StalePlanWatch::notices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return notices_;
}

void StalePlanWatch::run() {
  // The job's signals are for the thread that forwards them to the job (process.h
  // runAndWait), not for this one.
  sigset_t block;
  sigemptyset(&block);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&block, s);
  pthread_sigmask(SIG_BLOCK, &block, nullptr);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait_for(lock, options_.every, [this] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    check();
    lock.lock();
  }
}

void StalePlanWatch::check() {
  std::optional<Plan> current;
  std::string error;
  try {
    // Never longer than the interval: a slow agent must not pile up behind itself.
    current = source_(Deadline::after(std::min(options_.requestTimeout, options_.every)));
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::optional<std::string> line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++checks_;
    if (!current) {
      ++failures_;
      RANKMAP_DEBUG(Cli, "rankmap run: checking the job's plan against {}: {}",
                    options_.sourceName, error);
    } else {
      last_ = judgeStale(launched_, *current, options_.margin);
      currentHash_ = last_.stale ? current->hash : launched_.hash;
      if (last_.stale && current->hash != notifiedHash_) {
        notifiedHash_ = current->hash;
        ++notices_;
        line = fmt::format(
            "rankmap run: the job's plan {} is stale: {} now gives plan {} (topology version "
            "{}), {}: {}; the job keeps its order until it ends, a relaunch would use the new "
            "plan",
            shortPlanHash(launched_.hash), options_.sourceName, shortPlanHash(current->hash),
            current->epoch,
            last_.gain ? fmt::format("predicted {:.2f}x faster than the job's order", *last_.gain)
                       : std::string("gain over the job's order not predicted"),
            last_.reason);
      }
    }
  }
  if (line && say_) say_(*line);
  writeMetrics();
}

void StalePlanWatch::writeMetrics() {
  if (metricsPath_.empty() || !metricsOk_) return;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string labels = fmt::format("pid=\"{}\",launched_plan=\"{}\"", ::getpid(),
                                           shortPlanHash(launched_.hash));
    text = fmt::format(
        "# HELP rankmap_run_plan_stale 1 when a newer topology gives this job another plan "
        "predicted faster (RANKMAP_RUN_STALE_MARGIN), 0 otherwise\n"
        "# TYPE rankmap_run_plan_stale gauge\n"
        "rankmap_run_plan_stale{{{},current_plan=\"{}\"}} {}\n"
        "# HELP rankmap_run_plan_predicted_gain The newer plan's predicted speedup over the "
        "job's order (0 when not stale or not predicted)\n"
        "# TYPE rankmap_run_plan_predicted_gain gauge\n"
        "rankmap_run_plan_predicted_gain{{{}}} {}\n"
        "# HELP rankmap_run_plan_checks_total Checks of the job's plan against its source\n"
        "# TYPE rankmap_run_plan_checks_total counter\n"
        "rankmap_run_plan_checks_total{{{}}} {}\n"
        "# HELP rankmap_run_plan_check_failures_total Checks that got no plan from the source\n"
        "# TYPE rankmap_run_plan_check_failures_total counter\n"
        "rankmap_run_plan_check_failures_total{{{}}} {}\n",
        labels, shortPlanHash(currentHash_), last_.stale ? 1 : 0, labels,
        last_.stale && last_.gain ? *last_.gain : 0.0, labels, checks_, labels, failures_);
  }
  try {
    writeFileAtomic(metricsPath_, text);
  } catch (const std::exception& e) {
    metricsOk_ = false;
    RANKMAP_WARN(Cli, "rankmap run: no plan metrics: {}", e.what());
  }
}

}  // namespace rankmap::launch
