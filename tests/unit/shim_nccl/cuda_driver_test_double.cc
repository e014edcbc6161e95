// TEST DOUBLE of libcuda.so.1 (see cuda_driver_test_double.h). Not the CUDA driver.
#include "tests/unit/shim_nccl/cuda_driver_test_double.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace rankmap::testing::cuda_double {
namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kOutOfMemory = 2;

std::mutex gMu;
std::vector<Copy> gCopies;
std::set<void*> gLive;
size_t gBadFrees = 0;
std::atomic<int> gFailAllocs{0};
thread_local void* tContext = nullptr;

}  // namespace

std::vector<Copy> copies() {
  std::lock_guard<std::mutex> lock(gMu);
  return gCopies;
}

void resetCopies() {
  std::lock_guard<std::mutex> lock(gMu);
  gCopies.clear();
}

size_t liveAllocations() {
  std::lock_guard<std::mutex> lock(gMu);
  return gLive.size();
}

size_t badFrees() {
  std::lock_guard<std::mutex> lock(gMu);
  return gBadFrees;
}

void failAllocations(int n) { gFailAllocs.store(n); }

}  // namespace rankmap::testing::cuda_double

namespace cd = rankmap::testing::cuda_double;

#define RANKMAP_DOUBLE_EXPORT extern "C" __attribute__((visibility("default")))

RANKMAP_DOUBLE_EXPORT int cuInit(unsigned int) { return cd::kSuccess; }

RANKMAP_DOUBLE_EXPORT int cuDriverGetVersion(int* version) {
  *version = 13000;
  return cd::kSuccess;
}

RANKMAP_DOUBLE_EXPORT int cuCtxGetCurrent(void** ctx) {
  *ctx = cd::tContext;
  return cd::kSuccess;
}

RANKMAP_DOUBLE_EXPORT int cuCtxSetCurrent(void* ctx) {
  cd::tContext = ctx;
  return cd::kSuccess;
}

RANKMAP_DOUBLE_EXPORT int cuMemcpyAsync(unsigned long long dst, unsigned long long src,
                                        size_t bytes, void* stream) {
  if (bytes > 0 && (dst == 0 || src == 0)) return cd::kInvalidValue;
  std::memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  std::lock_guard<std::mutex> lock(cd::gMu);
  cd::gCopies.push_back(
      {reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes, stream});
  return cd::kSuccess;
}

RANKMAP_DOUBLE_EXPORT int cuMemAllocAsync(unsigned long long* ptr, size_t bytes, void*) {
  if (cd::gFailAllocs.load() > 0) {
    cd::gFailAllocs.fetch_sub(1);
    return cd::kOutOfMemory;
  }
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) return cd::kOutOfMemory;
  // Garbage, as fresh device memory is: a missing copy shows up as wrong data.
  std::memset(p, 0xa5, bytes);
  std::lock_guard<std::mutex> lock(cd::gMu);
  cd::gLive.insert(p);
  *ptr = reinterpret_cast<unsigned long long>(p);
  return cd::kSuccess;
}

RANKMAP_DOUBLE_EXPORT int cuMemFreeAsync(unsigned long long ptr, void*) {
  void* p = reinterpret_cast<void*>(ptr);
  {
    std::lock_guard<std::mutex> lock(cd::gMu);
    if (cd::gLive.erase(p) == 0) {
      ++cd::gBadFrees;
      return cd::kInvalidValue;
    }
  }
  std::free(p);
  return cd::kSuccess;
}

// Streams are immediate here: every copy is done when it is enqueued.
RANKMAP_DOUBLE_EXPORT int cuStreamSynchronize(void*) { return cd::kSuccess; }

RANKMAP_DOUBLE_EXPORT int cuGetErrorName(int error, const char** name) {
  switch (error) {
    case cd::kSuccess:
      *name = "CUDA_SUCCESS";
      return cd::kSuccess;
    case cd::kInvalidValue:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return cd::kSuccess;
    case cd::kOutOfMemory:
      *name = "CUDA_ERROR_OUT_OF_MEMORY";
      return cd::kSuccess;
    default:
      *name = nullptr;
      return cd::kInvalidValue;
  }
}
