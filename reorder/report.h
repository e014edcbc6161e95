// Text for people: what `rankmap plan` and `rankmap show` print.
#pragma once

#include <cstdint>
#include <string>

#include "common/plan.h"
#include "common/topology.h"
#include "reorder/planner.h"

namespace rankmap::reorder {

// "16 MiB", "1.5 KiB", "0 B".
std::string sizeText(uint64_t bytes);
// "812 us", "3.2 ms", "1.05 s".
std::string timeText(double us);

// "link model: 8164 of 1047552 directed pairs measured, the other 1039388 inferred".
std::string linkModelText(size_t hosts, size_t measured);

// A few lines about a planning run: groups, gain, algorithm per size, warnings.
std::string planSummary(const PlanResult& result);

// A plan.json for people: groups, ring, algorithm table, predicted gain.
std::string describePlan(const Plan& plan);

// A topology.json for people: coverage, what each signal shows, the inferred groups, the
// matrices summarised per level, the network model.
std::string describeTopology(const Topology& topology, const PlanResult& result);

}  // namespace rankmap::reorder
