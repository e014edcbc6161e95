// gpu_engine_device_bench: the engine's ring allreduce over TCP (ranks as threads on 127.0.0.1,
// sharing one GPU) with host buffers (execute) against device buffers (executeDevice with
// CudaOps: staging through pinned memory, copies/network/kernels overlapped).
//
//   gpu_engine_device_bench [--ranks N] [--iters K] [--min-bytes A] [--max-bytes B]
//
// Target (docs/performance.md, ## GPU): device within 10% of host on the socket path, i.e.
// time(device) <= 1.10 x time(host) for large messages. Median of K runs per size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/cuda/cuda_ops.h"
#include "collectives/cuda/device.h"
#include "collectives/cuda/device_executor.h"
#include "collectives/executor.h"
#include "collectives/reduce/reduction.h"
#include "tests/unit/collectives/harness.h"

using namespace rankmap;
using namespace rankmap::coll;

int main(int argc, char** argv) {
  int ranks = 4;
  int iters = 10;
  uint64_t minBytes = 1 << 20, maxBytes = 256u << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--ranks") == 0) ranks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--min-bytes") == 0) minBytes = std::strtoull(argv[i + 1], nullptr, 0);
    if (std::strcmp(argv[i], "--max-bytes") == 0) maxBytes = std::strtoull(argv[i + 1], nullptr, 0);
  }
  if (auto why = cuda::unavailableReason(); !why.empty()) {
    std::fprintf(stderr, "gpu_engine_device_bench: %s\n", why.c_str());
    return 77;
  }
  std::printf("ring allreduce fp32 sum, %d ranks over TCP 127.0.0.1, median of %d\n", ranks, iters);
  std::printf("%12s %12s %12s %8s\n", "bytes", "host ms", "device ms", "dev/host");
  auto contexts = testing::makeGroup(ranks, testing::Backend::Tcp);
  int rc = 0;
  uint64_t tag = 1;
  for (uint64_t bytes = minBytes; bytes <= maxBytes; bytes *= 4) {
    std::vector<double> hostMs, devMs;
    std::mutex mu;
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        transport::Context& ctx = *contexts[static_cast<size_t>(r)];
        AlgoParams p;
        p.rank = r;
        p.worldSize = ranks;
        p.count = bytes / 4;
        p.elementSize = 4;
        p.inPlace = true;
        const Schedule s = buildSchedule(Algorithm::kRing, p);
        Reduction red(DataType::kFloat32, ReduceOp::kSum);
        std::vector<float> host(p.count, 1.0f);
        std::vector<std::byte> scratch(s.scratchBytes() + 1);
        cuda::CudaOps ops;
        cuda::DeviceBuffer dev(bytes);
        dev.upload(host.data(), bytes);
        for (int it = 0; it < iters + 1; ++it) {
          auto t0 = std::chrono::steady_clock::now();
          execute(s, ctx, ExecBuffers{host.data(), host.data(), scratch.data()}, &red,
                  (tag + 2 * it) << 32, testing::testDeadline());
          auto t1 = std::chrono::steady_clock::now();
          cuda::executeDevice(
              s, ctx, ExecBuffers{dev.data(), dev.data(), ops.deviceScratch(s.scratchBytes())},
              DataType::kFloat32, ReduceOp::kSum, (tag + 2 * it + 1) << 32, testing::testDeadline(),
              ops);
          auto t2 = std::chrono::steady_clock::now();
          if (r == 0 && it > 0) {
            std::lock_guard<std::mutex> lock(mu);
            hostMs.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            devMs.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
          }
        }
      });
    for (auto& t : threads) t.join();
    tag += 2 * static_cast<uint64_t>(iters + 1);
    std::sort(hostMs.begin(), hostMs.end());
    std::sort(devMs.begin(), devMs.end());
    const double h = hostMs[hostMs.size() / 2], d = devMs[devMs.size() / 2];
    std::printf("%12llu %12.3f %12.3f %8.3f\n", static_cast<unsigned long long>(bytes), h, d,
                d / h);
    if (bytes >= (64u << 20) && d > 1.10 * h) rc = 1;
  }
  return rc;
}
