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
      {R"({"schema_version":3,"hosts":[]})",
       "at /schema_version: expected topology schema version 1 to 2, got 3"},
      {R"({"schema_version":0,"hosts":[]})",
       "at /schema_version: expected topology schema version 1 to 2, got 0"},
      {R"({"schema_version":1,"hosts":[]})", "at /hosts: expected at least one host"},
      {R"({"schema_version":1,"hosts":[{"name":""}]})",
       "at /hosts/0/name: expected a non-empty string"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"a"}]})",
       "at /hosts/1/name: expected a unique host name"},
      {R"({"schema_version":1,"hosts":[{"name":"a"}],"bandwidth_mbps":[[null],[1]]})",
       "at /bandwidth_mbps: expected an array of 1 elements, got 2"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,-5],[1,null]],"latency_us":[[null,null],[null,null]]})",
       "at /bandwidth_mbps/0/1: expected a non-negative number"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,"fast"],[1,null]],"latency_us":[[null,null],[null,null]]})",
       "at /bandwidth_mbps/0/1: expected a number, got string"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,1],[1,null]],"latency_us":[[null,{"min":5,"median":1,"p99":9}],[null,null]]})",
       "at /latency_us/0/1: expected latency statistics with min <= median <= p99"},
      {R"({"schema_version":1,"hosts":[{"name":"a"}],"bandwidth_mbps":[[null]],"latency_us":[[null]],"groups":[{"name":"rack","confidence":0.5,"groups":[["zz"]]}]})",
       "at /groups/0/groups/0/0: expected the name of a host listed in /hosts"},
      {R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,1],[1,null]],"latency_us":[[null,null],[null,null]],"groups":[{"name":"rack","confidence":0.5,"groups":[["a"]]}]})",
       "expected every host in exactly one group"},
      {R"({"schema_version":1,"hosts":[{"name":"a"}],"bandwidth_mbps":[[null]],"latency_us":[[null]],"groups":[{"name":"rack","confidence":7,"groups":[["a"]]}]})",
       "at /groups/0/confidence: expected a number in [0, 1]"},
  };
  for (const auto& c : cases) {
    auto m = errorOf(c.doc);
    EXPECT_NE(m.find("topo.json"), std::string::npos) << c.doc << " -> " << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.doc << " -> " << m;
  }
}

// Four hosts in two racks of one pod, with a link model: no matrices (a sparse probe).
Topology sampleLinks() {
  Topology t;
  t.hosts = {{"a", "10.0.0.1"}, {"b", "10.0.0.2"}, {"c", "10.0.0.3"}, {"d", "10.0.0.4"}};
  t.groups = {{"rack", 1, {{"a", "b"}, {"c", "d"}}}, {"pod", 0.5, {{"a", "b", "c", "d"}}}};
  TopologyLinks l;
  l.hosts = {{1000, 900}, {800, 1000}, {1000, 1000}, {1000, 400}};
  l.uplinks = {{{500, 250}, {300, 600}}, {{4000, 4000}}};
  l.hostLatencyUs = 2;
  l.uplinkLatencyUs = {5, 0};
  t.links = l;
  t.measured = {{0, 1}, {2, 0}, {1, 0}};
  t.time = "2026-11-21T12:00:00Z";
  t.version = 9;
  return t;
}

// The same with the full matrices: every measured pair has a value, the others inferred ones.
Topology sampleLinksDense() {
  Topology t = sampleLinks();
  Topology e = Topology::empty(t.hosts);
  t.bandwidthMbps = e.bandwidthMbps;
  t.latencyUs = e.latencyUs;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b) t.bandwidthMbps.at(a, b) = *t.pathMbps(a, b);
  t.latencyUs.at(0, 1) = LatencyStats{4, 5, 6, 7};
  return t;
}

