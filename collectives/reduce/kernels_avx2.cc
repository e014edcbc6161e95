// The AVX2 + F16C kernel variant; compiled with -mavx2 -mf16c (see collectives/CMakeLists.txt)
// and only called after a run-time CPU check.
#include <immintrin.h>

#define RANKMAP_KERNEL_NS avx2
#define RANKMAP_KERNEL_F16C 1
#include "collectives/reduce/kernels.h"
#include "collectives/reduce/kernels.inc"
