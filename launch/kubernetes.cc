#include "launch/kubernetes.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hosts_file.h"
#include "common/plan_agreement.h"

namespace rankmap::launch {
namespace {

bool isAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool isLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
bool isDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63 || !isLowerAlnum(s.front()) || !isLowerAlnum(s.back()))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return isLowerAlnum(c) || c == '-'; });
}

std::string rate(double mbps) { return fmt::format("{:.0f}", mbps); }

// The placement script's body; @NAME@ are filled in by k8sPlacementScript. POSIX sh. Names are
// checked against Kubernetes' syntax first, so none of them needs more than single quotes.
constexpr std::string_view kPlacementBody = R"SH(set -u
kubectl=${KUBECTL:-kubectl}
job='@JOB@'
ns='@NS@'
gate='@GATE@'
pods=@PODS@
wait_s=@WAIT@
follow=@FOLLOW@

say() { echo "rankmap placement: $*" >&2; }
# The strategic-merge entry that lifts rankmap's gate and leaves other gates alone.
lift="{\"\$patch\":\"delete\",\"name\":\"$gate\"}"
kc() {
  if [ -n "$ns" ]; then "$kubectl" --namespace "$ns" --request-timeout=30s "$@"
  else "$kubectl" --request-timeout=30s "$@"; fi
}
# One line per pod of the job: index|name|node selector|scheduling gates|deletion time.
list() {
  kc get pods -l "batch.kubernetes.io/job-name=$job" -o 'jsonpath={range .items[*]}{.metadata.annotations.batch\.kubernetes\.io/job-completion-index}{"|"}{.metadata.name}{"|"}{.spec.nodeSelector.kubernetes\.io/hostname}{"|"}{.spec.schedulingGates[*].name}{"|"}{.metadata.deletionTimestamp}{"\n"}{end}'
}
# From a listing, for the live pods of indexes 0..pods-1: "held INDEX POD" (gated: to place),
# "placed INDEX NODE" (given a node before), "free INDEX POD" (neither: no gate in its template);
# "extra INDEX POD" for a held pod of a higher index (a Job larger than the plan).
sort_pods() {
  awk -F'|' -v n="$pods" -v gate="$gate" '
    $1 ~ /^[0-9]+$/ && $5 == "" {
      held = 0; k = split($4, g, " ")
      for (i = 1; i <= k; i++) if (g[i] == gate) held = 1
      if ($1 + 0 >= n + 0) { if (held) print "extra", $1, $2 }
      else if (held) print "held", $1, $2
      else if ($3 != "") print "placed", $1, $3
      else print "free", $1, $2
    }'
}
# Lifts pod $1's gate without giving it a node: the scheduler's own choice.
unhold() {
  kc patch pod "$1" --type=strategic -p "{\"spec\":{\"schedulingGates\":[$lift]}}" \
    >/dev/null || say "could not lift the gate of pod $1: lift it by hand"
}
# Lifts the gate of every pod still held.
release() {
  printf '%s\n' "$listing" | sort_pods | while read -r what index pod; do
    [ "$what" = held ] || [ "$what" = extra ] || continue
    unhold "$pod"
  done
}
# Says why nothing is placed, releases every held pod and exits 1.
give_up() {
  say "$*; no pod placed, every held pod left to the scheduler's choice"
  release; exit 1
}
# The first pod of a kind in the sorted listing, as "POD (index I)"; empty when there is none.
first_of() {
  printf '%s\n' "$sorted" | awk -v kind="$1" '$1 == kind { print $3 " (index " $2 ")"; exit }'
}

