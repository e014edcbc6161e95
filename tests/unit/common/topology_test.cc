#include "common/topology.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace rankmap {
namespace {

Topology sample() {
  auto t = Topology::empty({{"a", "10.0.0.1"}, {"b", "10.0.0.2"}, {"c", "10.0.0.3"}});
  t.bandwidthMbps.at(0, 1) = 940.5;
  t.bandwidthMbps.at(1, 0) = 941;
  t.bandwidthMbps.at(0, 2) = 240;
  t.latencyUs.at(0, 1) = LatencyStats{10, 12, 15, 30};
  t.probe = {100, 250, 64 << 20, true};
  t.time = "2026-11-21T12:00:00Z";
  t.version = 4;
  t.groups = {{"rack", 0.9, {{"a", "b"}, {"c"}}}};
  t.sharedLinks = {{{"a", "b"}, 500}};
  return t;
}

std::string errorOf(std::string_view text) {
  try {
    Topology::parse(text, "topo.json");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(Topology, RoundTrip) {
  auto t = sample();
  auto back = Topology::parse(t.dump(), "mem");
  EXPECT_EQ(back, t);
  EXPECT_EQ(back.dump(), t.dump());
  EXPECT_EQ(back.contentHash(), t.contentHash());
  EXPECT_EQ(back.indexOf("c"), 2);
  EXPECT_EQ(back.indexOf("zz"), -1);
}

TEST(Topology, MalformedDocumentsNameThePath) {
  struct Case {
    const char* doc;
    const char* expect;
  } cases[] = {
      {R"([])", "at /: expected an object"},
      {R"({"hosts":[]})", "missing field 'schema_version'"},
      {R"({"schema_version":2,"hosts":[]})", "schema version 1, got 2"},
      {R"({"schema_version":1,"hosts":[]})", "at /hosts: expected at least one host"},
      {R"({"schema_version":1,"hosts":[{"name":""}]})", "at /hosts/0/name: expected a non-empty string"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"a"}]})", "at /hosts/1/name: expected a unique host name"},
      {R"({"schema_version":1,"hosts":[{"name":"a"}],"bandwidth_mbps":[[null],[1]]})", "at /bandwidth_mbps: expected an array of 1 elements, got 2"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,-5],[1,null]],"latency_us":[[null,null],[null,null]]})", "at /bandwidth_mbps/0/1: expected a non-negative number"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,"fast"],[1,null]],"latency_us":[[null,null],[null,null]]})", "at /bandwidth_mbps/0/1: expected a number, got string"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,1],[1,null]],"latency_us":[[null,{"min":5,"median":1,"p99":9}],[null,null]]})", "at /latency_us/0/1: expected latency statistics with min <= median <= p99"},
      {R"({"schema_version":1,"hosts":[{"name":"a"}],"bandwidth_mbps":[[null]],"latency_us":[[null]],"groups":[{"name":"rack","confidence":0.5,"groups":[["zz"]]}]})", "at /groups/0/groups/0/0: expected the name of a host listed in /hosts"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,1],[1,null]],"latency_us":[[null,null],[null,null]],"groups":[{"name":"rack","confidence":0.5,"groups":[["a"]]}]})", "expected every host in exactly one group"},
      {R"({"schema_version":1,"hosts":[{"name":"a"}],"bandwidth_mbps":[[null]],"latency_us":[[null]],"groups":[{"name":"rack","confidence":7,"groups":[["a"]]}]})", "at /groups/0/confidence: expected a number in [0, 1]"},
  };
  for (const auto& c : cases) {
    auto m = errorOf(c.doc);
    EXPECT_NE(m.find("topo.json"), std::string::npos) << c.doc << " -> " << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.doc << " -> " << m;
  }
}

TEST(Topology, EveryTruncationFailsCleanly) {
  std::string text = sample().toJson().dump();  // compact: any proper prefix is incomplete
  for (size_t len = 0; len < text.size(); len += 7) {
    auto m = errorOf(text.substr(0, len));
    EXPECT_FALSE(m.empty()) << "truncation at " << len << " parsed";
  }
}

TEST(Topology, HostileValuesAreRejected) {
  // NaN/Infinity are not JSON; huge exponents overflow to inf and are refused as non-finite.
  auto m = errorOf(R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,1e999],[1,null]],"latency_us":[[null,null],[null,null]]})");
  EXPECT_FALSE(m.empty());
  m = errorOf(R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,NaN],[1,null]],"latency_us":[[null,null],[null,null]]})");
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
}

}  // namespace
}  // namespace rankmap

namespace rankmap {
namespace {

TEST(TopologyHost, IpDropsThePort) {
  EXPECT_EQ((Host{"vm0", "10.0.0.4:7411"}).ip(), "10.0.0.4");
  EXPECT_EQ((Host{"vm0", "10.0.0.4"}).ip(), "10.0.0.4");
  EXPECT_EQ((Host{"vm0", ""}).ip(), "");
}

}  // namespace
}  // namespace rankmap
