// The C API (collectives/include/rankmap/coll.h) over Communicator. Every entry point runs its
// body in guard(): exceptions become result codes and this thread's last-error message; nothing
// escapes into the host program, nothing is printed to stdout. While RANKMAP_PROFILE_OUT is set
// (`rankmap run --record-profile`), the communicators made here and the traffic on them are
// counted for a job profile and handed to the MPI shim in the same process
// (rankmapProfileRecord, common/comm_profile.h).
#include "rankmap/coll.h"

#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "collectives/communicator.h"
#include "collectives/connect.h"
#include "common/comm_profile.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

struct rankmapComm {
  // Set when the rendezvous loaded MPI (rankmapCommInitFromEnv under mpirun): finalized after
  // the communicator, which is declared after it, is closed.
  std::unique_ptr<rankmap::coll::bootstrap::MpiLibrary> mpi;
  std::unique_ptr<rankmap::coll::Communicator> comm;
};

namespace {

using rankmap::ErrorCode;

thread_local std::string lastError;

static_assert(static_cast<int>(rankmapInvalidInput) == static_cast<int>(ErrorCode::kInvalidInput));
static_assert(static_cast<int>(rankmapIoError) == static_cast<int>(ErrorCode::kIo));
static_assert(static_cast<int>(rankmapTimeout) == static_cast<int>(ErrorCode::kTimeout));
static_assert(static_cast<int>(rankmapNotSupported) == static_cast<int>(ErrorCode::kNotSupported));
static_assert(static_cast<int>(rankmapSystemError) == static_cast<int>(ErrorCode::kSystem));
static_assert(static_cast<int>(rankmapCudaError) == static_cast<int>(ErrorCode::kCuda));
static_assert(static_cast<int>(rankmapPeerError) == static_cast<int>(ErrorCode::kPeer));
static_assert(static_cast<int>(rankmapInternalError) == static_cast<int>(ErrorCode::kInternal));
static_assert(static_cast<int>(rankmapFloat64) ==
              static_cast<int>(rankmap::coll::DataType::kFloat64));
static_assert(static_cast<int>(rankmapBfloat16) ==
              static_cast<int>(rankmap::coll::DataType::kBFloat16));
static_assert(static_cast<int>(rankmapAvg) == static_cast<int>(rankmap::coll::ReduceOp::kAvg));

template <typename F>
rankmapResult_t guard(F&& body) noexcept {
  try {
    lastError.clear();
    body();
    return rankmapSuccess;
  } catch (const std::exception& e) {
    try {
      lastError = e.what();
    } catch (...) {
    }
    return static_cast<rankmapResult_t>(rankmap::toCode(e));
  } catch (...) {
    try {
      lastError = "unknown exception";
    } catch (...) {
    }
    return rankmapInternalError;
  }
}

rankmap::coll::Communicator& get(rankmapComm_t comm) {
  if (comm == nullptr || !comm->comm) RANKMAP_THROW(rankmap::InvalidInput, "null communicator");
  return *comm->comm;
}

// The argument enums have the fixed underlying type unsigned int (coll.h), so any value a caller
// passes is a valid one here, and the range check is defined behaviour.
rankmap::coll::DataType typeOf(rankmapDataType_t t) {
  if (static_cast<unsigned>(t) >= static_cast<unsigned>(rankmap::coll::kNumDataTypes))
    RANKMAP_THROW(rankmap::InvalidInput, "unknown data type {}", static_cast<int>(t));
  return static_cast<rankmap::coll::DataType>(t);
}

rankmap::coll::ReduceOp opOf(rankmapRedOp_t op) {
  if (static_cast<unsigned>(op) >= static_cast<unsigned>(rankmap::coll::kNumReduceOps))
    RANKMAP_THROW(rankmap::InvalidInput, "unknown reduction operator {}", static_cast<int>(op));
  return static_cast<rankmap::coll::ReduceOp>(op);
}

// Loads the configuration and applies the log settings once per process.
rankmap::Config loadConfig() {
  rankmap::Config cfg = rankmap::Config::load();
  static std::once_flag once;
  std::call_once(once, [&] { rankmap::log::configure(cfg); });
  return cfg;
}

// This process's communicators for a job profile, on when RANKMAP_PROFILE_OUT is set at the
// first use.
rankmap::CommProfile& profile() {
  static rankmap::CommProfile p([] {
    try {
      return !loadConfig().get(rankmap::settings::kProfileOut).empty();
    } catch (...) {
      return false;
    }
  }());
  return p;
}

// A new communicator for the profile. Its key: what every member shares, `where` (the root
// address, or the environment's world) and the size, with how many communicators this rank made
// there before (every member makes its communicators in the same order).
// Never throws: the communicator is made whether it is recorded or not.
void profileMade(rankmapComm_t comm, const char* madeBy, const std::string& where) noexcept {
  try {
    rankmap::CommProfile& p = profile();
    if (!p.on()) return;
    static std::mutex mu;
    static std::map<std::tuple<std::string, int, int>, int> made;  // (where, size, rank) -> count
    const int size = comm->comm->size(), rank = comm->comm->rank();
    int ordinal = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      ordinal = ++made[{where, size, rank}];
    }
    p.made(comm, madeBy, fmt::format("{}/{}/{}", where, size, ordinal));
  } catch (...) {
  }
}

