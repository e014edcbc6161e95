// The declared placement (reorder/prior.h): each input format, good and bad, the comparison with
// measured groups, the plan's record of it, and that it changes nothing else in a plan.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "common/plan.h"
#include "reorder/planner.h"
#include "reorder/prior.h"
#include "reorder/report.h"
#include "tests/unit/reorder/test_util.h"

namespace rankmap::reorder {
namespace {

DeclaredPlacement parse(const std::string& text, const std::vector<std::string>& keys = {}) {
  return parseDeclaredPlacement(parseJson(text, "prior.json"), "prior.json", keys);
}

// The message of the InvalidInput that parsing `text` throws ("" when it does not throw).
std::string parseError(const std::string& text, const std::vector<std::string>& keys = {}) {
  try {
    parse(text, keys);
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(PriorFormats, Native) {
  auto d = parse(R"({"levels": ["spine", "leaf"],
                     "hosts": {"a": ["s1", "l1"], "b": ["s1", "l2"]}})");
  EXPECT_EQ(d.format, "native");
  EXPECT_EQ(d.levels, (std::vector<std::string>{"spine", "leaf"}));
  ASSERT_EQ(d.hosts.size(), 2u);
  EXPECT_EQ(d.hosts[0].id, "a");
  EXPECT_EQ(d.hosts[1].groups, (std::vector<std::string>{"s1", "l2"}));
  // Without names the levels are numbered.
  EXPECT_EQ(parse(R"({"hosts": {"a": ["x"]}})").levels, (std::vector<std::string>{"level-1"}));
}

TEST(PriorFormats, NativeBad) {
  EXPECT_HAS(parseError(R"({"levels": ["spine", "leaf"], "hosts": {"a": ["s1"]}})"),
             "prior.json: at /hosts/a: host 'a': expected 2 group IDs, one per level "
             "(spine, leaf), got 1");
  EXPECT_HAS(parseError(R"({"hosts": {"a": ["s1", "l1"], "b": ["s1"]}})"),
             "at /hosts/b: host 'b': expected 2 group IDs");
  EXPECT_HAS(parseError(R"({"hosts": {"a": []}})"), "host 'a': expected at least one group ID");
  EXPECT_HAS(parseError(R"({"hosts": {"a": ["s1", ""]}})"),
             "prior.json: at /hosts/a/1: expected a non-empty string");
  EXPECT_HAS(parseError(R"({"hosts": {"a": "s1"}})"), "at /hosts/a: expected an array");
  EXPECT_HAS(parseError(R"({"hosts": {}})"), "at /hosts: expected at least one host");
  EXPECT_HAS(parseError(R"({"nodes": []})"), "prior.json: at /: expected a declared placement");
  EXPECT_HAS(parseError(R"({"hosts": {"a": ["x"]}, "host_names": {"b": "vm1"}})"),
             "at /host_names/b: 'b' is not a declared host");
  // Label keys belong to node labels only.
  EXPECT_HAS(parseError(R"({"hosts": {"a": ["x"]}})", {"rack"}),
             "label keys were named (rack) but this is not `kubectl get nodes -o json`");
}

// DescribeInstanceTopology as the AWS CLI prints it (fields it has beyond these are ignored).
constexpr const char* kAws = R"({
  "Instances": [
    {"InstanceId": "i-0aaa", "InstanceType": "p5.48xlarge", "GroupName": "pg",
     "NetworkNodes": ["nn-1", "nn-2", "nn-3"], "AvailabilityZone": "us-east-1a",
     "ZoneId": "use1-az1"},
    {"InstanceId": "i-0bbb", "InstanceType": "p5.48xlarge",
     "NetworkNodes": ["nn-1", "nn-2", "nn-4"], "AvailabilityZone": "us-east-1a",
     "ZoneId": "use1-az1"}
  ],
  "host_names": {"i-0bbb": "vm1"}
})";

TEST(PriorFormats, Aws) {
  auto d = parse(kAws);
  EXPECT_EQ(d.format, "aws");
  EXPECT_EQ(d.levels, (std::vector<std::string>{"network-node-layer-1", "network-node-layer-2",
                                                "network-node-layer-3"}));
  ASSERT_EQ(d.hosts.size(), 2u);
  EXPECT_EQ(d.hosts[0].id, "i-0aaa");
  EXPECT_EQ(d.hosts[1].groups.back(), "nn-4");
  EXPECT_EQ(d.hosts[1].aliases, (std::vector<std::string>{"vm1"}));
}

TEST(PriorFormats, AwsBad) {
  EXPECT_HAS(parseError(R"({"Instances": [{"InstanceId": "i-1"}]})"),
             "prior.json: at /Instances/0: missing field 'NetworkNodes' (expected an array of "
             "network node IDs, top first)");
  EXPECT_HAS(parseError(R"({"Instances": [{"InstanceId": "i-1", "NetworkNodes": ["a", "b"]},
                                          {"InstanceId": "i-2", "NetworkNodes": ["a"]}]})"),
             "at /Instances/1/NetworkNodes: host 'i-2': expected 2 group IDs, one per level "
             "(network-node-layer-1, network-node-layer-2), got 1");
  EXPECT_HAS(parseError(R"({"Instances": [{"InstanceId": "i-1", "NetworkNodes": ["a"]},
                                          {"InstanceId": "i-1", "NetworkNodes": ["b"]}]})"),
             "at /Instances/1/NetworkNodes: host 'i-1' declared twice (also at "
             "/Instances/0/NetworkNodes)");
  EXPECT_HAS(parseError(R"({"Instances": []})"), "at /Instances: expected at least one instance");
  EXPECT_HAS(parseError(R"({"Instances": [{"InstanceId": 7, "NetworkNodes": ["a"]}]})"),
             "at /Instances/0/InstanceId: expected a string, got integer");
}

