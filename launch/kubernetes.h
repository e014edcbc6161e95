// Kubernetes: node labels and annotations from the inferred hierarchy, and Kueue's Topology.
//
// - `rankmap export --k8s-labels`: one `kubectl label nodes NODE k=v ... --overwrite` line per
//   host with, for each level j of the hierarchy (0 = innermost), two labels naming the host's
//   group at that level: kLevelLabelPrefix + (j+1) (rankmap's own keys, one per level, as Kueue's
//   topology-aware scheduling wants them) and kTopographTierPrefix + j (NVIDIA Topograph's
//   convention: tier 0 is the switch nearest the node); then, where the topology has a link model,
//   one `kubectl annotate nodes NODE ... --overwrite` line with the measured rates of the host's
//   link and of its groups' uplinks, in Mbit/s each direction, and the measurement's time.
// - `rankmap export --kueue-topology`: a Kueue Topology object whose levels are those label keys,
//   outermost first, and kubernetes.io/hostname last (as Kueue recommends).
// The node name is the topology's host name: hosts must be named as their Kubernetes nodes.
// - `rankmap export --k8s-placement JOB`: a shell script that puts an Indexed Job's pods on the
//   plan's nodes in plan order (pod of completion index i on the node at plan position i), so
//   that a job whose ranks are its completion indexes runs in the plan's order unchanged.
// - `rankmap hosts --from-endpointslices`: rankmap's hosts file (common/hosts_file.h) from the
//   EndpointSlices of the agents' headless Service, so the DaemonSet's agents learn their peers
//   from the cluster (deploy/kubernetes).
// Kubernetes is not needed to build or test any of this: the output is plain text.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/plan.h"
#include "common/topology.h"

namespace rankmap::launch {

inline constexpr std::string_view kLevelLabelPrefix = "rankmap.io/level-";
inline constexpr std::string_view kTopographTierPrefix = "fabric.topograph.run/tier-";
inline constexpr std::string_view kHostnameLabel = "kubernetes.io/hostname";
inline constexpr std::string_view kRateAnnotationPrefix = "rankmap.io/";
inline constexpr std::string_view kKueueApiVersion = "kueue.x-k8s.io/v1beta2";

// Kubernetes' syntax rules (apimachinery's validation): a DNS-1123 subdomain (node and object
// names: at most 253 characters, lower-case alphanumeric labels joined by dots, '-' inside), a
// label value (at most 63 characters, alphanumeric at both ends, '-', '_', '.' inside; may be
// empty) and a qualified name (label and annotation keys: optional DNS subdomain prefix and '/',
// then a name of at most 63 characters with the label value's characters, not empty).
bool isDnsSubdomain(std::string_view s);
bool isLabelValue(std::string_view s);
bool isQualifiedName(std::string_view s);

// A valid label value derived from `name`: lower-cased, characters outside [a-z0-9-_.] replaced
// by '-', non-alphanumerics trimmed from both ends, cut to 63 characters; "x" if nothing is left.
std::string labelValueFrom(std::string_view name);

struct NodeMarks {
  std::string node;
  std::vector<std::pair<std::string, std::string>> labels;
  std::vector<std::pair<std::string, std::string>> annotations;
};

// The labels (and, with `links`, the rate annotations) of every host. The group at level j is
// named labelValueFrom(level name) + its index in that level, as in topology.conf. `links` may be
// null (a plan, or a topology without a link model): no annotations then. `time` (RFC 3339) is
// annotated as rankmap.io/measured-at when not empty. Throws InvalidInput naming `source` when a
// host name is not a valid node name or a host is in no group of a level.
std::vector<NodeMarks> k8sNodeMarks(const std::vector<std::string>& hosts,
                                    const std::vector<HierarchyLevel>& levels,
                                    const TopologyLinks* links, std::string_view time,
                                    std::string_view source);

// The kubectl lines for `marks` (label lines first, then annotate lines), after a comment naming
// the source.
std::string k8sLabelCommands(const std::vector<NodeMarks>& marks, std::string_view source);

// Kueue's Topology object (YAML) named `name` for `levels` (only their count matters).
// `apiVersion` is kKueueApiVersion or an older one (kueue.x-k8s.io/v1beta1, /v1alpha1): the
// object is the same in each. Throws InvalidInput for a name that is not a DNS subdomain, more
// than 15 levels (Kueue allows 16 with the host level), or an unknown apiVersion.
std::string kueueTopologyYaml(const std::vector<HierarchyLevel>& levels, std::string_view name,
                              std::string_view apiVersion, std::string_view source);

// An Indexed Job's pods placed in plan order (`rankmap export --k8s-placement`). The lever is a
// scheduling gate: the Job's pod template lists `gate`, so its pods are created but not
// scheduled; the script then gives the pod of completion index i the node selector
// kubernetes.io/hostname = the plan's host at position i / podsPerHost and lifts the gate
// (Kubernetes allows adding a node selector to a pod while it is gated, 1.27+). Pods are found
// by the label batch.kubernetes.io/job-name and the annotation
// batch.kubernetes.io/job-completion-index. Nothing is placed until all of them are there and
// held: if they are not within `waitSeconds`, or the API refuses a patch, the script lifts the
// gate of every pod it still holds, without a node (the scheduler's own choice, as without
// rankmap), says so on stderr and exits 1; a pod that is neither held nor placed by this plan
// (a template without the gate), or a held pod whose index is beyond the plan's (a Job larger
// than the plan), is the same failure. Every kubectl call has --request-timeout.
// Re-running it after success changes nothing but a pod the Job controller made anew, which is
// held again and gets its index's node; with `follow` the script does that itself, every 2 s,
// until the Job has the condition Complete or Failed or is gone (a refused patch then lifts that
// pod's gate, a pod beyond the plan's indexes is left to the scheduler, and INT or TERM lifts
// every gate still held before it exits). Host names must be the nodes' names.
inline constexpr std::string_view kPlacementGate = "rankmap.io/placement";
struct PodPlacement {
  std::string job;     // the Indexed Job's name
  std::string nspace;  // its namespace; empty: kubectl's current one
  std::string gate = std::string(kPlacementGate);
  int podsPerHost = 1;    // consecutive completion indexes per node
  int waitSeconds = 600;  // for every pod to exist and be held
  bool follow = false;    // then place pods made anew until the Job ends
};
// Throws InvalidInput naming `source` or the option: a job, namespace or gate Kubernetes would
// refuse, a host name that is not a node name, pods per host or the wait outside their range.
std::string k8sPlacementScript(const Plan& plan, const PodPlacement& placement,
                               std::string_view source);

// The agents of a headless Service from its EndpointSlices (`kubectl get endpointslices -l
// kubernetes.io/service-name=SERVICE -o json`: a List of them, or one EndpointSlice): one host per
// node, named by the endpoint's nodeName (the DaemonSet names each agent after its node), at the
// endpoint's first address; a node's IPv4 address before an IPv6 one, FQDN slices and terminating
// endpoints left out; sorted by name, so the same cluster gives the same file. Throws
// InvalidInput naming `source` and the JSON path: not a list of EndpointSlices, an endpoint
// without nodeName or addresses, no endpoint at all, or a name the hosts file cannot hold.
std::vector<Host> hostsFromEndpointSlices(const Json& doc, std::string_view source);

}  // namespace rankmap::launch
