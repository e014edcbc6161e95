// `rankmap run --xgboost N -- PROGRAM...`: an XGBoost (Rabit/collective) job whose worker ranks
// follow a plan, with no change to the program.
//
// XGBoost's tracker ranks workers by host IP string (default) or by task id
// (RabitTracker(sortby="task")); ring neighbours are rank +- 1 and the ring carries every
// allreduce above 32768 elements (histograms with tree_method="hist"). rankmap run starts its own
// tracker (launch/xgboost_tracker.h, C++, wire-compatible with xgboost 1.7) that ranks by
// task id, and starts the N workers itself with task ids that sort in plan order:
//   - on hosts: worker i (launcher order) runs on hosts[i / K], K = N / hosts, started as
//     `RSH... HOST 'cd DIR; exec env DMLC_TASK_ID=.. DMLC_TRACKER_URI=.. DMLC_TRACKER_PORT=..
//     DMLC_NUM_WORKER=N PROGRAM...'` (RSH defaults to ssh; Open MPI's plm_rsh_agent convention);
//   - without hosts: N local processes.
// Worker i's task id is "rankmap-" + its new rank (zero-padded), so the rank order is the plan's
// host order with a host's workers contiguous. The program reads DMLC_TRACKER_URI,
// DMLC_TRACKER_PORT and DMLC_TASK_ID from its environment (as xgboost.rabit.init() and
// dmlc-submit jobs do).
//
// Bad input: a plan that does not cover the hosts gives identity order (hosts file order) with a
// warning; a worker that cannot reach the tracker makes the tracker's start deadline
// (RANKMAP_XGBOOST_TIMEOUT) expire with a TimeoutError naming the workers missing, and every
// worker is killed; a worker that exits non-zero ends the job with its status.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/plan.h"
#include "common/plan_agreement.h"
#include "common/topology.h"
#include "launch/launch.h"

namespace rankmap::launch {

struct XgboostWorker {
  int index = 0;       // launcher order: 0..N-1
  std::string host;    // as the hosts list spells it; empty = local
  int rank = 0;        // the rank the tracker will give it
  std::string taskId;  // DMLC_TASK_ID, sorts in rank order
};

// Places `workers` workers on `hosts` (launcher order, K each) and ranks them by `plan` when it
// covers the hosts (matched by name, or by address through `known`); otherwise identity order
// with `note` saying why. Throws InvalidInput when `workers` is not a multiple of the host count.
std::vector<XgboostWorker> placeXgboostWorkers(int workers, const std::vector<std::string>& hosts,
                                               const std::optional<Plan>& plan,
                                               const std::string& planError,
                                               const PlanSource& source,
                                               const std::vector<Host>& known, std::string& note);

// Splits a command given as one string ("ssh -p 2222") at whitespace; no quoting rules.
std::vector<std::string> splitWords(const std::string& text);

// The task id of rank `rank` of `workers`: "rankmap-" + zero-padded rank.
std::string xgboostTaskId(int rank, int workers);

struct XgboostOptions {
  int workers = 0;
  std::vector<std::string> hosts;          // empty = the plan's hosts, or local workers
  std::vector<std::string> rsh = {"ssh"};  // remote start: RSH... HOST COMMAND
  std::string trackerAddress;              // empty = the address that routes to the first host
  uint16_t trackerPort = 0;                // 0 = any
  std::chrono::milliseconds startTimeout{120000};
  std::chrono::milliseconds ioTimeout{60000};
  bool dryRun = false;  // print the worker commands, start nothing
};

// The command that starts `w` with the tracker at uri:port: RSH... HOST 'cd CWD; exec env
// DMLC_...= PROGRAM...' for a remote worker, or `env DMLC_...= PROGRAM...` for a local one.
std::vector<std::string> xgboostWorkerCommand(const XgboostWorker& w, int workers,
                                              const XgboostOptions& opts, const std::string& uri,
                                              uint16_t port,
                                              const std::vector<std::string>& program,
                                              const std::string& cwd);

// Runs the job: tracker here, workers local or remote. Returns the exit status (0 when every
// worker exited 0 after all shut down). Throws TimeoutError when the workers do not all start
// in time (after killing them).
int runXgboost(const XgboostOptions& opts, const std::vector<std::string>& program,
               const std::optional<Plan>& plan, const std::string& planError,
               const PlanSource& source, const std::vector<Host>& known);

// rankmap run's entry for --xgboost: the plan from `planPath` (host addresses from
// `topologyPath`, may be empty), else planned from `topologyPath` for the hosts, then runXgboost.
// `hostsFile` (may be empty) lists the hosts in launcher order. A stale plan (`checks`) is not
// applied.
int runXgboostJob(XgboostOptions opts, const std::string& hostsFile,
                  const std::vector<std::string>& program, const std::string& planPath,
                  const std::string& topologyPath, const PlanChecks& checks);

}  // namespace rankmap::launch
