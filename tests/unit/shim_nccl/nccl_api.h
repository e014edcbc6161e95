// NCCL's C API as the tests and nccl_test_double.cc see it: the same functions as <nccl.h>,
// declared with shim_nccl/nccl_abi.h's types so that no CUDA header is needed.
#pragma once

#include <cstddef>

#include "shim_nccl/nccl_abi.h"

namespace nccl_api {
using rankmap::shim_nccl::abi::Comm;
using rankmap::shim_nccl::abi::DataType;
using rankmap::shim_nccl::abi::RedOp;
using rankmap::shim_nccl::abi::Result;
using rankmap::shim_nccl::abi::Stream;
using rankmap::shim_nccl::abi::UniqueId;
}  // namespace nccl_api

#define RANKMAP_NCCL_API(prefix)                                                                  \
  nccl_api::Result prefix##GetVersion(int* version);                                              \
  nccl_api::Result prefix##GetUniqueId(nccl_api::UniqueId* id);                                   \
  nccl_api::Result prefix##CommInitRank(nccl_api::Comm* comm, int nranks, nccl_api::UniqueId id,  \
                                        int rank);                                                \
  nccl_api::Result prefix##CommInitRankConfig(nccl_api::Comm* comm, int nranks,                   \
                                              nccl_api::UniqueId id, int rank, void* config);     \
  nccl_api::Result prefix##CommInitRankScalable(nccl_api::Comm* comm, int nranks, int rank,       \
                                                int nIds, nccl_api::UniqueId* ids, void* config); \
  nccl_api::Result prefix##CommInitAll(nccl_api::Comm* comms, int ndev, const int* devlist);      \
  nccl_api::Result prefix##CommSplit(nccl_api::Comm comm, int color, int key,                     \
                                     nccl_api::Comm* newcomm, void* config);                      \
  nccl_api::Result prefix##CommShrink(nccl_api::Comm comm, int* exclude, int excludeCount,        \
                                      nccl_api::Comm* newcomm, void* config, int flags);          \
  nccl_api::Result prefix##CommDestroy(nccl_api::Comm comm);                                      \
  nccl_api::Result prefix##CommAbort(nccl_api::Comm comm);                                        \
  nccl_api::Result prefix##CommUserRank(nccl_api::Comm comm, int* rank);                          \
  nccl_api::Result prefix##CommCount(nccl_api::Comm comm, int* count);                            \
  nccl_api::Result prefix##CommGetAsyncError(nccl_api::Comm comm, nccl_api::Result* state);       \
  nccl_api::Result prefix##GroupStart();                                                          \
  nccl_api::Result prefix##GroupEnd();                                                            \
  nccl_api::Result prefix##GroupSimulateEnd(void* simInfo);                                       \
  nccl_api::Result prefix##Reduce(const void* send, void* recv, size_t count,                     \
                                  nccl_api::DataType dt, nccl_api::RedOp op, int root,            \
                                  nccl_api::Comm comm, nccl_api::Stream stream);                  \
  nccl_api::Result prefix##Bcast(void* buf, size_t count, nccl_api::DataType dt, int root,        \
                                 nccl_api::Comm comm, nccl_api::Stream stream);                   \
  nccl_api::Result prefix##Broadcast(const void* send, void* recv, size_t count,                  \
                                     nccl_api::DataType dt, int root, nccl_api::Comm comm,        \
                                     nccl_api::Stream stream);                                    \
  nccl_api::Result prefix##AllReduce(const void* send, void* recv, size_t count,                  \
                                     nccl_api::DataType dt, nccl_api::RedOp op,                   \
                                     nccl_api::Comm comm, nccl_api::Stream stream);               \
  nccl_api::Result prefix##ReduceScatter(const void* send, void* recv, size_t recvCount,          \
                                         nccl_api::DataType dt, nccl_api::RedOp op,               \
                                         nccl_api::Comm comm, nccl_api::Stream stream);           \
  nccl_api::Result prefix##AllGather(const void* send, void* recv, size_t sendCount,              \
                                     nccl_api::DataType dt, nccl_api::Comm comm,                  \
                                     nccl_api::Stream stream);                                    \
  nccl_api::Result prefix##AlltoAll(const void* send, void* recv, size_t count,                   \
                                    nccl_api::DataType dt, nccl_api::Comm comm,                   \
                                    nccl_api::Stream stream);                                     \
  nccl_api::Result prefix##Gather(const void* send, void* recv, size_t count,                     \
                                  nccl_api::DataType dt, int root, nccl_api::Comm comm,           \
                                  nccl_api::Stream stream);                                       \
  nccl_api::Result prefix##Scatter(const void* send, void* recv, size_t count,                    \
                                   nccl_api::DataType dt, int root, nccl_api::Comm comm,          \
                                   nccl_api::Stream stream);                                      \
  nccl_api::Result prefix##Send(const void* buf, size_t count, nccl_api::DataType dt, int peer,   \
                                nccl_api::Comm comm, nccl_api::Stream stream);                    \
  nccl_api::Result prefix##Recv(void* buf, size_t count, nccl_api::DataType dt, int peer,         \
                                nccl_api::Comm comm, nccl_api::Stream stream);

extern "C" {
RANKMAP_NCCL_API(nccl)
RANKMAP_NCCL_API(pnccl)
}
