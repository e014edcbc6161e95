// Checking CUDA runtime calls: every call goes through RANKMAP_CHECK_CUDA, which throws CudaError
// naming the call, the error and file:line. Only for translation units built with CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include "common/error.h"

#define RANKMAP_CHECK_CUDA(call)                                                       \
  do {                                                                                 \
    cudaError_t rankmap_err_ = (call);                                                 \
    if (rankmap_err_ != cudaSuccess)                                                   \
      RANKMAP_THROW(::rankmap::CudaError, "{} failed: {} ({})", #call,                 \
                    cudaGetErrorName(rankmap_err_), cudaGetErrorString(rankmap_err_)); \
  } while (0)
