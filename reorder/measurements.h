// Pair measurements as the planner uses them: symmetric, in float, NaN where missing.
//
// topology.json holds one value per direction (row = sender). The planner's network model has
// symmetric links, so each unordered pair gets one value: the mean of the two directions when
// both were measured, else the one that was. Two directions that disagree by more than
// kMaxAsymmetry are a broken measurement, not a property of the network: up to
// kMaxAsymmetricFraction of the measured pairs are dropped (treated as missing) with a warning;
// more than that is an error naming the first offending entry.
//
// Latency is the one-way minimum (`min` of the latency statistics): the floor of a ping-pong is
// the most stable estimate of the path length (hop count, distance), which is what locality is;
// medians and tails mostly measure load and scheduling noise.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "common/topology.h"
#include "reorder/numeric.h"

namespace rankmap::reorder {

inline constexpr double kMaxAsymmetry = kMaxDirectionRatio;  // common/topology.h
inline constexpr double kMaxAsymmetricFraction = 0.02;  // of the measured pairs

// A symmetric N x N matrix of floats; NaN = missing; the diagonal is always NaN.
class PairMatrix {
 public:
  PairMatrix() = default;
  explicit PairMatrix(size_t n) : n_(n), v_(n * n, std::numeric_limits<float>::quiet_NaN()) {}
  // Contents undefined: for code that writes every entry (it saves a pass over N^2 floats).
  static PairMatrix uninitialized(size_t n) {
    PairMatrix m;
    m.n_ = n;
    m.v_.resize(n * n);
    return m;
  }

  size_t size() const { return n_; }
  float at(size_t i, size_t j) const { return v_[i * n_ + j]; }
  bool has(size_t i, size_t j) const { return !std::isnan(v_[i * n_ + j]); }
  // Sets both (i, j) and (j, i).
  void set(size_t i, size_t j, float x) {
    v_[i * n_ + j] = x;
    v_[j * n_ + i] = x;
  }
  const float* row(size_t i) const { return v_.data() + i * n_; }

 private:
  size_t n_ = 0;
  std::vector<float, DefaultInitAllocator<float>> v_;
};

struct Measurements {
  size_t n = 0;
  PairMatrix bandwidthMbps;       // symmetric single-flow rate
  PairMatrix latencyUs;           // symmetric one-way minimum latency
  size_t bandwidthPairs = 0;      // unordered pairs with a bandwidth value
  size_t latencyPairs = 0;        // ... with a latency value
  size_t anyPairs = 0;            // ... with either
  std::vector<size_t> hostPairs;  // per host: measured pairs it belongs to (either feature)
  size_t droppedAsymmetric = 0;

  size_t pairs() const { return n * (n - 1) / 2; }
  // Fraction of unordered pairs with at least one measurement; 1 for a single host.
  double coverage() const { return n < 2 ? 1.0 : static_cast<double>(anyPairs) / pairs(); }
};

// Builds the symmetric matrices. Throws InvalidInput naming `source` and the JSON path when
// asymmetry is beyond tolerance for too many pairs, or when the topology has no matrices (a link
// model's: the planner takes those another way); appends warnings for what it dropped.
Measurements cleanMeasurements(const Topology& topology, std::string_view source,
                               std::vector<std::string>& warnings);

}  // namespace rankmap::reorder
