// Fuzz target for the declared-placement prior (reorder/prior.h): `rankmap plan --prior FILE
// [--prior-labels KEYS]` reads AWS DescribeInstanceTopology output, GCP instance lists,
// `kubectl get nodes -o json` or the native form, all written by other tools; and for the other
// kubectl JSON rankmap reads, the agents' EndpointSlices of `rankmap hosts --from-endpointslices`
// (launch/kubernetes.h hostsFromEndpointSlices), given the same document.
//
// Input: the first line is the --prior-labels value (may be empty), the rest the file. The file
// is parsed with parseJson + parseDeclaredPlacement, then compared with a 9-host topology in 3
// measured racks (hosts h0..h8, h8 also at 10.0.0.8), as `rankmap plan` does.
//
// Findings: a crash or sanitizer report; an exception other than InvalidInput out of the
// parsers or any exception out of comparePrior; a parsed placement that breaks the contract of
// prior.h (every host with as many groups as there are levels, at least one, no empty or twice
// declared ID, no empty group ID); a comparison that counts a host the prior does not cover, or
// names a host or switch in a disagreement that is not in the topology or the prior; hosts from
// EndpointSlices that are not a valid hosts file (common/hosts_file.h: names, one per node,
// sorted, each with an address) or an exception other than InvalidInput from them.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/hosts_file.h"
#include "common/json.h"
#include "common/topology.h"
#include "launch/kubernetes.h"
#include "reorder/prior.h"

namespace {

using namespace rankmap;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_prior: %s\n", what.c_str());
  std::abort();
}

struct Racks {
  Topology t;
  std::vector<int> rackOf;
  Racks() {
    std::vector<Host> hosts;
    for (int i = 0; i < 9; ++i)
      hosts.push_back({"h" + std::to_string(i), i == 8 ? "10.0.0.8:7411" : ""});
    t = Topology::empty(std::move(hosts));
    for (size_t a = 0; a < 9; ++a) {
      rackOf.push_back(static_cast<int>(a / 3));
      for (size_t b = 0; b < 9; ++b)
        if (a != b) t.bandwidthMbps.at(a, b) = a / 3 == b / 3 ? 1000.0 : 200.0;
    }
  }
};

void checkPlacement(const reorder::DeclaredPlacement& d) {
  std::set<std::string> ids;
  if (d.levels.empty() && !d.hosts.empty()) finding("hosts declared with no level");
  for (const auto& h : d.hosts) {
    if (h.id.empty()) finding("a host with an empty ID");
    if (!ids.insert(h.id).second) finding("host " + h.id + " declared twice");
    if (h.groups.size() != d.levels.size())
      finding("host " + h.id + " has " + std::to_string(h.groups.size()) + " groups for " +
              std::to_string(d.levels.size()) + " levels");
    for (const auto& g : h.groups)
      if (g.empty()) finding("host " + h.id + " has an empty group ID");
  }
}

void checkComparison(const reorder::DeclaredPlacement& d, const Topology& t,
                     const PlanPrior& p) {
  std::set<std::string> topologyHosts, switches;
  for (const auto& h : t.hosts) topologyHosts.insert(h.name);
  for (const auto& h : d.hosts)
    if (!h.groups.empty()) switches.insert(h.groups.back());
  if (p.declared != d.hosts.size()) finding("declared count differs from the placement");
  for (const auto& [name, groups] : p.hosts) {
    if (!topologyHosts.count(name)) finding("covered host " + name + " is not in the topology");
    if (groups.size() != d.levels.size()) finding("covered host " + name + " lost levels");
  }
  for (const auto& dis : p.disagreements) {
    if (dis.parts.size() < 2) finding("a disagreement with fewer than two parts");
    for (const auto& part : dis.parts)
      for (const auto& name : part)
        if (!p.hosts.count(name)) finding("disagreement names uncovered host " + name);
    for (const auto& s : dis.declared)
      if (!switches.count(s)) finding("disagreement names undeclared switch " + s);
  }
}

void checkEndpointSlices(const Json& doc) {
  std::vector<Host> hosts;
  try {
    hosts = launch::hostsFromEndpointSlices(doc, "slices.json");
  } catch (const InvalidInput&) {
    return;
  }
  if (hosts.empty()) finding("EndpointSlices gave an empty hosts list");
  std::string text;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (i > 0 && !(hosts[i - 1].name < hosts[i].name)) finding("hosts not sorted or repeated");
    if (hosts[i].address.empty()) finding("host " + hosts[i].name + " without an address");
    text += hosts[i].name + " " + hosts[i].address + "\n";
  }
  try {
    if (parseHostsFile(text, "hosts", HostAddress::kRequired).size() != hosts.size())
      finding("the hosts file written reads back with another count");
  } catch (const InvalidInput& e) {
    finding(std::string("the hosts file written does not read back: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Racks racks;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nl = in.find('\n');
  std::string_view labels = nl == std::string_view::npos ? std::string_view() : in.substr(0, nl);
  std::string_view text = nl == std::string_view::npos ? in : in.substr(nl + 1);

  Json doc;
  try {
    doc = parseJson(text, "prior.json");
  } catch (const InvalidInput&) {
    return 0;
  }
  checkEndpointSlices(doc);
  reorder::DeclaredPlacement d;
  try {
    std::vector<std::string> keys = reorder::parseLabelKeys(labels, "--prior-labels");
    d = reorder::parseDeclaredPlacement(doc, "prior.json", keys);
  } catch (const InvalidInput&) {
    return 0;
  }
  checkPlacement(d);
  // Outside a try: any exception is a finding. Both the measured racks and "nothing measured".
  checkComparison(d, racks.t, reorder::comparePrior(d, racks.t, racks.rackOf, "rack"));
  PlanPrior none = reorder::comparePrior(d, racks.t, {}, "");
  if (!none.disagreements.empty()) finding("disagreements with nothing measured");
  checkComparison(d, racks.t, none);
  return 0;
}
