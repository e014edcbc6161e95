#include "shim_mpi/engine.h"

#include <atomic>
#include <memory>
#include <string>

#include "collectives/bootstrap/mpi_bootstrap.h"
#include "collectives/communicator.h"
#include "collectives/connect.h"
#include "collectives/transport/transport.h"
#include "common/log.h"
#include "shim_mpi/wrappers.gen.h"

namespace rankmap::shim_mpi {
namespace {

using coll::DataType;
using coll::ReduceOp;

// Owned from startEngine() to stopEngine(); read by the wrappers.
std::atomic<coll::Communicator*> gEngine{nullptr};
MPI_Comm gEngineWorld = MPI_COMM_NULL;
int gRank = -1;
std::atomic<uint64_t> gServed{0};
std::atomic<uint64_t> gDeclined{0};
std::atomic<bool> gFailureLogged{false};

// The engine type of a predefined MPI type, by size where C and Fortran leave it to the platform.
// (PMPI_Type_size is not wrapped: the call goes straight to MPI.)
std::optional<DataType> engineType(MPI_Datatype t, bool reducing) {
  int size = 0;
  if (PMPI_Type_size(t, &size) != MPI_SUCCESS) return std::nullopt;
  auto sized = [size](DataType four, DataType eight) -> std::optional<DataType> {
    if (size == 4) return four;
    if (size == 8) return eight;
    return std::nullopt;
  };
  if (t == MPI_INT8_T || t == MPI_SIGNED_CHAR) return DataType::kInt8;
  if (t == MPI_UINT8_T || t == MPI_UNSIGNED_CHAR) return DataType::kUint8;
  if (t == MPI_BYTE) return reducing ? std::nullopt : std::optional<DataType>(DataType::kUint8);
  if (t == MPI_INT32_T || t == MPI_INT64_T || t == MPI_INT || t == MPI_LONG || t == MPI_LONG_LONG ||
      t == MPI_INTEGER)
    return sized(DataType::kInt32, DataType::kInt64);
  if (t == MPI_UINT32_T || t == MPI_UINT64_T || t == MPI_UNSIGNED || t == MPI_UNSIGNED_LONG ||
      t == MPI_UNSIGNED_LONG_LONG)
    return sized(DataType::kUint32, DataType::kUint64);
  if (t == MPI_FLOAT || t == MPI_DOUBLE || t == MPI_REAL || t == MPI_DOUBLE_PRECISION)
    return sized(DataType::kFloat32, DataType::kFloat64);
  return std::nullopt;
}

std::optional<ReduceOp> engineOp(MPI_Op op) {
  if (op == MPI_SUM) return ReduceOp::kSum;
  if (op == MPI_PROD) return ReduceOp::kProd;
  if (op == MPI_MIN) return ReduceOp::kMin;
  if (op == MPI_MAX) return ReduceOp::kMax;
  return std::nullopt;
}

// The engine for `comm` when it is the reordered world; else null.
coll::Communicator* engineFor(MPI_Comm comm) {
  coll::Communicator* e = gEngine.load(std::memory_order_acquire);
  return e != nullptr && comm == gEngineWorld ? e : nullptr;
}

std::optional<int> declined() {
  gDeclined.fetch_add(1, std::memory_order_relaxed);
  return std::nullopt;
}

// Runs `call` on the engine; a failure is raised on the world's error handler (fatal by default).
template <typename F>
std::optional<int> serve(F&& call) noexcept {
  try {
    call();
    gServed.fetch_add(1, std::memory_order_relaxed);
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    if (!gFailureLogged.exchange(true)) {
      try {
        RANKMAP_ERROR(Shim, "rank {}: the engine failed a collective: {}", gRank, e.what());
      } catch (...) {
      }
    }
  } catch (...) {
  }
  real::PMPI_Comm_call_errhandler(gEngineWorld, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

}  // namespace

bool startEngine(MPI_Comm world, const Plan& plan, const Config& config, int rank) noexcept {
  gRank = rank;
  std::string why;
  std::shared_ptr<coll::transport::Device> device;
  std::unique_ptr<coll::Communicator> comm;
  coll::CommOptions options;
  // Local set-up first, then one agreement, so that no rank enters the (collective) connection
  // while another has already given up.
  int ok = 1, all = 0;
  try {
    options = coll::CommOptions::fromConfig(config);
    // No live re-planning here: the shim reordered MPI's world once, at MPI_Init, and the engine
    // runs a plan re-derived for that world; a replaced plan file cannot reorder it again.
    options.live.planFile.clear();
    device = coll::transport::makeDevice(coll::transport::deviceOptionsFromConfig(config));
  } catch (const std::exception& e) {
    ok = 0;
    why = e.what();
  }
  if (real::PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, world) != MPI_SUCCESS) all = 0;
  if (all) {
    try {
      // The world's ranks are already in plan order: the engine keeps them (identity order) and
      // takes the plan's algorithm table and groups.
      Plan p = plan;
      p.hosts = p.order;
      p.derivePermutation();
      p.seal();
      const Deadline deadline = Deadline::after(options.timeout);
      auto bootstrap = coll::bootstrap::makeMpiBootstrap(world);
      // The engine's own agreement, as on every engine path (the shim agreed on the original
      // plan; this re-derived one must be the same on every rank too).
      coll::PlanDecision agreed = coll::agreePlan(
          *bootstrap, coll::localPlanFrom(std::move(p), rank, bootstrap->size(), config),
          deadline);
      auto ctx = device->connect(*bootstrap, deadline);
      comm = std::make_unique<coll::Communicator>(device, std::move(ctx), options,
                                                  std::move(agreed));
    } catch (const std::exception& e) {
      ok = 0;
      why = e.what();
    }
    if (real::PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, world) != MPI_SUCCESS) all = 0;
  }
  try {
    if (!all) {
      comm.reset();
      if (!ok) {
        RANKMAP_WARN(Shim, "rank {}: engine routing off: {}", rank, why);
      } else if (rank == 0) {
        RANKMAP_WARN(Shim, "engine routing off: another rank could not start the engine");
      }
      return false;
    }
    if (rank == 0)
      RANKMAP_INFO(Shim, "engine routing on: Allreduce, Bcast, Allgather and "
                   "Reduce_scatter_block on MPI_COMM_WORLD served by the rankmap engine ({})",
                   comm->backend());
  } catch (...) {
  }
  gEngineWorld = world;
  gEngine.store(comm.release(), std::memory_order_release);
  return all != 0;
}

void stopEngine() noexcept {
  coll::Communicator* e = gEngine.exchange(nullptr, std::memory_order_acq_rel);
  if (e == nullptr) return;
  try {
    if (gRank == 0)
      RANKMAP_INFO(Shim, "engine served {} collective call(s); {} went to MPI (types, ops or "
                   "forms it does not serve)", gServed.load(), gDeclined.load());
    delete e;
  } catch (...) {
  }
  gEngineWorld = MPI_COMM_NULL;
}

bool engineActive() noexcept { return gEngine.load(std::memory_order_relaxed) != nullptr; }

std::optional<int> engineAllreduce(const void* sendbuf, void* recvbuf, int count,
                                   MPI_Datatype type, MPI_Op op, MPI_Comm comm) noexcept {
  coll::Communicator* e = engineFor(comm);
  if (e == nullptr) return std::nullopt;
  auto t = engineType(type, true);
  auto o = engineOp(op);
  if (!t || !o || count < 0) return declined();
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  return serve([&] { e->allreduce(in, recvbuf, static_cast<uint64_t>(count), *t, *o); });
}

std::optional<int> engineBcast(void* buffer, int count, MPI_Datatype type, int root,
                               MPI_Comm comm) noexcept {
  coll::Communicator* e = engineFor(comm);
  if (e == nullptr) return std::nullopt;
  auto t = engineType(type, false);
  if (!t || count < 0) return declined();
  return serve([&] { e->broadcast(buffer, buffer, static_cast<uint64_t>(count), *t, root); });
}

std::optional<int> engineAllgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                   void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                   MPI_Comm comm) noexcept {
  coll::Communicator* e = engineFor(comm);
  if (e == nullptr) return std::nullopt;
  auto t = engineType(recvtype, false);
  bool inPlace = sendbuf == MPI_IN_PLACE;
  if (!t || recvcount < 0 || (!inPlace && (sendtype != recvtype || sendcount != recvcount)))
    return declined();
  int size = 0;
  if (PMPI_Type_size(recvtype, &size) != MPI_SUCCESS) return declined();
  const void* in = inPlace ? static_cast<char*>(recvbuf) + static_cast<size_t>(e->rank()) *
                                                               static_cast<size_t>(recvcount) *
                                                               static_cast<size_t>(size)
                           : sendbuf;
  return serve([&] { e->allgather(in, recvbuf, static_cast<uint64_t>(recvcount), *t); });
}

std::optional<int> engineReduceScatterBlock(const void* sendbuf, void* recvbuf, int recvcount,
                                            MPI_Datatype type, MPI_Op op, MPI_Comm comm) noexcept {
  coll::Communicator* e = engineFor(comm);
  if (e == nullptr) return std::nullopt;
  auto t = engineType(type, true);
  auto o = engineOp(op);
  // MPI's in-place form keeps the input in recvbuf and the result at its start: not the
  // engine's in-place layout.
  if (!t || !o || recvcount < 0 || sendbuf == MPI_IN_PLACE) return declined();
  return serve([&] { e->reduceScatter(sendbuf, recvbuf, static_cast<uint64_t>(recvcount), *t, *o); });
}

}  // namespace rankmap::shim_mpi
