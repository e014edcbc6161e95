// Reduction kernels on device memory (see reduce.h for the semantics and the contract).
//
// One kernel template per (storage kind, element type, operator): a grid-stride loop over
// 16-byte packs, each thread loading kUnroll packs of both operands before combining any (several
// independent loads in flight hide the memory latency), with the unaligned head and the tail
// done element by element. Pointers that are not equally aligned modulo 16 take the element path
// throughout (still coalesced). Integer division and the fp16/bf16 conversions are written
// exactly as the CPU kernels (collectives/reduce/kernels.inc, half.h) so that both give the same
// bits; floating-point arithmetic uses the explicitly rounded intrinsics where nvcc could
// otherwise contract a multiply and an add into one FMA.
//
// This file holds only device code and its launchers, which report errors as cudaError_t:
// reduce.cc turns them into exceptions (nvcc does not compile the fmt-based error helpers).
#include "collectives/cuda/reduce_kernels.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

namespace rankmap::coll::cuda::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;
constexpr int kMaxDevices = 64;

// --- fp16 / bf16 <-> fp32: device twins of collectives/reduce/half.h, same steps, same bits ----

__device__ __forceinline__ float halfToFloat(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t twoW = w + w;
  const float normalized = __fmul_rn(__uint_as_float((twoW >> 4) + (0xE0u << 23)), 0x1.0p-112f);
  const float denormalized = __fsub_rn(__uint_as_float((twoW >> 17) | (126u << 23)), 0.5f);
  const uint32_t magnitude =
      twoW < (1u << 27) ? __float_as_uint(denormalized) : __float_as_uint(normalized);
  return __uint_as_float(sign | magnitude);
}

__device__ __forceinline__ uint16_t floatToHalf(float f) {
  const uint32_t w = __float_as_uint(f);
  const uint32_t shl1W = w + w;
  const uint32_t sign = w & 0x80000000u;
  float base = __fmul_rn(__fmul_rn(__uint_as_float(w & 0x7FFFFFFFu), 0x1.0p+112f), 0x1.0p-110f);
  uint32_t bias = shl1W & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = __fadd_rn(__uint_as_float((bias >> 1) + 0x07800000u), base);
  const uint32_t bits = __float_as_uint(base);
  const uint32_t nonSign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  const uint32_t nan = 0x7E00u | ((w >> 13) & 0x03FFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1W > 0xFF000000u ? nan : nonSign));
}

