#include "reorder/prior.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/files.h"

namespace rankmap::reorder {
namespace {

[[noreturn]] void bad(const JsonReader& r, std::string_view what) {
  throw InvalidInput(
      fmt::format("{}: at {}: {}", r.source(), r.path().empty() ? "/" : r.path(), what));
}

// Adds one host, checking what every form shares: a non-empty ID not declared before, and as
// many group IDs as the levels (set from the first host when the form does not name them).
class Builder {
 public:
  explicit Builder(DeclaredPlacement& d) : d_(d) {}

  void add(const JsonReader& at, std::string id, std::vector<std::string> groups,
           std::vector<std::string> aliases = {}) {
    if (id.empty()) bad(at, "a host with an empty name");
    if (groups.empty()) bad(at, fmt::format("host '{}': expected at least one group ID", id));
    for (const auto& g : groups)
      if (g.empty()) bad(at, fmt::format("host '{}': expected non-empty group IDs", id));
    if (d_.levels.empty())
      for (size_t l = 0; l < groups.size(); ++l)
        d_.levels.push_back(fmt::format("level-{}", l + 1));
    if (groups.size() != d_.levels.size())
      bad(at, fmt::format("host '{}': expected {} group IDs, one per level ({}), got {}", id,
                          d_.levels.size(), fmt::join(d_.levels, ", "), groups.size()));
    auto [it, fresh] = seen_.emplace(id, at.path());
    if (!fresh) bad(at, fmt::format("host '{}' declared twice (also at {})", id, it->second));
    d_.hosts.push_back({std::move(id), std::move(aliases), std::move(groups)});
  }