TEST(PriorFormats, Gcp) {
  // gcloud compute instances list --format=json: the physical host's last element is dropped.
  auto d = parse(R"([
    {"name": "vm0", "networkInterfaces": [{"networkIP": "10.0.0.2"}],
     "resourceStatus": {"physicalHost": "/c1/b1/h1"}},
    {"name": "vm1", "resourceStatus": {"physicalHost": "/c1/b2/h7"}}])");
  EXPECT_EQ(d.format, "gcp");
  EXPECT_EQ(d.levels, (std::vector<std::string>{"cluster", "block"}));
  EXPECT_EQ(d.hosts[0].groups, (std::vector<std::string>{"c1", "b1"}));
  EXPECT_EQ(d.hosts[0].aliases, (std::vector<std::string>{"10.0.0.2"}));
  // The API's list with physicalHostTopology.
  auto t = parse(R"({"items": [{"name": "vm0", "resourceStatus": {"physicalHostTopology":
      {"cluster": "c1", "block": "b1", "subblock": "s3", "host": "h1"}}}]})");
  EXPECT_EQ(t.levels, (std::vector<std::string>{"cluster", "block", "subblock"}));
  EXPECT_EQ(t.hosts[0].groups, (std::vector<std::string>{"c1", "b1", "s3"}));
  // A plain map of physical_host strings.
  auto m = parse(R"({"physical_hosts": {"vm0": "/c1/b1/h1", "vm1": "/c1/b1/h2"}})");
  EXPECT_EQ(m.hosts.size(), 2u);
  EXPECT_EQ(m.hosts[1].groups, (std::vector<std::string>{"c1", "b1"}));
}

TEST(PriorFormats, GcpBad) {
  EXPECT_HAS(parseError(R"({"physical_hosts": {"vm0": "c1/b1/h1"}})"),
             "prior.json: at /physical_hosts/vm0: expected a path \"/CLUSTER/BLOCK/HOST\"");
  EXPECT_HAS(parseError(R"({"physical_hosts": {"vm0": "/h1"}})"),
             "at /physical_hosts/vm0: expected a path \"/CLUSTER/BLOCK/HOST\" (non-empty "
             "elements, at least two)");
  EXPECT_HAS(parseError(R"([{"name": "vm0", "resourceStatus": {}}])"),
             "at /0/resourceStatus: missing field 'physicalHost'");
  EXPECT_HAS(parseError(R"([{"resourceStatus": {"physicalHost": "/a/b/c"}}])"),
             "at /0: missing field 'name'");
}

