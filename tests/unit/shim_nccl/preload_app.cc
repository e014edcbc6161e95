// LD_PRELOAD=librankmap_nccl.so shim_nccl_preload_app <module>: loads the module (which needs
// libnccl.so.2, here nccl_test_double) with dlopen(RTLD_LOCAL) like Python loads torch, and checks
// that the preloaded shim found NCCL anyway and applied the plan. Exit 0 = pass.
#include <dlfcn.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "tests/unit/shim_nccl/shim_test_util.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODULE\n", argv[0]);
    return 2;
  }
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr || std::strstr(preload, "librankmap_nccl.so") == nullptr) {
    std::fprintf(stderr, "FAIL: run me with LD_PRELOAD=librankmap_nccl.so\n");
    return 1;
  }
  char tmpl[] = "/tmp/rankmap-nccl-preload-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  std::string dir = tmpl;
  rankmap::Plan plan = rankmap::testing::makePlan(2, 2, {1, 0});
  plan.save(dir + "/plan.json");
  setenv("RANKMAP_PLAN", (dir + "/plan.json").c_str(), 1);
  setenv("RANKMAP_TIMEOUT", "20s", 1);

  int rc = 1;
  void* module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    std::fprintf(stderr, "FAIL: dlopen %s: %s\n", argv[1], dlerror());
  } else if (dlsym(RTLD_DEFAULT, "pncclAllGather") != nullptr) {
    std::fprintf(stderr, "FAIL: NCCL is in the global scope; this test needs it local\n");
  } else {
    using Scenario = int (*)(const int*, char*, size_t);
    auto run = reinterpret_cast<Scenario>(dlsym(module, "rankmapPreloadScenario"));
    char why[256] = {};
    if (run == nullptr) {
      std::fprintf(stderr, "FAIL: module has no rankmapPreloadScenario\n");
    } else if (run(plan.permutation.data(), why, sizeof(why)) != 0) {
      std::fprintf(stderr, "FAIL: %s\n", why);
    } else {
      std::fprintf(stderr,
                   "PASS: the preloaded shim reached NCCL loaded RTLD_LOCAL and "
                   "permuted the ranks\n");
      rc = 0;
    }
  }
  std::filesystem::remove_all(dir);
  return rc;
}
