#include "collectives/reduce/reduction.h"

#if RANKMAP_KERNELS_X86
#include <cpuid.h>
#endif

#include "collectives/reduce/kernels.h"
#include "common/error.h"

namespace rankmap::coll {

#if RANKMAP_KERNELS_X86
namespace {
// F16C from cpuid leaf 1: clang 14's __builtin_cpu_supports does not know "f16c", and the fuzz
// tree builds this library with clang.
bool cpuHasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
}  // namespace
#endif

bool kernelIsaAvailable(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAuto:
    case KernelIsa::kGeneric:
      return true;
    case KernelIsa::kAvx2:
#if RANKMAP_KERNELS_X86
      return __builtin_cpu_supports("avx2") && cpuHasF16c();
#else
      return false;
#endif
  }
  return false;
}

KernelIsa bestKernelIsa() {
  static const KernelIsa best =
      kernelIsaAvailable(KernelIsa::kAvx2) ? KernelIsa::kAvx2 : KernelIsa::kGeneric;
  return best;
}

std::string_view kernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAuto: return "auto";
    case KernelIsa::kGeneric: return "generic";
    case KernelIsa::kAvx2: return "avx2";
  }
  return "?";
}

Reduction::Reduction(DataType type, ReduceOp op, KernelIsa isa)
    : type_(type), op_(op), elementSize_(coll::elementSize(type)), isa_(isa) {
  if (elementSize_ == 0) RANKMAP_THROW(InvalidInput, "unknown data type {}", static_cast<int>(type));
  if (static_cast<int>(op) < 0 || static_cast<int>(op) >= kNumReduceOps)
    RANKMAP_THROW(InvalidInput, "unknown reduction operator {}", static_cast<int>(op));
  if (isa_ == KernelIsa::kAuto) isa_ = bestKernelIsa();
  if (!kernelIsaAvailable(isa_))
    RANKMAP_THROW(NotSupported, "reduction kernels for {} are not available on this CPU",
                  kernelIsaName(isa_));
}

void Reduction::apply(void* dst, const void* a, const void* b, size_t count) const {
  if (count == 0) return;
#if RANKMAP_KERNELS_X86
  if (isa_ == KernelIsa::kAvx2) return kernels::avx2::apply(type_, op_, dst, a, b, count);
#endif
  kernels::generic::apply(type_, op_, dst, a, b, count);
}

void Reduction::finalize(void* buf, size_t count, int worldSize) const {
  if (op_ != ReduceOp::kAvg || count == 0 || worldSize == 1) return;
#if RANKMAP_KERNELS_X86
  if (isa_ == KernelIsa::kAvx2) return kernels::avx2::finalize(type_, buf, count, worldSize);
#endif
  kernels::generic::finalize(type_, buf, count, worldSize);
}

}  // namespace rankmap::coll