 private:
  DeclaredPlacement& d_;
  std::map<std::string, std::string> seen_;  // ID -> where it was declared
};

// AWS DescribeInstanceTopology: NetworkNodes lists the layers top to bottom.
void parseAws(const JsonReader& r, DeclaredPlacement& d) {
  d.format = "aws";
  Builder b(d);
  auto inst = r.at("Instances", "an array of instances");
  size_t n = inst.arraySize();
  if (n == 0) inst.fail("at least one instance");
  for (size_t i = 0; i < n; ++i) {
    auto e = inst.at(i);
    std::string id = e.at("InstanceId", "an instance ID").nonEmptyStr();
    auto nodes = e.at("NetworkNodes", "an array of network node IDs, top first");
    std::vector<std::string> groups;
    for (size_t k = 0, m = nodes.arraySize(); k < m; ++k)
      groups.push_back(nodes.at(k).nonEmptyStr());
    if (d.levels.empty())
      for (size_t l = 0; l < groups.size(); ++l)
        d.levels.push_back(fmt::format("network-node-layer-{}", l + 1));
    b.add(nodes, std::move(id), std::move(groups));
  }
}

// "/CLUSTER/BLOCK/HOST" without its last element (the physical machine is no switch).
std::vector<std::string> physicalHostGroups(const JsonReader& at) {
  std::string path = at.nonEmptyStr();
  if (path.front() != '/') at.fail("a path \"/CLUSTER/BLOCK/HOST\"");
  std::vector<std::string> parts;
  for (size_t pos = 1; pos <= path.size();) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    parts.push_back(path.substr(pos, slash - pos));
    pos = slash + 1;
  }
  if (parts.size() < 2 ||
      std::any_of(parts.begin(), parts.end(), [](auto& p) { return p.empty(); }))
    at.fail("a path \"/CLUSTER/BLOCK/HOST\" (non-empty elements, at least two)");
  parts.pop_back();
  return parts;
}

void gcpLevels(DeclaredPlacement& d, size_t depth) {
  if (!d.levels.empty()) return;
  static const char* kNames[] = {"cluster", "block", "subblock"};
  for (size_t l = 0; l < depth; ++l)
    d.levels.push_back(depth <= 3 ? std::string(kNames[l])
                                  : fmt::format("physical-host-{}", l + 1));
}

// GCP instances: name, first network interface's address, and resourceStatus.
void parseGcpInstances(const JsonReader& list, DeclaredPlacement& d) {
  d.format = "gcp";
  Builder b(d);
  size_t n = list.arraySize();
  if (n == 0) list.fail("at least one instance");
  for (size_t i = 0; i < n; ++i) {
    auto e = list.at(i);
    std::string name = e.at("name", "the instance name").nonEmptyStr();
    std::vector<std::string> aliases;
    if (auto nics = e.find("networkInterfaces"))
      for (size_t k = 0, m = nics->arraySize(); k < m; ++k)
        if (auto ip = nics->at(k).find("networkIP")) aliases.push_back(ip->nonEmptyStr());
    auto rs = e.at("resourceStatus", "resourceStatus with physicalHost or physicalHostTopology");
    std::vector<std::string> groups;
    std::optional<JsonReader> at;
    if (auto topo = rs.find("physicalHostTopology")) {
      topo->expectObject();
      for (const char* key : {"cluster", "block", "subblock"})
        if (auto v = topo->find(key)) groups.push_back(v->nonEmptyStr());
      if (groups.empty()) topo->fail("an object with cluster, block and subblock");
      at = topo;
    } else {
      auto ph = rs.at("physicalHost", "a path \"/CLUSTER/BLOCK/HOST\" (or physicalHostTopology)");
      groups = physicalHostGroups(ph);
      at = ph;
    }
    gcpLevels(d, groups.size());
    b.add(*at, std::move(name), std::move(groups), std::move(aliases));
  }
}

void parseGcpMap(const JsonReader& r, DeclaredPlacement& d) {
  d.format = "gcp";
  Builder b(d);
  auto m = r.at("physical_hosts", "an object host -> \"/CLUSTER/BLOCK/HOST\"");
  m.expectObject();
  if (m.json().empty()) m.fail("at least one host");
  for (const auto& [name, val] : m.json().items()) {
    JsonReader e(val, r.source(), m.path() + "/" + name);
    auto groups = physicalHostGroups(e);
    gcpLevels(d, groups.size());
    b.add(e, name, std::move(groups));
  }
}

// Kubernetes nodes: the label family (given, or the first known one some node carries).
void parseK8s(const JsonReader& items, DeclaredPlacement& d,
              const std::vector<std::string>& labelKeys) {
  d.format = "k8s_labels";
  size_t n = items.arraySize();
  if (n == 0) items.fail("at least one node");
  auto labelsOf = [&](size_t i) -> std::optional<JsonReader> {
    return items.at(i).at("metadata", "node metadata").find("labels");
  };
  std::vector<std::string> keys = labelKeys;
  if (keys.empty()) {
    for (const auto& family : knownLabelFamilies()) {
      for (size_t i = 0; i < n && keys.empty(); ++i)
        if (auto l = labelsOf(i); l && l->json().is_object())
          for (const auto& k : family)
            if (l->json().contains(k)) keys = family;
      if (!keys.empty()) break;
    }
    if (keys.empty())
      items.fail(
          "nodes labelled with a known topology label family (topology.k8s.aws/"
          "network-node-layer-N, cloud.google.com/gce-topology-block, fabric.topograph.run/"
          "tier-N, network.topology.nvidia.com/leaf) or label keys named with --prior-labels");
  }
  d.levels = keys;
  Builder b(d);
  for (size_t i = 0; i < n; ++i) {
    auto node = items.at(i);
    auto meta = node.at("metadata", "node metadata");
    std::string name = meta.at("name", "the node name").nonEmptyStr();
    auto labels = meta.find("labels");
    std::vector<std::string> groups;
    std::string missing;
    if (labels) labels->expectObject();
    for (const auto& k : keys) {
      if (labels && labels->json().contains(k))
        groups.push_back(labels->at(k).nonEmptyStr());
      else if (missing.empty())
        missing = k;
    }
    if (groups.empty()) continue;  // not a node the declaration covers (e.g. control plane)
    if (!missing.empty())
      bad(labels ? *labels : meta,
          fmt::format("node '{}': label '{}' missing (expected every one of {}, or none)", name,
                      missing, fmt::join(keys, ", ")));
    std::vector<std::string> aliases;
    if (auto st = node.find("status"))
      if (auto addrs = st->find("addresses"))
        for (size_t k = 0, m = addrs->arraySize(); k < m; ++k)
          if (auto a = addrs->at(k).find("address")) aliases.push_back(a->nonEmptyStr());
    b.add(*labels, std::move(name), std::move(groups), std::move(aliases));
  }
  if (d.hosts.empty())
    items.fail(fmt::format("at least one node labelled with {}", fmt::join(keys, ", ")));
}

void parseNative(const JsonReader& r, DeclaredPlacement& d) {
  d.format = "native";
  if (auto lv = r.find("levels")) {
    for (size_t i = 0, n = lv->arraySize(); i < n; ++i) d.levels.push_back(lv->at(i).nonEmptyStr());
    if (d.levels.empty()) lv->fail("at least one level name");
  }
  Builder b(d);
  auto hosts = r.at("hosts", "an object host -> group IDs, top first");
  hosts.expectObject();
  if (hosts.json().empty()) hosts.fail("at least one host");
  for (const auto& [name, val] : hosts.json().items()) {
    JsonReader e(val, r.source(), hosts.path() + "/" + name);
    std::vector<std::string> groups;
    for (size_t i = 0, n = e.arraySize(); i < n; ++i) groups.push_back(e.at(i).nonEmptyStr());
    b.add(e, name, std::move(groups));
  }
}

// {"host_names": {"declared ID": "topology host"}}: one more name per declared host.
void applyHostNames(const JsonReader& r, DeclaredPlacement& d) {
  if (!r.json().is_object()) return;
  auto m = r.find("host_names");
  if (!m) return;
  m->expectObject();
  for (const auto& [id, val] : m->json().items()) {
    JsonReader e(val, r.source(), m->path() + "/" + id);
    auto it = std::find_if(d.hosts.begin(), d.hosts.end(),
                           [&key = id](const DeclaredHost& h) { return h.id == key; });
    if (it == d.hosts.end()) bad(e, fmt::format("'{}' is not a declared host", id));
    it->aliases.push_back(e.nonEmptyStr());
  }
}

// Median of `v` (0 when empty).
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  double hi = v[mid];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + static_cast<long>(mid));
  return (lo + hi) / 2;
}

