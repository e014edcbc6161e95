// Scalar IEEE binary16 (fp16) and bfloat16 conversions to and from binary32.
//
// Contract: bit-exact with x86 F16C (VCVTPH2PS / VCVTPS2PH with round-to-nearest-even), so the
// generic and the AVX2 reduction kernels produce identical bits: rounding is to nearest even,
// subnormals are kept, a NaN keeps its sign and the top payload bits and becomes quiet. Written
// without branches so that loops over them auto-vectorise. Assumes the default floating-point
// environment (round to nearest, no flush-to-zero), which rankmap never changes.
#pragma once

#include <bit>
#include <cstdint>

namespace rankmap::coll {

inline float halfToFloat(uint16_t h) {
  // After Maratyszcza's FP16 library: rebias normal numbers with one multiply (which also turns
  // infinities and NaNs of the shifted exponent into binary32 ones) and build subnormals with a
  // magic-number subtraction.
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t twoW = w + w;
  const float normalized = std::bit_cast<float>((twoW >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = std::bit_cast<float>((twoW >> 17) | (126u << 23)) - 0.5f;
  const uint32_t magnitude = twoW < (1u << 27) ? std::bit_cast<uint32_t>(denormalized)
                                               : std::bit_cast<uint32_t>(normalized);
  return std::bit_cast<float>(sign | magnitude);
}

inline uint16_t floatToHalf(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1W = w + w;
  const uint32_t sign = w & 0x80000000u;
  // Scaling up then down rounds to the half precision grid and overflows to infinity; adding a
  // bias aligns the mantissa so the binary32 addition performs the round-to-nearest-even.
  float base = (std::bit_cast<float>(w & 0x7FFFFFFFu) * 0x1.0p+112f) * 0x1.0p-110f;
  uint32_t bias = shl1W & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t nonSign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  const uint32_t nan = 0x7E00u | ((w >> 13) & 0x03FFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1W > 0xFF000000u ? nan : nonSign));
}

inline float bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t floatToBf16(float f) {
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
  const uint32_t nan = (w >> 16) | 0x40u;
  return static_cast<uint16_t>((w & 0x7FFFFFFFu) > 0x7F800000u ? nan : rounded);
}

}  // namespace rankmap::coll
