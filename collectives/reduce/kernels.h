// Entry points of the per-instruction-set kernel variants (see kernels.inc). Internal to
// collectives/reduce/: everything else goes through Reduction.
#pragma once

#include <cstddef>

#include "collectives/types.h"

namespace rankmap::coll::kernels {

#define RANKMAP_DECLARE_KERNELS(ns)                                                        \
  namespace ns {                                                                           \
  void apply(DataType type, ReduceOp op, void* dst, const void* a, const void* b, size_t n); \
  void finalize(DataType type, void* buf, size_t n, int divisor);                          \
  }

RANKMAP_DECLARE_KERNELS(generic)
#if RANKMAP_KERNELS_X86
RANKMAP_DECLARE_KERNELS(avx2)
#endif

#undef RANKMAP_DECLARE_KERNELS

}  // namespace rankmap::coll::kernels