// One call that moved `count` elements of `t` per member (times the size when `perRank`).
// (typeOf() has accepted `t` already: the call ran.)
void profiled(rankmapComm_t comm, const char* collective, size_t count, rankmapDataType_t t,
              bool perRank = false) {
  rankmap::CommProfile& p = profile();
  if (!p.on()) return;
  uint64_t bytes = static_cast<uint64_t>(count) * rankmap::coll::elementSize(typeOf(t));
  if (perRank) bytes *= static_cast<uint64_t>(comm->comm->size());
  p.traffic(comm, collective, bytes);
}

}  // namespace

extern "C" {

// This process's communicators and their traffic while a profile is recorded, for the MPI shim
// (common/comm_profile.h, kProfileRecordSymbols). Not in coll.h: an interface between rankmap's
// own libraries.
__attribute__((visibility("default"))) size_t rankmapProfileRecord(char* buf, size_t cap) noexcept {
  return profile().copyRecord(buf, cap);
}

rankmapResult_t rankmapCommInitFromEnv(rankmapComm_t* comm) {
  return guard([&] {
    if (comm == nullptr) RANKMAP_THROW(rankmap::InvalidInput, "null communicator pointer");
    *comm = nullptr;
    auto c = std::make_unique<rankmapComm>();
    rankmap::coll::Connection connection = rankmap::coll::connectFromEnvironment(loadConfig());
    c->mpi = std::move(connection.mpi);
    c->comm = std::move(connection.comm);
    *comm = c.release();
    profileMade(*comm, "rankmapCommInitFromEnv", "environment");
  });
}

rankmapResult_t rankmapCommInitRoot(rankmapComm_t* comm, int rank, int nranks, const char* root,
                                    const char* planPath) {
  return guard([&] {
    using namespace rankmap;
    if (comm == nullptr) RANKMAP_THROW(InvalidInput, "null communicator pointer");
    *comm = nullptr;
    if (root == nullptr || *root == '\0') RANKMAP_THROW(InvalidInput, "no root address");
    if (nranks < 1 || rank < 0 || rank >= nranks)
      RANKMAP_THROW(InvalidInput, "rank {} of {} ranks", rank, nranks);
    Config cfg = loadConfig();
    auto options = coll::CommOptions::fromConfig(cfg);
    if (planPath != nullptr) options.live.planFile = planPath;  // watched instead of RANKMAP_PLAN
    auto plan = coll::loadLocalPlan(planPath ? std::string(planPath) : cfg.get(settings::kPlan),
                                    rank, nranks, cfg);
    auto c = std::make_unique<rankmapComm>();
    c->comm = coll::connectCommunicator(rank, nranks, root, cfg, options, std::move(plan),
                                        Deadline::after(options.timeout));
    *comm = c.release();
    profileMade(*comm, "rankmapCommInitRoot", root);
  });
}

rankmapResult_t rankmapCommDestroy(rankmapComm_t comm) {
  return guard([&] {
    profile().destroyed(comm);
    delete comm;
  });
}

rankmapResult_t rankmapCommRank(rankmapComm_t comm, int* rank) {
  return guard([&] {
    if (rank == nullptr) RANKMAP_THROW(rankmap::InvalidInput, "null rank pointer");
    *rank = get(comm).rank();
  });
}

rankmapResult_t rankmapCommSize(rankmapComm_t comm, int* size) {
  return guard([&] {
    if (size == nullptr) RANKMAP_THROW(rankmap::InvalidInput, "null size pointer");
    *size = get(comm).size();
  });
}

rankmapResult_t rankmapCommFallbacks(rankmapComm_t comm, uint64_t* fallbacks) {
  return guard([&] {
    if (fallbacks == nullptr) RANKMAP_THROW(rankmap::InvalidInput, "null pointer");
    *fallbacks = get(comm).fallbacks();
  });
}

rankmapResult_t rankmapCommPlanSwitches(rankmapComm_t comm, uint64_t* switches) {
  return guard([&] {
    if (switches == nullptr) RANKMAP_THROW(rankmap::InvalidInput, "null pointer");
    *switches = get(comm).stats().planSwitches;
  });
}

rankmapResult_t rankmapAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                                 rankmapDataType_t type, rankmapRedOp_t op, rankmapComm_t comm) {
  return guard([&] {
    get(comm).allreduce(sendbuf, recvbuf, count, typeOf(type), opOf(op));
    profiled(comm, "allreduce", count, type);
  });
}

