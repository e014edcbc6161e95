/* One rank of an allreduce through the installed C API: `allreduce RANK NRANKS HOST:PORT`.
 *
 * Rank r contributes (r + 1) * (i + 1) at element i of an int64 buffer, so the sum over n ranks is
 * n(n + 1)/2 * (i + 1), checked exactly at every element; then a float32 max (element i of rank r
 * is r * 1000 + i, so the result is (n - 1) * 1000 + i, exact in float). Prints one line and exits
 * 0 when every element is right, 1 with the first wrong element or the library's error. */
#include <rankmap/coll.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { kCount = 4099 }; /* a prime: no segment or rank boundary falls evenly */

static int failed(const char* what, rankmapResult_t result) {
  fprintf(stderr, "allreduce: %s: %s: %s\n", what, rankmapGetErrorString(result),
          rankmapGetLastError());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s RANK NRANKS HOST:PORT\n", argv[0]);
    return 2;
  }
  const int rank = atoi(argv[1]);
  const int nranks = atoi(argv[2]);
  rankmapComm_t comm = NULL;
  rankmapResult_t result = rankmapCommInitRoot(&comm, rank, nranks, argv[3], NULL);
  if (result != rankmapSuccess) return failed("rankmapCommInitRoot", result);

  static int64_t sums[kCount];
  static float maxima[kCount];
  for (int64_t i = 0; i < kCount; ++i) {
    sums[i] = (int64_t)(rank + 1) * (i + 1);
    maxima[i] = (float)(rank * 1000 + i);
  }
  result = rankmapAllReduce(sums, sums, kCount, rankmapInt64, rankmapSum, comm);
  if (result != rankmapSuccess) return failed("rankmapAllReduce(int64, sum)", result);
  result = rankmapAllReduce(maxima, maxima, kCount, rankmapFloat32, rankmapMax, comm);
  if (result != rankmapSuccess) return failed("rankmapAllReduce(float32, max)", result);

  const int64_t triangle = (int64_t)nranks * (nranks + 1) / 2;
  for (int64_t i = 0; i < kCount; ++i) {
    if (sums[i] != triangle * (i + 1)) {
      fprintf(stderr, "allreduce: rank %d: sum[%lld] = %lld, expected %lld\n", rank, (long long)i,
              (long long)sums[i], (long long)(triangle * (i + 1)));
      return 1;
    }
    if (maxima[i] != (float)((nranks - 1) * 1000 + i)) {
      fprintf(stderr, "allreduce: rank %d: max[%lld] = %g, expected %d\n", rank, (long long)i,
              (double)maxima[i], (int)((nranks - 1) * 1000 + i));
      return 1;
    }
  }
  result = rankmapCommDestroy(comm);
  if (result != rankmapSuccess) return failed("rankmapCommDestroy", result);
  printf("rank %d of %d: allreduce of %d int64 (sum) and float32 (max) exact\n", rank, nranks,
         kCount);
  return 0;
}
