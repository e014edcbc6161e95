// Reductions: the only typed code of the engine. Algorithms and the executor are type-erased
// (element size + a Reduction); the templates live in the kernels (kernels.inc), compiled once
// per instruction set and picked at run time.
//
// Semantics, identical for every kernel variant (tests compare them bit for bit):
// - Integers wrap around (two's complement) on sum and prod; min/max compare signed or unsigned
//   per the type.
// - Floating point: sum, prod, min, max in the element type; fp16 and bf16 are widened to fp32,
//   combined, and rounded back to nearest even. min(a, b) = a < b ? a : b and
//   max(a, b) = a > b ? a : b (the x86 MINPS/MAXPS rule: with a NaN or equal operands, b).
// - avg: the reduction runs as sum, and finalize() divides each element by the world size once
//   at the end. Integers: the wrapped sum divided with C++ integer division, i.e. rounded toward
//   zero (-7 / 2 = -3). Floating point: a true division (fp16/bf16 in fp32, then rounded).
#pragma once

#include <cstddef>
#include <string_view>

#include "collectives/types.h"

namespace rankmap::coll {

// Instruction sets with a kernel variant; kAuto = the best this CPU supports.
enum class KernelIsa { kAuto, kGeneric, kAvx2 };

class Reduction {
 public:
  Reduction(DataType type, ReduceOp op, KernelIsa isa = KernelIsa::kAuto);

  DataType type() const { return type_; }
  ReduceOp op() const { return op_; }
  size_t elementSize() const { return elementSize_; }
  KernelIsa isa() const { return isa_; }

  // dst[i] = a[i] (op) b[i] for i < count. dst may be exactly a or exactly b; any other overlap
  // is a caller bug. avg combines as sum.
  void apply(void* dst, const void* a, const void* b, size_t count) const;
  // For avg: buf[i] /= worldSize. A no-op for other operators.
  void finalize(void* buf, size_t count, int worldSize) const;
  bool needsFinalize() const { return op_ == ReduceOp::kAvg; }

 private:
  DataType type_;
  ReduceOp op_;
  size_t elementSize_;
  KernelIsa isa_;
};

// The variant KernelIsa::kAuto resolves to on this CPU.
KernelIsa bestKernelIsa();
// Whether this build and CPU can run `isa`.
bool kernelIsaAvailable(KernelIsa isa);
std::string_view kernelIsaName(KernelIsa isa);

}  // namespace rankmap::coll