// The measured single-flow rate a -> b: the matrix value, else the link model's path rate.
std::optional<double> rate(const Topology& t, int a, int b) {
  if (t.hasMatrices())
    if (const auto& v = t.bandwidthMbps.at(static_cast<size_t>(a), static_cast<size_t>(b)); v)
      return v;
  return t.pathMbps(a, b);
}

// The median rate over both directions of every pair (a, b) with a, b in different parts.
double ratesBetween(const Topology& t, const std::vector<std::vector<int>>& parts) {
  std::vector<double> v;
  for (size_t i = 0; i < parts.size(); ++i)
    for (size_t j = 0; j < parts.size(); ++j)
      if (i != j)
        for (int a : parts[i])
          for (int b : parts[j])
            if (auto r = rate(t, a, b)) v.push_back(*r);
  return median(std::move(v));
}

// Rounded to 0.1 Mbit/s: the plan is a document for people and byte-stable.
double roundMbps(double x) { return std::round(x * 10) / 10; }

}  // namespace

std::vector<std::vector<std::string>> knownLabelFamilies() {
  return {
      {"topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
       "topology.k8s.aws/network-node-layer-3"},
      {"cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"},
      {"fabric.topograph.run/tier-2", "fabric.topograph.run/tier-1", "fabric.topograph.run/tier-0"},
      {"network.topology.nvidia.com/core", "network.topology.nvidia.com/spine",
       "network.topology.nvidia.com/leaf"},
  };
}

DeclaredPlacement parseDeclaredPlacement(const Json& doc, std::string_view source,
                                         const std::vector<std::string>& labelKeys) {
  JsonReader r(doc, source);
  DeclaredPlacement d;
  d.source = std::string(source);
  auto has = [&](const char* key) { return doc.is_object() && doc.contains(key); };
  if (has("Instances")) {
    parseAws(r, d);
  } else if (has("physical_hosts")) {
    parseGcpMap(r, d);
  } else if (has("hosts")) {
    parseNative(r, d);
  } else if (doc.is_array()) {
    parseGcpInstances(r, d);
  } else if (has("items")) {
    auto items = r.at("items");
    items.arraySize();
    bool k8s = doc["items"].empty() ||
               (doc["items"][0].is_object() && doc["items"][0].contains("metadata"));
    if (k8s)
      parseK8s(items, d, labelKeys);
    else
      parseGcpInstances(items, d);
  } else {
    r.fail(
        "a declared placement: AWS DescribeInstanceTopology output (/Instances), GCP instances "
        "(an array, /items or /physical_hosts), `kubectl get nodes -o json` (/items) or "
        "{\"hosts\": {host: [group IDs, top first]}}");
  }
  if (!labelKeys.empty() && d.format != "k8s_labels")
    throw InvalidInput(fmt::format(
        "{}: label keys were named ({}) but this is not `kubectl get nodes -o json` output "
        "(format {})",
        source, fmt::join(labelKeys, ", "), d.format));
  applyHostNames(r, d);
  return d;
}

std::vector<std::string> parseLabelKeys(std::string_view list, std::string_view source) {
  std::vector<std::string> keys;
  if (list.empty()) return keys;
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = std::min(list.find(',', pos), list.size());
    std::string key(list.substr(pos, comma - pos));
    if (key.empty())
      throw InvalidInput(
          fmt::format("{} '{}': expected label keys separated by commas, top "
                      "level first (an empty key at byte {})",
                      source, list, pos));
    keys.push_back(std::move(key));
    pos = comma + 1;
  }
  return keys;
}

