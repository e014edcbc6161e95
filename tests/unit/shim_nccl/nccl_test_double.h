// nccl_test_double: a TEST DOUBLE of NCCL, built from our sources as libnccl.so.2, so that the
// shim's translation logic can be checked on machines without GPUs or NCCL. It is not NCCL.
//
// What it is: NCCL's C ABI (nccl_api.h: every ncclX and its pncclX twin, as real NCCL exports
// them) implemented over an in-process world of threads. "Device memory" is host memory: each
// collective is executed by the last rank to arrive, reading every rank's send buffer and writing
// every rank's receive buffer directly, reductions in rank order. Streams are ignored (work is
// done when it is "launched"), which makes ordering bugs visible as wrong data: a copy enqueued
// before the collective that fills its source reads garbage.
//
// NCCL behaviour it reproduces because the shim depends on it:
// - the unique id: 8-byte magic, then a sockaddr_in (127.0.0.1), the rest zero (real layout);
// - ranks join a world per unique id; two ranks claiming one rank, or disagreeing world sizes,
//   fail the whole world (ncclInvalidUsage) rather than hang, like NCCL's bootstrap root;
// - groups: nothing runs before the outermost ncclGroupEnd (inits included), then everything
//   runs; the CUDA context current at each init call is recorded (from the driver double);
// - pncclBcast calls ncclBroadcast through the global symbol, as NCCL does, so a preloaded shim
//   sees that nested call (the re-entry case);
// - non-blocking communicators (config->blocking == 0): init and every operation return
//   ncclInProgress and complete on a helper thread after asyncDelay(); ncclCommGetAsyncError
//   reports ncclInProgress until then; a call on a communicator still in progress fails with
//   ncclInvalidUsage, as NCCL requires the application to wait;
// - ncclCommSplit orders a color's ranks by (key, parent rank); ncclCommShrink keeps parent order.
// Every wait is bounded (kDoubleWait); a world that does not complete fails with ncclSystemError.
//
// Process mode (RANKMAP_NCCL_DOUBLE_PROCESS=1 in the environment), for the emulated cloud's fault
// matrix, where each rank is a process in its own VM: the unique id's sockaddr is
// RANKMAP_NCCL_DOUBLE_ROOT (a numeric IPv4 address; 127.0.0.1 without it), and an init joins no
// world of threads: it records its call, and, like NCCL's bootstrap, returns only when every rank
// of the id has called init (each writes a file named by the id's key and its rank into
// RANKMAP_NCCL_DOUBLE_DIR, a directory all ranks share; at most kDoubleWait, then
// ncclSystemError). Collectives on such a communicator fail with ncclInvalidUsage (this double
// cannot move data between processes); what the mode shows is the rank the shim hands to "NCCL"
// at init.
//
// Reductions support int8..uint64, float32 and float64 (not fp16/bf16/fp8: ncclInvalidArgument).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rankmap::testing::nccl_double {

inline constexpr std::chrono::seconds kDoubleWait{20};

// One recorded API call, with the arguments the double (= "NCCL") received.
struct Call {
  std::string fn;  // "ncclAllGather", "ncclCommInitRank", ...
  int rank = -1;   // the communicator's rank (for init: the rank argument)
  int nranks = 0;
  int root = -1;  // root or peer argument as received; -1 if none
  size_t count = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  void* context = nullptr;  // CUDA context current at the call (driver double)
  int color = 0;
  int key = 0;
};

__attribute__((visibility("default"))) std::vector<Call> calls();
__attribute__((visibility("default"))) void resetCalls();
// Delay before a non-blocking communicator's work runs (default 30 ms).
__attribute__((visibility("default"))) void setAsyncDelay(std::chrono::milliseconds delay);
// Communicators and helper threads still alive (tests check that they end at 0).
__attribute__((visibility("default"))) int liveComms();
__attribute__((visibility("default"))) int liveHelpers();

}  // namespace rankmap::testing::nccl_double
