#include "shim_mpi/shim.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/config.h"
#include "common/log.h"
#include "common/plan_agreement.h"
#include "shim_mpi/engine.h"
#include "shim_mpi/profile.h"
#include "shim_mpi/wrappers.gen.h"

namespace rankmap::shim_mpi {

thread_local int tCallDepth __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<MPI_Comm> gReordered{kNoComm};

namespace {

// The fixed-size record every rank contributes to the start-up allgather: whether it asks for
// the engine, whether it records the job's profile, and its encoded PlanVote
// (common/plan_agreement.h).
struct Record {
  uint16_t voteBytes;
  char engine;
  char profile;
  char vote[508];
};
static_assert(sizeof(Record) == 512);

// The configuration read at start-up, kept for the engine (MPI_Init's thread only).
std::optional<Config> gConfig;

// Truncates the reason until the encoded vote fits a Record.
void storeVote(Record& rec, PlanVote v) {
  std::string bytes = v.encode();
  while (bytes.size() > sizeof(rec.vote) && !v.reason.empty()) {
    v.reason.resize(v.reason.size() > 64 ? v.reason.size() - 64 : 0);
    bytes = v.encode();
  }
  if (bytes.size() > sizeof(rec.vote)) {  // a hash or host too long to be real
    v = PlanVote{v.rank, v.worldSize, PlanStatus::kInvalid, {}, "vote too large", {}, false};
    bytes = v.encode();
  }
  rec.voteBytes = static_cast<uint16_t>(bytes.size());
  std::memcpy(rec.vote, bytes.data(), bytes.size());
}

// This rank's record; its plan in `plan`. Never throws.
Record localRecord(int rank, int worldSize, std::optional<Plan>& plan) noexcept {
  Record rec{};
  try {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    PlanVote v;
    try {
      gConfig = Config::load();
      try {
        log::configure(*gConfig);
      } catch (const std::exception&) {
        // Logging keeps its defaults; the decision does not depend on it.
      }
      PlanChecks checks;
      checks.maxAge = gConfig->get(settings::kPlanMaxAge);
      v = localPlanVote(gConfig->get(settings::kPlan), rank, worldSize, checks, plan);
      v.checkHosts = gConfig->get(settings::kMpiCheckHosts);
      rec.engine = gConfig->get(settings::kMpiEngine) ? 1 : 0;
      rec.profile = gConfig->get(settings::kProfileOut).empty() ? 0 : 1;
    } catch (const std::exception& e) {
      plan.reset();
      v = PlanVote{rank, worldSize, PlanStatus::kInvalid, {}, std::string("configuration: ") + e.what(),
                   {}, false};
    }
    v.host = shortHostName(host);
    storeVote(rec, std::move(v));
  } catch (...) {
    plan.reset();
    rec = Record{};
    storeVote(rec, PlanVote{rank, worldSize, PlanStatus::kInvalid, {},
                            "out of memory reading the plan", {}, false});
  }
  return rec;
}

constexpr std::string_view kIdentity = "identity order (MPI_COMM_WORLD unchanged): ";

}  // namespace

void* resolveRealSymbol(const char* name) noexcept {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) {
    // No logger here: this may run before anything is set up. stderr, never stdout.
    std::fprintf(stderr, "rankmap error [shim] %s not found after the rankmap MPI shim; is the MPI "
                 "library it was built for loaded?\n", name);
  }
  return p;
}

void afterInit() noexcept {
  int rank = 0, size = 0;
  if (real::PMPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
      real::PMPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || size < 1)
    return;
  std::optional<Plan> plan;
  Record mine = localRecord(rank, size, plan);
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
  int profiling = 0;  // ranks that record the profile: all of them, or none does
  PlanVerdict d{false, "a rank could not gather the plans"};
  if (allOk) {
    try {
      std::vector<PlanVote> votes;
      votes.reserve(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) {
        const Record& rec = all[r];
        votes.push_back(PlanVote::decode(
            std::string_view(rec.vote, std::min<size_t>(rec.voteBytes, sizeof(rec.vote))),
            fmt::format("MPI shim start-up allgather, rank {}", r)));
        engine = engine && rec.engine != 0;
        profiling += rec.profile != 0;
      }
      d = judgePlan(votes, plan ? &*plan : nullptr);
    } catch (const std::exception& e) {
      d = {false, e.what()};
    } catch (...) {
      d = {false, "out of memory while deciding"};
    }
  }
  std::free(all);
  MPI_Comm world = MPI_COMM_NULL;
  if (d.apply) {
    // judgePlan() agreed on every rank, so every rank splits.
    if (real::PMPI_Comm_split(MPI_COMM_WORLD, 0, plan->newRank(rank), &world) == MPI_SUCCESS &&
        world != MPI_COMM_NULL) {
      real::PMPI_Comm_set_name(world, "MPI_COMM_WORLD");
    } else {
      d = {false, "MPI_Comm_split failed"};
    }
  }
  if (rank == 0) {
    try {
      if (d.apply) {
        RANKMAP_INFO(Shim, "MPI_COMM_WORLD reordered by {}", d.reason);
      } else {
        RANKMAP_WARN(Shim, "{}{}", kIdentity, d.reason);
      }
    } catch (...) {
    }
  }
  if (d.apply) {
    // Every rank asked for the engine or none uses it (the flags were gathered above).
    if (engine && gConfig) startEngine(world, *plan, *gConfig, plan->newRank(rank));
    gReordered.store(world, std::memory_order_release);
  }
  // Recording sees the world the program sees: after the reordered one is published. Every rank
  // records or none does (its gathers at MPI_Finalize are collective).
  if (allOk && profiling == size && gConfig) {
    startProfile(*gConfig);
  } else if (rank == 0 && profiling > 0) {
    try {
      RANKMAP_WARN(Shim,
                   "job profile not recorded: RANKMAP_PROFILE_OUT is set on {} of the {} "
                   "ranks (expected all of them)",
                   profiling, size);
    } catch (...) {
    }
  }
}

void beforeFinalize() noexcept {
  finishProfile();
  stopEngine();
  MPI_Comm w = gReordered.exchange(kNoComm, std::memory_order_acq_rel);
  if (w != kNoComm) real::PMPI_Comm_free(&w);
}

}  // namespace rankmap::shim_mpi
