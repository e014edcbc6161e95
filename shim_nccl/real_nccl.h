// RealNccl: the real NCCL functions behind the shim, resolved at run time.
//
// Resolution order (first that works):
// 1. dlopen("libnccl.so.2", RTLD_NOLOAD): the NCCL the application already loaded, found by its
//    soname wherever it came from (/usr/lib, a conda env, PyTorch's nvidia-nccl wheel) and in
//    whatever scope (a chain of RTLD_LOCAL dlopens, as Python does). Then dlsym of the exported
//    profiling names "pncclX" on that handle (NCCL exports every ncclX as a weak alias of
//    pncclX), falling back to "ncclX" on the same handle for builds without them. A handle's
//    lookup searches NCCL and its dependencies, never the shim, so it cannot find us.
// 2. dlsym(RTLD_NEXT, "pncclX"): for an NCCL linked into the global scope under another soname.
//    This alone would miss NCCL loaded RTLD_LOCAL, which is why it is not the first choice.
// The shim never links NCCL: it must load into processes that have their own.
//
// Contract: a RealNccl is immutable once resolved and shared by every thread. Optional functions
// (newer than NCCL 2.18: InitRankScalable, Shrink, AlltoAll, Gather, Scatter, GroupSimulateEnd)
// may be null; callers return ncclInvalidUsage for them. This is a dlopen border: the one place
// where function-pointer tables are right.
#pragma once

#include <cstddef>
#include <string>

#include "shim_nccl/nccl_abi.h"

namespace rankmap::shim_nccl {

struct RealNccl {
  using R = abi::Result;
  using Comm = abi::Comm;
  using Stream = abi::Stream;
  using DT = abi::DataType;
  using Op = abi::RedOp;

  R (*getVersion)(int*) = nullptr;
  R (*getUniqueId)(abi::UniqueId*) = nullptr;
  R (*commInitRank)(Comm*, int, abi::UniqueId, int) = nullptr;
  R (*commInitRankConfig)(Comm*, int, abi::UniqueId, int, void*) = nullptr;
  R (*commInitRankScalable)(Comm*, int, int, int, abi::UniqueId*, void*) = nullptr;
  R (*commInitAll)(Comm*, int, const int*) = nullptr;
  R (*commSplit)(Comm, int, int, Comm*, void*) = nullptr;
  R (*commShrink)(Comm, int*, int, Comm*, void*, int) = nullptr;
  R (*commDestroy)(Comm) = nullptr;
  R (*commAbort)(Comm) = nullptr;
  R (*commUserRank)(Comm, int*) = nullptr;
  R (*commCount)(Comm, int*) = nullptr;
  R (*commGetAsyncError)(Comm, abi::Result*) = nullptr;
  R (*groupStart)() = nullptr;
  R (*groupEnd)() = nullptr;
  R (*groupSimulateEnd)(void*) = nullptr;
  R (*reduce)(const void*, void*, size_t, DT, Op, int, Comm, Stream) = nullptr;
  R (*bcast)(void*, size_t, DT, int, Comm, Stream) = nullptr;
  R (*broadcast)(const void*, void*, size_t, DT, int, Comm, Stream) = nullptr;
  R (*allReduce)(const void*, void*, size_t, DT, Op, Comm, Stream) = nullptr;
  R (*reduceScatter)(const void*, void*, size_t, DT, Op, Comm, Stream) = nullptr;
  R (*allGather)(const void*, void*, size_t, DT, Comm, Stream) = nullptr;
  R (*alltoAll)(const void*, void*, size_t, DT, Comm, Stream) = nullptr;
  R (*gather)(const void*, void*, size_t, DT, int, Comm, Stream) = nullptr;
  R (*scatter)(const void*, void*, size_t, DT, int, Comm, Stream) = nullptr;
  R (*send)(const void*, size_t, DT, int, Comm, Stream) = nullptr;
  R (*recv)(void*, size_t, DT, int, Comm, Stream) = nullptr;

  // Where the functions came from ("libnccl.so.2 (/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9)").
  std::string source;
};

// Resolves from the loaded NCCL as described above. Throws NotSupported naming what was tried
// when no NCCL is loaded, and InternalError if a lookup would return the shim's own function.
RealNccl resolveRealNccl();

// Resolves from a handle of dlopen() (tests point it at the test double).
RealNccl resolveRealNccl(void* handle, std::string source);

}  // namespace rankmap::shim_nccl
