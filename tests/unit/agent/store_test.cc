#include "agent/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
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
    s.addMeasurements(id,
                      {{"a", "b", "bandwidth", 250, "round"}, {"a", "b", "latency", 12, "round"}});
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

TEST(Store, ReadingsComeBackExactlyInTheOrderAdded) {
  TempDir dir;
  std::vector<MeasurementRow> first = {{"h0001", "h0002", "bandwidth", 987.654321, "structure"},
                                       {"h0002", "h0001", "latency", 20.0 / 3, "latency"},
                                       {"h0003", "h0001", "bandwidth", 1e-300, "rings"}};
  std::vector<MeasurementRow> second = {{"h0001", "h0003", "bandwidth", 0, "load"}};
  int64_t id;
  {
    Store s(dir.path());
    id = s.beginRound("full", 3, 3);
    s.addMeasurements(id, first);
    s.addMeasurements(id, second);
    s.addMeasurements(id, {});
    EXPECT_THROW(s.addMeasurements(id, {{"a", "b", "jitter", 1, "x"}}), InvalidInput);
  }
  Store s(dir.path());
  std::vector<MeasurementRow> all = first;
  all.insert(all.end(), second.begin(), second.end());
  EXPECT_EQ(s.measurements(id), all);
  EXPECT_EQ(s.measurementCount(id), 4u);
  EXPECT_TRUE(s.measurements(id + 1).empty());
}

// `n` readings among 1024 hosts, of both kinds and two phases, every value different.
std::vector<MeasurementRow> manyReadings(int n) {
  std::vector<MeasurementRow> rows;
  for (int k = 0; k < n; ++k)
    rows.push_back({fmt::format("h{:04}", k % 1024), fmt::format("h{:04}", (k * 7 + 1) % 1024),
                    k % 2 ? "bandwidth" : "latency", 100.0 + k, k % 3 ? "structure" : "load"});
  return rows;
}

// A round's readings cost a record of 14 bytes each among 1024 hosts, not a row: the 1024-host
// hollow agents' round (about 100 000 readings) grew the store by 10.3 MB with a row each, and
// 4096 hollow agents' round (505 000 readings) passed 10 MB with 18-byte records.
TEST(Store, AHundredThousandReadingsTakeAFewMegabytes) {
  TempDir dir;
  Store s(dir.path());
  const int64_t id = s.beginRound("full", 1024, 0);
  const auto rows = manyReadings(100000);
  const auto before = std::filesystem::file_size(s.path());
  s.addMeasurements(id, rows);
  std::error_code ec;
  const auto wal = std::filesystem::file_size(s.path() + "-wal", ec);
  EXPECT_LT(std::filesystem::file_size(s.path()) + (ec ? 0 : wal) - before,
            rows.size() * 14 + (256u << 10));
  EXPECT_EQ(s.measurementCount(id), rows.size());
  EXPECT_EQ(s.measurements(id), rows);
}

// What a query of one row and one column of the store's database answers, as text.
std::string queryOne(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  std::string out;
  sqlite3_exec(
      h, sql.c_str(),
      [](void* o, int, char** v, char**) {
        *static_cast<std::string*>(o) = v[0] ? v[0] : "NULL";
        return 0;
      },
      &out, nullptr);
  sqlite3_close(h);
  return out;
}