__device__ __forceinline__ float bf16ToFloat(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

__device__ __forceinline__ uint16_t floatToBf16(float f) {
  const uint32_t w = __float_as_uint(f);
  const uint32_t rounded = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
  const uint32_t nan = (w >> 16) | 0x40u;
  return static_cast<uint16_t>((w & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

// --- operators on the compute type ---------------------------------------------------------------

struct SumOp {
  template <typename C>
  __device__ __forceinline__ static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      using U = std::make_unsigned_t<C>;
      return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else if constexpr (std::is_same_v<C, float>) {
      return __fadd_rn(a, b);
    } else {
      return __dadd_rn(a, b);
    }
  }
};
struct ProdOp {
  template <typename C>
  __device__ __forceinline__ static C apply(C a, C b) {
    if constexpr (std::is_integral_v<C>) {
      using U =
          std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
      return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
    } else if constexpr (std::is_same_v<C, float>) {
      return __fmul_rn(a, b);
    } else {
      return __dmul_rn(a, b);
    }
  }
};
struct MinOp {
  template <typename C>
  __device__ __forceinline__ static C apply(C a, C b) {
    return a < b ? a : b;
  }
};
struct MaxOp {
  template <typename C>
  __device__ __forceinline__ static C apply(C a, C b) {
    return a > b ? a : b;
  }
};

// --- storage <-> compute ------------------------------------------------------------------------

struct Plain {};
struct Half {};
struct Brain {};

template <typename Kind, typename S>
struct Conv {
  using C = S;
  __device__ __forceinline__ static C load(S s) { return s; }
  __device__ __forceinline__ static S store(C c) { return c; }
};
template <>
struct Conv<Half, uint16_t> {
  using C = float;
  __device__ __forceinline__ static float load(uint16_t s) { return halfToFloat(s); }
  __device__ __forceinline__ static uint16_t store(float c) { return floatToHalf(c); }
};
template <>
struct Conv<Brain, uint16_t> {
  using C = float;
  __device__ __forceinline__ static float load(uint16_t s) { return bf16ToFloat(s); }
  __device__ __forceinline__ static uint16_t store(float c) { return floatToBf16(c); }
};

template <typename Kind, typename S, typename Op>
__device__ __forceinline__ S combine(S a, S b) {
  using Cv = Conv<Kind, S>;
  return Cv::store(Op::apply(Cv::load(a), Cv::load(b)));
}

template <typename S>
union Pack {
  static constexpr int kElems = 16 / sizeof(S);
  uint4 v;
  S e[kElems];
};

// dst = a (op) b over [0, count): elements [0, head) and [head + packs * kElems, count) one by
// one; the packs in between 16 bytes at a time (dst + head, a + head, b + head are 16-aligned).
template <typename Kind, typename S, typename Op>
__global__ void __launch_bounds__(kThreads)
    reduceKernel(S* dst, const S* a, const S* b, size_t head, size_t packs, size_t count) {
  constexpr int kElems = Pack<S>::kElems;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;

  const uint4* a4 = reinterpret_cast<const uint4*>(a + head);
  const uint4* b4 = reinterpret_cast<const uint4*>(b + head);
  uint4* d4 = reinterpret_cast<uint4*>(dst + head);
  for (size_t base = tid; base < packs; base += stride * kUnroll) {
    Pack<S> ra[kUnroll], rb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t p = base + u * stride;
      if (p < packs) {
        ra[u].v = a4[p];
        rb[u].v = b4[p];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t p = base + u * stride;
      if (p < packs) {
        Pack<S> r;
#pragma unroll
        for (int k = 0; k < kElems; ++k) r.e[k] = combine<Kind, S, Op>(ra[u].e[k], rb[u].e[k]);
        d4[p] = r.v;
      }
    }
  }
  for (size_t i = tid; i < head; i += stride) dst[i] = combine<Kind, S, Op>(a[i], b[i]);
  for (size_t i = head + packs * kElems + tid; i < count; i += stride)
    dst[i] = combine<Kind, S, Op>(a[i], b[i]);
}

template <typename Kind, typename S>
__global__ void __launch_bounds__(kThreads) divideKernel(S* buf, size_t count, int divisor) {
  using Cv = Conv<Kind, S>;
  using C = typename Cv::C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    if constexpr (std::is_integral_v<C>) {
      // In 64 bits: the divisor may not fit the element type (int8 over 200 ranks).
      using W = std::conditional_t<std::is_signed_v<C>, int64_t, uint64_t>;
      buf[i] = static_cast<S>(static_cast<W>(buf[i]) / static_cast<W>(divisor));
    } else if constexpr (std::is_same_v<C, float>) {
      buf[i] = Cv::store(__fdiv_rn(Cv::load(buf[i]), static_cast<float>(divisor)));
    } else {
      buf[i] = Cv::store(__ddiv_rn(Cv::load(buf[i]), static_cast<double>(divisor)));
    }
  }
}

// --- launching ----------------------------------------------------------------------------------

cudaError_t multiprocessors(int* sms) {
  static std::atomic<int> cache[kMaxDevices] = {};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (dev < 0 || dev >= kMaxDevices) dev = 0;
  *sms = cache[dev].load(std::memory_order_relaxed);
  if (*sms == 0) {
    if (cudaError_t e = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
        e != cudaSuccess)
      return e;
    cache[dev].store(*sms, std::memory_order_relaxed);
  }
  return cudaSuccess;
}

// A persistent grid: as many blocks as the GPU keeps resident at once for `kernel` (read off the
// device through the occupancy API, once per kernel), fewer when there is less work; the loops
// are grid-stride, so more blocks would only queue behind the resident ones.
template <auto kernel>
cudaError_t blocksFor(size_t items, unsigned* blocks) {
  static const int perSm = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0) != cudaSuccess) {
      cudaGetLastError();  // not sticky; keep it from being reported by the launch check
      n = 1;
    }
    return n > 0 ? n : 1;
  }();
  int sms = 0;
  if (cudaError_t e = multiprocessors(&sms); e != cudaSuccess) return e;
  size_t b = (items + kThreads - 1) / kThreads;
  const size_t cap = static_cast<size_t>(sms) * static_cast<size_t>(perSm);
  if (b > cap) b = cap;
  *blocks = static_cast<unsigned>(b < 1 ? 1 : b);
  return cudaSuccess;
}

