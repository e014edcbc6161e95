// Numeric helpers for the planner's O(N^2) loops.
//
// fastLog: the natural logarithm for clustering features and histograms. Contract: for finite
// x > 0, |fastLog(x) - log(x)| < 2e-6, far below any measurement noise; it costs a few
// multiplications instead of a libm call, which matters at 16 million pairs. Pure float
// arithmetic: the same binary gives the same bits everywhere.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

namespace rankmap::reorder {

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

// An allocator whose value-less construct() default-initialises: a std::vector<float> of N^2
// elements then skips the zero-filling pass that the code is about to overwrite anyway.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
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
