// Summaries of probe samples.
#pragma once

#include <optional>
#include <vector>

#include "common/topology.h"

namespace rankmap::probe {

// Nearest-rank percentile (q in [0, 1]) of `sorted` (ascending, non-empty).
double percentile(const std::vector<double>& sorted, double q);

// min, median, p90, p99 of round-trip samples in microseconds. InvalidInput if empty.
LatencyStats summarizeLatency(std::vector<double> samplesUs);

// A byte count and when it was taken (seconds from any fixed origin).
struct RateSample {
  double seconds = 0;
  double bytes = 0;
};

// Least-squares slope of bytes over time, in bytes per second: every sample of a window weighs
// in, so one count taken late (a receiver descheduled next to it) moves the rate by a fraction
// of what it does to a rate from the two end points. nullopt with fewer than 3 samples or no
// spread in time.
std::optional<double> fittedRate(const std::vector<RateSample>& samples);

}  // namespace rankmap::probe
