// A sealed plan for tests of what consumes plans (launchers, the MPI shim).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/plan.h"

namespace rankmap::testing {

// `hosts` (k ranks each) reordered to `order`, with the planner's confidence and, when given, a
// predicted speedup for "allreduce 16 MiB ring".
inline Plan orderedPlan(std::vector<std::string> hosts, std::vector<std::string> order, int k = 1,
                        double confidence = 0, std::optional<double> speedup = std::nullopt) {
  Plan p = Plan::identity(std::move(hosts), k);
  p.order = std::move(order);
  p.confidence = confidence;
  if (speedup) {
    p.predicted.basis = "allreduce 16 MiB ring";
    p.predicted.speedup = *speedup;
  }
  p.derivePermutation();
  p.seal();
  return p;
}

}  // namespace rankmap::testing