TEST(Topology, RoundTripWithLinks) {
  for (const Topology& t : {sampleLinks(), sampleLinksDense()}) {
    auto back = Topology::parse(t.dump(), "mem");
    EXPECT_EQ(back, t);
    EXPECT_EQ(back.dump(), t.dump());
    EXPECT_EQ(back.contentHash(), t.contentHash());
    ASSERT_TRUE(back.links);
    EXPECT_EQ(back.measured, t.measured);
    EXPECT_EQ(back.hasMatrices(), t.bandwidthMbps.size() == 4);
    Json doc = t.toJson();
    EXPECT_EQ(doc["schema_version"], 2);
    EXPECT_EQ(doc.contains("bandwidth_mbps"), t.hasMatrices());
    EXPECT_EQ(doc.contains("latency_us"), t.hasMatrices());
  }
  Topology sparse = sampleLinks();
  EXPECT_FALSE(sparse.hasMatrices());
  EXPECT_EQ(sparse.bandwidthMbps.size(), 0u);
  // The hash covers the link model and the measured list.
  Topology other = sparse;
  other.links->uplinks[0][1].inMbps = 601;
  EXPECT_NE(other.contentHash(), sparse.contentHash());
  EXPECT_FALSE(other == sparse);
  other = sparse;
  other.measured.pop_back();
  EXPECT_NE(other.contentHash(), sparse.contentHash());
  // A flat network: no levels, "groups": [] written so that "links" has its levels.
  Topology flat = sparse;
  flat.groups.clear();
  flat.links->uplinks.clear();
  flat.links->uplinkLatencyUs.clear();
  EXPECT_EQ(Topology::parse(flat.dump(), "mem"), flat);
}

TEST(Topology, PathMbpsIsTheNarrowestLinkOnThePath) {
  Topology t = sampleLinks();
  // Same rack: a's host link out, b's in.
  EXPECT_EQ(t.pathMbps(0, 1), 1000.0);  // a out 1000, b in 1000
  EXPECT_EQ(t.pathMbps(1, 0), 800.0);   // b out 800, a in 900
  EXPECT_EQ(t.pathMbps(2, 3), 400.0);   // d in 400
  // Across racks: a out 1000, rack 0 out 500, rack 1 in 600, c in 1000.
  EXPECT_EQ(t.pathMbps(0, 2), 500.0);
  // c out 1000, rack 1 out 300, rack 0 in 250, a in 900.
  EXPECT_EQ(t.pathMbps(2, 0), 250.0);
  EXPECT_EQ(t.pathMbps(0, 0), std::nullopt);
  // One-way latency: two host links, twice the rack uplink across racks; the pod's is unknown.
  EXPECT_EQ(t.pathLatencyUs(0, 1), 4.0);
  EXPECT_EQ(t.pathLatencyUs(0, 3), 14.0);
  EXPECT_EQ(sample().pathMbps(0, 1), std::nullopt);
  EXPECT_EQ(sample().pathLatencyUs(0, 1), std::nullopt);
  // The index follows edits between calls: groups assigned anew in place (same sizes, same
  // storage), hosts reordered; and copies.
  Topology u = t;
  EXPECT_EQ(u.pathMbps(0, 2), 500.0);
  u.groups[0].groups = {{"a", "c"}, {"b", "d"}};
  EXPECT_EQ(u.pathMbps(0, 2), 1000.0);  // now one rack: a out, c in
  EXPECT_EQ(t.pathMbps(0, 2), 500.0);
  Topology v = t;
  EXPECT_EQ(v.pathMbps(1, 2), 500.0);  // b out 800, rack 0 out 500
  std::swap(v.hosts[0], v.hosts[2]);   // c is now host 0, a host 2; links stay per position
  std::swap(v.links->hosts[0], v.links->hosts[2]);
  EXPECT_EQ(v.pathMbps(1, 0), 500.0);  // b -> c across racks, not b -> a inside one (800)
  // A link model that does not fit its groups is a writer's bug, named.
  u.links->uplinks[0].pop_back();
  EXPECT_THROW(u.pathMbps(0, 1), InvalidInput);
  EXPECT_THROW(t.pathMbps(0, 4), InternalError);
}

TEST(Topology, SchemaOneDocumentsMigrate) {
  // tests/data keeps schema 1 fixtures on purpose: they load as schema 2 with no link model and
  // every value present measured, and are written back as schema 2.
  Topology t =
      Topology::load(std::string(RANKMAP_TEST_DATA_DIR) + "/topologies/testbed_8vm_2rack.json");
  EXPECT_EQ(t.size(), 8u);
  EXPECT_TRUE(t.hasMatrices());
  EXPECT_FALSE(t.links);
  EXPECT_TRUE(t.measured.empty());
  EXPECT_TRUE(t.bandwidthMbps.at(0, 1));
  Json doc = t.toJson();
  EXPECT_EQ(doc["schema_version"], 2);
  EXPECT_FALSE(doc.contains("links"));
  EXPECT_FALSE(doc.contains("measured"));
  EXPECT_EQ(Topology::parse(t.dump(), "mem"), t);
  // Schema 1 knew no "links" or "measured": there they are unknown fields, ignored.
  auto v1 = Topology::parse(
      R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,1],[1,null]],)"
      R"("latency_us":[[null,null],[null,null]],"links":7,"measured":[[0,0]]})",
      "old.json");
  EXPECT_FALSE(v1.links);
  EXPECT_TRUE(v1.measured.empty());
}

