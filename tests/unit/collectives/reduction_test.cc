// Reduction kernels: every type and operator against an independent scalar reference, the
// generic and AVX2 variants bit for bit against each other (every aliasing form, every tail
// length), fp16/bf16 conversions against the compiler's _Float16 and an exact rounding model.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/reduce/half.h"
#include "collectives/reduce/reduction.h"
#include "common/error.h"
#include "tests/unit/collectives/type_lists.h"

namespace rankmap::coll {
namespace {

using testing::kAllOps;
using testing::kAllTypes;

// bf16 reference: the nearest bf16 to f (ties to even), by comparing the two neighbours in
// double precision; NaN keeps sign and top payload, quiet.
uint16_t bf16Reference(float f) {
  uint32_t w = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((w >> 16) | 0x40);
  uint32_t lo = w & 0xFFFF0000u;
  uint32_t hi = lo + 0x10000u;
  double dl = std::fabs(static_cast<double>(std::bit_cast<float>(lo)) - f);
  float fh = std::bit_cast<float>(hi);
  double dh = std::isinf(fh) && !std::isinf(f) ? INFINITY : std::fabs(static_cast<double>(fh) - f);
  // Overflow: values past the largest bf16 round to infinity like the bit trick does.
  if (std::isinf(fh) && !std::isinf(f)) {
    double maxv = static_cast<double>(std::bit_cast<float>(lo));
    double ulp = static_cast<double>(std::bit_cast<float>(lo)) - static_cast<double>(std::bit_cast<float>(lo - 0x10000u));
    dh = std::fabs(maxv + ulp - f);
  }
  if (dl < dh) return static_cast<uint16_t>(lo >> 16);
  if (dh < dl) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

TEST(Half, AllHalvesConvertLikeFloat16) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 x;
    uint16_t hb = static_cast<uint16_t>(h);
    std::memcpy(&x, &hb, 2);
    float ref = static_cast<float>(x);
    float got = halfToFloat(hb);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(got)) << h;
      // Quiet, same sign, payload kept in the top bits.
      uint32_t g = std::bit_cast<uint32_t>(got);
      EXPECT_EQ(g >> 31, h >> 15u);
      EXPECT_EQ((g >> 13) & 0x3FF, (h & 0x3FF) | 0x200) << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(ref)) << "half " << h;
      // Round trip.
      ASSERT_EQ(floatToHalf(got), hb) << "half " << h;
    }
  }
}

TEST(Half, FloatsRoundToNearestEvenLikeFloat16) {
  std::mt19937 rng(7);
  std::vector<float> samples = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f,
                                std::numeric_limits<float>::infinity(), 5.96e-8f, 2.98e-8f,
                                2.9802322e-08f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                                std::numeric_limits<float>::denorm_min(), 6.1e-5f, 6.103515625e-05f};
  for (int i = 0; i < 400000; ++i) samples.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (float f : samples) {
    if (std::isnan(f)) continue;
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(floatToHalf(f), rb) << "float " << f << " bits " << std::bit_cast<uint32_t>(f);
  }
}

TEST(Half, Bfloat16RoundsToNearestEven) {
  std::mt19937 rng(11);
  for (int i = 0; i < 400000; ++i) {
    float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    ASSERT_EQ(floatToBf16(f), bf16Reference(f)) << std::bit_cast<uint32_t>(f);
  }
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(floatToBf16(f), b);
    }
  }
}

// Random inputs of a type: any bit pattern for integers; finite values of modest magnitude for
// floating point (so sums and products stay finite and are checked exactly).
std::vector<std::byte> randomBuffer(DataType t, size_t n, std::mt19937& rng) {
  std::vector<std::byte> b(n * elementSize(t));
  for (size_t i = 0; i < n; ++i) {
    std::byte* p = b.data() + i * elementSize(t);
    float f = std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng);
    switch (t) {
      case DataType::kFloat16: { uint16_t v = floatToHalf(f); std::memcpy(p, &v, 2); break; }
      case DataType::kBFloat16: { uint16_t v = floatToBf16(f); std::memcpy(p, &v, 2); break; }
      case DataType::kFloat32: std::memcpy(p, &f, 4); break;
      case DataType::kFloat64: { double d = static_cast<double>(f) * 1.000001; std::memcpy(p, &d, 8); break; }
      default:
        for (size_t k = 0; k < elementSize(t); ++k) p[k] = static_cast<std::byte>(rng());
    }
  }
  return b;
}