listing=
end=$(( $(date +%s) + wait_s ))
while :; do
  if out=$(list 2>&1); then
    listing=$out
    sorted=$(printf '%s\n' "$listing" | sort_pods)
    free=$(first_of free)
    [ -z "$free" ] || give_up "pod $free of job $job is neither held by the scheduling gate" \
      "$gate nor placed by this plan: the Job's pod template must list the gate" \
      "(spec.template.spec.schedulingGates)"
    extra=$(first_of extra)
    [ -z "$extra" ] || give_up "pod $extra of job $job is beyond the plan's $pods pods: the" \
      "Job has more completions than the plan's nodes times the pods per node"
    ready=$(printf '%s\n' "$sorted" | awk '$1 == "held" || $1 == "placed" { seen[$2] = 1 }
      END { c = 0; for (i in seen) c++; print c }')
    [ "$ready" -ge "$pods" ] && break
  else
    ready=0; say "kubectl get pods: $out"
  fi
  [ "$(date +%s)" -lt "$end" ] || give_up "after $wait_s s, $ready of $pods pods of job $job" \
    "are there and held (the Job needs completionMode: Indexed and parallelism = completions =" \
    "$pods)"
  sleep 2
done

# Gives every held pod of the sorted listing its index's node and lifts its gate; says what a
# pod given another node before holds (once: not while following). Returns 1 at the first
# refused patch ($failed: which).
placed=0
place() {
  for line in $(printf '%s\n' "$sorted" | awk '{ print $1 ":" $2 ":" $3 }'); do
    what=${line%%:*}; rest=${line#*:}; index=${rest%%:*}; arg=${rest#*:}
    node=$(node_of "$index")
    if [ "$what" = placed ]; then
      [ "$arg" = "$node" ] || [ -n "${following:-}" ] ||
        say "the pod of index $index already has node $arg, the plan says $node"
      continue
    fi
    [ "$what" = held ] || continue
    if kc patch pod "$arg" --type=strategic -p "{\"spec\":{\"nodeSelector\":{\"kubernetes.io/hostname\":\"$node\"},\"schedulingGates\":[$lift]}}" >/dev/null; then
      placed=$((placed + 1))
    else
      failed="$arg (index $index, node $node)"; return 1
    fi
  done
}
if ! place; then
  say "kubectl patch pod $failed failed after $placed placed: the rest left to the scheduler's" \
    "choice"
  listing=$(list 2>/dev/null) || listing=
  release; exit 1
fi
say "$placed pod(s) of job $job given their nodes in the plan's order"
[ "$follow" = 1 ] || exit 0

# --follow: until the Job ends, a pod the Job controller makes anew (held by the gate from its
# template) gets its index's node too. Stopped (INT, TERM), it leaves no pod held.
following=1
say "following job $job until it ends: a pod made anew gets its index's node"
trap 'listing=$(list 2>/dev/null) || listing=; release; exit 130' INT TERM
while :; do
  sleep 2
  if ! state=$(kc get job "$job" -o 'jsonpath={.status.conditions[?(@.status=="True")].type}' 2>&1); then
    case $state in
      *NotFound*|*"not found"*) say "job $job is gone: following ends"; exit 0 ;;
    esac
    say "kubectl get job: $state"; continue
  fi
  case " $state " in
    *" Complete "*|*" Failed "*) say "job $job ended ($state): following ends"; exit 0 ;;
  esac
  out=$(list 2>&1) || { say "kubectl get pods: $out"; continue; }
  listing=$out
  sorted=$(printf '%s\n' "$listing" | sort_pods)
  extra=$(first_of extra)
  if [ -n "$extra" ]; then
    say "pod $extra of job $job is beyond the plan's $pods pods: left to the scheduler's choice"
    printf '%s\n' "$sorted" | awk '$1 == "extra" { print $3 }' | while read -r pod; do
      unhold "$pod"
    done
  fi
  before=$placed
  if ! place; then
    say "kubectl patch pod $failed failed: that pod is left to the scheduler's choice"
    unhold "${failed%% *}"
  fi
  [ "$placed" = "$before" ] || say "$((placed - before)) pod(s) made anew given their nodes"
done
)SH";

void replaceToken(std::string& s, std::string_view token, std::string_view value) {
  for (size_t at = s.find(token); at != std::string::npos; at = s.find(token, at + value.size()))
    s.replace(at, token.size(), value);
}

}  // namespace

