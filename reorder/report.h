// Text for people: what `rankmap plan` and `rankmap show` print.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
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

// A plan.json for people: groups, ring, algorithm table, chunk weights and packed trees
// explained, predicted gain. `hostMbps` (host name -> measured host link rate), when the
// topology is at hand, lets it say which rates made a share small; `uplinkMbps` (host name ->
// the uplink rate of its innermost group) the same for weights that balance uplinks.
std::string describePlan(const Plan& plan, const std::map<std::string, double>& hostMbps = {},
                         const std::map<std::string, double>& uplinkMbps = {});

// The chunk weights of a plan in words: who gets a smaller share of hier's shards and why (the
// plan's chunk_weights_basis: host link rates, or the groups' uplinks).
std::string chunkWeightsText(const Plan& plan, const std::map<std::string, double>& hostMbps,
                             const std::map<std::string, double>& uplinkMbps = {});
// The ring weights of a plan in words: which hosts reduce which share of the vector in the
// engine's ring allreduce, and its predicted time against equal blocks; "" without them.
std::string ringWeightsText(const Plan& p);
// The packed trees of a plan in words: which trees, their roots and weights, what each carries,
// and what each host's link carries over all of them.
std::string packedTreesText(const Plan& plan, const std::map<std::string, double>& hostMbps);

// What the links of one host carry in a plan's packed trees: per position in `order`, the sum
// over trees of weight x degree (the fraction of the buffer its link carries each way).
std::vector<double> treeLoads(const Plan& plan);

// A plan's declared placement for people (`rankmap plan`, `rankmap show`): what it declares and
// covers of the plan's `planHosts` hosts, then one line per disagreement with the measured groups
// (the hosts of each part, the declared switch and measured group, the measured rate between
// them), or that it agrees.
std::string priorText(const PlanPrior& prior, size_t planHosts);

// What a probe found, in a few lines for people (`rankmap probe`, `rankmap show TOPOLOGY`): the
// levels with their groups and confidence, or that it found none; and the rings it measured as a
// collective runs them, with what they mean for plans (the structure's ring must beat the input
// order's by more than the probe's noise, or plans keep the input order).
std::string structureText(const Topology& topology);

// A topology.json for people: coverage, what each signal shows, the inferred groups, the
// matrices summarised per level, the network model.
std::string describeTopology(const Topology& topology, const PlanResult& result);

// What describePlan and describeTopology say, for programs (`rankmap show --json`): the same
// numbers, one object. A plan: {kind "plan", hosts, ranks_per_host, ranks, confidence, epoch,
// topology_hash, order, and groups, collectives, open_mpi and predicted as plan.json writes them
// (docs/formats.md), each range with at_bytes (the size of its prediction), a collective's with
// busbw_bytes_per_second, an Open MPI one's with engine_faster (the planner's advice). A topology:
// {kind "topology", hosts, groups inferred, network_model (host and uplink rates), predicted for
// the best order, warnings}.
Json planReport(const Plan& plan);
Json topologyReport(const Topology& topology, const PlanResult& result);

}  // namespace rankmap::reorder
