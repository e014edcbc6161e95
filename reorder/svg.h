// The plan drawn for people: bandwidth and latency heatmaps with hosts sorted by the plan's
// order (so groups are blocks on the diagonal), group boundaries, the plan's ring (arrows on
// the pairs it uses, hugging the diagonal blocks) and the input order's ring (markers on the
// pairs it uses, scattered across blocks), a legend, and the predicted gain in the title.
// Above kMaxCells hosts, cells are blocks of hosts (median of the block's measured pairs).
// Below them, when the plan has them: its chunk weights as a strip of bars in ring order, each
// host's bar as wide as its share (<g id="shares">, one <rect class="share"> per host), and its
// packed trees as diagrams over the hosts in ring order (<g id="trees">, one <g class="tree">
// per tree drawn, with <line class="tree-edge"> per edge and a <circle class="tree-root">).
// A plan with a mesh (plan.mesh) also marks, per dimension (up to four), the cells its groups'
// traffic uses between hosts (<path class="mesh-hop" data-dim="NAME">), with a legend line each
// (the dimension's time with all its groups at once and its slowest group's alone).
#pragma once

#include <string>

#include "common/plan.h"
#include "common/topology.h"

namespace rankmap::reorder {

inline constexpr size_t kMaxCells = 128;

// Throws InvalidInput when a host of the plan is not in the topology.
std::string renderSvg(const Topology& topology, const Plan& plan);

}  // namespace rankmap::reorder