DeclaredPlacement loadDeclaredPlacement(const std::string& path,
                                        const std::vector<std::string>& labelKeys) {
  return parseDeclaredPlacement(readJsonFile(path), path, labelKeys);
}

PlanPrior comparePrior(const DeclaredPlacement& prior, const Topology& t,
                       const std::vector<int>& measuredGroupOf, std::string_view measuredLevel) {
  PlanPrior out;
  out.source = prior.source;
  out.format = prior.format;
  out.levels = prior.levels;
  out.declared = prior.hosts.size();
  out.measuredLevel = measuredGroupOf.empty() ? "" : std::string(measuredLevel);

  // Topology host -> declared host, by name first, then by address.
  std::map<std::string, size_t> byName;
  for (size_t i = 0; i < prior.hosts.size(); ++i) {
    byName.emplace(prior.hosts[i].id, i);
    for (const auto& a : prior.hosts[i].aliases) byName.emplace(a, i);
  }
  const size_t n = t.size();
  std::vector<int> declOf(n, -1);
  for (size_t h = 0; h < n; ++h) {
    auto it = byName.find(t.hosts[h].name);
    if (it == byName.end() && !t.hosts[h].address.empty()) it = byName.find(t.hosts[h].ip());
    if (it == byName.end()) continue;
    declOf[h] = static_cast<int>(it->second);
    out.hosts[t.hosts[h].name] = prior.hosts[it->second].groups;
  }
  if (measuredGroupOf.empty()) return out;
  RANKMAP_ASSERT(measuredGroupOf.size() == n);

  // The lowest declared switch of each covered host, keyed by its whole path.
  std::map<std::vector<std::string>, int> switchIndex;
  std::vector<std::string> switchName;  // index -> the lowest ID
  std::vector<int> switchOf(n, -1);
  for (size_t h = 0; h < n; ++h) {
    if (declOf[h] < 0) continue;
    const auto& g = prior.hosts[static_cast<size_t>(declOf[h])].groups;
    auto [it, fresh] = switchIndex.emplace(g, static_cast<int>(switchName.size()));
    if (fresh) switchName.push_back(g.back());
    switchOf[h] = it->second;
  }

  // Reference rates over every covered pair: inside one measured group and across groups.
  std::vector<double> same, cross;
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      if (a != b && declOf[a] >= 0 && declOf[b] >= 0)
        if (auto r = rate(t, static_cast<int>(a), static_cast<int>(b)))
          (measuredGroupOf[a] == measuredGroupOf[b] ? same : cross).push_back(*r);
  out.sameGroupMbps = roundMbps(median(std::move(same)));
  out.crossGroupMbps = roundMbps(median(std::move(cross)));

  // Split the covered hosts of one group of `outer` by their group of `inner`: a disagreement
  // wherever a group holds hosts of two or more inner groups. Groups in order of their lowest
  // host, parts in order of their lowest host.
  auto split = [&](const std::vector<int>& outer, const std::vector<int>& inner, bool together) {
    std::map<int, std::map<int, std::vector<int>>> byOuter;  // outer -> inner -> hosts
    std::vector<int> outerOrder;
    for (size_t h = 0; h < n; ++h) {
      if (declOf[h] < 0) continue;
      if (!byOuter.count(outer[h])) outerOrder.push_back(outer[h]);
      byOuter[outer[h]][inner[h]].push_back(static_cast<int>(h));
    }
    for (int o : outerOrder) {
      const auto& parts = byOuter[o];
      if (parts.size() < 2) continue;
      std::vector<std::pair<int, std::vector<int>>> ordered(parts.begin(), parts.end());
      std::sort(ordered.begin(), ordered.end(),
                [](const auto& x, const auto& y) { return x.second.front() < y.second.front(); });
      PriorDisagreement d;
      std::vector<std::vector<int>> hostSets;
      if (together) {
        d.kind = PriorDisagreement::kDeclaredTogether;
        d.declared.push_back(switchName[static_cast<size_t>(o)]);
      } else {
        d.kind = PriorDisagreement::kDeclaredApart;
        d.measured.push_back(o);
      }
      for (const auto& [in, hosts] : ordered) {
        if (together)
          d.measured.push_back(in);
        else
          d.declared.push_back(switchName[static_cast<size_t>(in)]);
        auto& names = d.parts.emplace_back();
        for (int h : hosts) names.push_back(t.hosts[static_cast<size_t>(h)].name);
        hostSets.push_back(hosts);
      }
      d.betweenMbps = roundMbps(ratesBetween(t, hostSets));
      out.disagreements.push_back(std::move(d));
    }
  };
  split(switchOf, measuredGroupOf, true);
  split(measuredGroupOf, switchOf, false);
  return out;
}

}  // namespace rankmap::reorder
