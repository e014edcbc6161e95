// The C ABI border of librankmap_nccl.so: the NCCL functions the shim interposes, the agreed
// plan for the tuner plugin (agreed_plan.h) and this process's part of a job profile
// (common/comm_profile.h).
//
// Only functions that need translation or counting for a profile are exported (the version
// script exports nccl*, rankmap_nccl_agreed_plan and rankmap_nccl_profile_record, nothing else):
// ncclCommCount, ncclCommGetAsyncError and the rest go to NCCL directly, at no cost. Every entry:
// - passes straight through when the thread is already inside an interposed call (the re-entry
//   guard): NCCL calls its own public functions internally, e.g. ncclBcast calls ncclBroadcast
//   and ncclCommInitAll calls ncclGetUniqueId, and those calls resolve to the shim like any other;
//   translating them again would apply the permutation twice;
// - catches every exception and returns the NCCL result for it, logging the reason. Never exit(),
//   never abort(), never print to stdout inside someone else's process.
#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

#include "common/log.h"
#include "shim_nccl/agreed_plan.h"
#include "shim_nccl/nccl_abi.h"
#include "shim_nccl/shim.h"

namespace rankmap::shim_nccl {
namespace {

thread_local int tDepth = 0;

class ReentryGuard {
 public:
  ReentryGuard() { ++tDepth; }
  ~ReentryGuard() { --tDepth; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
  static bool active() { return tDepth > 0; }
};

// Runs `translate` under the guard, or `passThrough` when nested; maps exceptions to results.
template <typename Translate, typename PassThrough>
abi::Result entry(const char* name, Translate&& translate, PassThrough&& passThrough) noexcept {
  try {
    if (ReentryGuard::active()) return passThrough(globalShim().real());
    ReentryGuard guard;
    return translate(globalShim());
  } catch (const std::exception& e) {
    abi::Result r = resultFor(e);
    RANKMAP_ERROR(Shim, "{}: {} (returning {})", name, e.what(), abi::resultName(r));
    return r;
  } catch (...) {
    RANKMAP_ERROR(Shim, "{}: unknown exception (returning ncclInternalError)", name);
    return abi::kInternalError;
  }
}

}  // namespace
}  // namespace rankmap::shim_nccl

using rankmap::shim_nccl::entry;
using rankmap::shim_nccl::RealNccl;
using rankmap::shim_nccl::Shim;
namespace abi = rankmap::shim_nccl::abi;

#define RANKMAP_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

RANKMAP_NCCL_EXPORT abi::Result ncclGetUniqueId(abi::UniqueId* id) {
  return entry(
      "ncclGetUniqueId", [&](Shim& s) { return s.getUniqueId(id); },
      [&](const RealNccl& r) { return r.getUniqueId(id); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclCommInitRank(abi::Comm* comm, int nranks, abi::UniqueId id,
                                                 int rank) {
  return entry(
      "ncclCommInitRank", [&](Shim& s) { return s.commInitRank(comm, nranks, id, rank); },
      [&](const RealNccl& r) { return r.commInitRank(comm, nranks, id, rank); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclCommInitRankConfig(abi::Comm* comm, int nranks,
                                                       abi::UniqueId id, int rank, void* config) {
  return entry(
      "ncclCommInitRankConfig",
      [&](Shim& s) { return s.commInitRankConfig(comm, nranks, id, rank, config); },
      [&](const RealNccl& r) { return r.commInitRankConfig(comm, nranks, id, rank, config); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclCommInitRankScalable(abi::Comm* comm, int nranks, int rank,
                                                         int nIds, abi::UniqueId* ids,
                                                         void* config) {
  return entry(
      "ncclCommInitRankScalable",
      [&](Shim& s) { return s.commInitRankScalable(comm, nranks, rank, nIds, ids, config); },
      [&](const RealNccl& r) {
        return r.commInitRankScalable
                   ? r.commInitRankScalable(comm, nranks, rank, nIds, ids, config)
                   : abi::kInvalidUsage;
      });
}

// Interposed only to hold the guard: the ncclGetUniqueId it calls internally must not start a
// plan agreement. Single-process communicators are not reordered (one process, one host).
RANKMAP_NCCL_EXPORT abi::Result ncclCommInitAll(abi::Comm* comms, int ndev, const int* devlist) {
  return entry(
      "ncclCommInitAll", [&](Shim& s) { return s.real().commInitAll(comms, ndev, devlist); },
      [&](const RealNccl& r) { return r.commInitAll(comms, ndev, devlist); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclCommSplit(abi::Comm comm, int color, int key,
                                              abi::Comm* newcomm, void* config) {
  return entry(
      "ncclCommSplit", [&](Shim& s) { return s.commSplit(comm, color, key, newcomm, config); },
      [&](const RealNccl& r) { return r.commSplit(comm, color, key, newcomm, config); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclCommShrink(abi::Comm comm, int* exclude, int excludeCount,
                                               abi::Comm* newcomm, void* config, int flags) {
  return entry(
      "ncclCommShrink",
      [&](Shim& s) { return s.commShrink(comm, exclude, excludeCount, newcomm, config, flags); },
      [&](const RealNccl& r) {
        return r.commShrink ? r.commShrink(comm, exclude, excludeCount, newcomm, config, flags)
                            : abi::kInvalidUsage;
      });
}

RANKMAP_NCCL_EXPORT abi::Result ncclCommDestroy(abi::Comm comm) {
  return entry(
      "ncclCommDestroy", [&](Shim& s) { return s.commDestroy(comm); },
      [&](const RealNccl& r) { return r.commDestroy(comm); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclCommAbort(abi::Comm comm) {
  return entry(
      "ncclCommAbort", [&](Shim& s) { return s.commAbort(comm); },
      [&](const RealNccl& r) { return r.commAbort(comm); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclCommUserRank(abi::Comm comm, int* rank) {
  return entry(
      "ncclCommUserRank", [&](Shim& s) { return s.commUserRank(comm, rank); },
      [&](const RealNccl& r) { return r.commUserRank(comm, rank); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclGroupStart() {
  return entry(
      "ncclGroupStart", [&](Shim& s) { return s.groupStart(); },
      [&](const RealNccl& r) { return r.groupStart(); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclGroupEnd() {
  return entry(
      "ncclGroupEnd", [&](Shim& s) { return s.groupEnd(); },
      [&](const RealNccl& r) { return r.groupEnd(); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclGroupSimulateEnd(void* simInfo) {
  return entry(
      "ncclGroupSimulateEnd", [&](Shim& s) { return s.groupSimulateEnd(simInfo); },
      [&](const RealNccl& r) {
        return r.groupSimulateEnd ? r.groupSimulateEnd(simInfo) : abi::kInvalidUsage;
      });
}

RANKMAP_NCCL_EXPORT abi::Result ncclAllReduce(const void* send, void* recv, size_t count,
                                              abi::DataType dt, abi::RedOp op, abi::Comm comm,
                                              abi::Stream stream) {
  return entry(
      "ncclAllReduce",
      [&](Shim& s) { return s.allReduce(send, recv, count, dt, op, comm, stream); },
      [&](const RealNccl& r) { return r.allReduce(send, recv, count, dt, op, comm, stream); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclReduce(const void* send, void* recv, size_t count,
                                           abi::DataType dt, abi::RedOp op, int root,
                                           abi::Comm comm, abi::Stream stream) {
  return entry(
      "ncclReduce",
      [&](Shim& s) { return s.reduce(send, recv, count, dt, op, root, comm, stream); },
      [&](const RealNccl& r) { return r.reduce(send, recv, count, dt, op, root, comm, stream); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclBcast(void* buf, size_t count, abi::DataType dt, int root,
                                          abi::Comm comm, abi::Stream stream) {
  return entry(
      "ncclBcast", [&](Shim& s) { return s.bcast(buf, count, dt, root, comm, stream); },
      [&](const RealNccl& r) { return r.bcast(buf, count, dt, root, comm, stream); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclBroadcast(const void* send, void* recv, size_t count,
                                              abi::DataType dt, int root, abi::Comm comm,
                                              abi::Stream stream) {
  return entry(
      "ncclBroadcast",
      [&](Shim& s) { return s.broadcast(send, recv, count, dt, root, comm, stream); },
      [&](const RealNccl& r) { return r.broadcast(send, recv, count, dt, root, comm, stream); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclReduceScatter(const void* send, void* recv, size_t recvCount,
                                                  abi::DataType dt, abi::RedOp op, abi::Comm comm,
                                                  abi::Stream stream) {
  return entry(
      "ncclReduceScatter",
      [&](Shim& s) { return s.reduceScatter(send, recv, recvCount, dt, op, comm, stream); },
      [&](const RealNccl& r) {
        return r.reduceScatter(send, recv, recvCount, dt, op, comm, stream);
      });
}

RANKMAP_NCCL_EXPORT abi::Result ncclAllGather(const void* send, void* recv, size_t sendCount,
                                              abi::DataType dt, abi::Comm comm,
                                              abi::Stream stream) {
  return entry(
      "ncclAllGather",
      [&](Shim& s) { return s.allGather(send, recv, sendCount, dt, comm, stream); },
      [&](const RealNccl& r) { return r.allGather(send, recv, sendCount, dt, comm, stream); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclAlltoAll(const void* send, void* recv, size_t count,
                                             abi::DataType dt, abi::Comm comm, abi::Stream stream) {
  return entry(
      "ncclAlltoAll", [&](Shim& s) { return s.alltoAll(send, recv, count, dt, comm, stream); },
      [&](const RealNccl& r) {
        return r.alltoAll ? r.alltoAll(send, recv, count, dt, comm, stream) : abi::kInvalidUsage;
      });
}

RANKMAP_NCCL_EXPORT abi::Result ncclGather(const void* send, void* recv, size_t count,
                                           abi::DataType dt, int root, abi::Comm comm,
                                           abi::Stream stream) {
  return entry(
      "ncclGather", [&](Shim& s) { return s.gather(send, recv, count, dt, root, comm, stream); },
      [&](const RealNccl& r) {
        return r.gather ? r.gather(send, recv, count, dt, root, comm, stream) : abi::kInvalidUsage;
      });
}

RANKMAP_NCCL_EXPORT abi::Result ncclScatter(const void* send, void* recv, size_t count,
                                            abi::DataType dt, int root, abi::Comm comm,
                                            abi::Stream stream) {
  return entry(
      "ncclScatter", [&](Shim& s) { return s.scatter(send, recv, count, dt, root, comm, stream); },
      [&](const RealNccl& r) {
        return r.scatter ? r.scatter(send, recv, count, dt, root, comm, stream)
                         : abi::kInvalidUsage;
      });
}

RANKMAP_NCCL_EXPORT abi::Result ncclSend(const void* buf, size_t count, abi::DataType dt, int peer,
                                         abi::Comm comm, abi::Stream stream) {
  return entry(
      "ncclSend", [&](Shim& s) { return s.send(buf, count, dt, peer, comm, stream); },
      [&](const RealNccl& r) { return r.send(buf, count, dt, peer, comm, stream); });
}

RANKMAP_NCCL_EXPORT abi::Result ncclRecv(void* buf, size_t count, abi::DataType dt, int peer,
                                         abi::Comm comm, abi::Stream stream) {
  return entry(
      "ncclRecv", [&](Shim& s) { return s.recv(buf, count, dt, peer, comm, stream); },
      [&](const RealNccl& r) { return r.recv(buf, count, dt, peer, comm, stream); });
}

// Not an NCCL function: the tuner plugin's question (agreed_plan.h). Its type is checked against
// the declaration there.
RANKMAP_NCCL_EXPORT int rankmap_nccl_agreed_plan(int nranks, char* text, size_t capacity,
                                                 size_t* length) {
  static_assert(std::is_same_v<decltype(&rankmap_nccl_agreed_plan), RankmapNcclAgreedPlanFn>);
  using rankmap::shim_nccl::AgreedPlanStatus;
  if (nranks < 1 || length == nullptr || (text == nullptr && capacity > 0))
    return static_cast<int>(AgreedPlanStatus::kBadArguments);
  AgreedPlanStatus status = AgreedPlanStatus::kNoPlan;
  std::string out;
  try {
    Shim::AgreedPlan a = rankmap::shim_nccl::globalShim().agreedPlan(nranks);
    status = a.status;
    out = a.plan != nullptr ? a.plan->dump() : a.reason;
  } catch (const std::exception& e) {
    status = AgreedPlanStatus::kNoPlan;
    out = std::string("the NCCL shim could not answer: ") + e.what();
  } catch (...) {
    status = AgreedPlanStatus::kNoPlan;
    out = "the NCCL shim could not answer";
  }
  *length = out.size();
  if (capacity > 0) std::memcpy(text, out.data(), std::min(capacity, out.size()));
  return static_cast<int>(status);
}

// This process's NCCL communicators and their traffic while RANKMAP_PROFILE_OUT is set, for the
// MPI shim in the same process (common/comm_profile.h, kProfileRecordSymbols).
extern "C" __attribute__((visibility("default"))) size_t rankmap_nccl_profile_record(
    char* buf, size_t cap) noexcept {
  try {
    return rankmap::shim_nccl::globalShim().profile().copyRecord(buf, cap);
  } catch (...) {
    return 0;
  }
}