rankmapResult_t rankmapAllGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                 rankmapDataType_t type, rankmapComm_t comm) {
  return guard([&] {
    get(comm).allgather(sendbuf, recvbuf, sendcount, typeOf(type));
    profiled(comm, "allgather", sendcount, type, true);
  });
}

rankmapResult_t rankmapReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                     rankmapDataType_t type, rankmapRedOp_t op,
                                     rankmapComm_t comm) {
  return guard([&] {
    get(comm).reduceScatter(sendbuf, recvbuf, recvcount, typeOf(type), opOf(op));
    profiled(comm, "reducescatter", recvcount, type, true);
  });
}

rankmapResult_t rankmapBroadcast(const void* sendbuf, void* recvbuf, size_t count,
                                 rankmapDataType_t type, int root, rankmapComm_t comm) {
  return guard([&] {
    get(comm).broadcast(sendbuf, recvbuf, count, typeOf(type), root);
    profiled(comm, "broadcast", count, type);
  });
}

rankmapResult_t rankmapReduce(const void* sendbuf, void* recvbuf, size_t count,
                              rankmapDataType_t type, rankmapRedOp_t op, int root,
                              rankmapComm_t comm) {
  return guard(
      [&] { get(comm).reduce(sendbuf, recvbuf, count, typeOf(type), opOf(op), root); });
}

rankmapResult_t rankmapBarrier(rankmapComm_t comm) {
  return guard([&] { get(comm).barrier(); });
}

const char* rankmapGetErrorString(rankmapResult_t result) {
  switch (result) {
    case rankmapSuccess: return "success";
    case rankmapInvalidInput: return "invalid input";
    case rankmapIoError: return "I/O error";
    case rankmapTimeout: return "timeout";
    case rankmapNotSupported: return "not supported";
    case rankmapSystemError: return "system error";
    case rankmapCudaError: return "CUDA error";
    case rankmapPeerError: return "peer error";
    case rankmapInternalError: return "internal error";
  }
  return "unknown result";
}

const char* rankmapGetLastError(void) { return lastError.c_str(); }

}  // extern "C"
