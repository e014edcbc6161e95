#include "shim_mpi/profile.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "common/comm_profile.h"
#include "common/error.h"
#include "common/files.h"
#include "common/job_profile.h"
#include "common/json.h"
#include "common/log.h"
#include "shim_mpi/wrappers.gen.h"

namespace rankmap::shim_mpi {
namespace {

struct Counter {
  uint64_t calls = 0, bytes = 0;
};

// What this rank saw of one set: its own group and its own calls on it.
struct LocalSet {
  std::string madeBy;
  int call = 0;
  std::vector<int> members;  // the job's ranks
  std::map<std::string, Counter, std::less<>> traffic;
  std::map<int, Counter> sentTo = {};  // the world's only: messages by destination
};

std::atomic<bool> gOn{false};
std::mutex gMu;
std::string gPath;
std::string gBroken;                // why this rank's record is unusable ("" = usable)
int gCalls = 0;                     // communicator-creating calls so far
std::vector<LocalSet> gSets;        // [0] = the world
std::map<MPI_Comm, size_t> gComms;  // live communicator -> its set in gSets

// The executable's file name: which job this is.
std::string programName() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "unknown";
  return fileNameOf(std::string_view(buf, static_cast<size_t>(n)));
}

// The members of `c` as ranks of the job's world (the reordered one when a plan is applied).
// Group calls are not wrapped (no communicator to substitute): PMPI_* of the MPI library itself.
std::vector<int> membersOf(MPI_Comm c) {
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  int n = 0;
  std::vector<int> out;
  if (real::PMPI_Comm_group(c, &g) == MPI_SUCCESS &&
      real::PMPI_Comm_group(toReordered(MPI_COMM_WORLD), &wg) == MPI_SUCCESS &&
      ::PMPI_Group_size(g, &n) == MPI_SUCCESS && n > 0) {
    std::vector<int> in(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = i;
    out.resize(static_cast<size_t>(n));
    if (::PMPI_Group_translate_ranks(g, n, in.data(), wg, out.data()) != MPI_SUCCESS) out.clear();
  }
  if (g != MPI_GROUP_NULL) ::PMPI_Group_free(&g);
  if (wg != MPI_GROUP_NULL) ::PMPI_Group_free(&wg);
  std::sort(out.begin(), out.end());
  return out;
}

// The communicators that NCCL (through librankmap_nccl.so preloaded beside this shim) or
// rankmap's engine (its C API) made in this process while recording: their entries, keyed by
// communicator, for merge() to group (common/comm_profile.h).
Json libraryEntries() {
  using RecordFn = size_t (*)(char*, size_t);
  Json all = Json::array();
  for (const char* symbol : kProfileRecordSymbols) {
    auto fn = reinterpret_cast<RecordFn>(::dlsym(RTLD_DEFAULT, symbol));
    if (fn == nullptr) continue;
    const std::string source = fmt::format("the profile record of {}", symbol);
    std::string text(fn(nullptr, 0), '\0');
    if (text.empty()) RANKMAP_THROW(InvalidInput, "{}: could not be read", source);
    text.resize(std::min(fn(text.data(), text.size() + 1), text.size()));
    Json a = parseJson(text, source);
    if (!a.is_array()) RANKMAP_THROW(InvalidInput, "{}: expected an array", source);
    for (auto& e : a) all.push_back(std::move(e));
  }
  return all;
}

// This rank's record, for rank 0 to merge (JobProfile::merge).
std::string encodeLocal() {
  Json a = Json::array();
  for (const auto& s : gSets) {
    Json t = Json::object();
    for (const auto& [coll, c] : s.traffic) t[coll] = {c.calls, c.bytes};
    Json e = {{"m", s.madeBy}, {"c", s.call}, {"g", s.members}, {"t", std::move(t)}};
    if (!s.sentTo.empty()) {
      Json p = Json::array();
      for (const auto& [to, c] : s.sentTo) p.push_back({to, c.calls, c.bytes});
      e["p"] = std::move(p);
    }
    a.push_back(std::move(e));
  }
  try {
    for (auto& e : libraryEntries()) a.push_back(std::move(e));
  } catch (const std::exception& e) {
    RANKMAP_WARN(Shim, "job profile: this rank's NCCL and engine communicators are left out: {}",
                 e.what());
  }
  return a.dump();
}

}  // namespace

void startProfile(const Config& cfg) noexcept {
  try {
    std::string path = cfg.get(settings::kProfileOut);
    int size = 0;
    if (path.empty() || real::PMPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS) return;
    std::lock_guard<std::mutex> lock(gMu);
    gPath = path;
    LocalSet world{"MPI_COMM_WORLD", 0, {}, {}};
    for (int r = 0; r < size; ++r) world.members.push_back(r);
    gSets.push_back(std::move(world));
    gOn.store(true, std::memory_order_release);
  } catch (...) {
    // No recording: the job runs as it would without the setting.
  }
}

bool profiling() noexcept { return gOn.load(std::memory_order_acquire); }

void profileComm(std::string_view madeBy, MPI_Comm made) noexcept {
  if (!profiling()) return;
  try {
    std::lock_guard<std::mutex> lock(gMu);
    int call = ++gCalls;
    if (made == MPI_COMM_NULL) return;
    LocalSet s{std::string(madeBy), call, membersOf(made), {}};
    if (s.members.empty()) {
      gBroken = fmt::format("the members of the communicator from {} could not be read", madeBy);
      return;
    }
    gSets.push_back(std::move(s));
    gComms[made] = gSets.size() - 1;
  } catch (...) {
    gBroken = "out of memory while recording";
  }
}

void profileFree(MPI_Comm comm) noexcept {
  if (!profiling()) return;
  std::lock_guard<std::mutex> lock(gMu);
  gComms.erase(comm);
}

void profileTraffic(std::string_view collective, MPI_Comm comm, long long count, MPI_Datatype type,
                    int peer) noexcept {
  if (!profiling() || peer == MPI_PROC_NULL || count <= 0) return;
  int typeSize = 0;
  if (::PMPI_Type_size(type, &typeSize) != MPI_SUCCESS || typeSize <= 0) return;
  try {
    std::lock_guard<std::mutex> lock(gMu);
    size_t set = 0;
    if (!isWorld(comm)) {
      auto it = gComms.find(comm);
      if (it == gComms.end()) return;  // a communicator the profile does not follow
      set = it->second;
    }
    auto& traffic = gSets[set].traffic;
    auto it = traffic.find(collective);
    if (it == traffic.end()) it = traffic.emplace(std::string(collective), Counter{}).first;
    const uint64_t bytes = static_cast<uint64_t>(count) * static_cast<uint64_t>(typeSize);
    ++it->second.calls;
    it->second.bytes += bytes;
    if (set == 0 && collective == "sendrecv") {
      Counter& c = gSets[0].sentTo[peer];
      ++c.calls;
      c.bytes += bytes;
    }
  } catch (...) {
    gBroken = "out of memory while recording";
  }
}

void finishProfile() noexcept {
  if (!gOn.exchange(false, std::memory_order_acq_rel)) return;
  int rank = 0, size = 0;
  if (real::PMPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
      real::PMPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS)
    return;
  std::string mine;
  int len = -1;
  {
    std::lock_guard<std::mutex> lock(gMu);
    try {
      if (gBroken.empty()) {
        mine = encodeLocal();
        len = static_cast<int>(std::min<size_t>(mine.size(), INT32_MAX));
      }
    } catch (...) {
      len = -1;
    }
    if (len < 0) mine.clear();
  }
  // Every rank reaches both gathers whatever happened above: no rank is left waiting.
  int* lens =
      rank == 0 ? static_cast<int*>(std::calloc(static_cast<size_t>(size), sizeof(int))) : nullptr;
  int lenDummy = 0;
  real::PMPI_Gather(&len, 1, MPI_INT, lens ? lens : &lenDummy, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int* displs = nullptr;
  char* all = nullptr;
  std::string why = rank == 0 && !lens ? "out of memory" : "";
  if (rank == 0 && lens) {
    displs = static_cast<int*>(std::calloc(static_cast<size_t>(size), sizeof(int)));
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      if (lens[r] < 0) {
        if (why.empty()) why = fmt::format("rank {} could not record its part", r);
        lens[r] = 0;
      }
      if (displs) displs[r] = static_cast<int>(total);
      total += lens[r];
    }
    if (total > INT32_MAX) why = "the ranks' records exceed 2 GiB";
    all = static_cast<char*>(std::malloc(static_cast<size_t>(std::max<long long>(total, 1))));
    if (!displs || !all) why = "out of memory";
  }
  // The root says whether it can receive; if not, nobody sends (counts must match).
  int ok = rank != 0 || (lens && displs && all) ? 1 : 0;
  real::PMPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (ok)
    real::PMPI_Gatherv(mine.data(), std::max(len, 0), MPI_CHAR, all, lens, displs, MPI_CHAR, 0,
                       MPI_COMM_WORLD);
  if (rank == 0) {
    try {
      if (!why.empty()) RANKMAP_THROW(InvalidInput, "{}", why);
      std::vector<std::string> records;
      for (int r = 0; r < size; ++r)
        records.emplace_back(all + displs[r], static_cast<size_t>(lens[r]));
      JobProfile p =
          JobProfile::merge(records, programName(),
                            fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::time(nullptr))));
      writeFileAtomic(gPath, p.dump());
      RANKMAP_INFO(Shim, "job profile of {} ({} ranks, {} group set(s)) written to {}", p.program,
                   p.worldSize, p.sets.size() - 1, gPath);
    } catch (const std::exception& e) {
      try {
        RANKMAP_WARN(Shim, "job profile not written to {}: {}", gPath, e.what());
      } catch (...) {
      }
    } catch (...) {
    }
  }
  std::free(lens);
  std::free(displs);
  std::free(all);
}

}  // namespace rankmap::shim_mpi
