// Reference values (collectives/reference_values.h), the yardstick of `rankmap bench --check` and
// the engine tests, against closed forms computed here from the inputs alone: one rank reduces to
// its input, integer results wrap like unsigned arithmetic, floating-point inputs are small exact
// integers whose reductions agree across fp16, bf16, fp32 and fp64.
#include "collectives/reference_values.h"

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/reduce/half.h"
#include "tests/unit/collectives/type_lists.h"

namespace rankmap::coll {
namespace {

using testing::kAllOps;
using testing::kAllTypes;

constexpr int kWorldSizes[] = {1, 2, 3, 5, 7, 8, 13, 16};

template <typename T>
T input(DataType t, ReduceOp op, int r, uint64_t i) {
  T v{};
  referenceInput(t, op, r, i, &v);
  return v;
}

template <typename T>
T result(DataType t, ReduceOp op, int n, uint64_t i) {
  T v{};
  referenceResult(t, op, n, i, &v);
  return v;
}

std::vector<std::byte> bytes(const void* p, size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  return {b, b + n};
}

TEST(ReferenceValues, OneRankReducesToItsInput) {
  for (DataType t : kAllTypes)
    for (ReduceOp op : kAllOps)
      for (uint64_t i = 0; i < 64; ++i) {
        uint64_t in = 0, out = 0;
        referenceInput(t, op, 0, i, &in);
        referenceResult(t, op, 1, i, &out);
        EXPECT_EQ(in, out) << dataTypeName(t) << " " << reduceOpName(op) << " element " << i;
      }
}

TEST(ReferenceValues, InputsDependOnRankAndElement) {
  for (DataType t : kAllTypes) {
    const size_t es = elementSize(t);
    uint64_t a = 0, b = 0, c = 0;
    referenceInput(t, ReduceOp::kSum, 0, 5, &a);
    referenceInput(t, ReduceOp::kSum, 1, 5, &b);
    referenceInput(t, ReduceOp::kSum, 0, 6, &c);
    EXPECT_NE(bytes(&a, es), bytes(&b, es)) << dataTypeName(t);
    EXPECT_NE(bytes(&a, es), bytes(&c, es)) << dataTypeName(t);
  }
}

TEST(ReferenceValues, IntegersWrapLikeUnsignedArithmetic) {
  for (int n : kWorldSizes)
    for (uint64_t i = 0; i < 200; ++i) {
      uint32_t sum = 0, prod = 1;
      int8_t lo = 0, hi = 0;
      int64_t sum64 = 0;
      for (int r = 0; r < n; ++r) {
        sum += input<uint32_t>(DataType::kInt32, ReduceOp::kSum, r, i);
        prod *= input<uint32_t>(DataType::kUint32, ReduceOp::kProd, r, i);
        int8_t v = input<int8_t>(DataType::kInt8, ReduceOp::kMin, r, i);
        lo = r == 0 || v < lo ? v : lo;
        hi = r == 0 || v > hi ? v : hi;
        sum64 = static_cast<int64_t>(static_cast<uint64_t>(sum64) +
                                     input<uint64_t>(DataType::kInt64, ReduceOp::kAvg, r, i));
      }
      EXPECT_EQ(result<uint32_t>(DataType::kInt32, ReduceOp::kSum, n, i), sum);
      EXPECT_EQ(result<uint32_t>(DataType::kUint32, ReduceOp::kProd, n, i), prod);
      EXPECT_EQ(result<int8_t>(DataType::kInt8, ReduceOp::kMin, n, i), lo);
      EXPECT_EQ(result<int8_t>(DataType::kInt8, ReduceOp::kMax, n, i), hi);
      // Average: the wrapped sum divided once, rounded toward zero.
      EXPECT_EQ(result<int64_t>(DataType::kInt64, ReduceOp::kAvg, n, i), sum64 / n);
    }
}

// Small integers (and powers of two for prod) are exact in every floating-point type, so the
// reduction is the same number in all four.
TEST(ReferenceValues, FloatingPointReductionsAreExact) {
  for (int n : kWorldSizes)
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax})
      for (uint64_t i = 0; i < 200; ++i) {
        double acc = 0;
        for (int r = 0; r < n; ++r) {
          double v = input<double>(DataType::kFloat64, op, r, i);
          EXPECT_EQ(v, static_cast<float>(input<float>(DataType::kFloat32, op, r, i)));
          if (op == ReduceOp::kProd)
            EXPECT_TRUE(v == 1.0 || v == -1.0 || v == 2.0) << v;
          else
            EXPECT_TRUE(v >= -8.0 && v <= 8.0 && v == static_cast<int>(v)) << v;
          acc = r == 0                   ? v
                : op == ReduceOp::kSum  ? acc + v
                : op == ReduceOp::kProd ? acc * v
                : op == ReduceOp::kMin  ? std::min(acc, v)
                                        : std::max(acc, v);
        }
        EXPECT_EQ(result<double>(DataType::kFloat64, op, n, i), acc);
        EXPECT_EQ(result<float>(DataType::kFloat32, op, n, i), static_cast<float>(acc));
        EXPECT_EQ(halfToFloat(result<uint16_t>(DataType::kFloat16, op, n, i)), acc);
        EXPECT_EQ(bf16ToFloat(result<uint16_t>(DataType::kBFloat16, op, n, i)), acc);
      }
}

// The engine divides once in the element type; fp16 and bf16 divide in fp32, then round.
TEST(ReferenceValues, FloatingPointAverageDividesOnceInTheElementType) {
  for (int n : kWorldSizes)
    for (uint64_t i = 0; i < 50; ++i) {
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += input<double>(DataType::kFloat64, ReduceOp::kAvg, r, i);
      const float f = static_cast<float>(sum) / static_cast<float>(n);
      EXPECT_EQ(result<double>(DataType::kFloat64, ReduceOp::kAvg, n, i), sum / n);
      EXPECT_EQ(result<float>(DataType::kFloat32, ReduceOp::kAvg, n, i), f);
      EXPECT_EQ(result<uint16_t>(DataType::kFloat16, ReduceOp::kAvg, n, i), floatToHalf(f));
      EXPECT_EQ(result<uint16_t>(DataType::kBFloat16, ReduceOp::kAvg, n, i), floatToBf16(f));
    }
}

TEST(ReferenceValues, StoreFloatingPointConvertsAndLeavesIntegersAlone) {
  uint16_t h = 0;
  storeFloatingPoint(DataType::kFloat16, 1.5, &h);
  EXPECT_EQ(halfToFloat(h), 1.5f);
  storeFloatingPoint(DataType::kBFloat16, -3.0, &h);
  EXPECT_EQ(bf16ToFloat(h), -3.0f);
  uint64_t untouched = 0x1122334455667788ull;
  for (DataType t : {DataType::kInt8, DataType::kUint32, DataType::kInt64}) {
    storeFloatingPoint(t, 7.0, &untouched);
    EXPECT_EQ(untouched, 0x1122334455667788ull) << dataTypeName(t);
  }
}

}  // namespace
}  // namespace rankmap::coll