// `kubectl get nodes -o json`, trimmed to what matters.
std::string k8sNode(const std::string& name, const std::string& labels,
                    const std::string& ip = "") {
  std::string addresses =
      ip.empty() ? "[]" : R"([{"type": "InternalIP", "address": ")" + ip + R"("}])";
  return R"({"metadata": {"name": ")" + name + R"(", "labels": {)" + labels +
         R"(}}, "status": {"addresses": )" + addresses + "}}";
}

TEST(PriorFormats, KubernetesLabels) {
  const std::string aws = R"("topology.k8s.aws/network-node-layer-1": "nn-1",
                             "topology.k8s.aws/network-node-layer-2": "nn-2",
                             "topology.k8s.aws/network-node-layer-3": "nn-)";
  std::string doc = R"({"apiVersion": "v1", "kind": "List", "items": [)" +
                    k8sNode("n0", aws + R"(3")", "10.0.0.1") + "," +
                    k8sNode("cp", R"("node-role.kubernetes.io/control-plane": "")") + "," +
                    k8sNode("n1", aws + R"(4")") + "]}";
  auto d = parse(doc);
  EXPECT_EQ(d.format, "k8s_labels");
  EXPECT_EQ(d.levels.back(), "topology.k8s.aws/network-node-layer-3");
  ASSERT_EQ(d.hosts.size(), 2u);  // the control-plane node has none of the labels
  EXPECT_EQ(d.hosts[0].aliases, (std::vector<std::string>{"10.0.0.1"}));
  EXPECT_EQ(d.hosts[1].groups, (std::vector<std::string>{"nn-1", "nn-2", "nn-4"}));

  // Topograph's tiers: tier 0 is closest to the node, so it is the last level.
  auto tg = parse(R"({"items": [)" + k8sNode("n0", R"("fabric.topograph.run/tier-0": "leaf1",
                                   "fabric.topograph.run/tier-1": "spine1",
                                   "fabric.topograph.run/tier-2": "core1")") +
                  "]}");
  EXPECT_EQ(tg.hosts[0].groups, (std::vector<std::string>{"core1", "spine1", "leaf1"}));

  // GCP's labels: block and subblock (the host label is the physical machine, no switch).
  auto g = parse(R"({"items": [)" + k8sNode("n0", R"("cloud.google.com/gce-topology-block": "b1",
                                  "cloud.google.com/gce-topology-subblock": "s1",
                                  "cloud.google.com/gce-topology-host": "h1")") +
                 "]}");
  EXPECT_EQ(g.hosts[0].groups, (std::vector<std::string>{"b1", "s1"}));

  // Keys the user names (Kueue-style levels set by hand).
  auto u = parse(R"({"items": [)" + k8sNode("n0", R"("example.com/block": "b1",
                                                     "example.com/rack": "r1")") +
                     "]}",
                 {"example.com/block", "example.com/rack"});
  EXPECT_EQ(u.levels, (std::vector<std::string>{"example.com/block", "example.com/rack"}));
  EXPECT_EQ(u.hosts[0].groups, (std::vector<std::string>{"b1", "r1"}));
}

TEST(PriorFormats, KubernetesLabelsBad) {
  EXPECT_HAS(parseError(R"({"items": [)" +
                        k8sNode("n0", R"("topology.k8s.aws/network-node-layer-1": "nn-1",
                                         "topology.k8s.aws/network-node-layer-2": "nn-2")") +
                        "]}"),
             "prior.json: at /items/0/metadata/labels: node 'n0': label "
             "'topology.k8s.aws/network-node-layer-3' missing (expected every one of");
  EXPECT_HAS(parseError(R"({"items": [)" + k8sNode("n0", R"("a": "b")") + "]}"),
             "at /items: expected nodes labelled with a known topology label family");
  EXPECT_HAS(parseError(R"({"items": [)" + k8sNode("n0", R"("a": "b")") + "]}", {"rack"}),
             "at /items: expected at least one node labelled with rack");
  EXPECT_HAS(parseError(R"({"items": [)" + k8sNode("n0", R"("rack": "")") + "]}", {"rack"}),
             "at /items/0/metadata/labels/rack: expected a non-empty string");
}

