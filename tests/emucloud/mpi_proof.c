/* mpi_proof: an unmodified MPI program for the MPI-path proof (mpi_path_test.py) and the shim's
 * unit tests. It knows nothing of rankmap.
 *
 * Every rank prints one line "rank R of N on HOST launcher L" (R and N from MPI_COMM_WORLD, HOST
 * from gethostname, L the launcher's rank from OMPI_COMM_WORLD_RANK (Open MPI) or PMI_RANK (MPICH's
 * Hydra), -1 if neither is set). Then it runs
 * integer collectives on MPI_COMM_WORLD whose results have a closed form in N alone (inputs
 * depend on the rank), checks every element, and rank 0 prints one line
 * per collective, "check NAME DIGEST", where DIGEST (FNV-1a of the result) is the same whatever
 * the rank order: a run under `rankmap run` must print the very lines a plain run prints.
 * With --bytes B[,B2,...] it also times MPI_Allreduce (MPI_SUM over int32) of B bytes (each size
 * in turn), --iters times after --warmup untimed calls, each started after a barrier and timed as
 * the slowest rank, and rank 0 prints "time allreduce bytes=B iters=K median_s=S" per size.
 * With --back-to-back the K calls run after one barrier with nothing between them, timed as
 * `rankmap bench` times the engine (the slowest rank's total over K), and the line reads
 * "time allreduce bytes=B iters=K mean_s=S"; the last call's result is checked.
 * A wrong element makes the rank print it on stderr and the job abort with exit code 3.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kPeriod = 13, kExitBadResult = 3, kExitUsage = 2, kCount = 1000 };

static uint64_t fnv(const void* data, size_t n, uint64_t h) {
  const unsigned char* p = (const unsigned char*)data;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static int rank_, size_;

static void expect(const char* what, size_t i, int64_t got, int64_t want) {
  if (got != want) {
    fprintf(stderr, "mpi_proof: rank %d: %s[%zu] = %lld, expected %lld\n", rank_, what, i,
            (long long)got, (long long)want);
    MPI_Abort(MPI_COMM_WORLD, kExitBadResult);
  }
}

static void report(const char* name, const void* data, size_t n) {
  if (rank_ == 0) printf("check %s %016llx\n", name, (unsigned long long)fnv(data, n, 14695981039346656037ull));
}

static long parseLong(const char* opt, const char* text, long min) {
  char* end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min) {
    fprintf(stderr, "mpi_proof: %s %s: expected an integer >= %ld\n", opt, text, min);
    MPI_Abort(MPI_COMM_WORLD, kExitUsage);
  }
  return v;
}

static int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void checkAllreduce(const int32_t* out, size_t count) {
  const int64_t base = (int64_t)size_ * (size_ - 1) / 2;
  for (size_t j = 0; j < count; ++j)
    expect("allreduce", j, out[j], (int32_t)(base + (int64_t)size_ * (int64_t)(j % 7919)));
}

/* The engine's statistic: iters calls after one barrier, the slowest rank's total / iters. */
static double backToBackSeconds(const int32_t* in, int32_t* out, size_t count, long iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (long it = 0; it < iters; ++it)
    MPI_Allreduce(in, out, (int)count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  double dt = MPI_Wtime() - t0, slowest = 0;
  MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  checkAllreduce(out, count);
  return slowest / (double)iters;
}

static void timeAllreduce(long bytes, long iters, long warmup, int backToBack) {
  size_t count = (size_t)bytes / sizeof(int32_t);
  int32_t* in = malloc(count * sizeof(int32_t) + 1);
  int32_t* out = malloc(count * sizeof(int32_t) + 1);
  double* times = malloc((size_t)iters * sizeof(double));
  if (!in || !out || !times) MPI_Abort(MPI_COMM_WORLD, 1);
  for (size_t j = 0; j < count; ++j) in[j] = (int32_t)(rank_ + (int)(j % 7919));
  for (long it = -warmup; it < (backToBack ? 0 : iters); ++it) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(in, out, (int)count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0, slowest = 0;
    MPI_Reduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    checkAllreduce(out, count);
    if (it >= 0) times[it] = slowest;
  }
  if (backToBack) {
    double mean = backToBackSeconds(in, out, count, iters);
    if (rank_ == 0) printf("time allreduce bytes=%ld iters=%ld mean_s=%.6f\n", bytes, iters, mean);
  } else if (rank_ == 0) {
    qsort(times, (size_t)iters, sizeof(double), compareDoubles);
    double median = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
    printf("time allreduce bytes=%ld iters=%ld median_s=%.6f min_s=%.6f max_s=%.6f\n", bytes,
           iters, median, times[0], times[iters - 1]);
  }
  free(times);
  free(out);
  free(in);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  enum { kMaxSizes = 64 };
  long sizes[kMaxSizes], iters = 5, warmup = 1;
  int nsizes = 0, backToBack = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--back-to-back") == 0) {
      backToBack = 1;
      continue;
    }
    if (i + 1 < argc && strcmp(argv[i], "--bytes") == 0) {
      char* list = argv[i + 1];
      for (char* item = strtok(list, ","); item != NULL && nsizes < kMaxSizes; item = strtok(NULL, ","))
        sizes[nsizes++] = parseLong("--bytes", item, 4);
    } else if (i + 1 < argc && strcmp(argv[i], "--iters") == 0) {
      iters = parseLong(argv[i], argv[i + 1], 1);
    } else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0) {
      warmup = parseLong(argv[i], argv[i + 1], 0);
    } else {
      if (rank_ == 0) fprintf(stderr, "usage: mpi_proof [--bytes N[,N...]] [--iters K] [--warmup W] [--back-to-back]\n");
      MPI_Abort(MPI_COMM_WORLD, kExitUsage);
    }
    ++i;
  }

  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  /* One line per rank, printed in rank order so the output is easy to read. */
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      const char* launcher = getenv("OMPI_COMM_WORLD_RANK");
      if (launcher == NULL) launcher = getenv("PMI_RANK");
      printf("rank %d of %d on %s launcher %s\n", rank_, size_, host, launcher ? launcher : "-1");
      fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  const int n = size_;
  int32_t* in = malloc(sizeof(int32_t) * kCount * (size_t)n);
  int32_t* out = malloc(sizeof(int32_t) * kCount * (size_t)n);
  if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 1);

  /* Allreduce: in[j] = 7r + j % 13 -> 7 n(n-1)/2 + n (j % 13). */
  for (int j = 0; j < kCount; ++j) in[j] = 7 * rank_ + j % kPeriod;
  MPI_Allreduce(in, out, kCount, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  for (int j = 0; j < kCount; ++j) expect("allreduce", j, out[j], 7LL * n * (n - 1) / 2 + (int64_t)n * (j % kPeriod));
  report("allreduce", out, sizeof(int32_t) * kCount);

  /* Bcast from the last rank: its pattern 3j + n. */
  for (int j = 0; j < kCount; ++j) out[j] = rank_ == n - 1 ? 3 * j + n : -1;
  MPI_Bcast(out, kCount, MPI_INT32_T, n - 1, MPI_COMM_WORLD);
  for (int j = 0; j < kCount; ++j) expect("bcast", j, out[j], 3 * j + n);
  report("bcast", out, sizeof(int32_t) * kCount);

  /* Allgather: rank r contributes r*r + 1. */
  int32_t mine = rank_ * rank_ + 1;
  MPI_Allgather(&mine, 1, MPI_INT32_T, out, 1, MPI_INT32_T, MPI_COMM_WORLD);
  for (int r = 0; r < n; ++r) expect("allgather", (size_t)r, out[r], r * r + 1);
  report("allgather", out, sizeof(int32_t) * (size_t)n);

  /* Reduce_scatter_block: in[b*4 + k] = r + b + k -> block r of the sum: n(n-1)/2 + n(r + k). */
  for (int b = 0; b < n; ++b)
    for (int k = 0; k < 4; ++k) in[b * 4 + k] = rank_ + b + k;
  MPI_Reduce_scatter_block(in, out, 4, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  for (int k = 0; k < 4; ++k) expect("reduce_scatter_block", (size_t)k, out[k], (int64_t)n * (n - 1) / 2 + (int64_t)n * (rank_ + k));
  MPI_Gather(out, 4, MPI_INT32_T, in, 4, MPI_INT32_T, 0, MPI_COMM_WORLD);
  report("reduce_scatter_block", in, sizeof(int32_t) * 4 * (size_t)n);

  /* Alltoall: rank r sends 100 r + d to d. */
  for (int d = 0; d < n; ++d) in[d] = 100 * rank_ + d;
  MPI_Alltoall(in, 1, MPI_INT32_T, out, 1, MPI_INT32_T, MPI_COMM_WORLD);
  for (int s = 0; s < n; ++s) expect("alltoall", (size_t)s, out[s], 100 * s + rank_);
  MPI_Gather(out, n, MPI_INT32_T, in, n, MPI_INT32_T, 0, MPI_COMM_WORLD);
  report("alltoall", in, sizeof(int32_t) * (size_t)n * (size_t)n);

  /* Ring: send r to r+1, receive r-1 (point-to-point ranks follow MPI_COMM_WORLD too). */
  int32_t got = -1, send = rank_;
  MPI_Sendrecv(&send, 1, MPI_INT32_T, (rank_ + 1) % n, 7, &got, 1, MPI_INT32_T, (rank_ + n - 1) % n,
               7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  expect("sendrecv", 0, got, (rank_ + n - 1) % n);
  MPI_Gather(&got, 1, MPI_INT32_T, out, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
  report("sendrecv", out, sizeof(int32_t) * (size_t)n);

  /* Scan: inclusive prefix sum of r + 1 -> (r + 1)(r + 2) / 2. */
  int32_t one = rank_ + 1, prefix = 0;
  MPI_Scan(&one, &prefix, 1, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  expect("scan", 0, prefix, (int64_t)(rank_ + 1) * (rank_ + 2) / 2);
  MPI_Gather(&prefix, 1, MPI_INT32_T, out, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
  report("scan", out, sizeof(int32_t) * (size_t)n);
  if (rank_ == 0) fflush(stdout);
  free(out);
  free(in);

  for (int k = 0; k < nsizes; ++k) timeAllreduce(sizes[k], iters, warmup, backToBack);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
