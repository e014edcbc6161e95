// An "unmodified application" module for the LD_PRELOAD test: it only calls NCCL (here the
// nccl_test_double, its DT_NEEDED libnccl.so.2) and is itself loaded with dlopen(RTLD_LOCAL), so
// NCCL sits in a local scope that RTLD_NEXT/RTLD_DEFAULT lookups cannot see, as in Python.
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "tests/unit/shim_nccl/nccl_api.h"
#include "tests/unit/shim_nccl/nccl_test_double.h"
#include "tests/unit/shim_nccl/shim_test_util.h"

extern "C" int cuCtxSetCurrent(void* ctx);

namespace abi = rankmap::shim_nccl::abi;

// Runs 4 ranks: init, AllGather, Broadcast from rank 1. Returns 0 when NCCL received ranks
// `expectRealRank[app]` and the results are in app order; else writes why into `why`.
extern "C" __attribute__((visibility("default"))) int rankmapPreloadScenario(
    const int* expectRealRank, char* why, size_t whyLen) {
  namespace nd = rankmap::testing::nccl_double;
  const int n = 4;
  std::vector<abi::Comm> comms(n, nullptr);
  abi::UniqueId id;
  if (ncclGetUniqueId(&id) != abi::kSuccess) {
    std::snprintf(why, whyLen, "ncclGetUniqueId failed");
    return 1;
  }
  int bad = 0;
  rankmap::testing::runRanks(n, [&](int a) {
    cuCtxSetCurrent(reinterpret_cast<void*>(0x100 + a));
    if (ncclCommInitRank(&comms[static_cast<size_t>(a)], n, id, a) != abi::kSuccess) ++bad;
    std::vector<int32_t> mine{rankmap::testing::pattern(a, 0)}, all(n, -1), b{mine[0]};
    if (ncclAllGather(mine.data(), all.data(), 1, abi::kInt32, comms[static_cast<size_t>(a)],
                      nullptr) != abi::kSuccess)
      ++bad;
    for (int r = 0; r < n; ++r)
      if (all[static_cast<size_t>(r)] != rankmap::testing::pattern(r, 0)) ++bad;
    if (ncclBroadcast(b.data(), b.data(), 1, abi::kInt32, 1, comms[static_cast<size_t>(a)],
                      nullptr) != abi::kSuccess ||
        b[0] != rankmap::testing::pattern(1, 0))
      ++bad;
  });
  for (auto c : comms) ncclCommDestroy(c);
  if (bad != 0) {
    std::snprintf(why, whyLen, "%d wrong results or failed calls", bad);
    return 1;
  }
  std::map<int, int> byApp;
  for (const auto& c : nd::calls())
    if (c.fn == "ncclCommInitRank")
      byApp[static_cast<int>(reinterpret_cast<intptr_t>(c.context) - 0x100)] = c.rank;
  for (int a = 0; a < n; ++a)
    if (byApp[a] != expectRealRank[a]) {
      std::snprintf(why, whyLen, "app rank %d reached NCCL as rank %d, expected %d", a, byApp[a],
                    expectRealRank[a]);
      return 1;
    }
  return 0;
}
