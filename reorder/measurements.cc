#include "reorder/measurements.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "common/error.h"

namespace rankmap::reorder {
namespace {

// Values below these floors are compared by absolute difference instead of ratio: a 0.2 us vs
// 0.9 us latency is not a broken measurement.
constexpr double kLatencyFloorUs = 2.0;
constexpr double kBandwidthFloorMbps = 1.0;

bool asymmetric(double a, double b, double floor) {
  double lo = std::max(std::min(a, b), floor);
  double hi = std::max(a, b);
  return hi > kMaxAsymmetry * lo;
}

struct Offender {
  std::string field;
  size_t i = 0, j = 0;
  double a = 0, b = 0;
};

}  // namespace

Measurements cleanMeasurements(const Topology& t, std::string_view source,
                               std::vector<std::string>& warnings) {
  Measurements m;
  size_t n = t.size();
  m.n = n;
  m.bandwidthMbps = PairMatrix(n);
  m.latencyUs = PairMatrix(n);
  m.hostPairs.assign(n, 0);
  size_t asym = 0;
  size_t measured = 0;
  std::optional<Offender> first;

  auto combine = [&](std::optional<double> a, std::optional<double> b, double floor,
                     const char* field, size_t i, size_t j) -> std::optional<double> {
    if (a && b) {
      ++measured;
      if (asymmetric(*a, *b, floor)) {
        ++asym;
        // Report the first offender in row-major order, whatever the traversal order.
        if (!first || std::pair(i, j) < std::pair(first->i, first->j))
          first = Offender{field, i, j, *a, *b};
        return std::nullopt;
      }
      return 0.5 * (*a + *b);
    }
    if (a || b) ++measured;
    return a ? a : b;
  };

  // Tiles keep both directions of a pair, and both writes, in cache (rows are up to 4096
  // entries of 56 bytes in the topology).
  constexpr size_t kTile = 32;
  for (size_t bi = 0; bi < n; bi += kTile)
    for (size_t bj = bi; bj < n; bj += kTile)
      for (size_t i = bi; i < std::min(n, bi + kTile); ++i)
        for (size_t j = std::max(bj, i + 1); j < std::min(n, bj + kTile); ++j) {
          auto bw = combine(t.bandwidthMbps.at(i, j), t.bandwidthMbps.at(j, i),
                            kBandwidthFloorMbps, "bandwidth_mbps", i, j);
          const auto& lij = t.latencyUs.at(i, j);
          const auto& lji = t.latencyUs.at(j, i);
          auto lat = combine(lij ? std::optional<double>(lij->minUs) : std::nullopt,
                             lji ? std::optional<double>(lji->minUs) : std::nullopt,
                             kLatencyFloorUs, "latency_us", i, j);
          // A zero bandwidth is "no path", which the model cannot use; treat it as missing.
          bool hasBw = bw && *bw > 0;
          if (hasBw) {
            m.bandwidthMbps.set(i, j, static_cast<float>(*bw));
            ++m.bandwidthPairs;
          }
          if (lat) {
            m.latencyUs.set(i, j, static_cast<float>(*lat));
            ++m.latencyPairs;
          }
          if (hasBw || lat) {
            ++m.anyPairs;
            ++m.hostPairs[i];
            ++m.hostPairs[j];
          }
        }
  m.droppedAsymmetric = asym;
  if (asym > 0) {
    const Offender& o = *first;
    std::string where =
        fmt::format("{}: at /{}/{}/{}: {:g} vs /{}/{}/{}: {:g}", source, o.field, o.i, o.j, o.a,
                    o.field, o.j, o.i, o.b);
    double fraction = static_cast<double>(asym) / std::max<size_t>(measured, 1);
    if (fraction > kMaxAsymmetricFraction)
      throw InvalidInput(fmt::format(
          "{}: the two directions differ by more than {:g}x (asymmetric beyond tolerance) in {} "
          "of {} measured pairs; at most {:g}% may be",
          where, kMaxAsymmetry, asym, measured, 100 * kMaxAsymmetricFraction));
    warnings.push_back(fmt::format(
        "{}: directions differ by more than {:g}x; dropped {} such pair value(s) as missing",
        where, kMaxAsymmetry, asym));
  }
  return m;
}

}  // namespace rankmap::reorder
