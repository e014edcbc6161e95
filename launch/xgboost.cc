#include "launch/xgboost.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/deadline.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hosts_file.h"
#include "common/log.h"
#include "common/net.h"
#include "common/plan_agreement.h"
#include "launch/plan_source.h"
#include "launch/process.h"
#include "launch/xgboost_tracker.h"
#include "reorder/planner.h"

namespace rankmap::launch {
namespace {

// IPv4 address of a host as spelled: a topology address for a plan name, the spelling itself
// when it is an address, else the resolver's answer. nullopt when none.
std::optional<std::string> resolveHost(const std::string& spelling,
                                       const std::vector<Host>& known) {
  std::string h =
      spelling.substr(spelling.find('@') == std::string::npos ? 0 : spelling.find('@') + 1);
  for (const auto& k : known)
    if (k.name == h && !k.address.empty()) return k.ip();
  try {
    return resolve(h, 0, Lookup::kNamesIpv4).host();
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

std::atomic<int> gSignal{0};
extern "C" void onSignal(int sig) { gSignal.store(sig); }

// The workers' processes: each in its own process group, killed (group-wide) unless they all
// ended by the time this goes out of scope.
class Workers {
 public:
  ~Workers() { killAll(); }

  void start(const XgboostWorker& w, const std::vector<std::string>& argv) {
    SpawnOptions opts;
    opts.newProcessGroup = true;
    opts.what = fmt::format("XGBoost worker {}", w.index);
    procs_.push_back({w, spawn(argv, opts)});
  }

  // Reaps what has exited; throws PeerError for a worker that failed while `failIsError`.
  void poll(bool failIsError) {
    for (auto& p : procs_) {
      if (!p.child.running()) continue;
      auto st = p.child.poll();
      if (st && failIsError && st->code() != 0)
        RANKMAP_THROW(PeerError, "XGBoost worker {} (task {}{}) {} before the job ended", p.w.index,
                      p.w.taskId, p.w.host.empty() ? "" : " on " + p.w.host, st->describe());
    }
  }
  bool allExited() const {
    return std::all_of(procs_.begin(), procs_.end(),
                       [](const Proc& p) { return !p.child.running(); });
  }
  // The first non-zero exit code, else 0.
  int exitStatus() const {
    for (const auto& p : procs_)
      if (p.child.status() && p.child.status()->code() != 0) return p.child.status()->code();
    return 0;
  }
  // SIGTERM to every worker's group, then SIGKILL, each with 2 s to exit.
  void killAll() {
    for (int sig : {SIGTERM, SIGKILL}) {
      for (auto& p : procs_) p.child.kill(sig);
      Deadline d = Deadline::afterMs(2000);
      while (!d.expired()) {
        poll(false);
        if (allExited()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    // Still there 2 s after SIGKILL (stuck in the kernel): an expired wait kills again and reaps.
    for (auto& p : procs_)
      if (p.child.running()) p.child.wait(Deadline::afterMs(0));
  }

 private:
  struct Proc {
    XgboostWorker w;
    Child child;
  };
  std::vector<Proc> procs_;
};

}  // namespace

std::vector<std::string> splitWords(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

std::string xgboostTaskId(int rank, int workers) {
  int width = static_cast<int>(std::to_string(std::max(0, workers - 1)).size());
  return fmt::format("rankmap-{:0{}}", rank, width);
}

std::vector<XgboostWorker> placeXgboostWorkers(int workers, const std::vector<std::string>& hosts,
                                               const std::optional<Plan>& plan,
                                               const std::string& planError,
                                               const PlanSource& source,
                                               const std::vector<Host>& known, std::string& note) {
  if (workers < 1) RANKMAP_THROW(InvalidInput, "--xgboost {}: expected at least 1 worker", workers);
  size_t h = hosts.empty() ? 1 : hosts.size();
  if (workers % static_cast<int>(h) != 0)
    RANKMAP_THROW(InvalidInput,
                  "--xgboost {}: expected a multiple of the {} hosts (K workers on "
                  "each)",
                  workers, h);
  int k = workers / static_cast<int>(h);
  std::vector<XgboostWorker> out(workers);
  for (int i = 0; i < workers; ++i) {
    out[i].index = i;
    out[i].host = hosts.empty() ? std::string() : hosts[i / k];
    out[i].rank = i;
  }
  auto identity = [&](const std::string& why) {
    note = "identity order (" + why + ")";
    for (auto& w : out) w.taskId = xgboostTaskId(w.rank, workers);
    return out;
  };
  if (!plan) return identity(fmt::format("no plan from {}: {}", source.description, planError));
  if (hosts.empty()) return identity("local workers: nothing to reorder");
  std::vector<JobHost> job;
  for (const auto& host : hosts) job.push_back({host, k});
  std::vector<std::string> names;
  try {
    names = matchHosts(job, plan->hosts, known);
  } catch (const Error& e) {
    note = fmt::format("warning: plan {} from {} does not cover the hosts: {}; ",
                       shortPlanHash(plan->hash), source.description, e.what());
    std::string keep = note;
    identity("the hosts file's order");
    note = keep + note;
    return out;
  }
  std::map<std::string, int> pos;
  for (size_t i = 0; i < plan->order.size(); ++i) pos[plan->order[i]] = static_cast<int>(i);
  for (auto& w : out) w.rank = pos.at(names[w.index / k]) * k + w.index % k;
  for (auto& w : out) w.taskId = xgboostTaskId(w.rank, workers);
  bool same =
      std::all_of(out.begin(), out.end(), [](const XgboostWorker& w) { return w.rank == w.index; });
  std::string pred = plan->predicted.speedup > 0 && !plan->predicted.basis.empty()
                         ? fmt::format("; predicted {:.2f}x for {}", plan->predicted.speedup,
                                       plan->predicted.basis)
                         : std::string();
  note = fmt::format("plan {} from {}: {} workers on {} host(s) ranked in plan order{}{}",
                     shortPlanHash(plan->hash), source.description, workers, h,
                     same ? " (the same as the hosts' order)" : "", pred);
  return out;
}

std::vector<std::string> xgboostWorkerCommand(const XgboostWorker& w, int workers,
                                              const XgboostOptions& opts, const std::string& uri,
                                              uint16_t port,
                                              const std::vector<std::string>& program,
                                              const std::string& cwd) {
  std::vector<std::string> envCmd = {"env", "DMLC_TASK_ID=" + w.taskId, "DMLC_TRACKER_URI=" + uri,
                                     "DMLC_TRACKER_PORT=" + std::to_string(port),
                                     "DMLC_NUM_WORKER=" + std::to_string(workers)};
  envCmd.insert(envCmd.end(), program.begin(), program.end());
  if (w.host.empty()) return envCmd;
  std::vector<std::string> argv = opts.rsh;
  argv.push_back(w.host);
  // ssh semantics: the words form one shell command line on the remote side.
  argv.push_back("cd " + shellJoin({cwd}) + " 2>/dev/null; exec " + shellJoin(envCmd));
  return argv;
}

int runXgboost(const XgboostOptions& opts, const std::vector<std::string>& program,
               const std::optional<Plan>& plan, const std::string& planError,
               const PlanSource& source, const std::vector<Host>& known) {
  if (program.empty()) RANKMAP_THROW(InvalidInput, "--xgboost: expected a program after --");
  std::vector<std::string> hosts = opts.hosts;
  if (hosts.empty() && plan && !opts.rsh.empty()) {
    // The plan's hosts in their input order are the launcher order.
    if (opts.workers % static_cast<int>(plan->hosts.size()) == 0) hosts = plan->hosts;
  }
  std::string note;
  auto workers = placeXgboostWorkers(opts.workers, hosts, plan, planError, source, known, note);

  std::string uri = opts.trackerAddress;
  if (uri.empty()) {
    if (hosts.empty()) {
      uri = "127.0.0.1";
    } else {
      auto addr = resolveHost(hosts[0], known);
      auto src = addr ? sourceAddressFor(*addr) : std::nullopt;
      if (!src)
        RANKMAP_THROW(InvalidInput,
                      "--xgboost: no local address reaches host {:?} (give its "
                      "address in a topology, or --tracker-addr)",
                      hosts[0]);
      uri = *src;
    }
  }
  RabitTracker tracker(uri, opts.trackerPort, opts.workers);
  char cwdBuf[PATH_MAX] = {};
  std::string cwd = getcwd(cwdBuf, sizeof cwdBuf) ? cwdBuf : "/";
  fmt::print(stderr, "rankmap run: xgboost: {}; tracker {}:{}\n", note, uri, tracker.port());
  if (opts.dryRun) {
    for (const auto& w : workers)
      fmt::print("{}\n", shellJoin(xgboostWorkerCommand(w, opts.workers, opts, uri, tracker.port(),
                                                        program, cwd)));
    return 0;
  }

  gSignal.store(0);
  struct sigaction sa {
  }, oldInt{}, oldTerm{};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &oldInt);
  sigaction(SIGTERM, &sa, &oldTerm);
  struct Restore {
    struct sigaction i, t;
    ~Restore() {
      sigaction(SIGINT, &i, nullptr);
      sigaction(SIGTERM, &t, nullptr);
    }
  } restore{oldInt, oldTerm};

  Workers procs;
  for (const auto& w : workers)
    procs.start(w, xgboostWorkerCommand(w, opts.workers, opts, uri, tracker.port(), program, cwd));
  std::optional<Deadline> allExitedAt;
  auto tick = [&] {
    if (int sig = gSignal.load())
      RANKMAP_THROW(PeerError, "rankmap run: xgboost: signal {}: stopping the workers", sig);
    procs.poll(true);
    // Shutdown messages may still sit in the listen backlog when the last worker exits: allow
    // the tracker a grace period to read them.
    if (!procs.allExited()) return;
    if (!allExitedAt) allExitedAt = Deadline::afterMs(3000);
    if (allExitedAt->expired())
      RANKMAP_THROW(PeerError, "XGBoost workers all exited without shutting down at the tracker");
  };
  try {
    tracker.serve(Deadline::after(opts.startTimeout), opts.ioTimeout, tick,
                  [](const std::string& msg) {
                    fmt::print("{}\n", msg);
                    std::fflush(stdout);
                  });
  } catch (const TimeoutError& e) {
    std::string missing;
    for (const auto& w : workers)
      if (!tracker.ranks().count(w.taskId))
        missing += fmt::format("{}{} (task {}{})", missing.empty() ? "" : ", ", w.index, w.taskId,
                               w.host.empty() ? "" : " on " + w.host);
    throw TimeoutError(fmt::format("{}; workers without a rank: {}", e.what(),
                                   missing.empty() ? std::string("none") : missing));
  }
  // Every worker shut down at the tracker: they should exit now.
  Deadline d = Deadline::after(opts.ioTimeout);
  while (!procs.allExited() && !d.expired()) {
    procs.poll(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!procs.allExited()) {
    RANKMAP_WARN(Agent, "XGBoost workers still running {} ms after shutting down; killing them",
                 opts.ioTimeout.count());
    procs.killAll();
    return procs.exitStatus() ? procs.exitStatus() : 1;
  }
  return procs.exitStatus();
}

int runXgboostJob(XgboostOptions opts, const std::string& hostsFile,
                  const std::vector<std::string>& program, const std::string& planPath,
                  const std::string& topologyPath, const PlanChecks& checks) {
  // The hosts file is rankmap's (`name [address]`, common/hosts_file.h): the names in
  // launcher order, and the addresses, when given, reach the hosts a topology does not name.
  std::vector<Host> fileHosts;
  if (!hostsFile.empty())
    for (const auto& h : readHostsFile(hostsFile, HostAddress::kOptional)) {
      opts.hosts.push_back(h.name);
      if (!h.address.empty()) fileHosts.push_back({h.name, h.address});
    }
  PlanResult pr = planForFramework(
      planPath, topologyPath,
      [&] {
        Job job;
        int k = opts.hosts.empty()
                    ? 1
                    : std::max(1, opts.workers / static_cast<int>(opts.hosts.size()));
        if (opts.hosts.empty()) {
          for (const auto& h : Topology::load(topologyPath).hosts) job.hosts.push_back({h.name, 1});
          if (opts.workers % static_cast<int>(job.hosts.size()) == 0)
            for (auto& h : job.hosts) h.ranks = opts.workers / static_cast<int>(job.hosts.size());
        } else {
          for (const auto& h : opts.hosts) job.hosts.push_back({h, k});
        }
        return job;
      },
      "no --plan or --topology (RANKMAP_PLAN / RANKMAP_TOPOLOGY)", checks);
  for (const auto& h : fileHosts)
    if (std::none_of(pr.known.begin(), pr.known.end(),
                     [&](const Host& k) { return k.name == h.name; }))
      pr.known.push_back(h);
  return runXgboost(opts, program, pr.plan, pr.error, pr.source, pr.known);
}

}  // namespace rankmap::launch
