// Helpers shared by the NCCL shim tests: plans, thread "ranks", data patterns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/plan.h"
#include "tests/unit/common/rank_threads.h"

namespace rankmap::testing {

// A plan over `hosts` hosts h0..h{hosts-1} with `ranksPerHost` ranks each, whose `order` lists
// host indices in the new order.
inline Plan makePlan(int hosts, int ranksPerHost, const std::vector<int>& order) {
  Plan p;
  for (int h = 0; h < hosts; ++h) p.hosts.push_back("h" + std::to_string(h));
  for (int h : order) p.order.push_back("h" + std::to_string(h));
  p.ranksPerHost = ranksPerHost;
  p.derivePermutation();
  p.confidence = 0.9;
  p.seal();
  return p;
}

// The value rank `rank` contributes at element `i` (distinct for every (rank, i), exact in int32
// sums over a few ranks).
inline int32_t pattern(int rank, size_t i) {
  return static_cast<int32_t>(rank * 100000 + static_cast<int>(i % 99991));
}

}  // namespace rankmap::testing