// Independent scalar reference for one element.
template <typename T>
T intRef(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)));
    case ReduceOp::kProd:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)));
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
  }
  return 0;
}

template <typename F>
F floatRef(ReduceOp op, F a, F b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
  }
  return 0;
}

void reference(DataType t, ReduceOp op, std::byte* d, const std::byte* a, const std::byte* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    auto one = [&]<typename T>(T) {
      T x, y, z;
      std::memcpy(&x, a + i * sizeof(T), sizeof(T));
      std::memcpy(&y, b + i * sizeof(T), sizeof(T));
      if constexpr (std::is_integral_v<T>) z = intRef(op, x, y);
      else z = floatRef(op, x, y);
      std::memcpy(d + i * sizeof(T), &z, sizeof(T));
    };
    switch (t) {
      case DataType::kInt8: one(int8_t{}); break;
      case DataType::kUint8: one(uint8_t{}); break;
      case DataType::kInt32: one(int32_t{}); break;
      case DataType::kUint32: one(uint32_t{}); break;
      case DataType::kInt64: one(int64_t{}); break;
      case DataType::kUint64: one(uint64_t{}); break;
      case DataType::kFloat32: one(float{}); break;
      case DataType::kFloat64: one(double{}); break;
      case DataType::kFloat16: {
        _Float16 x, y;
        std::memcpy(&x, a + 2 * i, 2);
        std::memcpy(&y, b + 2 * i, 2);
        _Float16 z = static_cast<_Float16>(floatRef(op, static_cast<float>(x), static_cast<float>(y)));
        std::memcpy(d + 2 * i, &z, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t x, y;
        std::memcpy(&x, a + 2 * i, 2);
        std::memcpy(&y, b + 2 * i, 2);
        uint16_t z = bf16Reference(floatRef(op, bf16ToFloat(x), bf16ToFloat(y)));
        std::memcpy(d + 2 * i, &z, 2);
        break;
      }
    }
  }
}

class ReductionTypes : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReductionTypes, MatchesReferenceInEveryVariantAndAliasing) {
  auto [t, op] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(static_cast<int>(t) * 10 + static_cast<int>(op)));
  std::vector<KernelIsa> isas = {KernelIsa::kGeneric};
  if (kernelIsaAvailable(KernelIsa::kAvx2)) isas.push_back(KernelIsa::kAvx2);
  for (size_t n : {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 65, 1000, 4099}) {
    auto a = randomBuffer(t, n, rng), b = randomBuffer(t, n, rng);
    std::vector<std::byte> want(a.size());
    reference(t, op, want.data(), a.data(), b.data(), n);
    for (KernelIsa isa : isas) {
      Reduction red(t, op, isa);
      SCOPED_TRACE(fmt::format("{} {} n={} {}", dataTypeName(t), reduceOpName(op), n, kernelIsaName(isa)));
      // Compared with vector ==, not memcmp: at n = 0 every data() is null, and memcmp's
      // pointers must not be null even for zero bytes (UBSan's nonnull-attribute check).
      std::vector<std::byte> d(a.size());
      red.apply(d.data(), a.data(), b.data(), n);
      EXPECT_TRUE(d == want) << "distinct";
      auto inA = a;
      red.apply(inA.data(), inA.data(), b.data(), n);
      EXPECT_TRUE(inA == want) << "dst == a";
      auto inB = b;
      red.apply(inB.data(), a.data(), inB.data(), n);
      EXPECT_TRUE(inB == want) << "dst == b";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ReductionTypes,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes), ::testing::ValuesIn(kAllOps)),
                         [](const auto& info) {
                           return std::string(dataTypeName(std::get<0>(info.param))) + "_" +
                                  std::string(reduceOpName(std::get<1>(info.param)));
                         });

