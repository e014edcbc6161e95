/* overhead_bench: the cost of librankmap_mpi.so's wrappers on the smallest collectives.
 *
 * Times --calls back-to-back MPI_Allreduce calls of 8 bytes (one int64, MPI_SUM) on
 * MPI_COMM_WORLD, then --calls MPI_Barrier calls, after --warmup untimed calls of each. Each phase
 * starts after a barrier; its time is rank 0's wall time divided by the calls. Rank 0 prints
 *
 *   overhead allreduce8_ns=... barrier_ns=... calls=... ranks=...
 *
 * run_overhead.py runs it with and without the shim, interleaved, and compares medians.
 * Usage: overhead_bench [--calls N] [--warmup W]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long calls = 100000, warmup = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--calls") == 0) {
      calls = atol(argv[i + 1]);
    } else if (strcmp(argv[i], "--warmup") == 0) {
      warmup = atol(argv[i + 1]);
    } else {
      if (rank == 0) fprintf(stderr, "usage: overhead_bench [--calls N] [--warmup W]\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (calls < 1) calls = 1;
  int64_t in = rank + 1, out = 0;
  const int64_t want = (int64_t)size * (size + 1) / 2;

  for (long i = 0; i < warmup; ++i) MPI_Allreduce(&in, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (long i = 0; i < calls; ++i) MPI_Allreduce(&in, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  double allreduce = (MPI_Wtime() - t0) / (double)calls;
  if (out != want) {
    fprintf(stderr, "overhead_bench: rank %d: allreduce gave %lld, expected %lld\n", rank,
            (long long)out, (long long)want);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }

  for (long i = 0; i < warmup; ++i) MPI_Barrier(MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  for (long i = 0; i < calls; ++i) MPI_Barrier(MPI_COMM_WORLD);
  double barrier = (MPI_Wtime() - t0) / (double)calls;

  if (rank == 0) {
    printf("overhead allreduce8_ns=%.1f barrier_ns=%.1f calls=%ld ranks=%d\n", allreduce * 1e9,
           barrier * 1e9, calls, size);
    fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
