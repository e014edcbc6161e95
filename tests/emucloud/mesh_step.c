/* mesh_step: an MPI program with row and column communicators, as a job with a 2-D mesh runs
 * them, for the emulated cloud's mesh benchmark (tests/emucloud/mesh_bench.py).
 *
 * The world is a mesh dp x pp, pp varying fastest (PyTorch's order): rank r has dp coordinate
 * r / pp and pp coordinate r % pp. MPI_Comm_split makes the data-parallel communicator (same pp
 * coordinate) and the pipeline communicator (same dp coordinate). One step: an MPI_Allreduce of
 * --dp-bytes int32 in the data-parallel communicator, then the pipeline: each stage sends
 * --pp-bytes to the next stage and receives from the previous one (forward), then the same
 * backward. Results are checked (integers, exact). Prints the slowest rank's median step time:
 *   time mesh_step dp=D pp=P iters=N median_s=S
 *
 * Usage: mesh_step --dp D --pp P [--dp-bytes B] [--pp-bytes B] [--iters N] [--warmup W]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  long dp = 0, pp = 0, dpBytes = 64l << 20, ppBytes = 8l << 20, iters = 5, warmup = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    long v = atol(argv[i + 1]);
    if (!strcmp(argv[i], "--dp"))
      dp = v;
    else if (!strcmp(argv[i], "--pp"))
      pp = v;
    else if (!strcmp(argv[i], "--dp-bytes"))
      dpBytes = v;
    else if (!strcmp(argv[i], "--pp-bytes"))
      ppBytes = v;
    else if (!strcmp(argv[i], "--iters"))
      iters = v;
    else if (!strcmp(argv[i], "--warmup"))
      warmup = v;
    else {
      fprintf(stderr, "mesh_step: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (dp * pp != size || iters < 1) {
    if (rank == 0) fprintf(stderr, "mesh_step: --dp x --pp must be the world size %d\n", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int myDp = (int)(rank / pp), myPp = (int)(rank % pp);
  MPI_Comm dpComm, ppComm;
  MPI_Comm_split(MPI_COMM_WORLD, myPp, rank, &dpComm);
  MPI_Comm_split(MPI_COMM_WORLD, myDp, rank, &ppComm);
  size_t dpCount = (size_t)dpBytes / 4, ppCount = (size_t)ppBytes / 4;
  int32_t* grad = malloc(dpCount * 4 + 4);
  int32_t* act = malloc(ppCount * 4 + 4);
  int32_t* in = malloc(ppCount * 4 + 4);
  double* times = malloc(sizeof(double) * (size_t)iters);
  long bad = 0;
  for (long it = 0; it < warmup + iters; ++it) {
    for (size_t i = 0; i < dpCount; ++i) grad[i] = (int32_t)(rank + (int)(i % 7));
    for (size_t i = 0; i < ppCount; ++i) act[i] = (int32_t)(rank * 3 + (int)(i % 5));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, grad, (int)dpCount, MPI_INT32_T, MPI_SUM, dpComm);
    int next = myPp + 1 < pp ? myPp + 1 : MPI_PROC_NULL;
    int prev = myPp > 0 ? myPp - 1 : MPI_PROC_NULL;
    MPI_Sendrecv(act, (int)ppCount, MPI_INT32_T, next, 1, in, (int)ppCount, MPI_INT32_T, prev, 1,
                 ppComm, MPI_STATUS_IGNORE);
    MPI_Sendrecv(act, (int)ppCount, MPI_INT32_T, prev, 2, in, (int)ppCount, MPI_INT32_T, next, 2,
                 ppComm, MPI_STATUS_IGNORE);
    double t = MPI_Wtime() - t0, slowest;
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it >= warmup) times[it - warmup] = slowest;
    /* The gradient sum over the dp group {myPp, myPp + pp, ...}: sum of ranks + dp * (i % 7). */
    long rankSum = 0;
    for (long d = 0; d < dp; ++d) rankSum += d * pp + myPp;
    for (size_t i = 0; i < dpCount; i += 4099)
      if (grad[i] != (int32_t)(rankSum + dp * (long)(i % 7))) ++bad;
    if (next != MPI_PROC_NULL) /* backward: from the next stage, rank + 1 */
      for (size_t i = 0; i < ppCount; i += 4099)
        if (in[i] != (int32_t)((rank + 1) * 3 + (int)(i % 5))) ++bad;
  }
  long allBad = 0;
  MPI_Allreduce(&bad, &allBad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    qsort(times, (size_t)iters, sizeof(double), cmp);
    printf("check mesh_step wrong=%ld\n", allBad);
    printf("time mesh_step dp=%ld pp=%ld iters=%ld median_s=%.6f\n", dp, pp, iters,
           times[iters / 2]);
  }
  free(grad);
  free(act);
  free(in);
  free(times);
  MPI_Comm_free(&dpComm);
  MPI_Comm_free(&ppComm);
  MPI_Finalize();
  return allBad ? 1 : 0;
}