// A store's database with one round (its id returned), then `sql` run on it as an older rankmapd
// would have left it; `sql` names the round's id as {0} (fmt).
int64_t oneRoundThen(const TempDir& dir, const std::string& sql) {
  int64_t id;
  {
    Store s(dir.path());
    id = s.beginRound("full", 2, 1);
  }
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open((dir.path() + "/rankmapd.db").c_str(), &db), SQLITE_OK);
  EXPECT_EQ(sqlite3_exec(db, fmt::format(fmt::runtime(sql), id).c_str(), nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  return id;
}

// A part's host indexes take 1 byte up to 256 hosts, 2 up to 65 536 and 4 beyond, and every
// width reads back exactly.
TEST(Store, HostIndexesAreAsNarrowAsTheHostCountAllows) {
  for (auto [hosts, width] : {std::pair{256, 1}, {257, 2}, {65536, 2}, {65537, 4}}) {
    TempDir dir;
    std::vector<MeasurementRow> rows;
    for (int k = 0; k < hosts; ++k)
      rows.push_back({fmt::format("h{}", k), fmt::format("h{}", (k + 1) % hosts),
                      k % 2 ? "bandwidth" : "latency", 0.1 * k, "structure"});
    int64_t id;
    {
      Store s(dir.path());
      id = s.beginRound("full", hosts, 0);
      s.addMeasurements(id, rows);
    }
    Store s(dir.path());
    EXPECT_EQ(s.measurements(id), rows) << hosts << " hosts";
    EXPECT_EQ(queryOne(s.path(), "SELECT host_bytes FROM readings"), std::to_string(width));
    EXPECT_EQ(queryOne(s.path(), "SELECT length(records) FROM readings"),
              std::to_string(hosts * (2 * width + 10)));
  }
}

// A round's readings in one transaction do not stay on disk twice: the write-ahead log that held
// them is cut back to 1 MiB once the next write restarts it (journal_size_limit).
TEST(Store, TheLogOfALargeRoundIsCutBack) {
  TempDir dir;
  Store s(dir.path());
  const int64_t id = s.beginRound("full", 1024, 0);
  const auto rows = manyReadings(300000);
  s.addMeasurements(id, rows);
  RoundRecord rec;
  rec.id = id;
  rec.status = "ok";
  s.finishRound(rec);
  s.beginRound("full", 1024, 0);
  std::error_code ec;
  const auto wal = std::filesystem::file_size(s.path() + "-wal", ec);
  EXPECT_LE(ec ? 0 : wal, 1u << 20);
  EXPECT_GT(std::filesystem::file_size(s.path()), 300000u * 14);
  EXPECT_EQ(s.measurementCount(id), rows.size());
}

// Schema 1 kept a row per reading in `measurements`: opening such a database packs them by round
// and drops the table, the readings unchanged.
TEST(Store, ASchemaOneDatabaseIsMigrated) {
  TempDir dir;
  const int64_t id = oneRoundThen(
      dir,
      "DROP TABLE readings; UPDATE meta SET value = '1' WHERE key = 'schema_version';"
      "CREATE TABLE measurements(round_id INTEGER NOT NULL, src TEXT NOT NULL, dst TEXT NOT "
      "NULL, kind TEXT NOT NULL, value REAL NOT NULL, phase TEXT NOT NULL, extra TEXT);"
      "INSERT INTO measurements VALUES({0}, 'a', 'b', 'bandwidth', 250.5, 'round', NULL),"
      "({0}, 'b', 'a', 'latency', 12, 'round', '{{\"min\": 10}}');");
  Store s(dir.path());
  EXPECT_FALSE(s.recoveredFrom());
  EXPECT_EQ(s.measurements(id),
            (std::vector<MeasurementRow>{{"a", "b", "bandwidth", 250.5, "round"},
                                         {"b", "a", "latency", 12, "round"}}));
  EXPECT_EQ(queryOne(s.path(), "SELECT COUNT(*) FROM sqlite_master WHERE name = 'measurements'"),
            "0");
}

// Schema 2 packed every index in 4 bytes and had no host_bytes column: opening such a database
// adds the column, its parts read back as they were, and new parts are narrow.
TEST(Store, ASchemaTwoDatabaseIsMigrated) {
  TempDir dir;
  // One 18-byte record: src 0, dst 1, 250.5 (IEEE bits 0x406F500000000000), bandwidth, phase 0.
  const int64_t id = oneRoundThen(
      dir,
      "DROP TABLE readings; UPDATE meta SET value = '2' WHERE key = 'schema_version';"
      "CREATE TABLE readings(id INTEGER PRIMARY KEY AUTOINCREMENT, round_id INTEGER NOT NULL "
      "REFERENCES rounds(id) ON DELETE CASCADE, hosts TEXT NOT NULL, phases TEXT NOT NULL, "
      "count INTEGER NOT NULL, records BLOB NOT NULL);"
      "INSERT INTO readings(round_id, hosts, phases, count, records) VALUES({0}, '[\"a\", "
      "\"b\"]', '[\"round\"]', 1, X'00000000010000000000000000506F400100');");
  Store s(dir.path());
  EXPECT_FALSE(s.recoveredFrom());
  s.addMeasurements(id, {{"b", "a", "latency", 12, "check"}});
  EXPECT_EQ(s.measurements(id),
            (std::vector<MeasurementRow>{{"a", "b", "bandwidth", 250.5, "round"},
                                         {"b", "a", "latency", 12, "check"}}));
  EXPECT_EQ(queryOne(s.path(), "SELECT group_concat(host_bytes) FROM readings"), "4,1");
  EXPECT_EQ(queryOne(s.path(), "SELECT value FROM meta WHERE key = 'schema_version'"), "3");
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
    s.addMeasurements(id, {{"a", "b", "bandwidth", 1, "round"}});
    Topology t = twoHosts(i + 1);
    s.addTopology(t, id);
  }
  s.prune({.rounds = 2, .topologies = 3});
  EXPECT_EQ(s.rounds(100).size(), 2u);
  EXPECT_EQ(s.topologies(100).size(), 3u);
  EXPECT_EQ(s.latestTopology()->version, 5);
  EXPECT_EQ(s.measurementCount(1), 0u);
  EXPECT_EQ(s.measurementCount(5), 1u);
}