TEST(PriorFormats, LabelKeyList) {
  EXPECT_EQ(parseLabelKeys("a/b,c", "--prior-labels"), (std::vector<std::string>{"a/b", "c"}));
  EXPECT_TRUE(parseLabelKeys("", "--prior-labels").empty());
  try {
    parseLabelKeys("a,,b", "--prior-labels");
    FAIL() << "an empty key must be refused";
  } catch (const InvalidInput& e) {
    EXPECT_HAS(std::string(e.what()), "--prior-labels 'a,,b': expected label keys");
  }
}

// 9 hosts in 3 measured racks (0-2, 3-5, 6-8): 1000 Mbit/s inside a rack, 200 across; h8 has
// the address 10.0.0.8.
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

// A native prior: host -> its lowest switch (under one spine).
DeclaredPlacement declare(const std::vector<std::pair<std::string, std::string>>& leafOf) {
  DeclaredPlacement d;
  d.source = "prior.json";
  d.format = "native";
  d.levels = {"spine", "leaf"};
  for (const auto& [host, leaf] : leafOf) d.hosts.push_back({host, {}, {"s1", leaf}});
  return d;
}

TEST(PriorCompare, CorrectPriorAgrees) {
  Racks r;
  auto p = comparePrior(declare({{"h0", "A"},
                                 {"h1", "A"},
                                 {"h2", "A"},
                                 {"h3", "B"},
                                 {"h4", "B"},
                                 {"h5", "B"},
                                 {"h6", "C"},
                                 {"h7", "C"},
                                 {"h8", "C"}}),
                        r.t, r.rackOf, "rack");
  EXPECT_TRUE(p.disagreements.empty());
  EXPECT_EQ(p.hosts.size(), 9u);
  EXPECT_EQ(p.measuredLevel, "rack");
  EXPECT_DOUBLE_EQ(p.sameGroupMbps, 1000);
  EXPECT_DOUBLE_EQ(p.crossGroupMbps, 200);
  EXPECT_HAS(priorText(p, 9), "agrees with the measured racks at its lowest level (leaf;");
}

TEST(PriorCompare, MergedRacksAreDeclaredTogetherMeasuredApart) {
  Racks r;
  auto p = comparePrior(declare({{"h0", "A"},
                                 {"h1", "A"},
                                 {"h2", "A"},
                                 {"h3", "A"},
                                 {"h4", "A"},
                                 {"h5", "A"},
                                 {"h6", "C"},
                                 {"h7", "C"},
                                 {"h8", "C"}}),
                        r.t, r.rackOf, "rack");
  ASSERT_EQ(p.disagreements.size(), 1u);
  const auto& d = p.disagreements[0];
  EXPECT_EQ(d.kind, PriorDisagreement::kDeclaredTogether);
  EXPECT_EQ(d.declared, (std::vector<std::string>{"A"}));
  EXPECT_EQ(d.measured, (std::vector<int>{0, 1}));
  EXPECT_EQ(d.parts,
            (std::vector<std::vector<std::string>>{{"h0", "h1", "h2"}, {"h3", "h4", "h5"}}));
  EXPECT_DOUBLE_EQ(d.betweenMbps, 200);
  EXPECT_HAS(priorText(p, 9),
             "declared together, measured apart: switch A holds hosts of rack 0 (h0, h1 and h2) "
             "and rack 1 (h3, h4 and h5); 200 Mbit/s between them");
}

