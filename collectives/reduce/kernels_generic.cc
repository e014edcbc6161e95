// The portable kernel variant (the build's baseline instruction set, SSE2 on x86-64).
#define RANKMAP_KERNEL_NS generic
#define RANKMAP_KERNEL_F16C 0
#include "collectives/reduce/kernels.h"
#include "collectives/reduce/kernels.inc"
