// gpu_reduce_bench: bandwidth of the reduction kernels against a device-to-device copy.
//
//   gpu_reduce_bench [--bytes N] [--iters K]
//
// Both are memory-bound, so both are reported as bytes moved through device memory per second:
// a copy reads and writes each byte once (2 x N), a reduction reads two operands and writes one
// (3 x N). Target (docs/performance.md, ## GPU): fp32 and bf16 sum >= 85% of the copy's rate
// on large buffers. Prints one line per measurement (median of K timed runs, CUDA events).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/cuda/device.h"
#include "collectives/cuda/reduce.h"

namespace {

using rankmap::coll::DataType;
using rankmap::coll::ReduceOp;
namespace cuda = rankmap::coll::cuda;

#define CHECK(call)                                                    \
  do {                                                                 \
    cudaError_t e_ = (call);                                           \
    if (e_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

template <typename Fn>
double medianMs(int iters, Fn&& fn) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();  // warm-up
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    CHECK(cudaEventRecord(a));
    fn();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--bytes") == 0) bytes = std::strtoull(argv[i + 1], nullptr, 0);
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
  }
  if (auto why = cuda::unavailableReason(); !why.empty()) {
    std::fprintf(stderr, "gpu_reduce_bench: %s\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  int dev = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %s, %d SMs; buffers of %zu MiB, median of %d\n", prop.name,
              prop.multiProcessorCount, bytes >> 20, iters);
  cuda::DeviceBuffer a(bytes), b(bytes), d(bytes);
  a.fill(0x3c);
  b.fill(0x3c);
  const double copyMs = medianMs(
      iters, [&] { CHECK(cudaMemcpyAsync(d.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); });
  const double copyGBps = 2.0 * static_cast<double>(bytes) / (copyMs * 1e6);
  std::printf("%-24s %9.3f ms %8.1f GB/s\n", "d2d copy (2N)", copyMs, copyGBps);
  struct Kernel {
    const char* name;
    DataType type;
    ReduceOp op;
    size_t elem;
  } kernels[] = {{"fp32 sum (3N)", DataType::kFloat32, ReduceOp::kSum, 4},
                 {"bf16 sum (3N)", DataType::kBFloat16, ReduceOp::kSum, 2},
                 {"fp16 sum (3N)", DataType::kFloat16, ReduceOp::kSum, 2},
                 {"fp64 sum (3N)", DataType::kFloat64, ReduceOp::kSum, 8},
                 {"int32 max (3N)", DataType::kInt32, ReduceOp::kMax, 4},
                 {"int8 sum (3N)", DataType::kInt8, ReduceOp::kSum, 1}};
  int rc = 0;
  for (const auto& k : kernels) {
    const double ms = medianMs(iters, [&] {
      cuda::reduceDevice(d.data(), a.data(), b.data(), bytes / k.elem, k.type, k.op, nullptr);
    });
    const double gbps = 3.0 * static_cast<double>(bytes) / (ms * 1e6);
    const double ratio = gbps / copyGBps;
    const bool target = k.type == DataType::kFloat32 || k.type == DataType::kBFloat16;
    std::printf(
        "%-24s %9.3f ms %8.1f GB/s  %5.1f%% of copy%s\n", k.name, ms, gbps, 100 * ratio,
        target ? (ratio >= 0.85 ? "  [target >= 85%: met]" : "  [target >= 85%: MISSED]") : "");
    if (target && ratio < 0.85) rc = 1;
  }
  return rc;
}
