// A program with NCCL (here nccl_test_double's code) linked statically into the executable, for
// `rankmap doctor`'s test: its NCCL calls bind directly and no preload can interpose them.
#include <cstdio>

#include "tests/unit/shim_nccl/nccl_api.h"

int main() {
  int version = 0;
  ncclGetVersion(&version);
  std::printf("%d\n", version);
  return 0;
}