TEST(Topology, LinkModelErrorsNameThePath) {
  // A valid sparse document, then one field broken at a time.
  const std::string head =
      R"({"schema_version":2,"hosts":[{"name":"a"},{"name":"b"},{"name":"c"}],)"
      R"("groups":[{"name":"rack","confidence":1,"groups":[["a","b"],["c"]]}],)";
  const std::string hostsOk =
      R"("hosts":[{"out_mbps":1,"in_mbps":1},{"out_mbps":1,"in_mbps":1},{"out_mbps":1,"in_mbps":1}])";
  const std::string uplinksOk =
      R"("uplinks":[[{"out_mbps":1,"in_mbps":1},{"out_mbps":2,"in_mbps":2}]])";
  auto links = [&](const std::string& hosts, const std::string& uplinks, const std::string& hostLat,
                   const std::string& upLat) {
    return R"("links":{)" + hosts + "," + uplinks + R"(,"host_latency_us":)" + hostLat +
           R"(,"uplink_latency_us":)" + upLat + "}";
  };
  const std::string linksOk = links(hostsOk, uplinksOk, "1", "[2]");
  ASSERT_EQ(errorOf(head + linksOk + R"(,"measured":[[0,1],[2,0]]})"), "");
  const std::string matrices =
      R"("bandwidth_mbps":[[null,1,null],[null,null,null],[null,null,null]],)"
      R"("latency_us":[[null,null,null],[null,null,null],[null,null,null]],)";
  ASSERT_EQ(errorOf(head + matrices + linksOk + R"(,"measured":[[0,1]]})"), "");
  struct Case {
    std::string doc;
    const char* expect;
  } cases[] = {
      {R"({"schema_version":2,"hosts":[{"name":"a"}],)" +
           links(R"("hosts":[{"out_mbps":1,"in_mbps":1}])", R"("uplinks":[])", "0", "[]") + "}",
       "at /links: expected /groups beside it"},
      {head + links(R"("hosts":[{"out_mbps":1,"in_mbps":1}])", uplinksOk, "1", "[2]") + "}",
       "at /links/hosts: expected one entry per host of /hosts (3), got 1"},
      {head + links(hostsOk, R"("uplinks":[])", "1", "[2]") + "}",
       "at /links/uplinks: expected one entry per level of /groups (1), got 0"},
      {head + links(hostsOk, R"("uplinks":[[{"out_mbps":1,"in_mbps":1}]])", "1", "[2]") + "}",
       "at /links/uplinks/0: expected one entry per group of /groups/0/groups (2), got 1"},
      {head +
           links(hostsOk, R"("uplinks":[[{"out_mbps":1,"in_mbps":1},{"out_mbps":-2,"in_mbps":2}]])",
                 "1", "[2]") +
           "}",
       "at /links/uplinks/0/1/out_mbps: expected a non-negative number, got -2"},
      {head +
           links(hostsOk, R"("uplinks":[[{"out_mbps":1,"in_mbps":1},{"out_mbps":2}]])", "1",
                 "[2]") +
           "}",
       "at /links/uplinks/0/1: missing field 'in_mbps'"},
      {head +
           links(
               R"("hosts":[{"out_mbps":1,"in_mbps":1},{"out_mbps":"x","in_mbps":1},{"out_mbps":1,"in_mbps":1}])",
               uplinksOk, "1", "[2]") +
           "}",
       "at /links/hosts/1/out_mbps: expected a number, got string"},
      {head + links(hostsOk, uplinksOk, "-1", "[2]") + "}",
       "at /links/host_latency_us: expected a non-negative number, got -1"},
      {head + links(hostsOk, uplinksOk, "1", "[2, 3]") + "}",
       "at /links/uplink_latency_us: expected one entry per level of /groups (1), got 2"},
      {head + links(hostsOk, uplinksOk, "1", "[1e999]") + "}", "not valid JSON"},
      // Matrices: omitted only with links, and then both.
      {R"({"schema_version":2,"hosts":[{"name":"a"}]})", "missing field 'bandwidth_mbps'"},
      {head + R"("latency_us":[[null,null,null],[null,null,null],[null,null,null]],)" + linksOk +
           "}",
       "missing field 'bandwidth_mbps'"},
      {head + R"("bandwidth_mbps":[[null,1,null],[null,null,null],[null,null,null]],)" + linksOk +
           "}",
       "missing field 'latency_us'"},
      // Measured pairs.
      {head + linksOk + R"(,"measured":[[0,3]]})",
       "at /measured/0/1: expected an integer in [0, 2], got 3"},
      {head + linksOk + R"(,"measured":[[-1,0]]})",
       "at /measured/0/0: expected an integer in [0, 2], got -1"},
      {head + linksOk + R"(,"measured":[[0,1],[1,1]]})",
       "at /measured/1: expected a pair of two different hosts, got [1, 1]"},
      {head + linksOk + R"(,"measured":[[0,1],[2,0],[0,1]]})",
       "at /measured/2: expected a pair not listed before, got [0, 1] again"},
      {head + linksOk + R"(,"measured":[[0,1,2]]})",
       "at /measured/0: expected an array of 2 elements, got 3"},
      {head + linksOk + R"(,"measured":{}})", "at /measured: expected an array, got object"},
      {head + matrices + linksOk + R"(,"measured":[[0,1],[1,0]]})",
       "at /measured/1: expected a pair whose /bandwidth_mbps/1/0 is a number (it was measured), "
       "got null there"},
      {R"({"schema_version":2,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,1],[1,null]],)"
       R"("latency_us":[[null,null],[null,null]],"measured":[[0,1]]})",
       "at /measured: expected no measured pairs without /links"},
  };
  for (const auto& c : cases) {
    auto m = errorOf(c.doc);
    EXPECT_NE(m.find("topo.json"), std::string::npos) << c.doc << " -> " << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.doc << " -> " << m;
  }
}

