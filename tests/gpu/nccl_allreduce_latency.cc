// gpu_nccl_allreduce_latency: time per 8-byte ncclAllReduce, for measuring the shim's overhead
// (run once plainly and once under LD_PRELOAD=librankmap_nccl.so with an identity plan; see
// tests/gpu/run_gpu_benchmarks.sh). One process per rank, unique id through --id-file.
//
//   gpu_nccl_allreduce_latency --rank R --nranks N --id-file PATH [--iters K] [--batches B]
//
// Rank 0 prints "allreduce 8 B: median X us/op over B batches of K".
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

// Returns 2 from main when `call` does not give `ok`.
#define CHECK_RESULT(call, ok)                    \
  do {                                            \
    if ((call) != (ok)) {                         \
      std::fprintf(stderr, "%s failed\n", #call); \
      return 2;                                   \
    }                                             \
  } while (0)
#define CHECK_CUDA(call) CHECK_RESULT(call, cudaSuccess)
#define CHECK_NCCL(call) CHECK_RESULT(call, ncclSuccess)

int main(int argc, char** argv) {
  int r = -1, n = -1, iters = 2000, batches = 7;
  std::string idFile;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--rank") r = std::atoi(argv[i + 1]);
    if (a == "--nranks") n = std::atoi(argv[i + 1]);
    if (a == "--id-file") idFile = argv[i + 1];
    if (a == "--iters") iters = std::atoi(argv[i + 1]);
    if (a == "--batches") batches = std::atoi(argv[i + 1]);
  }
  if (r < 0 || n < 1 || idFile.empty()) {
    std::fprintf(stderr, "usage: %s --rank R --nranks N --id-file PATH\n", argv[0]);
    return 2;
  }
  CHECK_CUDA(cudaSetDevice(0));
  ncclUniqueId id;
  if (r == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    std::string tmp = idFile + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof(id.internal));
    std::rename(tmp.c_str(), idFile.c_str());
  } else {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (;;) {
      std::ifstream f(idFile, std::ios::binary);
      if (f.read(id.internal, sizeof(id.internal))) break;
      if (std::chrono::steady_clock::now() > until) return 2;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, n, id, r));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  float* buf = nullptr;
  CHECK_CUDA(cudaMalloc(&buf, 8));
  for (int i = 0; i < 200; ++i) CHECK_NCCL(ncclAllReduce(buf, buf, 2, ncclFloat, ncclSum, comm, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<double> us;
  for (int b = 0; b < batches; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      CHECK_NCCL(ncclAllReduce(buf, buf, 2, ncclFloat, ncclSum, comm, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        iters);
  }
  std::sort(us.begin(), us.end());
  if (r == 0)
    std::printf("allreduce 8 B: median %.3f us/op over %d batches of %d\n", us[us.size() / 2],
                batches, iters);
  cudaFree(buf);
  ncclCommDestroy(comm);
  return 0;
}
