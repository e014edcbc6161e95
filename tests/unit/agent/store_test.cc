#include "agent/store.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap::agent {
namespace {

using rankmap::testing::TempDir;

Topology twoHosts(double bw) {
  Topology t = Topology::empty({{"a", "10.0.0.1"}, {"b", "10.0.0.2"}});
  t.bandwidthMbps.at(0, 1) = bw;
  t.bandwidthMbps.at(1, 0) = bw / 2;
  t.latencyUs.at(0, 1) = LatencyStats{10, 12, 14, 20};
  t.latencyUs.at(1, 0) = LatencyStats{10, 12, 14, 20};
  t.time = "2024-01-01T00:00:00.000Z";
  return t;
}

TEST(Store, KeepsATopologyWithoutMatrices) {
  // A sparse probe's topology (schema 2): a link model, measured pairs, no matrices.
  TempDir dir;
  Store s(dir.path());
  Topology t;
  t.hosts = {{"a", "10.0.0.1"}, {"b", "10.0.0.2"}};
  t.groups = {{"rack", 1, {{"a"}, {"b"}}}};
  t.links = TopologyLinks{{{1000, 900}, {800, 1000}}, {{{250, 250}, {300, 300}}}, 5, {10}};
  t.measured = {{1, 0}};
  EXPECT_EQ(s.addTopology(t, std::nullopt), 1);
  auto back = s.latestTopology();
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, t);
  EXPECT_FALSE(back->hasMatrices());
  EXPECT_EQ(back->pathMbps(0, 1), 250);
}

TEST(Store, KeepsTopologyHistoryWithIncreasingVersions) {
  TempDir dir;
  Store s(dir.path());
  EXPECT_FALSE(s.latestTopology());
  Topology a = twoHosts(100), b = twoHosts(200);
  EXPECT_EQ(s.addTopology(a, std::nullopt), 1);
  EXPECT_EQ(s.addTopology(b, std::nullopt), 2);
  EXPECT_EQ(a.version, 1);
  auto latest = s.latestTopology();
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->version, 2);
  EXPECT_EQ(*latest->bandwidthMbps.at(0, 1), 200);
  auto first = s.topology(1);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first->bandwidthMbps.at(0, 1), 100);
  EXPECT_EQ(*first->latencyUs.at(0, 1), (LatencyStats{10, 12, 14, 20}));
  auto hist = s.topologies(10);
  ASSERT_EQ(hist.size(), 2u);
  EXPECT_EQ(hist[0].version, 2);
  EXPECT_EQ(hist[1].hash, a.contentHash());
}

TEST(Store, PushedTopologiesKeepTheirVersionAndDuplicatesAreIgnored) {
  TempDir dir;
  Store s(dir.path());
  Topology t = twoHosts(100);
  t.version = 7;
  EXPECT_TRUE(s.putTopology(t));
  EXPECT_FALSE(s.putTopology(t));
  EXPECT_EQ(s.latestTopology()->version, 7);
  Topology next = twoHosts(50);
  EXPECT_EQ(s.addTopology(next, std::nullopt), 8);
  Topology unversioned = twoHosts(1);
  EXPECT_THROW(s.putTopology(unversioned), InvalidInput);
}

TEST(Store, RoundsAndMeasurementsSurviveARestart) {
  TempDir dir;
  int64_t id;
  {
    Store s(dir.path());
    id = s.beginRound("full", 2, 1);
    s.addMeasurements(id, {{"a", "b", "bandwidth", 250, "round", nullptr},
                           {"a", "b", "latency", 12, "round", Json{{"min", 10}}}});
    Topology t = twoHosts(250);
    RoundRecord r;
    r.id = id;
    r.status = "ok";
    r.pairsTotal = 1;
    r.seconds = 1.5;
    r.topologyVersion = s.addTopology(t, id);
    s.finishRound(r);
    s.beginRound("light", 2, 0);  // left running: the agent "crashes"
  }
  Store s(dir.path());
  EXPECT_FALSE(s.recoveredFrom());
  EXPECT_EQ(s.abandonRunningRounds(), 1);
  auto r = s.round(id);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, "ok");
  EXPECT_EQ(r->topologyVersion, 1);
  EXPECT_DOUBLE_EQ(r->seconds, 1.5);
  EXPECT_EQ(s.measurementCount(id), 2u);
  auto all = s.rounds(10);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].status, "failed");
  EXPECT_EQ(s.latestTopology()->version, 1);
}

TEST(Store, CorruptFileIsMovedAsideNotOverwritten) {
  TempDir dir;
  std::string junk(8192, '\x5a');
  junk.replace(0, 16, "not a database!!");
  writeFileAtomic(dir.file("rankmapd.db"), junk);
  Store s(dir.path());
  ASSERT_TRUE(s.recoveredFrom());
  EXPECT_NE(s.recoveredFrom()->find("rankmapd.db.corrupt-"), std::string::npos);
  EXPECT_EQ(readFile(*s.recoveredFrom()), junk);  // kept byte for byte
  Topology t = twoHosts(1);
  EXPECT_EQ(s.addTopology(t, std::nullopt), 1);  // the new database works
}

TEST(Store, DamagedPagesAreDetected) {
  TempDir dir;
  {
    Store s(dir.path());
    for (int i = 0; i < 50; ++i) {
      Topology t = twoHosts(i + 1);
      s.addTopology(t, std::nullopt);
    }
  }
  // Overwrite the middle of the file (past the header) with garbage.
  std::string db = readFile(dir.file("rankmapd.db"));
  ASSERT_GT(db.size(), 16384u);
  for (size_t i = 4096; i < db.size() - 4096; ++i) db[i] = static_cast<char>(i * 7);
  std::filesystem::remove(dir.file("rankmapd.db-wal"));
  std::filesystem::remove(dir.file("rankmapd.db-shm"));
  writeFileAtomic(dir.file("rankmapd.db"), db);
  Store s(dir.path());
  EXPECT_TRUE(s.recoveredFrom());
  EXPECT_FALSE(s.latestTopology());
}

TEST(Store, PruneKeepsTheNewest) {
  TempDir dir;
  Store s(dir.path());
  for (int i = 0; i < 5; ++i) {
    int64_t id = s.beginRound("full", 2, 1);
    s.addMeasurements(id, {{"a", "b", "bandwidth", 1, "round", nullptr}});
    Topology t = twoHosts(i + 1);
    s.addTopology(t, id);
  }
  s.prune(2, 3);
  EXPECT_EQ(s.rounds(100).size(), 2u);
  EXPECT_EQ(s.topologies(100).size(), 3u);
  EXPECT_EQ(s.latestTopology()->version, 5);
  EXPECT_EQ(s.measurementCount(1), 0u);
  EXPECT_EQ(s.measurementCount(5), 1u);
}

TEST(Store, PlansByHostSet) {
  TempDir dir;
  Store s(dir.path());
  Plan p = Plan::identity({"a", "b"});
  p.seal();
  s.addPlan(p, "a,b");
  EXPECT_TRUE(s.latestPlan("a,b"));
  EXPECT_FALSE(s.latestPlan("a,c"));
  EXPECT_EQ(s.latestPlan("a,b")->hash, p.hash);
}

TEST(Store, UnwritableStateDirIsAnIoError) {
  EXPECT_THROW(Store("/proc/rankmap-no-such-dir/x"), IoError);
}

}  // namespace
}  // namespace rankmap::agent
