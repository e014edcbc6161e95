// Kubernetes: node label and annotation lines, Kueue's Topology, and the syntax rules they obey.
#include "launch/kubernetes.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"

namespace rankmap::launch {
namespace {

std::vector<HierarchyLevel> twoLevels() {
  return {
      {"rack", 1, {{"a1", "a2"}, {"b1"}, {"c1", "c2"}}},
      {"pod", 1, {{"a1", "a2", "b1"}, {"c1", "c2"}}},
  };
}
const std::vector<std::string> kHosts = {"a1", "a2", "b1", "c1", "c2"};

TEST(KubernetesTest, SyntaxRules) {
  for (const char* ok : {"node-1", "a.b.c", "ip-10-0-0-1.ec2.internal", "0"})
    EXPECT_TRUE(isDnsSubdomain(ok)) << ok;
  for (const char* bad : {"", "Node1", "-a", "a-", "a..b", "a_b", ".a"})
    EXPECT_FALSE(isDnsSubdomain(bad)) << bad;
  EXPECT_FALSE(isDnsSubdomain(std::string(64, 'a')));  // one DNS label is at most 63
  for (const char* ok : {"", "rack0", "A_b.c-D", "0"}) EXPECT_TRUE(isLabelValue(ok)) << ok;
  for (const char* bad : {"-a", "a.", "a b", "a/b", "ä"}) EXPECT_FALSE(isLabelValue(bad)) << bad;
  EXPECT_FALSE(isLabelValue(std::string(64, 'a')));
  for (const char* ok : {"rankmap.io/level-1", "kubernetes.io/hostname", "simple", "a/B_c"})
    EXPECT_TRUE(isQualifiedName(ok)) << ok;
  for (const char* bad : {"", "rankmap.io/", "/x", "Rankmap.io/x", "a/b/c", "x-"})
    EXPECT_FALSE(isQualifiedName(bad)) << bad;
  EXPECT_EQ(labelValueFrom("Rack A/1"), "rack-a-1");
  EXPECT_EQ(labelValueFrom("--_x_--"), "x");
  EXPECT_EQ(labelValueFrom("###"), "x");
  EXPECT_EQ(labelValueFrom(std::string(80, 'z')).size(), 63u);
  EXPECT_TRUE(isLabelValue(labelValueFrom(std::string(62, 'z') + "-y")));
}

TEST(KubernetesTest, LabelsEveryLevelOnEveryNode) {
  auto marks = k8sNodeMarks(kHosts, twoLevels(), nullptr, "", "t.json");
  auto text = k8sLabelCommands(marks, "topology t.json");
  EXPECT_NE(text.find("kubectl label nodes a2 rankmap.io/level-1=rack0 "
                      "fabric.topograph.run/tier-0=rack0 rankmap.io/level-2=pod0 "
                      "fabric.topograph.run/tier-1=pod0 --overwrite\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kubectl label nodes b1 rankmap.io/level-1=rack1 "
                      "fabric.topograph.run/tier-0=rack1 rankmap.io/level-2=pod0 "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kubectl label nodes c2 rankmap.io/level-1=rack2 "), std::string::npos);
  // One line per node, no annotations without a link model.
  size_t lines = 0;
  for (size_t p = text.find("kubectl label"); p != std::string::npos;
       p = text.find("kubectl label", p + 1))
    ++lines;
  EXPECT_EQ(lines, kHosts.size());
  EXPECT_EQ(text.find("kubectl annotate"), std::string::npos);
  for (const auto& m : marks)
    for (const auto& [k, v] : m.labels) {
      EXPECT_TRUE(isQualifiedName(k)) << k;
      EXPECT_TRUE(isLabelValue(v)) << v;
    }
}

TEST(KubernetesTest, AnnotatesMeasuredRates) {
  TopologyLinks links;
  links.hosts = {{1000, 990}, {1000, 1000}, {500, 500}, {1000, 1000}, {1000, 0}};
  links.uplinks = {{{400, 410}, {250, 250}, {300, 300}}, {{100, 100}, {120, 0}}};
  auto marks = k8sNodeMarks(kHosts, twoLevels(), &links, "2026-11-26T10:00:00Z", "t.json");
  auto text = k8sLabelCommands(marks, "topology t.json");
  EXPECT_NE(text.find("kubectl annotate nodes a1 rankmap.io/host-out-mbps=1000 "
                      "rankmap.io/host-in-mbps=990 rankmap.io/level-1-uplink-out-mbps=400 "
                      "rankmap.io/level-1-uplink-in-mbps=410 "
                      "rankmap.io/level-2-uplink-out-mbps=100 "
                      "rankmap.io/level-2-uplink-in-mbps=100 "
                      "rankmap.io/measured-at=2026-11-26T10:00:00Z --overwrite\n"),
            std::string::npos)
      << text;
  // Unknown (0) rates are left out.
  EXPECT_NE(text.find("kubectl annotate nodes c2 rankmap.io/host-out-mbps=1000 "
                      "rankmap.io/level-1-uplink-out-mbps=300 "
                      "rankmap.io/level-1-uplink-in-mbps=300 "
                      "rankmap.io/level-2-uplink-out-mbps=120 rankmap.io/measured-at="),
            std::string::npos)
      << text;
  links.hosts.pop_back();
  EXPECT_THROW(k8sNodeMarks(kHosts, twoLevels(), &links, "", "t.json"), InvalidInput);
}

TEST(KubernetesTest, RefusesWhatIsNoNodeOrNoHierarchy) {
  EXPECT_THROW(k8sNodeMarks({"A1", "a2"}, {}, nullptr, "", "t.json"), InvalidInput);
  EXPECT_THROW(k8sNodeMarks({"a1", "a1"}, {}, nullptr, "", "t.json"), InvalidInput);
  auto levels = twoLevels();
  levels[0].groups[1] = {};  // b1 in no rack
  EXPECT_THROW(k8sNodeMarks(kHosts, levels, nullptr, "", "t.json"), InvalidInput);
  levels[0].groups[1] = {"b1", "zz"};  // a host that is not one
  EXPECT_THROW(k8sNodeMarks(kHosts, levels, nullptr, "", "t.json"), InvalidInput);
  // Odd level names still give valid, distinct values.
  levels = twoLevels();
  levels[0].name = "Rack #1";
  levels[1].name = "rack #1";
  auto marks = k8sNodeMarks(kHosts, levels, nullptr, "", "t.json");
  EXPECT_EQ(marks[0].labels[0].second, "rack--10");
  EXPECT_EQ(marks[0].labels[2].second, "rack--1-l20");
}

TEST(KubernetesTest, KueueTopologyListsLevelsOutermostFirstThenTheHost) {
  auto yaml = kueueTopologyYaml(twoLevels(), "rankmap", kKueueApiVersion, "t.json");
  EXPECT_NE(yaml.find("apiVersion: kueue.x-k8s.io/v1beta2\n"
                      "kind: Topology\n"
                      "metadata:\n"
                      "  name: rankmap\n"
                      "spec:\n"
                      "  levels:\n"
                      "    - nodeLabel: rankmap.io/level-2\n"
                      "    - nodeLabel: rankmap.io/level-1\n"
                      "    - nodeLabel: kubernetes.io/hostname\n"),
            std::string::npos)
      << yaml;
  auto flat = kueueTopologyYaml({}, "flat", "kueue.x-k8s.io/v1alpha1", "t.json");
  EXPECT_NE(flat.find("  levels:\n    - nodeLabel: kubernetes.io/hostname\n"), std::string::npos);
  EXPECT_THROW(kueueTopologyYaml({}, "Bad_Name", kKueueApiVersion, "t.json"), InvalidInput);
  EXPECT_THROW(kueueTopologyYaml({}, "x", "kueue.x-k8s.io/v9", "t.json"), InvalidInput);
  EXPECT_THROW(kueueTopologyYaml(std::vector<HierarchyLevel>(16), "x", kKueueApiVersion, "t.json"),
               InvalidInput);
}

}  // namespace
}  // namespace rankmap::launch

namespace rankmap::launch {
namespace {

std::string hostsError(const std::string& json) {
  try {
    hostsFromEndpointSlices(parseJson(json, "slices.json"), "slices.json");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

// The agents' peers from their headless Service: one host per node, IPv4 before IPv6 (a node of
// a dual-stack cluster is in both slices), a node only in the IPv6 slice at its IPv6 address,
// terminating agents left out, a not-ready agent kept (it answers probes before its first
// topology), sorted by name.
TEST(KubernetesTest, HostsFromTheAgentsEndpointSlices) {
  std::string path = std::string(RANKMAP_TEST_DATA_DIR) + "/kubernetes/endpointslices.json";
  auto hosts = hostsFromEndpointSlices(parseJson(readFile(path), path), path);
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "cpu-node-c");
  EXPECT_EQ(hosts[0].address, "[fd00:10::13]");
  EXPECT_EQ(hosts[1].name, "gpu-node-a");
  EXPECT_EQ(hosts[1].address, "10.0.1.11");
  EXPECT_EQ(hosts[2].name, "gpu-node-b");
  EXPECT_EQ(hosts[2].address, "10.0.1.12");
  // One EndpointSlice alone (kubectl get endpointslice NAME -o json) is read too.
  Json one = parseJson(readFile(path), path)["items"][0];
  EXPECT_EQ(hostsFromEndpointSlices(one, "one").size(), 2u);
}

TEST(KubernetesTest, EndpointSlicesThatGiveNoHostsFileAreNamed) {
  EXPECT_EQ(hostsError(R"({"items": []})"),
            "slices.json: no endpoint (expected the agents' EndpointSlices, with at least one "
            "endpoint that is not terminating)");
  EXPECT_NE(hostsError(R"({"items": [{"kind": "Pod"}]})").find("at /items/0/kind"),
            std::string::npos);
  EXPECT_NE(hostsError(R"({"items": [{"kind": "EndpointSlice", "addressType": "IPv4",
      "endpoints": [{"addresses": ["10.0.0.1"]}]}]})")
                .find("at /items/0/endpoints/0: expected an endpoint with nodeName"),
            std::string::npos)
      << hostsError(R"({"items": [{"kind": "EndpointSlice", "addressType": "IPv4",
      "endpoints": [{"addresses": ["10.0.0.1"]}]}]})");
  EXPECT_NE(hostsError(R"({"kind": "EndpointSlice", "addressType": "IPv4",
      "endpoints": [{"nodeName": "n", "addresses": []}]})")
                .find("at /endpoints/0/addresses: expected at least one address"),
            std::string::npos);
  EXPECT_NE(hostsError(R"({"kind": "EndpointSlice", "addressType": "IPv4",
      "endpoints": [{"nodeName": "a/b", "addresses": ["10.0.0.1"]}]})")
                .find("host name \"a/b\""),
            std::string::npos);
  // FQDN slices name hosts the probe would have to resolve: not hosts.
  EXPECT_NE(hostsError(R"({"kind": "EndpointSlice", "addressType": "FQDN",
      "endpoints": [{"nodeName": "n", "addresses": ["n.example"]}]})")
                .find("no endpoint"),
            std::string::npos);
}