// Rings measured as a collective runs them ("rings"): round trip, the hash, what the parser
// refuses, and the measured bottleneck.
TEST(Topology, RingChecks) {
  Topology t = sampleLinks();
  t.rings = {{"input", {0, 1, 2, 3}, {900.0, 250.0, std::nullopt, 240.0}},
             {"structure", {0, 1, 3, 2}, {1000.0, 990.0, 500.0, 980.0}}};
  auto back = Topology::parse(t.dump(), "mem");
  EXPECT_EQ(back, t);
  EXPECT_EQ(back.dump(), t.dump());
  Topology other = t;
  other.rings[1].mbps[2] = 501.0;
  EXPECT_NE(other.contentHash(), t.contentHash());
  EXPECT_FALSE(sampleLinks().toJson().contains("rings"));
  // The lowest band: the readings within 2 x the noise of the lowest, their median when there
  // are kRingBandForMedian of them, else the lowest.
  EXPECT_EQ(t.rings[1].bottleneckMbps(), 500.0);
  RingCheck even{"r", {0, 1, 2, 3, 4, 5, 6, 7},
                 {1000.0, 950.0, 1080.0, 910.0, 1050.0, 990.0, 1020.0, 970.0}};
  EXPECT_EQ(even.bottleneckMbps(), 990.0);  // 910 .. 1092: all eight, median 990
  // Five hops in the band: as likely five hops of one rate as five slow hops of different rates
  // (other tenants' flows spread them); a step waits for the slowest.
  RingCheck few{"r", {0, 1, 2, 3, 4}, {1000.0, 950.0, 1080.0, 910.0, 1050.0}};
  EXPECT_EQ(few.bottleneckMbps(), 910.0);
  // Ten slow hops through uplinks that the link model tells apart (the thin uplinks at 4096
  // hosts): the median of all ten, 24.5, would state the ring faster than its two slowest hops
  // run; with the model only those two count, too few for a median, so the lowest stands. Hops
  // the model rates alike keep the median.
  RingCheck thin{"r",
                 {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                 {21.7, 21.8, 23.4, 23.8, 24.5, 24.6, 25.6, 25.7, 26.0, 27.8, 90.0}};
  const std::vector<double> apart{20.8, 20.8, 23.1, 23.7, 24.9, 24.4, 25.9, 25.9, 24.9, 23.1, 92};
  EXPECT_EQ(thin.bottleneckMbps(), 24.5);
  EXPECT_EQ(thin.bottleneckMbps(apart), 21.7);
  const std::vector<double> alike{21, 21.5, 22, 21, 22.5, 21, 22, 21, 21.5, 22, 92};
  EXPECT_EQ(thin.bottleneckMbps(alike), 24.5);
  // A model as noisy as the readings (they deviate from it by 14% in the median) tells nothing
  // apart: its three slowest hops are not taken for the ring's.
  const std::vector<double> noisy{23, 26, 20.5, 24.5, 21, 27, 22, 28, 21.5, 25, 92};
  EXPECT_EQ(thin.bottleneckMbps(noisy), 24.5);
  // A model of another ring (another hop count) is not this ring's: no model.
  EXPECT_EQ(thin.bottleneckMbps(std::vector<double>{20.8, 20.8}), 24.5);
  // One hop of four without a reading is too many (kMaxMissingHops).
  EXPECT_FALSE(t.rings[0].bottleneckMbps());
  RingCheck none{"r", {0, 1}, {std::nullopt, std::nullopt}};
  EXPECT_FALSE(none.bottleneckMbps());

  std::string doc = sampleLinks().toJson().dump();
  doc.pop_back();
  struct Case {
    std::string rings;
    const char* expect;
  } cases[] = {
      {R"([{"name":"x","order":[0,1],"mbps":[1,2]}])", ""},
      {R"([{"name":"x","order":[0,4],"mbps":[1,2]}])",
       "at /rings/0/order/1: expected an integer in [0, 3], got 4"},
      {R"([{"name":"x","order":[0,1,0],"mbps":[1,2,3]}])",
       "at /rings/0/order/2: expected a host index not listed before in this ring"},
      {R"([{"name":"x","order":[0],"mbps":[1]}])",
       "at /rings/0/order: expected a ring of at least two hosts"},
      {R"([{"name":"x","order":[0,1],"mbps":[1]}])",
       "at /rings/0/mbps: expected 2 rates, one per hop of the order"},
      {R"([{"name":"x","order":[0,1],"mbps":[1,-1]}])",
       "at /rings/0/mbps/1: expected a non-negative number, got -1"},
      {R"([{"order":[0,1],"mbps":[1,1]}])", "at /rings/0: missing field 'name'"},
  };
  for (const auto& c : cases) {
    auto m = errorOf(doc + R"(,"rings":)" + c.rings + "}");
    if (std::string(c.expect).empty()) {
      EXPECT_EQ(m, "") << c.rings;
      continue;
    }
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.rings << " -> " << m;
  }
}

TEST(Topology, EveryTruncationFailsCleanly) {
  for (const Topology& t : {sample(), sampleLinks()}) {
    std::string text = t.toJson().dump();  // compact: any proper prefix is incomplete
    for (size_t len = 0; len < text.size(); len += 7) {
      auto m = errorOf(text.substr(0, len));
      EXPECT_FALSE(m.empty()) << "truncation at " << len << " parsed";
    }
  }
}

TEST(Topology, HostileValuesAreRejected) {
  // NaN/Infinity are not JSON; huge exponents overflow to inf and are refused as non-finite.
  auto m = errorOf(
      R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,1e999],[1,null]],"latency_us":[[null,null],[null,null]]})");
  EXPECT_FALSE(m.empty());
  m = errorOf(
      R"({"schema_version":1,"hosts":[{"name":"a"},{"name":"b"}],"bandwidth_mbps":[[null,NaN],[1,null]],"latency_us":[[null,null],[null,null]]})");
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

// Time fields are bounded on both sides, and years stay inside system_clock's range (a year 4052
// overflowed its nanoseconds: UBSan through tests/fuzz).
TEST(ParseUtcTime, AcceptsRfc3339UtcInRangeOnly) {
  auto t = parseUtcTime("2026-11-26T22:30:00.5Z");
  ASSERT_TRUE(t);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count(),
            1795732200500);
  EXPECT_TRUE(parseUtcTime("1970-01-01T00:00:00Z"));
  EXPECT_TRUE(parseUtcTime("2200-12-31T23:59:60Z"));
  for (const char* bad : {"4052-11-21T12:00:00Z", "9999-12-31T23:59:59Z", "1969-12-31T23:59:59Z",
                          "-999-01-01T00:00:00Z", "2026-01-01T-1:00:00Z", "2026-01-01T00:-1:00Z",
                          "2026-01-01T00:00:-1Z", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00"})
    EXPECT_FALSE(parseUtcTime(bad)) << bad;
}

}  // namespace
}  // namespace rankmap