// Generic and AVX2 agree on special values too (NaN, infinities, signed zeros, subnormals).
TEST(Reduction, VariantsAgreeOnSpecialValues) {
  if (!kernelIsaAvailable(KernelIsa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::vector<uint16_t> halves;
  for (uint32_t h = 0; h < 65536; h += 7) halves.push_back(static_cast<uint16_t>(h));
  for (uint16_t h : {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7D00, 0x0001, 0x03FF, 0x7BFF})
    halves.push_back(h);
  std::vector<uint16_t> other(halves.rbegin(), halves.rend());
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : kAllOps) {
      std::vector<uint16_t> g(halves.size()), v(halves.size());
      Reduction(t, op, KernelIsa::kGeneric).apply(g.data(), halves.data(), other.data(), g.size());
      Reduction(t, op, KernelIsa::kAvx2).apply(v.data(), halves.data(), other.data(), v.size());
      EXPECT_EQ(g, v) << dataTypeName(t) << " " << reduceOpName(op);
    }
  }
  std::vector<float> fs = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, 3.4e38f, 1.0f};
  std::vector<float> gs(fs.rbegin(), fs.rend());
  for (ReduceOp op : kAllOps) {
    std::vector<float> g(fs.size()), v(fs.size());
    Reduction(DataType::kFloat32, op, KernelIsa::kGeneric).apply(g.data(), fs.data(), gs.data(), fs.size());
    Reduction(DataType::kFloat32, op, KernelIsa::kAvx2).apply(v.data(), fs.data(), gs.data(), fs.size());
    EXPECT_EQ(std::memcmp(g.data(), v.data(), g.size() * 4), 0) << reduceOpName(op);
  }
}

TEST(Reduction, AvgDividesOnceAndRoundsIntegersTowardZero) {
  Reduction red(DataType::kInt32, ReduceOp::kAvg);
  EXPECT_TRUE(red.needsFinalize());
  std::vector<int32_t> v = {-7, 7, -1, 9, 0};
  red.finalize(v.data(), v.size(), 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-3, 3, 0, 4, 0}));
  // The divisor does not have to fit the element type.
  std::vector<int8_t> small = {100, -100};
  Reduction(DataType::kInt8, ReduceOp::kAvg).finalize(small.data(), 2, 200);
  EXPECT_EQ(small, (std::vector<int8_t>{0, 0}));
  std::vector<uint8_t> us = {255};
  Reduction(DataType::kUint8, ReduceOp::kAvg).finalize(us.data(), 1, 2);
  EXPECT_EQ(us[0], 127);
  std::vector<float> f = {3.0f};
  Reduction(DataType::kFloat32, ReduceOp::kAvg).finalize(f.data(), 1, 4);
  EXPECT_EQ(f[0], 0.75f);
  std::vector<uint16_t> h = {floatToHalf(3.0f)};
  Reduction(DataType::kFloat16, ReduceOp::kAvg).finalize(h.data(), 1, 4);
  EXPECT_EQ(halfToFloat(h[0]), 0.75f);
  // Other operators: finalize is a no-op.
  std::vector<int32_t> s = {10};
  Reduction(DataType::kInt32, ReduceOp::kSum).finalize(s.data(), 1, 4);
  EXPECT_EQ(s[0], 10);
}

TEST(Reduction, RejectsUnknownTypeAndOp) {
  EXPECT_THROW(Reduction(static_cast<DataType>(42), ReduceOp::kSum), InvalidInput);
  EXPECT_THROW(Reduction(DataType::kInt8, static_cast<ReduceOp>(9)), InvalidInput);
}

TEST(Types, NamesRoundTrip) {
  for (DataType t : kAllTypes) EXPECT_EQ(parseDataType(dataTypeName(t)), t);
  for (ReduceOp op : kAllOps) EXPECT_EQ(parseReduceOp(reduceOpName(op)), op);
  EXPECT_EQ(parseDataType("half"), DataType::kFloat16);
  EXPECT_EQ(parseDataType("bf16"), DataType::kBFloat16);
  EXPECT_EQ(parseDataType("float"), DataType::kFloat32);
  EXPECT_FALSE(parseDataType("float128").has_value());
  EXPECT_EQ(parseCollective("reducescatter"), Collective::kReduceScatter);
  EXPECT_EQ(parseAlgorithm("hier"), Algorithm::kHier);
}

}  // namespace
}  // namespace rankmap::coll