TEST(PriorCompare, SplitRackIsDeclaredApartMeasuredTogether) {
  Racks r;
  auto p = comparePrior(declare({{"h0", "A"},
                                 {"h1", "A"},
                                 {"h2", "A"},
                                 {"h3", "B"},
                                 {"h4", "B"},
                                 {"h5", "B"},
                                 {"h6", "C1"},
                                 {"h7", "C2"},
                                 {"h8", "C2"}}),
                        r.t, r.rackOf, "rack");
  ASSERT_EQ(p.disagreements.size(), 1u);
  const auto& d = p.disagreements[0];
  EXPECT_EQ(d.kind, PriorDisagreement::kDeclaredApart);
  EXPECT_EQ(d.measured, (std::vector<int>{2}));
  EXPECT_EQ(d.declared, (std::vector<std::string>{"C1", "C2"}));
  EXPECT_EQ(d.parts, (std::vector<std::vector<std::string>>{{"h6"}, {"h7", "h8"}}));
  EXPECT_DOUBLE_EQ(d.betweenMbps, 1000);
  EXPECT_HAS(priorText(p, 9),
             "declared apart, measured together: rack 2 holds hosts declared behind switch C1 "
             "(h6) and switch C2 (h7 and h8); 1000 Mbit/s between them");
}

// One mislabelled host shows twice: with the hosts it is declared with, and with its rack.
TEST(PriorCompare, MislabelledHostShowsOnBothSides) {
  Racks r;
  auto p = comparePrior(declare({{"h0", "A"},
                                 {"h1", "A"},
                                 {"h2", "A"},
                                 {"h3", "A"},
                                 {"h4", "B"},
                                 {"h5", "B"},
                                 {"h6", "C"},
                                 {"h7", "C"},
                                 {"h8", "C"}}),
                        r.t, r.rackOf, "rack");
  ASSERT_EQ(p.disagreements.size(), 2u);
  EXPECT_EQ(p.disagreements[0].kind, PriorDisagreement::kDeclaredTogether);
  EXPECT_EQ(p.disagreements[0].parts[1], (std::vector<std::string>{"h3"}));
  EXPECT_EQ(p.disagreements[1].kind, PriorDisagreement::kDeclaredApart);
  EXPECT_EQ(p.disagreements[1].parts[0], (std::vector<std::string>{"h3"}));
  EXPECT_EQ(p.disagreements[1].declared, (std::vector<std::string>{"A", "B"}));
}

// Switch IDs are compared as whole paths: leaf "L" under two spines is two switches.
TEST(PriorCompare, SwitchesAreWholePaths) {
  Racks r;
  DeclaredPlacement d;
  d.source = "prior.json";
  d.format = "native";
  d.levels = {"spine", "leaf"};
  for (int i = 0; i < 9; ++i)
    d.hosts.push_back({"h" + std::to_string(i), {}, {"s" + std::to_string(i / 3), "L"}});
  EXPECT_TRUE(comparePrior(d, r.t, r.rackOf, "rack").disagreements.empty());
}

// Hosts match by name, alias or address; the rest are not covered and not compared.
TEST(PriorCompare, CoverageByNameAliasOrAddress) {
  Racks r;
  auto d = declare({{"h0", "A"}, {"i-0003", "A"}, {"10.0.0.8", "C"}, {"other", "X"}});
  d.hosts[1].aliases = {"h3"};
  auto p = comparePrior(d, r.t, r.rackOf, "rack");
  EXPECT_EQ(p.declared, 4u);
  EXPECT_EQ(p.hosts.size(), 3u);
  EXPECT_TRUE(p.hosts.count("h0") && p.hosts.count("h3") && p.hosts.count("h8"));
  ASSERT_EQ(p.disagreements.size(), 1u);  // h0 and h3 on A, measured in racks 0 and 1
  EXPECT_EQ(p.disagreements[0].parts, (std::vector<std::vector<std::string>>{{"h0"}, {"h3"}}));
  EXPECT_HAS(priorText(p, 9), "4 host(s) declared, 3 of the plan's 9 covered");
}

TEST(PriorCompare, APriorOfOtherHostsSaysSo) {
  Racks r;
  auto p = comparePrior(declare({{"vm0", "A"}, {"vm1", "B"}}), r.t, r.rackOf, "rack");
  EXPECT_TRUE(p.hosts.empty());
  EXPECT_TRUE(p.disagreements.empty());
  EXPECT_HAS(priorText(p, 9),
             "2 host(s) declared, 0 of the plan's 9 covered\n  not compared: "
             "it names none of the plan's hosts");
}

