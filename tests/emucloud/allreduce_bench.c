/* allreduce_bench: times MPI_Allreduce (MPI_SUM over int32) of a given size.
 *
 * Every iteration starts after a barrier; its time is the slowest rank's time for the
 * one MPI_Allreduce call. After `--warmup` untimed calls, `--iters` timed calls run and
 * rank 0 prints the median (and min/max) per-op time on one line:
 *
 *   allreduce ranks=8 bytes=16777216 iters=3 median_s=0.9812 min_s=... max_s=... algbw_mbit=...
 *
 * Inputs have a closed-form sum: rank r contributes in[j] = r + (j % kPeriod), so
 * out[j] = n(n-1)/2 + n * (j % kPeriod). Every element of every call is checked; a wrong
 * element makes the program print it and exit 3 (via MPI_Abort).
 *
 * Usage: allreduce_bench [--bytes N] [--iters K] [--warmup W]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kPeriod = 7919, kExitBadResult = 3, kExitUsage = 2 };

static int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static long parseLong(const char* opt, const char* text, long min) {
  char* end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min) {
    fprintf(stderr, "allreduce_bench: %s %s: expected an integer >= %ld\n", opt, text, min);
    MPI_Abort(MPI_COMM_WORLD, kExitUsage);
  }
  return v;
}

static void fillInput(int32_t* in, size_t count, int rank) {
  for (size_t j = 0; j < count; ++j) in[j] = (int32_t)(rank + (int)(j % kPeriod));
}

/* Returns the number of wrong elements, printing the first one. */
static size_t checkOutput(const int32_t* out, size_t count, int size, int rank) {
  const int64_t base = (int64_t)size * (size - 1) / 2;
  size_t bad = 0;
  for (size_t j = 0; j < count; ++j) {
    const int32_t want = (int32_t)(base + (int64_t)size * (int64_t)(j % kPeriod));
    if (out[j] != want) {
      if (bad == 0)
        fprintf(stderr, "allreduce_bench: rank %d: out[%zu] = %d, expected %d\n", rank, j,
                out[j], want);
      ++bad;
    }
  }
  return bad;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  long bytes = 16L << 20, iters = 5, warmup = 1;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && strcmp(argv[i], "--bytes") == 0) {
      bytes = parseLong(argv[i], argv[i + 1], 4);
      ++i;
    } else if (i + 1 < argc && strcmp(argv[i], "--iters") == 0) {
      iters = parseLong(argv[i], argv[i + 1], 1);
      ++i;
    } else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0) {
      warmup = parseLong(argv[i], argv[i + 1], 0);
      ++i;
    } else {
      if (rank == 0)
        fprintf(stderr, "usage: allreduce_bench [--bytes N] [--iters K] [--warmup W]\n");
      MPI_Abort(MPI_COMM_WORLD, kExitUsage);
    }
  }
  const size_t count = (size_t)bytes / sizeof(int32_t);
  int32_t* in = malloc(count * sizeof(int32_t));
  int32_t* out = malloc(count * sizeof(int32_t));
  double* times = malloc((size_t)iters * sizeof(double));
  if (in == NULL || out == NULL || times == NULL) {
    fprintf(stderr, "allreduce_bench: rank %d: cannot allocate 2 x %ld bytes\n", rank, bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  fillInput(in, count, rank);

  for (long it = -warmup; it < iters; ++it) {
    memset(out, 0xff, count * sizeof(int32_t));
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, (int)count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0, slowest = 0;
    MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (checkOutput(out, count, size, rank) != 0) MPI_Abort(MPI_COMM_WORLD, kExitBadResult);
    if (it >= 0) times[it] = slowest;
  }

  if (rank == 0) {
    qsort(times, (size_t)iters, sizeof(double), compareDoubles);
    const double median = iters % 2 ? times[iters / 2]
                                    : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
    printf("allreduce ranks=%d bytes=%ld iters=%ld median_s=%.6f min_s=%.6f max_s=%.6f "
           "algbw_mbit=%.1f\n",
           size, bytes, iters, median, times[0], times[iters - 1],
           (double)bytes * 8 / median / 1e6);
    fflush(stdout);
  }
  free(times);
  free(out);
  free(in);
  MPI_Finalize();
  return 0;
}
