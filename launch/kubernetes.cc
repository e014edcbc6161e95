#include "launch/kubernetes.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hosts_file.h"

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