// The script's table: completion index i on the plan's node at position i / pods per node, and
// every placeholder filled. (What the script does is tests/unit/deploy/k8s_placement_test.py's.)
TEST(KubernetesTest, PlacementScriptMapsEachCompletionIndexToItsPlanNode) {
  Plan plan;
  plan.hosts = {"n-a", "n-b", "n-c"};
  plan.order = {"n-b", "n-c", "n-a"};
  PodPlacement p;
  p.job = "train";
  p.nspace = "ml";
  p.podsPerHost = 2;
  std::string s = k8sPlacementScript(plan, p, "plan P");
  EXPECT_EQ(s.rfind("#!/bin/sh\n", 0), 0u);
  for (const char* line :
       {"    0|1) echo 'n-b' ;;\n", "    2|3) echo 'n-c' ;;\n", "    4|5) echo 'n-a' ;;\n",
        "job='train'\n", "ns='ml'\n", "gate='rankmap.io/placement'\n", "pods=6\n", "wait_s=600\n"})
    EXPECT_NE(s.find(line), std::string::npos) << line;
  for (const char* token : {"@JOB@", "@NS@", "@GATE@", "@PODS@", "@WAIT@"})
    EXPECT_EQ(s.find(token), std::string::npos) << token << " left";
}

TEST(KubernetesTest, PlacementRefusesWhatKubernetesWould) {
  Plan plan;
  plan.hosts = plan.order = {"n-a", "n-b"};
  auto error = [&](PodPlacement p, const Plan& pl) {
    try {
      k8sPlacementScript(pl, p, "plan P");
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  PodPlacement ok;
  ok.job = "train";
  EXPECT_EQ(error(ok, plan), "");
  auto with = [&](auto change) {
    PodPlacement p = ok;
    change(p);
    return error(p, plan);
  };
  EXPECT_NE(with([](auto& p) { p.job = "Train"; }).find("--k8s-placement \"Train\""),
            std::string::npos);
  EXPECT_NE(with([](auto& p) { p.job = std::string(64, 'a'); }).find("at most 63"),
            std::string::npos);
  EXPECT_NE(with([](auto& p) { p.nspace = "a.b"; }).find("--namespace \"a.b\""), std::string::npos);
  EXPECT_NE(with([](auto& p) { p.gate = "a gate"; }).find("--gate"), std::string::npos);
  EXPECT_NE(with([](auto& p) { p.podsPerHost = 0; }).find("pods per node"), std::string::npos);
  EXPECT_NE(with([](auto& p) { p.waitSeconds = 0; }).find("--wait 0"), std::string::npos);
  Plan bad = plan;
  bad.order = {"n-a", "N_B"};
  EXPECT_NE(error(ok, bad).find("plan P: host \"N_B\" is not a Kubernetes node name"),
            std::string::npos);
}

}  // namespace
}  // namespace rankmap::launch
