#include "agent/metrics.h"

#include <gtest/gtest.h>

namespace rankmap::agent {
namespace {

// Two racks of two; the rack uplinks are narrower than the host links.
Topology sparseTopology() {
  Topology t;
  t.hosts = {{"a", ""}, {"b", ""}, {"c", ""}, {"d", ""}};
  t.groups = {{"rack", 1, {{"a", "b"}, {"c", "d"}}}};
  TopologyLinks l;
  l.hosts.assign(4, {1000, 1000});
  l.uplinks = {{{250, 250}, {250, 250}}};
  l.uplinkLatencyUs = {10};
  t.links = l;
  t.sharedLinks = {{{"a", "b"}, 250}, {{"c", "d"}, 250}};
  t.version = 5;
  return t;
}

TEST(Metrics, TopologyWithoutMatricesIsSummarisedFromItsLinkModel) {
  Topology t = sparseTopology();
  ASSERT_FALSE(t.hasMatrices());
  Metrics m;
  m.setTopologySummary(t);
  std::string text = m.render();
  EXPECT_NE(text.find(R"(rankmap_topology_bandwidth_bytes_per_second{tier="intra",pair_quantile="0.5"} 125000000)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(rankmap_topology_bandwidth_bytes_per_second{tier="cross",pair_quantile="0.5"} 31250000)"),
            std::string::npos)
      << text;
  // No round-trip medians to report: the link model has one-way latencies per tier only.
  EXPECT_EQ(text.find("rankmap_topology_latency_seconds"), std::string::npos) << text;
  EXPECT_NE(text.find("rankmap_topology_hosts 4"), std::string::npos) << text;
}

}  // namespace
}  // namespace rankmap::agent
