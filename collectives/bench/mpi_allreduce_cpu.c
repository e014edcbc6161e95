/* mpi_allreduce_cpu: Open MPI's MPI_Allreduce, measured the way `rankmap bench` measures the
 * engine, for docs/performance.md ("## Engine"): the slowest rank's mean time per call, busbw
 * (2(n-1)/n x size / time), and the CPU seconds (user + system, all ranks summed) per GB of
 * payload (size x iterations). Float sum, every element checked once at the end.
 *
 *   mpirun --oversubscribe -np 4 --mca btl self,vader mpi_allreduce_cpu 67108864 20 5
 *   (arguments: bytes, iterations, warm-up iterations)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static double cpuSeconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long long bytes = argc > 1 ? atoll(argv[1]) : 64ll << 20;
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  int warmup = argc > 3 ? atoi(argv[3]) : 5;
  long long count = bytes / 4;
  float* in = malloc((size_t)count * 4);
  float* out = malloc((size_t)count * 4);
  if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 2);
  for (long long i = 0; i < count; ++i) in[i] = (float)((rank * 7 + i * 3) % 17) - 8.0f;
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double cpu0 = cpuSeconds(), t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double secs = MPI_Wtime() - t0;
  MPI_Barrier(MPI_COMM_WORLD);
  double cpu = cpuSeconds() - cpu0, maxSecs = 0, sumCpu = 0;
  MPI_Reduce(&secs, &maxSecs, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&cpu, &sumCpu, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  long long wrong = 0, allWrong = 0;
  for (long long i = 0; i < count; ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += (double)((r * 7 + i * 3) % 17) - 8.0;
    if (out[i] != (float)want) ++wrong;
  }
  MPI_Reduce(&wrong, &allWrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    double us = maxSecs / iters * 1e6;
    double algbw = (double)bytes / (us * 1e-6) / 1e9;
    double gb = (double)bytes * iters / 1e9;
    printf("mpi_allreduce_cpu: %d ranks, %lld bytes float sum, %d iterations: %.1f us, algbw %.3f GB/s, "
           "busbw %.3f GB/s, CPU %.3f s for %.3f GB: %.3f s/GB, #wrong %lld\n",
           n, bytes, iters, us, algbw, algbw * 2.0 * (n - 1) / n, sumCpu, gb, sumCpu / gb, allWrong);
  }
  free(in);
  free(out);
  MPI_Finalize();
  return allWrong == 0 ? 0 : 1;
}