// A count alone would keep 7 GB of 4096-host rounds: the bytes bound what is kept, and the newest
// round and topology stay whatever their size.
TEST(Store, PruneKeepsWhatItsBytesHold) {
  TempDir dir;
  Store s(dir.path());
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(s.beginRound("full", 1024, 0));
    s.addMeasurements(ids.back(), manyReadings(1000));  // 14 000 bytes of records
    Topology t = twoHosts(i + 1);
    s.addTopology(t, ids.back());
  }
  const uint64_t doc = twoHosts(5).toJson().dump().size();
  s.prune({.bytes = 30000});
  EXPECT_EQ(s.rounds(100).size(), 2u);
  EXPECT_EQ(s.measurementCount(ids[2]), 0u);
  EXPECT_EQ(s.measurementCount(ids[3]), 1000u);
  EXPECT_EQ(s.measurementCount(ids[4]), 1000u);
  EXPECT_EQ(s.topologies(100).size(), std::min<uint64_t>(5, 30000 / doc));
  s.prune({.bytes = 1});
  ASSERT_EQ(s.rounds(100).size(), 1u);
  EXPECT_EQ(s.rounds(100)[0].id, ids[4]);
  EXPECT_EQ(s.measurementCount(ids[4]), 1000u);
  ASSERT_EQ(s.topologies(100).size(), 1u);
  EXPECT_EQ(s.latestTopology()->version, 5);
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

// Every topology version adds a plan for each host set asked for: prune keeps the newest of each
// set, for the newest sets.
TEST(Store, PruneKeepsTheNewestPlanOfEachHostSet) {
  TempDir dir;
  Store s(dir.path());
  for (int version = 1; version <= 3; ++version)
    for (const char* key : {"a,b", "a,c", "b,c"}) {
      Plan p = Plan::identity({"a", "b"});
      p.epoch = version;
      p.seal();
      s.addPlan(p, key);
    }
  s.prune({.hostSets = 2});
  EXPECT_FALSE(s.latestPlan("a,b"));
  ASSERT_TRUE(s.latestPlan("a,c"));
  ASSERT_TRUE(s.latestPlan("b,c"));
  EXPECT_EQ(s.latestPlan("b,c")->epoch, 3);
  EXPECT_EQ(queryOne(s.path(), "SELECT COUNT(*) FROM plans"), "2");
}

TEST(Store, UnwritableStateDirIsAnIoError) {
  EXPECT_THROW(Store("/proc/rankmap-no-such-dir/x"), IoError);
}

}  // namespace
}  // namespace rankmap::agent
