/* rankmap collective engine: C API.
 *
 * For shims (MPI, NCCL, PyTorch, XGBoost) and for users. A communicator is one rank's member-
 * ship in a group of processes; collectives are blocking and must be called by every rank in
 * the same order with matching arguments. Rank order and algorithms come from plan.json
 * (RANKMAP_PLAN or the planPath argument); the transport from RANKMAP_TRANSPORT.
 *
 * Errors: every function returns a rankmapResult_t (values mirror rankmap::ErrorCode) and never
 * exits, aborts or prints to stdout; rankmapGetLastError() gives the message of the calling
 * thread's last failure. Every call is bounded by RANKMAP_TIMEOUT (default 300 s): a dead or
 * missing peer is reported as rankmapTimeout or rankmapPeerError naming it. After a failure
 * during communication the communicator is broken (later calls return rankmapPeerError) and the
 * buffers of the failed call must stay valid until rankmapCommDestroy().
 *
 * Threads: one thread at a time per communicator; different communicators are independent.
 *
 * Buffers: host memory, or in a build with CUDA device memory (cudaMalloc or managed) of the
 * device that was current at the communicator's first call with device buffers: such a call
 * runs on the engine's device executor, staged through pinned host memory, and returns when the
 * result is on the device. A call with one host and one device buffer is rankmapInvalidInput.
 */
#ifndef RANKMAP_COLL_H_
#define RANKMAP_COLL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  rankmapSuccess = 0,
  rankmapInvalidInput = 1,   /* bad argument, environment variable or file */
  rankmapIoError = 2,        /* file or socket I/O failed */
  rankmapTimeout = 3,        /* a deadline (RANKMAP_TIMEOUT) passed; the message names the peer */
  rankmapNotSupported = 4,   /* not available in this build or on this machine */
  rankmapSystemError = 5,    /* a system call failed */
  rankmapCudaError = 6,      /* a CUDA call failed */
  rankmapPeerError = 7,      /* a peer failed, disconnected or disagreed; or comm broken */
  rankmapInternalError = 8,  /* a bug in rankmap */
} rankmapResult_t;

/* The two argument enums below have, seen from C++, the fixed underlying type unsigned int, the
 * type gcc and clang give them in C: a caller may pass a value that names no enumerator (a C
 * program, ctypes), and the functions must be able to read it to refuse it (rankmapInvalidInput).
 * In C++ such a value is only valid for an enum with a fixed underlying type. */
#ifdef __cplusplus
#define RANKMAP_ARG_ENUM_BASE : unsigned int
#else
#define RANKMAP_ARG_ENUM_BASE
#endif

/* Element types (nccl-tests names in parentheses). */
typedef enum RANKMAP_ARG_ENUM_BASE {
  rankmapInt8 = 0,     /* int8 */
  rankmapUint8 = 1,    /* uint8 */
  rankmapInt32 = 2,    /* int32 */
  rankmapUint32 = 3,   /* uint32 */
  rankmapInt64 = 4,    /* int64 */
  rankmapUint64 = 5,   /* uint64 */
  rankmapFloat16 = 6,  /* half: IEEE binary16, stored as 16-bit patterns */
  rankmapBfloat16 = 7, /* bfloat16 */
  rankmapFloat32 = 8,  /* float */
  rankmapFloat64 = 9,  /* double */
} rankmapDataType_t;

/* Reductions. Integers wrap around on sum and prod. avg = sum divided by the number of ranks at
 * the end; for integers the division rounds toward zero. fp16/bf16 are combined in fp32. */
typedef enum RANKMAP_ARG_ENUM_BASE {
  rankmapSum = 0,
  rankmapProd = 1,
  rankmapMin = 2,
  rankmapMax = 3,
  rankmapAvg = 4,
} rankmapRedOp_t;

typedef struct rankmapComm* rankmapComm_t;

/* Creates this process's communicator from the environment. The rendezvous, first match wins:
 * RANKMAP_ROOT (host:port where rank 0 listens) with RANKMAP_RANK/RANKMAP_WORLD_SIZE or the
 * launcher's rank; under Open MPI's mpirun, Open MPI's library loaded at run time (MPI_Init
 * unless the program initialized MPI, MPI_Finalize in rankmapCommDestroy if it was called here);
 * under torchrun, MASTER_ADDR:MASTER_PORT+1. Then RANKMAP_PLAN, RANKMAP_ALGO, RANKMAP_TIMEOUT.
 * Blocks until every rank has joined; an unreachable root is rankmapTimeout naming it. */
rankmapResult_t rankmapCommInitFromEnv(rankmapComm_t* comm);

/* Same with explicit rank, size and root ("host:port"; rank 0 binds it, port 0 is not allowed
 * here since the others could not know it). planPath may be NULL (then RANKMAP_PLAN, if set). A
 * plan that cannot be read, or is for another number of ranks, is ignored with a warning. */
rankmapResult_t rankmapCommInitRoot(rankmapComm_t* comm, int rank, int nranks, const char* root,
                                    const char* planPath);

/* Frees the communicator and its connections. NULL is accepted. */
rankmapResult_t rankmapCommDestroy(rankmapComm_t comm);

rankmapResult_t rankmapCommRank(rankmapComm_t comm, int* rank);
rankmapResult_t rankmapCommSize(rankmapComm_t comm, int* size);
/* Number of times the plan or the chosen algorithm could not be used and a fallback ran. */
rankmapResult_t rankmapCommFallbacks(rankmapComm_t comm, uint64_t* fallbacks);
/* Number of newer plans adopted while the job ran (live re-planning: the plan file replaced,
   every rank agreeing; RANKMAP_LIVE_PLAN). */
rankmapResult_t rankmapCommPlanSwitches(rankmapComm_t comm, uint64_t* switches);

/* recvbuf = reduction of every rank's sendbuf (count elements). sendbuf == recvbuf: in place. */
rankmapResult_t rankmapAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                                 rankmapDataType_t type, rankmapRedOp_t op, rankmapComm_t comm);
/* recvbuf (nranks * sendcount) = every rank's sendbuf in rank order. In place: sendbuf ==
 * recvbuf + rank * sendcount elements. */
rankmapResult_t rankmapAllGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                 rankmapDataType_t type, rankmapComm_t comm);
/* recvbuf (recvcount) = block `rank` of the reduction of every rank's sendbuf (nranks *
 * recvcount). In place: recvbuf == sendbuf + rank * recvcount elements. */
rankmapResult_t rankmapReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                     rankmapDataType_t type, rankmapRedOp_t op,
                                     rankmapComm_t comm);
/* recvbuf = root's sendbuf on every rank (root included); sendbuf is read on the root only. */
rankmapResult_t rankmapBroadcast(const void* sendbuf, void* recvbuf, size_t count,
                                 rankmapDataType_t type, int root, rankmapComm_t comm);
/* root's recvbuf = reduction of sendbuf; recvbuf is ignored (may be NULL) on other ranks. */
rankmapResult_t rankmapReduce(const void* sendbuf, void* recvbuf, size_t count,
                              rankmapDataType_t type, rankmapRedOp_t op, int root,
                              rankmapComm_t comm);
rankmapResult_t rankmapBarrier(rankmapComm_t comm);

/* Static text for a result ("timeout"); never NULL. */
const char* rankmapGetErrorString(rankmapResult_t result);
/* The message of the calling thread's last failed call ("" if none); valid until this thread's
 * next call into rankmap. */
const char* rankmapGetLastError(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* RANKMAP_COLL_H_ */
