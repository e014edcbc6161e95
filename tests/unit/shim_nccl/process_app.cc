// shim_nccl_process_app ID_FILE APP_RANK NRANKS: one rank of an NCCL job as its own process, for
// the emulated cloud's fault matrix (tests/emucloud/faults.py), run with
// LD_PRELOAD=librankmap_nccl.so over nccl_test_double in process mode
// (RANKMAP_NCCL_DOUBLE_PROCESS=1, RANKMAP_NCCL_DOUBLE_ROOT = rank 0's address,
// RANKMAP_NCCL_DOUBLE_DIR = a directory all ranks share; the double, not NCCL). Rank 0 gets the
// unique id (the shim starts its plan agreement server and writes its tail) and publishes it in
// ID_FILE (write, then rename); the others wait for the file (at most 30 s). Every rank then
// calls ncclCommInitRank(APP_RANK), which the shim turns into the plan's rank or identity after
// the agreement, and which returns when every rank has called it (as NCCL's). Prints one line to
// stdout,
//   {"app_rank": R, "nccl_rank": K, "result": N, "seconds": S}
// where K is the rank "NCCL" (the double) received at init and N the init's ncclResult_t; exits 0
// when the init returned ncclSuccess, 1 otherwise, 2 on bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/unit/shim_nccl/nccl_api.h"
#include "tests/unit/shim_nccl/nccl_test_double.h"

namespace {

bool readId(const std::string& path, nccl_api::UniqueId& id) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.read(id.internal, sizeof(id.internal));
  return in.gcount() == static_cast<std::streamsize>(sizeof(id.internal));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ID_FILE APP_RANK NRANKS\n", argv[0]);
    return 2;
  }
  const std::string idFile = argv[1];
  const int rank = std::atoi(argv[2]), n = std::atoi(argv[3]);
  if (n < 1 || rank < 0 || rank >= n) {
    std::fprintf(stderr, "%s: APP_RANK %s of NRANKS %s: expected 0 <= APP_RANK < NRANKS\n",
                 argv[0], argv[2], argv[3]);
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  nccl_api::UniqueId id{};
  if (rank == 0) {
    nccl_api::Result r = ncclGetUniqueId(&id);
    if (r != 0) {
      std::fprintf(stderr, "%s: ncclGetUniqueId: result %d\n", argv[0], static_cast<int>(r));
      return 1;
    }
    const std::string tmp = idFile + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.internal, sizeof(id.internal));
      if (!out) {
        std::fprintf(stderr, "%s: cannot write %s\n", argv[0], tmp.c_str());
        return 1;
      }
    }
    std::filesystem::rename(tmp, idFile);
  } else {
    const auto limit = t0 + std::chrono::seconds(30);
    while (!readId(idFile, id)) {
      if (std::chrono::steady_clock::now() > limit) {
        std::fprintf(stderr, "%s: no unique id in %s after 30 s\n", argv[0], idFile.c_str());
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  nccl_api::Comm comm = nullptr;
  const nccl_api::Result result = ncclCommInitRank(&comm, n, id, rank);
  int ncclRank = -1;
  for (const auto& c : rankmap::testing::nccl_double::calls())
    if (c.fn == "ncclCommInitRank") ncclRank = c.rank;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"app_rank\": %d, \"nccl_rank\": %d, \"result\": %d, \"seconds\": %.3f}\n", rank,
              ncclRank, static_cast<int>(result), secs);
  std::fflush(stdout);
  if (comm != nullptr) ncclCommDestroy(comm);
  return result == 0 ? 0 : 1;
}
