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

std::optional<double> fittedRate(const std::vector<RateSample>& samples) {
  if (samples.size() < 3) return std::nullopt;
  double n = static_cast<double>(samples.size()), mt = 0, mb = 0;
  for (const auto& s : samples) {
    mt += s.seconds / n;
    mb += s.bytes / n;
  }
  double stt = 0, stb = 0;
  for (const auto& s : samples) {
    stt += (s.seconds - mt) * (s.seconds - mt);
    stb += (s.seconds - mt) * (s.bytes - mb);
  }
  if (!(stt > 0)) return std::nullopt;
  return std::max(0.0, stb / stt);
}

}  // namespace rankmap::probe
