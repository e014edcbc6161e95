// Test inputs with closed-form results for the engine tests: a value for (rank, element) per
// type and operator, and the expected reduction computed independently of the engine.
//
// Integers take arbitrary bit patterns (sum and prod wrap; every result is exact and
// order-independent). Floating-point values are small integers (and +-1, 2 for prod) so that
// every partial sum or product is exact in the type: results are then bit-exact whatever the
// reduction order, and must equal the reference exactly.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "collectives/reduce/half.h"
#include "collectives/types.h"

namespace rankmap::coll::testing {

inline uint64_t mix(uint64_t r, uint64_t i) {
  uint64_t x = (r + 1) * 0x9E3779B97F4A7C15ull ^ (i + 7) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 32);
}

// Small exact floating-point value for (rank, element).
inline double smallValue(ReduceOp op, int r, uint64_t i) {
  if (op == ReduceOp::kProd) {
    if (static_cast<uint64_t>(r) == i % 16) return 2.0;
    return (r + i) % 3 == 0 ? -1.0 : 1.0;
  }
  return static_cast<double>(static_cast<int64_t>((r * 7 + i * 3) % 17) - 8);
}

// Writes `bytes` of element value (from a double for floating-point types).
inline void storeFloat(DataType t, double v, void* p) {
  switch (t) {
    case DataType::kFloat16: { uint16_t h = floatToHalf(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DataType::kBFloat16: { uint16_t h = floatToBf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DataType::kFloat32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case DataType::kFloat64: std::memcpy(p, &v, 8); break;
    default: break;
  }
}

// Input element `i` of rank `r`.
inline void inputValue(DataType t, ReduceOp op, int r, uint64_t i, void* p) {
  if (isFloatingPoint(t)) return storeFloat(t, smallValue(op, r, i), p);
  uint64_t v = mix(static_cast<uint64_t>(r), i);
  std::memcpy(p, &v, elementSize(t));  // little-endian: the low bytes
}

inline std::vector<std::byte> inputBuffer(DataType t, ReduceOp op, int r, uint64_t count,
                                          uint64_t first = 0) {
  std::vector<std::byte> b(count * elementSize(t));
  for (uint64_t i = 0; i < count; ++i) inputValue(t, op, r, first + i, b.data() + i * elementSize(t));
  return b;
}

template <typename T>
T foldInt(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::kProd:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<uint64_t>(static_cast<U>(b))));
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
  }
  return a;
}

template <typename T>
void expectedInt(ReduceOp op, int n, uint64_t i, void* out) {
  T acc{};
  for (int r = 0; r < n; ++r) {
    T v;
    uint64_t bits = mix(static_cast<uint64_t>(r), i);
    std::memcpy(&v, &bits, sizeof(T));
    acc = r == 0 ? v : foldInt(op, acc, v);
  }
  if (op == ReduceOp::kAvg) {
    using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    acc = static_cast<T>(static_cast<W>(acc) / static_cast<W>(n));
  }
  std::memcpy(out, &acc, sizeof(T));
}

// The reduction over ranks 0..n-1 of element i.
inline void expectedValue(DataType t, ReduceOp op, int n, uint64_t i, void* out) {
  switch (t) {
    case DataType::kInt8: return expectedInt<int8_t>(op, n, i, out);
    case DataType::kUint8: return expectedInt<uint8_t>(op, n, i, out);
    case DataType::kInt32: return expectedInt<int32_t>(op, n, i, out);
    case DataType::kUint32: return expectedInt<uint32_t>(op, n, i, out);
    case DataType::kInt64: return expectedInt<int64_t>(op, n, i, out);
    case DataType::kUint64: return expectedInt<uint64_t>(op, n, i, out);
    default: break;
  }
  double acc = 0;
  for (int r = 0; r < n; ++r) {
    double v = smallValue(op, r, i);
    if (r == 0) acc = v;
    else if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    else if (op == ReduceOp::kProd) acc *= v;
    else if (op == ReduceOp::kMin) acc = v < acc ? v : acc;
    else acc = v > acc ? v : acc;
  }
  if (op == ReduceOp::kAvg) {
    // The engine divides once, in the element type (fp32 for fp16/bf16), then rounds.
    if (t == DataType::kFloat64) acc = acc / n;
    else acc = static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
  }
  storeFloat(t, acc, out);
}

inline std::vector<std::byte> expectedBuffer(DataType t, ReduceOp op, int n, uint64_t count,
                                             uint64_t first = 0) {
  std::vector<std::byte> b(count * elementSize(t));
  for (uint64_t i = 0; i < count; ++i) expectedValue(t, op, n, first + i, b.data() + i * elementSize(t));
  return b;
}

}  // namespace rankmap::coll::testing
