// PlanWatch: the plan a communicator created now gets, for the life of the job.
//
// The shim loads RANKMAP_PLAN at first use; a long job (PyTorch creates communicators lazily,
// and again after a failure) may outlive it: whoever re-plans replaces the file atomically
// (write, then rename: Plan::save), and communicators created after that should get the new
// plan. So every unique id and every init call takes a snapshot (snapshot()): one stat(2) of the
// file and, when its identity (inode, size, mtime: common/files.h, as the engine's
// PlanFileSource compares it) changed since the last look, one bounded read with the loader of
// the start (Plan::load: readable, valid JSON, a valid plan; the world size and the age are the
// vote's checks, per communicator). The snapshot is a shared_ptr that the call, and then its
// communicator, keeps for its whole life: a later replacement never changes a communicator.
//
// A replacement that cannot be read or is not a valid plan is a warning and a count
// (rejected()); new communicators then keep the last good plan, as the engine keeps the plan in
// use: a half-written or corrupt file must not turn a working job to identity order, and every
// rank that read the same good file before still agrees. A file that disappears also keeps the
// last good plan. A rank that never had a good plan votes "invalid" with the reason, as at start.
// Ranks that hold different snapshots (the file reached some hosts first) disagree in the plan
// agreement (agreement.h): identity order for that communicator, with a warning and a count.
//
// Thread-safe: any thread may call snapshot(); one mutex, held across the stat and the read.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/files.h"
#include "common/plan.h"

namespace rankmap::shim_nccl {

struct PlanSnapshot {
  std::shared_ptr<const Plan> plan;  // null: no usable plan
  std::string error;                 // why not, when the file was given but never read well
};

class PlanWatch {
 public:
  // `path` empty: the snapshot is always `initial` (tests, or RANKMAP_PLAN unset). Otherwise
  // `initial`/`initialError` are what the start read from `path` when it had identity `seen`
  // (taken before that read); a later identity reloads.
  PlanWatch(std::string path, std::optional<Plan> initial, std::string initialError,
            FileIdentity seen);

  PlanSnapshot snapshot();

  uint64_t reloads() const { return reloads_.load(std::memory_order_relaxed); }
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  std::mutex mu_;
  FileIdentity seen_;
  PlanSnapshot current_;
  std::atomic<uint64_t> reloads_{0};
  std::atomic<uint64_t> rejected_{0};
};

}  // namespace rankmap::shim_nccl
