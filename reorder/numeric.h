// Numeric helpers for the planner's O(N^2) loops.
//
// fastLog: the natural logarithm for clustering features and histograms. Contract: for finite
// x > 0, |fastLog(x) - log(x)| < 2e-6, far below any measurement noise; it costs a few
// multiplications instead of a libm call, which matters at 16 million pairs. Pure float
// arithmetic: the same binary gives the same bits everywhere.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace rankmap::reorder {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The upper median of v (its element at size/2 in sorted order), in O(m); reorders v. NaN when
// v is empty.
template <class T>
double upperMedianInPlace(std::vector<T>& v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}
template <class T>
double upperMedian(std::vector<T> v) {
  return upperMedianInPlace(v);
}

// Top band of a sample in O(m): the median of the values within 25% of the largest. Robust to
// noise and to a minority of slower paths: a single flow shows the narrowest link of its path,
// so the fastest flows show the link in question (a host's own link, a group's uplink).
inline double topBand(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double ref = *std::max_element(v.begin(), v.end());
  std::vector<double> band;
  for (double x : v)
    if (x >= 0.75 * ref) band.push_back(x);
  auto mid = band.begin() + static_cast<std::ptrdiff_t>(band.size() / 2);
  std::nth_element(band.begin(), mid, band.end());
  return *mid;
}

inline float fastLog(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  int exponent = static_cast<int>((bits >> 23) & 0xff) - 127;
  bits = (bits & 0x7fffffu) | 0x3f800000u;  // mantissa as a float in [1, 2)
  float m;
  std::memcpy(&m, &bits, sizeof m);
  float t = m - 1.0f;
  // log1p(t) on [0, 1): an 8th-order minimax polynomial.
  float p =
      t * (0.9999964239f +
           t * (-0.4998741238f +
                t * (0.3317990258f +
                     t * (-0.2407338084f +
                          t * (0.1676540711f +
                               t * (-0.0953293897f + t * (0.0360884937f + t * -0.0064535442f)))))));
  return static_cast<float>(exponent) * 0.69314718056f + p;
}

// Large blocks (the N x N matrices: 64 MiB each at 4096 hosts) are aligned to 2 MiB and marked
// for transparent huge pages where the kernel offers them (MADV_HUGEPAGE; a no-op elsewhere).
// With 4 KiB pages, first touch of a 4096-host plan's ~270 MiB costs ~70 000 page faults, and
// the linkage's column reads (one row = 32 KiB apart) miss the TLB on nearly every access.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
inline constexpr size_t kHugeAllocMin = size_t{8} << 20;

inline void* allocateLarge(size_t bytes) {
  size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing but speed
#endif
  return p;
}

// An allocator whose value-less construct() default-initialises: a std::vector<float> of N^2
// elements then skips the zero-filling pass that the code is about to overwrite anyway.
// Blocks of kHugeAllocMin bytes or more come from allocateLarge.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    if (n * sizeof(T) < kHugeAllocMin) return std::allocator<T>::allocate(n);
    return static_cast<T*>(allocateLarge(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugeAllocMin)
      std::allocator<T>::deallocate(p, n);
    else
      std::free(p);
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0)
      ::new (static_cast<void*>(p)) U;
    else
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// splitmix64: a tiny, portable, seeded generator (std distributions differ between standard
// libraries; this does not).
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A deterministic pseudo-random number in [0, 1) for the pair (i, j) (splitmix64 of both):
// sampling that is the same on every run and every machine.
inline double pairHash(uint64_t i, uint64_t j) {
  uint64_t z = (i << 32 | j) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

}  // namespace rankmap::reorder
