#include "probe/stats.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace rankmap::probe {

double percentile(const std::vector<double>& sorted, double q) {
  RANKMAP_ASSERT(!sorted.empty());
  q = std::clamp(q, 0.0, 1.0);
  // Nearest rank: the smallest sample with at least q of the samples at or below it.
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[rank == 0 ? 0 : rank - 1];
}

LatencyStats summarizeLatency(std::vector<double> samplesUs) {
  if (samplesUs.empty()) RANKMAP_THROW(InvalidInput, "no latency samples to summarize");
  std::sort(samplesUs.begin(), samplesUs.end());
  LatencyStats s;
  s.minUs = samplesUs.front();
  s.medianUs = percentile(samplesUs, 0.5);
  s.p90Us = percentile(samplesUs, 0.9);
  s.p99Us = percentile(samplesUs, 0.99);
  return s;
}

}  // namespace rankmap::probe
