// Test inputs with closed-form results for the engine tests: whole buffers of the reference
// values of collectives/reference_values.h (an input per rank, the expected reduction).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/reference_values.h"
#include "collectives/types.h"

namespace rankmap::coll::testing {

// Elements first..first+count-1, each written by `element` (referenceInput or referenceResult)
// for (t, op, r).
template <typename Element>
std::vector<std::byte> elements(Element element, DataType t, ReduceOp op, int r, uint64_t count,
                                uint64_t first) {
  std::vector<std::byte> b(count * elementSize(t));
  for (uint64_t i = 0; i < count; ++i) element(t, op, r, first + i, b.data() + i * elementSize(t));
  return b;
}

// Rank r's input.
inline std::vector<std::byte> inputBuffer(DataType t, ReduceOp op, int r, uint64_t count,
                                          uint64_t first = 0) {
  return elements(referenceInput, t, op, r, count, first);
}

// The reduction over ranks 0..n-1.
inline std::vector<std::byte> expectedBuffer(DataType t, ReduceOp op, int n, uint64_t count,
                                             uint64_t first = 0) {
  return elements(referenceResult, t, op, n, count, first);
}

inline void storeFloat(DataType t, double v, void* p) { storeFloatingPoint(t, v, p); }

}  // namespace rankmap::coll::testing
