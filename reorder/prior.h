// A declared placement as a prior: what the provider or the operator says about where each host
// sits (AWS network nodes, GCP physical hosts, Kubernetes node labels, or a native list), read
// from a JSON file and compared with the groups the planner measured. Formats in
// docs/formats.md ("Declared placement"); how the planner uses it in docs/planner.md.
//
// Measured groups win: the prior never changes the plan's groups, ring or algorithms. It is
// recorded in the plan (Plan::prior) with the places where it disagrees, at its lowest level
// (the switch closest to the hosts) against the planner's innermost measured level:
//   declared together, measured apart: hosts declared behind one switch that the measurements put
//     in different groups (a flow between them crosses a measured boundary);
//   declared apart, measured together: hosts in one measured group declared behind different
//     switches (no measured boundary where the declaration puts one).
// Declared IDs are compared as the whole path from the top level down, so that two switches with
// the same name under different parents stay two switches.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/plan.h"
#include "common/topology.h"

namespace rankmap::reorder {

// One declared host: the names it may go by (an instance ID, node name, addresses) and its group
// IDs from the top level down.
struct DeclaredHost {
  std::string id;                    // the name the prior gives it (instance ID, node name)
  std::vector<std::string> aliases;  // other names: addresses, a host name from host_names
  std::vector<std::string> groups;   // top first; the last is the lowest declared switch
};

struct DeclaredPlacement {
  std::string source;               // the file, as given
  std::string format;               // "native", "aws", "gcp", "k8s_labels"
  std::vector<std::string> levels;  // level names, top first (as long as every host's groups)
  std::vector<DeclaredHost> hosts;
};

// Label families recognised in `kubectl get nodes -o json` output, tried in this order when no
// keys are named: AWS EKS network-node layers, GCP topology labels (block, subblock; the
// physical host is no switch), Topograph's fabric tiers (tier 0 closest to the node) and its
// earlier core/spine/leaf labels. Each is listed top first.
std::vector<std::vector<std::string>> knownLabelFamilies();

// Parses a declared placement, recognising the format by its shape:
//   AWS DescribeInstanceTopology output: {"Instances": [{"InstanceId", "NetworkNodes": [top ..
//     bottom]}, ...]};
//   GCP instances (`gcloud compute instances list --format=json`, or the API's {"items": [...]}):
//     [{"name", "networkInterfaces": [{"networkIP"}], "resourceStatus": {"physicalHost":
//     "/CLUSTER/BLOCK/HOST"} or {"physicalHostTopology": {"cluster", "block", "subblock"}}}],
//     or {"physical_hosts": {"host": "/CLUSTER/BLOCK/HOST"}}; the last path element (the
//     physical machine) is dropped;
//   Kubernetes nodes (`kubectl get nodes -o json`): {"items": [{"metadata": {"name", "labels"},
//     "status": {"addresses": [...]}}]}, levels from `labelKeys` (top first) or the first of
//     knownLabelFamilies() some node carries; nodes with none of the keys are not declared;
//   native: {"levels": ["spine", "leaf"] (optional), "hosts": {"host": ["s1", "l3"], ...}}.
// Any form may add {"host_names": {"declared ID": "topology host name"}} at its top level (an
// object document; for a GCP array, use the API's {"items": [...]}) to name hosts whose
// topology name is neither the declared ID nor one of its addresses.
// Throws InvalidInput naming `source`, the JSON path and what was expected: a host declared
// twice, hosts with different numbers of levels, empty IDs, a node with some of the label keys.
DeclaredPlacement parseDeclaredPlacement(const Json& doc, std::string_view source,
                                         const std::vector<std::string>& labelKeys = {});
// Reads and parses FILE (IoError when unreadable).
DeclaredPlacement loadDeclaredPlacement(const std::string& path,
                                        const std::vector<std::string>& labelKeys = {});

// "k1,k2,k3" (label keys, top level first) as a list; "" gives none. Throws InvalidInput naming
// `source` for an empty key.
std::vector<std::string> parseLabelKeys(std::string_view list, std::string_view source);

// Compares the declaration with the measured groups of `topology`'s hosts. `measuredGroupOf`:
// host index -> group of the planner's innermost measured level named `measuredLevel` (groups
// numbered as in Plan::groups), all zeros with "network" when the measurements show no level;
// empty when nothing was measured well enough to group (measuredLevel then ""). A topology host
// is covered when its name, or its address without port, is a declared host's ID or alias.
// Rates are the medians of the measured single-flow rates (the matrices, or the link model's
// path rates where a value is missing) over both directions of the pairs concerned.
PlanPrior comparePrior(const DeclaredPlacement& prior, const Topology& topology,
                       const std::vector<int>& measuredGroupOf, std::string_view measuredLevel);

}  // namespace rankmap::reorder
