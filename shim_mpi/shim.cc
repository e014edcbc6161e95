#include "shim_mpi/shim.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/config.h"
#include "common/log.h"
#include "shim_mpi/agreement.h"
#include "shim_mpi/engine.h"
#include "shim_mpi/wrappers.gen.h"

namespace rankmap::shim_mpi {

thread_local int tCallDepth __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<MPI_Comm> gReordered{kNoComm};

namespace {

// The fixed-size record every rank contributes to the start-up allgather.
struct Record {
  char status;
  char checkHosts;
  char engine;
  char hash[80];
  char host[64];
  char reason[173];
};
static_assert(sizeof(Record) == 320);

void copyField(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

std::string field(const char* src, size_t cap) { return std::string(src, strnlen(src, cap)); }

// The configuration read at start-up, kept for the engine (MPI_Init's thread only).
std::optional<Config> gConfig;

// This rank's record; its plan in `plan`. Never throws.
Record localRecord(int worldSize, std::optional<Plan>& plan) noexcept {
  Record rec{};
  try {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    RankView v;
    try {
      gConfig = Config::load();
      try {
        log::configure(*gConfig);
      } catch (const std::exception&) {
        // Logging keeps its defaults; the decision does not depend on it.
      }
      v = loadLocalView(*gConfig, worldSize, host, plan);
      rec.engine = gConfig->get(settings::kMpiEngine) ? 1 : 0;
    } catch (const std::exception& e) {
      plan.reset();
      v.status = PlanStatus::kInvalid;
      v.reason = std::string("configuration: ") + e.what();
      v.host = shortHostName(host);
    }
    rec.status = static_cast<char>(v.status);
    rec.checkHosts = v.checkHosts ? 1 : 0;
    copyField(rec.hash, sizeof(rec.hash), v.hash);
    copyField(rec.host, sizeof(rec.host), v.host);
    copyField(rec.reason, sizeof(rec.reason), v.reason);
  } catch (...) {
    plan.reset();
    rec = Record{};
    rec.status = static_cast<char>(PlanStatus::kInvalid);
    copyField(rec.reason, sizeof(rec.reason), "out of memory reading the plan");
  }
  return rec;
}

}  // namespace

void* resolveRealSymbol(const char* name) noexcept {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) {
    // No logger here: this may run before anything is set up. stderr, never stdout.
    std::fprintf(stderr, "rankmap error [shim] %s not found after librankmap_mpi.so; is the MPI "
                 "library loaded?\n", name);
  }
  return p;
}

void afterInit() noexcept {
  int rank = 0, size = 0;
  if (real::PMPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
      real::PMPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || size < 1)
    return;
  std::optional<Plan> plan;
  Record mine = localRecord(size, plan);
  // Every rank reaches this allgather whatever happened above: no rank is left waiting.
  Record* all = static_cast<Record*>(std::calloc(static_cast<size_t>(size), sizeof(Record)));
  Record dummy{};
  bool gathered = real::PMPI_Allgather(&mine, sizeof(Record), MPI_BYTE, all ? all : &dummy,
                                       all ? static_cast<int>(sizeof(Record)) : 0, MPI_BYTE,
                                       MPI_COMM_WORLD) == MPI_SUCCESS;
  // A rank that could not allocate contributes its record but cannot read the others'; it
  // tells the others through a second, tiny allreduce so that all ranks decide alike.
  int ok = all != nullptr && gathered ? 1 : 0, allOk = 0;
  if (real::PMPI_Allreduce(&ok, &allOk, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS) allOk = 0;
  bool engine = allOk != 0;
  Decision d{false, "identity order (MPI_COMM_WORLD unchanged): a rank could not gather the plans"};
  if (allOk) {
    try {
      std::vector<RankView> views(static_cast<size_t>(size));
      for (size_t r = 0; r < views.size(); ++r) {
        views[r].status = static_cast<PlanStatus>(all[r].status);
        views[r].checkHosts = all[r].checkHosts != 0;
        views[r].hash = field(all[r].hash, sizeof(all[r].hash));
        views[r].host = field(all[r].host, sizeof(all[r].host));
        views[r].reason = field(all[r].reason, sizeof(all[r].reason));
        engine = engine && all[r].engine != 0;
      }
      d = decide(views, plan);
    } catch (...) {
      d = {false, "identity order (MPI_COMM_WORLD unchanged): out of memory while deciding"};
    }
  }
  std::free(all);
  MPI_Comm world = MPI_COMM_NULL;
  if (d.reorder) {
    // decide() agreed on every rank, so every rank splits.
    if (real::PMPI_Comm_split(MPI_COMM_WORLD, 0, plan->newRank(rank), &world) == MPI_SUCCESS &&
        world != MPI_COMM_NULL) {
      real::PMPI_Comm_set_name(world, "MPI_COMM_WORLD");
    } else {
      d = {false, "identity order (MPI_COMM_WORLD unchanged): MPI_Comm_split failed"};
    }
  }
  if (rank == 0) {
    try {
      if (d.reorder) {
        RANKMAP_INFO(Shim, "{}", d.message);
      } else {
        RANKMAP_WARN(Shim, "{}", d.message);
      }
    } catch (...) {
    }
  }
  if (d.reorder) {
    // Every rank asked for the engine or none uses it (the flags were gathered above).
    if (engine && gConfig) startEngine(world, *plan, *gConfig, plan->newRank(rank));
    gReordered.store(world, std::memory_order_release);
  }
}

void beforeFinalize() noexcept {
  stopEngine();
  MPI_Comm w = gReordered.exchange(kNoComm, std::memory_order_acq_rel);
  if (w != kNoComm) real::PMPI_Comm_free(&w);
}

}  // namespace rankmap::shim_mpi
