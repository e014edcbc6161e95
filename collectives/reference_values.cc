#include "collectives/reference_values.h"

#include <cstring>
#include <type_traits>

#include "collectives/reduce/half.h"

namespace rankmap::coll {
namespace {

// A 64-bit mix of (rank, element): integer inputs cover every bit pattern.
uint64_t mixBits(uint64_t r, uint64_t i) {
  uint64_t x = (r + 1) * 0x9E3779B97F4A7C15ull ^ (i + 7) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 32);
}

// Small exact floating-point value for (rank, element): in [-8, 8] for sum, min, max and avg;
// +-1, and 2 on one rank in 16, for prod (so products stay powers of two).
double smallValue(ReduceOp op, int r, uint64_t i) {
  if (op == ReduceOp::kProd) {
    if (static_cast<uint64_t>(r) == i % 16) return 2.0;
    return (r + i) % 3 == 0 ? -1.0 : 1.0;
  }
  return static_cast<double>(static_cast<int64_t>((r * 7 + i * 3) % 17) - 8);
}

// Wrapping arithmetic through the unsigned type: signed overflow would be undefined.
template <typename T>
T foldInt(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::kProd:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) *
                                           static_cast<uint64_t>(static_cast<U>(b))));
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
  }
  return a;
}

template <typename T>
void resultInt(ReduceOp op, int n, uint64_t i, void* out) {
  T acc{};
  for (int r = 0; r < n; ++r) {
    T v;
    uint64_t bits = mixBits(static_cast<uint64_t>(r), i);
    std::memcpy(&v, &bits, sizeof(T));  // little-endian: the low bytes
    acc = r == 0 ? v : foldInt(op, acc, v);
  }
  if (op == ReduceOp::kAvg) {
    using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    acc = static_cast<T>(static_cast<W>(acc) / static_cast<W>(n));
  }
  std::memcpy(out, &acc, sizeof(T));
}

}  // namespace

void storeFloatingPoint(DataType t, double value, void* out) {
  switch (t) {
    case DataType::kFloat16: {
      uint16_t h = floatToHalf(static_cast<float>(value));
      std::memcpy(out, &h, 2);
      break;
    }
    case DataType::kBFloat16: {
      uint16_t h = floatToBf16(static_cast<float>(value));
      std::memcpy(out, &h, 2);
      break;
    }
    case DataType::kFloat32: {
      float f = static_cast<float>(value);
      std::memcpy(out, &f, 4);
      break;
    }
    case DataType::kFloat64: std::memcpy(out, &value, 8); break;
    default: break;
  }
}

void referenceInput(DataType t, ReduceOp op, int rank, uint64_t index, void* out) {
  if (isFloatingPoint(t)) return storeFloatingPoint(t, smallValue(op, rank, index), out);
  uint64_t v = mixBits(static_cast<uint64_t>(rank), index);
  std::memcpy(out, &v, elementSize(t));  // little-endian: the low bytes
}

void referenceResult(DataType t, ReduceOp op, int worldSize, uint64_t index, void* out) {
  switch (t) {
    case DataType::kInt8: return resultInt<int8_t>(op, worldSize, index, out);
    case DataType::kUint8: return resultInt<uint8_t>(op, worldSize, index, out);
    case DataType::kInt32: return resultInt<int32_t>(op, worldSize, index, out);
    case DataType::kUint32: return resultInt<uint32_t>(op, worldSize, index, out);
    case DataType::kInt64: return resultInt<int64_t>(op, worldSize, index, out);
    case DataType::kUint64: return resultInt<uint64_t>(op, worldSize, index, out);
    default: break;
  }
  double acc = 0;
  for (int r = 0; r < worldSize; ++r) {
    double v = smallValue(op, r, index);
    if (r == 0)
      acc = v;
    else if (op == ReduceOp::kSum || op == ReduceOp::kAvg)
      acc += v;
    else if (op == ReduceOp::kProd)
      acc *= v;
    else if (op == ReduceOp::kMin)
      acc = v < acc ? v : acc;
    else
      acc = v > acc ? v : acc;
  }
  if (op == ReduceOp::kAvg) {
    // The engine divides once, in the element type (fp32 for fp16/bf16), then rounds.
    if (t == DataType::kFloat64)
      acc = acc / worldSize;
    else
      acc = static_cast<double>(static_cast<float>(acc) / static_cast<float>(worldSize));
  }
  storeFloatingPoint(t, acc, out);
}

}  // namespace rankmap::coll