bool isDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    if (!isDnsLabel(s.substr(start, dot == std::string_view::npos ? s.npos : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool isLabelValue(std::string_view s) {
  if (s.empty()) return true;
  if (s.size() > 63 || !isAlnum(s.front()) || !isAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return isAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool isQualifiedName(std::string_view s) {
  size_t slash = s.find('/');
  std::string_view name = s;
  if (slash != std::string_view::npos) {
    if (!isDnsSubdomain(s.substr(0, slash))) return false;
    name = s.substr(slash + 1);
  }
  return !name.empty() && isLabelValue(name);
}

std::string labelValueFrom(std::string_view name) {
  std::string out;
  for (char c : name) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += (isLowerAlnum(l) || l == '-' || l == '_' || l == '.') ? l : '-';
  }
  auto first = std::find_if(out.begin(), out.end(), isAlnum);
  out.erase(out.begin(), first);
  if (out.size() > 63) out.resize(63);
  while (!out.empty() && !isAlnum(out.back())) out.pop_back();
  return out.empty() ? std::string("x") : out;
}

std::vector<NodeMarks> k8sNodeMarks(const std::vector<std::string>& hosts,
                                    const std::vector<HierarchyLevel>& levels,
                                    const TopologyLinks* links, std::string_view time,
                                    std::string_view source) {
  if (links && links->hosts.size() != hosts.size())
    RANKMAP_THROW(InvalidInput, "{}: links: {} host links for {} hosts: expected one per host",
                  source, links->hosts.size(), hosts.size());
  std::vector<NodeMarks> out;
  std::map<std::string, size_t> indexOf;
  for (const auto& h : hosts) {
    if (!isDnsSubdomain(h))
      RANKMAP_THROW(InvalidInput,
                    "{}: host {:?}: expected a Kubernetes node name (a DNS-1123 subdomain: "
                    "lower-case letters, digits, '-' and '.'); name hosts as their nodes",
                    source, h);
    if (!indexOf.emplace(h, out.size()).second)
      RANKMAP_THROW(InvalidInput, "{}: host {:?} listed twice", source, h);
    out.push_back({h, {}, {}});
  }
  // Level values: as topology.conf's switch names, each level's base made unique.
  std::set<std::string> usedBases;
  for (size_t j = 0; j < levels.size(); ++j) {
    std::string base = labelValueFrom(levels[j].name);
    if (base.size() > 50) base.resize(50);
    if (usedBases.count(base)) base += "-l" + std::to_string(j + 1);
    usedBases.insert(base);
    std::vector<bool> seen(hosts.size(), false);
    for (size_t g = 0; g < levels[j].groups.size(); ++g) {
      std::string value = base + std::to_string(g);
      for (const auto& h : levels[j].groups[g]) {
        auto it = indexOf.find(h);
        if (it == indexOf.end())
          RANKMAP_THROW(InvalidInput, "{}: level {:?}: host {:?} is not one of the hosts", source,
                        levels[j].name, h);
        seen[it->second] = true;
        auto& m = out[it->second];
        m.labels.emplace_back(fmt::format("{}{}", kLevelLabelPrefix, j + 1), value);
        m.labels.emplace_back(fmt::format("{}{}", kTopographTierPrefix, j), value);
        if (links && j < links->uplinks.size() && g < links->uplinks[j].size()) {
          const LinkCapacity& up = links->uplinks[j][g];
          if (up.outMbps > 0)
            m.annotations.emplace_back(
                fmt::format("{}level-{}-uplink-out-mbps", kRateAnnotationPrefix, j + 1),
                rate(up.outMbps));
          if (up.inMbps > 0)
            m.annotations.emplace_back(
                fmt::format("{}level-{}-uplink-in-mbps", kRateAnnotationPrefix, j + 1),
                rate(up.inMbps));
        }
      }
    }
    for (size_t i = 0; i < hosts.size(); ++i)
      if (!seen[i])
        RANKMAP_THROW(InvalidInput, "{}: host {:?} is in no group of level {:?}", source, hosts[i],
                      levels[j].name);
  }
  if (links) {
    for (size_t i = 0; i < hosts.size(); ++i) {
      auto& a = out[i].annotations;
      const LinkCapacity& h = links->hosts[i];
      std::vector<std::pair<std::string, std::string>> first;
      if (h.outMbps > 0)
        first.emplace_back(std::string(kRateAnnotationPrefix) + "host-out-mbps", rate(h.outMbps));
      if (h.inMbps > 0)
        first.emplace_back(std::string(kRateAnnotationPrefix) + "host-in-mbps", rate(h.inMbps));
      a.insert(a.begin(), first.begin(), first.end());
    }
  }
  if (!time.empty())
    for (auto& m : out)
      if (!m.annotations.empty())
        m.annotations.emplace_back(std::string(kRateAnnotationPrefix) + "measured-at",
                                   std::string(time));
  return out;
}

std::string k8sLabelCommands(const std::vector<NodeMarks>& marks, std::string_view source) {
  std::string out = fmt::format(
      "# Kubernetes node labels written by `rankmap export --k8s-labels` from {}: {} node(s).\n",
      source, marks.size());
  auto words = [](const std::vector<std::pair<std::string, std::string>>& kv) {
    std::string s;
    // Annotation values are numbers and an RFC 3339 time, label values [A-Za-z0-9-_.]: none
    // needs shell quoting.
    for (const auto& [k, v] : kv) s += fmt::format(" {}={}", k, v);
    return s;
  };
  for (const auto& m : marks)
    if (!m.labels.empty())
      out += fmt::format("kubectl label nodes {}{} --overwrite\n", m.node, words(m.labels));
  for (const auto& m : marks)
    if (!m.annotations.empty())
      out += fmt::format("kubectl annotate nodes {}{} --overwrite\n", m.node, words(m.annotations));
  return out;
}

std::string kueueTopologyYaml(const std::vector<HierarchyLevel>& levels, std::string_view name,
                              std::string_view apiVersion, std::string_view source) {
  if (!isDnsSubdomain(name))
    RANKMAP_THROW(InvalidInput, "Kueue Topology name {:?}: expected a DNS-1123 subdomain",
                  std::string(name));
  if (apiVersion != kKueueApiVersion && apiVersion != "kueue.x-k8s.io/v1beta1" &&
      apiVersion != "kueue.x-k8s.io/v1alpha1")
    RANKMAP_THROW(InvalidInput,
                  "Kueue apiVersion {:?}: expected {}, kueue.x-k8s.io/v1beta1 or "
                  "kueue.x-k8s.io/v1alpha1",
                  std::string(apiVersion), kKueueApiVersion);
  if (levels.size() > 15)
    RANKMAP_THROW(InvalidInput, "{}: {} levels: Kueue allows at most 15 besides the host level",
                  source, levels.size());
  std::string out = fmt::format(
      "# Kueue Topology written by `rankmap export --kueue-topology` from {}: {} inferred "
      "level(s),\n# outermost first, then the node. Label the nodes with `rankmap export "
      "--k8s-labels`.\n",
      source, levels.size());
  out += fmt::format("apiVersion: {}\nkind: Topology\nmetadata:\n  name: {}\nspec:\n  levels:\n",
                     apiVersion, name);
  for (size_t j = levels.size(); j-- > 0;)
    out += fmt::format("    - nodeLabel: {}{}\n", kLevelLabelPrefix, j + 1);
  out += fmt::format("    - nodeLabel: {}\n", kHostnameLabel);
  return out;
}

std::string k8sPlacementScript(const Plan& plan, const PodPlacement& p, std::string_view source) {
  if (p.job.size() > 63 || !isDnsSubdomain(p.job))
    RANKMAP_THROW(InvalidInput,
                  "--k8s-placement {:?}: expected the Job's name (lower-case letters, digits, "
                  "'-' and '.', at most 63 characters)",
                  p.job);
  if (!p.nspace.empty() && !isDnsLabel(p.nspace))
    RANKMAP_THROW(InvalidInput,
                  "--namespace {:?}: expected a namespace name (a DNS-1123 label: lower-case "
                  "letters, digits and '-', at most 63 characters)",
                  p.nspace);
  if (!isQualifiedName(p.gate))
    RANKMAP_THROW(InvalidInput,
                  "--gate {:?}: expected a scheduling gate name (a qualified name such as {})",
                  p.gate, kPlacementGate);
  if (p.podsPerHost < 1 || p.podsPerHost > 1024)
    RANKMAP_THROW(InvalidInput, "--tasks-per-node {}: expected pods per node, 1 to 1024",
                  p.podsPerHost);
  if (p.waitSeconds < 1 || p.waitSeconds > 86400)
    RANKMAP_THROW(InvalidInput, "--wait {}: expected seconds, 1 to 86400", p.waitSeconds);
  if (plan.order.empty()) RANKMAP_THROW(InvalidInput, "{}: the plan has no hosts", source);
  for (const auto& h : plan.order)
    if (!isDnsSubdomain(h))
      RANKMAP_THROW(InvalidInput,
                    "{}: host {:?} is not a Kubernetes node name (a DNS-1123 subdomain): the "
                    "plan's hosts must be named as their nodes",
                    source, h);
  const size_t pods = plan.order.size() * static_cast<size_t>(p.podsPerHost);
  std::string out = fmt::format(
      "#!/bin/sh\n"
      "# Pod placement written by `rankmap export --k8s-placement` from {} (plan {}, {} "
      "node(s),\n# {} pod(s) per node): the pod of completion index i of the Indexed Job {} goes "
      "to the\n# plan's node at position i / {}, so that ranks taken from the completion index "
      "follow the plan.\n"
      "# The Job's pod template must list the scheduling gate {} (spec.template.spec.\n"
      "# schedulingGates) and run {} pods at once. Run this once the Job is created; it waits up "
      "to\n# {} s for every pod. If they are not all there, or a patch fails, it lifts the gate "
      "of every\n# pod it still holds without a node (the scheduler's own choice), says so and "
      "exits 1.\n{}# KUBECTL names another kubectl.\n",
      source, plan.hash.empty() ? std::string("without hash") : shortPlanHash(plan.hash),
      plan.order.size(), p.podsPerHost, p.job, p.podsPerHost, p.gate, pods, p.waitSeconds,
      p.follow ? "# Then it follows the Job until it ends (Complete or Failed): a pod the Job "
                 "controller makes\n# anew gets its index's node too; stopped, it lifts every "
                 "gate it holds.\n"
               : "# Run it again to place a pod the Job controller made anew (it waits, held, "
                 "until then),\n# or write it with --follow.\n");
  out += "node_of() {\n  case $1 in\n";
  for (size_t h = 0; h < plan.order.size(); ++h) {
    std::string indexes;
    for (int k = 0; k < p.podsPerHost; ++k)
      indexes += fmt::format("{}{}", k ? "|" : "", h * p.podsPerHost + k);
    out += fmt::format("    {}) echo '{}' ;;\n", indexes, plan.order[h]);
  }
  out += "  esac\n}\n";
  std::string body(kPlacementBody);
  replaceToken(body, "@JOB@", p.job);
  replaceToken(body, "@NS@", p.nspace);
  replaceToken(body, "@GATE@", p.gate);
  replaceToken(body, "@PODS@", std::to_string(pods));
  replaceToken(body, "@WAIT@", std::to_string(p.waitSeconds));
  replaceToken(body, "@FOLLOW@", p.follow ? "1" : "0");
  return out + body;
}

std::vector<Host> hostsFromEndpointSlices(const Json& doc, std::string_view source) {
  JsonReader r(doc, source);
  r.expectObject();
  std::vector<JsonReader> slices;
  if (doc.contains("items")) {
    auto items = r.at("items", "a list of EndpointSlices");
    for (size_t i = 0, n = items.arraySize(); i < n; ++i) slices.push_back(items.at(i));
  } else {
    slices.push_back(r);
  }
  // Per node: its address, and whether that address is IPv4 (which an IPv6 one never replaces).
  std::map<std::string, std::pair<std::string, bool>> nodes;
  for (const auto& s : slices) {
    s.expectObject();
    std::string kind = s.find("kind") ? s.at("kind").str() : "EndpointSlice";
    if (kind != "EndpointSlice")
      s.at("kind").fail("an EndpointSlice (kubectl get endpointslices -o json)");
    std::string type = s.at("addressType", "IPv4, IPv6 or FQDN").str();
    if (type == "FQDN") continue;  // names the probe would have to resolve
    if (type != "IPv4" && type != "IPv6") s.at("addressType").fail("IPv4, IPv6 or FQDN");
    auto eps = s.find("endpoints");
    if (!eps) continue;  // a slice with no endpoint is valid (and empty)
    for (size_t i = 0, n = eps->arraySize(); i < n; ++i) {
      auto e = eps->at(i);
      if (auto c = e.find("conditions"))
        if (auto t = c->find("terminating"); t && t->boolean()) continue;
      auto name = e.find("nodeName");
      if (!name) e.fail("an endpoint with nodeName (the agents' pods name the node they run on)");
      auto addrs = e.at("addresses", "the endpoint's addresses");
      if (addrs.arraySize() == 0) addrs.fail("at least one address");
      std::string address = addrs.at(size_t{0}).nonEmptyStr();
      if (type == "IPv6") address = "[" + address + "]";
      auto [it, fresh] = nodes.try_emplace(name->nonEmptyStr(), address, type == "IPv4");
      if (!fresh && !it->second.second && type == "IPv4") it->second = {address, true};
    }
  }
  if (nodes.empty())
    throw InvalidInput(
        fmt::format("{}: no endpoint (expected the agents' EndpointSlices, with "
                    "at least one endpoint that is not terminating)",
                    source));
  std::string text;
  for (const auto& [name, addr] : nodes) text += name + " " + addr.first + "\n";
  std::vector<Host> hosts;
  for (auto& e :
       parseHostsFile(text, fmt::format("{} (as a hosts file)", source), HostAddress::kRequired))
    hosts.push_back({std::move(e.name), std::move(e.address)});
  return hosts;
}

}  // namespace rankmap::launch
