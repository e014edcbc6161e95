// GPU reduction kernels (collectives/cuda/reduce.h) against the CPU kernels
// (collectives/reduce/reduction.h): every type, every operator, aligned, misaligned and
// differently aligned operands, the three aliasing forms, and avg's finalize; bit for bit.
// Label gpu: skips with the reason when this machine has no usable CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "collectives/cuda/device.h"
#include "collectives/cuda/reduce.h"
#include "collectives/reduce/half.h"
#include "collectives/reduce/reduction.h"
#include "tests/unit/collectives/type_lists.h"

namespace rankmap::coll {
namespace {

class GpuReduce : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = cuda::unavailableReason(); !why.empty()) GTEST_SKIP() << why;
  }
};

// Finite values only (no NaN or infinity): x86 and the GPU propagate NaN payloads differently in
// plain fp32/fp64 arithmetic, which the engine does not promise to hide. Subnormals, signed
// zeros and values that round in fp16/bf16 are included.
std::vector<std::byte> randomElements(DataType t, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(-300.0f, 300.0f);
  const size_t es = elementSize(t);
  std::vector<std::byte> out(count * es);
  for (size_t i = 0; i < count; ++i) {
    std::byte* p = out.data() + i * es;
    float f = real(rng);
    if (i % 17 == 3) f = 1e-39f;  // fp32 subnormal
    if (i % 19 == 5) f = -0.0f;
    switch (t) {
      case DataType::kFloat16: {
        uint16_t h = floatToHalf(i % 23 == 7 ? 3e-6f : f);  // fp16 subnormal
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t b = floatToBf16(f);
        std::memcpy(p, &b, 2);
        break;
      }
      case DataType::kFloat32:
        std::memcpy(p, &f, 4);
        break;
      case DataType::kFloat64: {
        double d = static_cast<double>(f) * 1.000001;
        std::memcpy(p, &d, 8);
        break;
      }
      default:
        for (size_t k = 0; k < es; ++k) p[k] = static_cast<std::byte>(rng());
    }
  }
  return out;
}

TEST_F(GpuReduce, EveryTypeAndOperatorMatchesTheCpuBitForBit) {
  for (DataType t : testing::kAllTypes) {
    const size_t es = elementSize(t);
    for (ReduceOp op : testing::kAllOps) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{33}, size_t{1000},
                           (size_t{1} << 20) + 3}) {
        // Offsets in elements of a, b and dst: equal (vector path with a head) or different
        // modulo 16 bytes (element path).
        for (auto [oa, ob, od] : {std::tuple{0, 0, 0}, std::tuple{1, 1, 1}, std::tuple{1, 0, 2}}) {
          SCOPED_TRACE(::testing::Message()
                       << dataTypeName(t) << " " << reduceOpName(op) << " count " << count
                       << " offsets " << oa << "," << ob << "," << od);
          auto a = randomElements(t, count, 1);
          auto b = randomElements(t, count, 2);
          std::vector<std::byte> want(count * es);
          Reduction red(t, op);
          red.apply(want.data(), a.data(), b.data(), count);
          const size_t pad = 4 * es;
          cuda::DeviceBuffer da(count * es + pad), db(count * es + pad), dd(count * es + pad);
          da.upload(a.data(), a.size(), oa * es);
          db.upload(b.data(), b.size(), ob * es);
          auto* pa = static_cast<std::byte*>(da.data()) + oa * es;
          auto* pb = static_cast<std::byte*>(db.data()) + ob * es;
          auto* pd = static_cast<std::byte*>(dd.data()) + od * es;
          std::vector<std::byte> got(count * es);
          // dst distinct
          cuda::reduceDevice(pd, pa, pb, count, t, op, nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          dd.download(got.data(), got.size(), od * es);
          ASSERT_EQ(got, want) << "distinct";
          // dst == b, then dst == a (two-operand form: a op= b)
          cuda::reduceDevice(pb, pa, pb, count, t, op, nullptr);
          db.download(got.data(), got.size(), ob * es);
          ASSERT_EQ(got, want) << "dst == b";
          da.upload(a.data(), a.size(), oa * es);
          db.upload(b.data(), b.size(), ob * es);
          cuda::reduceDevice(pa, pb, count, t, op, nullptr);
          da.download(got.data(), got.size(), oa * es);
          ASSERT_EQ(got, want) << "dst == a";
          if (op == ReduceOp::kAvg) {
            for (int world : {3, 200}) {
              std::vector<std::byte> fin = want;
              red.finalize(fin.data(), count, world);
              da.upload(want.data(), want.size(), oa * es);
              cuda::finalizeDevice(pa, count, t, op, world, nullptr);
              da.download(got.data(), got.size(), oa * es);
              ASSERT_EQ(got, fin) << "finalize over " << world;
            }
          }
        }
      }
    }
  }
}

TEST_F(GpuReduce, DevicePointersAreRecognised) {
  cuda::DeviceBuffer d(64);
  std::vector<char> h(64);
  EXPECT_TRUE(cuda::isDevicePointer(d.data()));
  EXPECT_FALSE(cuda::isDevicePointer(h.data()));
  EXPECT_FALSE(cuda::isDevicePointer(nullptr));
}

}  // namespace
}  // namespace rankmap::coll
