#include "reorder/measurements.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "common/error.h"

namespace rankmap::reorder {
namespace {

// Values below these floors are compared by absolute difference instead of ratio: a 0.2 us vs
// 0.9 us latency is not a broken measurement.
constexpr double kLatencyFloorUs = 2.0;
constexpr double kBandwidthFloorMbps = 1.0;
constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

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
  if (!t.hasMatrices())
    throw InvalidInput(fmt::format("{}: no bandwidth and latency matrices to clean ({} x {} for {} "
                                   "hosts); a topology without them is planned from its links",
                                   source, t.bandwidthMbps.size(), t.bandwidthMbps.size(), n));
  m.n = n;
  // Every entry is written below: missing pairs and the diagonal as NaN.
  m.bandwidthMbps = PairMatrix::uninitialized(n);
  m.latencyUs = PairMatrix::uninitialized(n);
  for (size_t i = 0; i < n; ++i) {
    m.bandwidthMbps.set(i, i, kNaNf);
    m.latencyUs.set(i, i, kNaNf);
  }
  m.hostPairs.assign(n, 0);
  size_t asym = 0, measured = 0, bwPairs = 0, latPairs = 0, anyPairs = 0;
  std::optional<Offender> first;
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

  // One value from the two directions (NaN = none); an asymmetric pair is counted and dropped.
  // Inlined: called twice per pair (16M calls at 4096 hosts), where the call itself costs more
  // than the common case's few compares.
  auto combine = [&](double a, double b, double floor, const char* field, size_t i,
                     size_t j) __attribute__((always_inline)) -> double {
    bool ha = !std::isnan(a), hb = !std::isnan(b);
    if (!ha && !hb) return kNone;
    ++measured;
    if (!(ha && hb)) return ha ? a : b;
    if (!asymmetric(a, b, floor)) return 0.5 * (a + b);
    ++asym;
    // Report the first offender in row-major order, whatever the traversal order.
    if (!first || std::pair(i, j) < std::pair(first->i, first->j))
      first = Offender{field, i, j, a, b};
    return kNone;
  };
  auto bwOf = [](const std::optional<double>& o) { return o ? *o : kNone; };
  auto latOf = [](const std::optional<LatencyStats>& o) { return o ? o->minUs : kNone; };

  // Tiles keep both directions of a pair, and both writes, in cache (rows are up to 4096
  // entries of 56 bytes in the topology).
  constexpr size_t kTile = 32;
  for (size_t bi = 0; bi < n; bi += kTile)
    for (size_t bj = bi; bj < n; bj += kTile)
      for (size_t i = bi; i < std::min(n, bi + kTile); ++i)
        for (size_t j = std::max(bj, i + 1); j < std::min(n, bj + kTile); ++j) {
          double bw = combine(bwOf(t.bandwidthMbps.at(i, j)), bwOf(t.bandwidthMbps.at(j, i)),
                              kBandwidthFloorMbps, "bandwidth_mbps", i, j);
          double lat = combine(latOf(t.latencyUs.at(i, j)), latOf(t.latencyUs.at(j, i)),
                               kLatencyFloorUs, "latency_us", i, j);
          // A zero bandwidth is "no path", which the model cannot use; treat it as missing.
          bool hasBw = bw > 0;  // false for NaN
          bool hasLat = !std::isnan(lat);
          m.bandwidthMbps.set(i, j, hasBw ? static_cast<float>(bw) : kNaNf);
          m.latencyUs.set(i, j, hasLat ? static_cast<float>(lat) : kNaNf);
          bwPairs += hasBw;
          latPairs += hasLat;
          if (hasBw || hasLat) {
            ++anyPairs;
            ++m.hostPairs[i];
            ++m.hostPairs[j];
          }
        }
  m.bandwidthPairs = bwPairs;
  m.latencyPairs = latPairs;
  m.anyPairs = anyPairs;
  m.droppedAsymmetric = asym;
  if (asym > 0) {
    const Offender& o = *first;
    std::string where = fmt::format("{}: at /{}/{}/{}: {:g} vs /{}/{}/{}: {:g}", source, o.field,
                                    o.i, o.j, o.a, o.field, o.j, o.i, o.b);
    double fraction = static_cast<double>(asym) / std::max<size_t>(measured, 1);
    if (fraction > kMaxAsymmetricFraction)
      throw InvalidInput(fmt::format(
          "{}: the two directions differ by more than {:g}x (asymmetric beyond tolerance) in {} "
          "of {} measured pairs; at most {:g}% may be",
          where, kMaxAsymmetry, asym, measured, 100 * kMaxAsymmetricFraction));
    warnings.push_back(fmt::format(
        "{}: directions differ by more than {:g}x; dropped {} such pair value(s) as missing", where,
        kMaxAsymmetry, asym));
  }
  return m;
}

}  // namespace rankmap::reorder