template <typename Kind, typename S, typename Op>
cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count,
                         cudaStream_t stream) {
  constexpr size_t kElems = Pack<S>::kElems;
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const bool congruent = ((d ^ reinterpret_cast<uintptr_t>(a)) % 16 == 0) &&
                         ((d ^ reinterpret_cast<uintptr_t>(b)) % 16 == 0) && d % sizeof(S) == 0;
  size_t head = count;
  size_t packs = 0;
  if (congruent) {
    head = ((16 - d % 16) % 16) / sizeof(S);
    if (head > count) head = count;
    packs = (count - head) / kElems;
  }
  const size_t scalar = count - packs * kElems;
  const size_t items = packs / kUnroll > scalar ? packs / kUnroll : scalar;
  unsigned blocks = 0;
  if (cudaError_t e = blocksFor<reduceKernel<Kind, S, Op>>(items, &blocks); e != cudaSuccess)
    return e;
  reduceKernel<Kind, S, Op><<<blocks, kThreads, 0, stream>>>(
      static_cast<S*>(dst), static_cast<const S*>(a), static_cast<const S*>(b), head, packs, count);
  return cudaGetLastError();
}

template <typename Kind, typename S>
cudaError_t reduceOp(ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                     cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return launchReduce<Kind, S, SumOp>(dst, a, b, count, stream);
    case ReduceOp::kProd:
      return launchReduce<Kind, S, ProdOp>(dst, a, b, count, stream);
    case ReduceOp::kMin:
      return launchReduce<Kind, S, MinOp>(dst, a, b, count, stream);
    case ReduceOp::kMax:
      return launchReduce<Kind, S, MaxOp>(dst, a, b, count, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename Kind, typename S>
cudaError_t divide(void* buf, size_t count, int divisor, cudaStream_t stream) {
  unsigned blocks = 0;
  if (cudaError_t e = blocksFor<divideKernel<Kind, S>>(count, &blocks); e != cudaSuccess) return e;
  divideKernel<Kind, S><<<blocks, kThreads, 0, stream>>>(static_cast<S*>(buf), count, divisor);
  return cudaGetLastError();
}

// The one place a DataType becomes kernel template arguments: calls f(Kind{}, S{}) with the
// arithmetic tag and the storage type of `type`.
template <typename F>
cudaError_t byType(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8:
      return f(Plain{}, int8_t{});
    case DataType::kUint8:
      return f(Plain{}, uint8_t{});
    case DataType::kInt32:
      return f(Plain{}, int32_t{});
    case DataType::kUint32:
      return f(Plain{}, uint32_t{});
    case DataType::kInt64:
      return f(Plain{}, int64_t{});
    case DataType::kUint64:
      return f(Plain{}, uint64_t{});
    case DataType::kFloat16:
      return f(Half{}, uint16_t{});
    case DataType::kBFloat16:
      return f(Brain{}, uint16_t{});
    case DataType::kFloat32:
      return f(Plain{}, float{});
    case DataType::kFloat64:
      return f(Plain{}, double{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launchReduce(void* dst, const void* a, const void* b, size_t count, DataType type,
                         ReduceOp op, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return byType(type, [&](auto kind, auto zero) {
    return reduceOp<decltype(kind), decltype(zero)>(op, dst, a, b, count, stream);
  });
}

cudaError_t launchFinalize(void* buf, size_t count, DataType type, ReduceOp op, int worldSize,
                           cudaStream_t stream) {
  if (op != ReduceOp::kAvg || count == 0 || worldSize == 1) return cudaSuccess;
  return byType(type, [&](auto kind, auto zero) {
    return divide<decltype(kind), decltype(zero)>(buf, count, worldSize, stream);
  });
}

}  // namespace rankmap::coll::cuda::kernels
