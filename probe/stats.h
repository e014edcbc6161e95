// Summaries of probe samples.
#pragma once

#include <vector>

#include "common/topology.h"

namespace rankmap::probe {

// Nearest-rank percentile (q in [0, 1]) of `sorted` (ascending, non-empty).
double percentile(const std::vector<double>& sorted, double q);

// min, median, p90, p99 of round-trip samples in microseconds. InvalidInput if empty.
LatencyStats summarizeLatency(std::vector<double> samplesUs);

}  // namespace rankmap::probe
