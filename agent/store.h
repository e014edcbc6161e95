// The agent's state: probe rounds, their readings, topology versions and plans, in SQLite
// (DIR/rankmapd.db) with write-ahead logging and synchronous=FULL, so a committed round
// survives a crash or power loss of the agent and nothing is half-written.
//
// History is kept: every topology version and round stays until prune() removes the oldest.
// A file that is not a valid database (or fails SQLite's quick_check) is moved aside to
// DIR/rankmapd.db.corrupt-<UTC time> (with its -wal/-shm files), an error is logged and a fresh
// database is created; recoveredFrom() tells where the old one went. Thread-safe: one
// connection guarded by a mutex; every write is one transaction.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/plan.h"
#include "common/topology.h"
#include "probe/round.h"

struct sqlite3;

namespace rankmap::agent {

// One measured value of a round (bandwidth: src sends to dst; latency: round trip measured by
// src to dst). Stored packed: a round's readings are one record each (12 bytes up to 256 hosts,
// 14 up to 65 536) plus the host and phase names they index (table `readings`), so that a round
// at 4096 hosts (~505 000 readings) adds about 8 MB, not the ~50 MB of a row each.
struct MeasurementRow {
  std::string src;
  std::string dst;
  std::string kind;  // "bandwidth" (value in Mbit/s) or "latency" (us)
  double value = 0;
  std::string phase;  // the probe phase that took it (probe::Reading::phase)
  bool operator==(const MeasurementRow&) const = default;
};

// A round's readings as rows, hosts named from `hosts` (the fleet's, which the readings index).
std::vector<MeasurementRow> measurementRows(const std::vector<probe::Reading>& readings,
                                            const std::vector<Host>& hosts);

struct RoundRecord {
  int64_t id = 0;
  std::string kind;  // "full", "light" or "repair" (a group re-probe after a light check)
  std::string startedAt, finishedAt;
  std::string status;  // "running", "ok", "partial", "failed", "unchanged", "changed"
  int64_t hosts = 0;
  int64_t pairsTotal = 0;
  int64_t pairsMissing = 0;
  double seconds = 0;
  std::optional<int64_t> topologyVersion;
  std::string error;
  Json toJson() const;
};

struct TopologyRecord {
  int64_t version = 0;
  std::string createdAt;
  std::optional<int64_t> roundId;
  std::string hash;
  int64_t hosts = 0;
  Json toJson() const;
};

class Store {
 public:
  // Opens (creating DIR and the database if needed). Throws IoError naming the path.
  explicit Store(const std::string& stateDir);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  // Where a corrupt database was moved when this Store opened, if it was.
  const std::optional<std::string>& recoveredFrom() const { return recoveredFrom_; }

  int64_t beginRound(const std::string& kind, int64_t hosts, int64_t pairsTotal);
  void finishRound(const RoundRecord& r);  // by r.id: status, finishedAt, counts, version, error
  // Marks rounds left "running" by a previous process as "failed" (agent restart).
  int64_t abandonRunningRounds();
  // Appends `rows` to the round's readings. Throws InvalidInput for a kind other than
  // "latency" or "bandwidth".
  void addMeasurements(int64_t roundId, const std::vector<MeasurementRow>& rows);
  size_t measurementCount(int64_t roundId);
  std::vector<MeasurementRow> measurements(int64_t roundId);  // in the order added
  std::optional<RoundRecord> round(int64_t id);
  std::vector<RoundRecord> rounds(size_t limit);

  // Stores `t` as the next version (max + 1); sets t.version and returns it.
  int64_t addTopology(Topology& t, std::optional<int64_t> roundId);
  // Stores a topology under its own version (pushed by the coordinator); false if that version
  // exists already.
  bool putTopology(const Topology& t);
  std::optional<Topology> latestTopology();
  std::optional<Topology> topology(int64_t version);
  std::vector<TopologyRecord> topologies(size_t limit);

  int64_t addPlan(const Plan& p, const std::string& hostsKey);
  std::optional<Plan> latestPlan(const std::string& hostsKey);

  // Why a write would fail now (the state dir not writable, the database read-only or locked
  // by another process), or nullopt. Cheap: it takes the write lock and rolls back at once, so
  // it cannot see a full disk (a round that could not store its results fails, and says so).
  std::optional<std::string> writeProblem();

  // What prune() keeps. Rounds: the newest `rounds`, as many of them as `bytes` holds in their
  // readings' records (the newest always stays). Topologies: the newest `topologies` versions,
  // as many as `bytes` holds at the newest document's size (at least one). A 4096-host round's
  // readings take about 7 MB and its topology 0.75 MB: a count alone would keep 7 GB of rounds.
  // Plans: the newest of each host set (only it is ever read), for the newest `hostSets`.
  struct Retention {
    size_t rounds = 1000;
    size_t topologies = 200;
    size_t hostSets = 1000;
    uint64_t bytes = uint64_t{256} << 20;
  };
  void prune(const Retention& keep);

 private:
  void open();
  void exec(const char* sql);
  void migrateReadings();
  void setSchemaVersion();
  // One part of a round's readings, packed (the caller holds mu_, or is open()).
  void insertReadings(int64_t roundId, const std::vector<MeasurementRow>& rows);
  std::optional<Topology> topologyWhere(const char* sql, int64_t arg, bool bind);

  std::string dir_;
  std::string path_;
  std::optional<std::string> recoveredFrom_;
  sqlite3* db_ = nullptr;
  std::mutex mu_;
};

}  // namespace rankmap::agent