// When the measurements show no level, every host is one group: declared switches that no
// measurement sees are the second kind.
TEST(PriorCompare, FlatNetworkShowsDeclaredSwitchesNoMeasurementSees) {
  Racks r;
  std::vector<int> one(9, 0);
  auto p = comparePrior(declare({{"h0", "A"}, {"h1", "A"}, {"h4", "B"}}), r.t, one, "network");
  ASSERT_EQ(p.disagreements.size(), 1u);
  EXPECT_EQ(p.disagreements[0].kind, PriorDisagreement::kDeclaredApart);
  EXPECT_DOUBLE_EQ(p.crossGroupMbps, 0);
  EXPECT_HAS(priorText(p, 9),
             "1 disagreement(s) with the measurements, which show no level (one group)");
  EXPECT_HAS(priorText(p, 9),
             "declared apart, measured together: the network holds hosts declared behind switch "
             "A (h0 and h1) and switch B (h4); 200 Mbit/s between them");
}

TEST(PriorCompare, NotComparedWithoutMeasuredGroups) {
  Racks r;
  auto p = comparePrior(declare({{"h0", "A"}, {"h1", "B"}}), r.t, {}, "");
  EXPECT_EQ(p.measuredLevel, "");
  EXPECT_TRUE(p.disagreements.empty());
  EXPECT_EQ(p.hosts.size(), 2u);
  EXPECT_HAS(priorText(p, 9), "not compared: the plan fell back");
}

// The plan records the prior (and reads it back); without one it writes nothing, so plans
// made before keep their hash.
TEST(PriorPlan, RecordedAndReadBack) {
  Topology t = Topology::load(test::fixture("noisy.json"));
  PlanOptions o;
  o.source = "noisy.json";
  Plan plain = planTopology(t, o).plan;
  EXPECT_FALSE(plain.toJson().contains("prior"));

  std::vector<std::pair<std::string, std::string>> leafOf;
  for (const auto& h : t.hosts) leafOf.push_back({h.name, "leaf-" + h.name});  // 16 switches
  o.prior = declare(leafOf);
  PlanResult r = planTopology(t, o);
  ASSERT_TRUE(r.plan.prior);
  // Measured groups win: the prior changes nothing but its own record.
  Plan withoutPrior = r.plan;
  withoutPrior.prior.reset();
  withoutPrior.seal();
  EXPECT_EQ(withoutPrior, plain);
  // Every measured rack of 4 is declared behind 4 switches.
  EXPECT_EQ(r.plan.prior->disagreements.size(), plain.groups.at(0).groups.size());
  Plan back = Plan::parse(r.plan.dump(), "plan.json");
  EXPECT_EQ(back, r.plan);
  EXPECT_HAS(planSummary(r), "  prior: prior.json (native), levels spine > leaf");
}

TEST(PriorPlan, BadRecordIsRefused) {
  Topology t = Topology::load(test::fixture("noisy.json"));
  PlanOptions o;
  o.source = "noisy.json";
  o.prior = declare({{"h0", "A"}, {"h1", "A"}});
  Json doc = planTopology(t, o).plan.toJson();
  auto refused = [&](Json d, const std::string& what) {
    try {
      Plan::fromJson(d, "plan.json");
      ADD_FAILURE() << "accepted: " << d["prior"].dump();
    } catch (const InvalidInput& e) {
      EXPECT_HAS(std::string(e.what()), what);
    }
  };
  Json d = doc;
  d["prior"]["hosts"]["nobody"] = {"s1", "A"};
  refused(d, "plan.json: at /prior/hosts/nobody: expected a host of the plan's /hosts");
  d = doc;
  d["prior"]["hosts"]["h0"] = {"A"};
  refused(d, "at /prior/hosts/h0: expected an array of 2 elements");
  d = doc;
  d["prior"]["disagreements"] = {{{"kind", "declared_sideways"}}};
  refused(d, "at /prior/disagreements/0/kind: expected \"declared_together\" or");
  d = doc;
  d["prior"]["format"] = "azure";
  refused(d, "at /prior/format: expected one of native, aws, gcp, k8s_labels");
}

}  // namespace
}  // namespace rankmap::reorder
