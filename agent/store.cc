#include "agent/store.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iterator>
#include <map>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::agent {
namespace {

// 3: a part's host indexes as narrow as its host count allows (`readings.host_bytes`; 2: always
// 4 bytes, migrated by adding the column); 2: a round's readings packed in `readings` (1: a row
// each in `measurements`; migrated).
constexpr int kSchemaVersion = 3;
constexpr int kBusyTimeoutMs = 5000;
// The write-ahead log is cut back to this size when it restarts after a checkpoint.
constexpr int64_t kWalLimitBytes = 1 << 20;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL,
  hosts INTEGER NOT NULL,
  pairs_total INTEGER NOT NULL,
  pairs_missing INTEGER NOT NULL DEFAULT 0,
  seconds REAL NOT NULL DEFAULT 0,
  topology_version INTEGER,
  error TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS readings(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  round_id INTEGER NOT NULL REFERENCES rounds(id) ON DELETE CASCADE,
  hosts TEXT NOT NULL,
  phases TEXT NOT NULL,
  count INTEGER NOT NULL,
  records BLOB NOT NULL,
  host_bytes INTEGER NOT NULL DEFAULT 4);
CREATE INDEX IF NOT EXISTS readings_round ON readings(round_id, id);
CREATE TABLE IF NOT EXISTS topologies(
  version INTEGER PRIMARY KEY,
  created_at TEXT NOT NULL,
  round_id INTEGER,
  hash TEXT NOT NULL,
  hosts INTEGER NOT NULL,
  document TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS plans(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  created_at TEXT NOT NULL,
  hosts_key TEXT NOT NULL,
  topology_version INTEGER,
  hash TEXT NOT NULL,
  document TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS plans_hosts ON plans(hosts_key, id);
)sql";

// A prepared statement; finalized on destruction. Errors name the statement and the database.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path), sql_(sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(st_, i, v)); }
  Stmt& bind(int i, double v) { return check(sqlite3_bind_double(st_, i, v)); }
  Stmt& bind(int i, const std::string& v) {
    return check(sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& bind(int i, const std::vector<uint8_t>& v) {
    return check(sqlite3_bind_blob(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Stmt& bindNull(int i) { return check(sqlite3_bind_null(st_, i)); }
  Stmt& bind(int i, const std::optional<int64_t>& v) { return v ? bind(i, *v) : bindNull(i); }

  // true while there is a row.
  bool step() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail("step");
  }
  void run() {
    while (step()) {
    }
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  int64_t integer(int c) const { return sqlite3_column_int64(st_, c); }
  double real(int c) const { return sqlite3_column_double(st_, c); }
  bool isNull(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
  std::vector<uint8_t> blob(int c) const {
    auto* p = static_cast<const uint8_t*>(sqlite3_column_blob(st_, c));
    return p ? std::vector<uint8_t>(p, p + sqlite3_column_bytes(st_, c)) : std::vector<uint8_t>();
  }
  std::string text(int c) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, c));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(st_, c))) : std::string();
  }

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) fail("bind");
    return *this;
  }
  [[noreturn]] void fail(const char* what) {
    throw IoError(fmt::format("{}: sqlite {} of '{:.60}' failed: {}", path_, what, sql_,
                              sqlite3_errmsg(db_)));
  }
  sqlite3* db_;
  const std::string& path_;
  const char* sql_;
  sqlite3_stmt* st_ = nullptr;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back if the scope exits by an exception.
class Transaction {
 public:
  Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {
    exec("BEGIN IMMEDIATE");
  }
  ~Transaction() {
    if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    exec("COMMIT");
    done_ = true;
  }

 private:
  void exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "?";
      sqlite3_free(err);
      throw IoError(fmt::format("{}: {} failed: {}", path_, sql, msg));
    }
  }
  sqlite3* db_;
  const std::string& path_;
  bool done_ = false;
};

std::string utcStamp() {
  // 20240501T120000Z: a file-name-safe UTC time.
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

bool fileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

RoundRecord roundFrom(const Stmt& s) {
  RoundRecord r;
  r.id = s.integer(0);
  r.kind = s.text(1);
  r.startedAt = s.text(2);
  r.finishedAt = s.text(3);
  r.status = s.text(4);
  r.hosts = s.integer(5);
  r.pairsTotal = s.integer(6);
  r.pairsMissing = s.integer(7);
  r.seconds = s.real(8);
  if (!s.isNull(9)) r.topologyVersion = s.integer(9);
  r.error = s.text(10);
  return r;
}

constexpr const char* kRoundColumns =
    "id, kind, started_at, finished_at, status, hosts, pairs_total, pairs_missing, seconds, "
    "topology_version, error";

// A round's readings as stored: each record little-endian src, dst (indexes into the part's host
// names, `hostBytes` each: 1, 2 or 4, the fewest that hold the part's host count), f64 value
// (IEEE bits, as measured), u8 kind (kKinds), u8 phase (index into its phase names). At 4096
// hosts a record is 14 bytes; it was 18 with 4-byte indexes (schema 2), and a round's 505 000
// readings then took the store past 10 MB.
constexpr size_t kFixedRecordBytes = 10;
constexpr size_t recordBytes(int hostBytes) {
  return 2 * static_cast<size_t>(hostBytes) + kFixedRecordBytes;
}
constexpr const char* kKinds[] = {"latency", "bandwidth"};

struct PackedReadings {
  Json hosts = Json::array();
  Json phases = Json::array();
  int hostBytes = 4;
  std::vector<uint8_t> records;
};

// The fewest bytes that index `hosts` names.
int indexBytes(size_t hosts) { return hosts <= 0x100 ? 1 : hosts <= 0x10000 ? 2 : 4; }

PackedReadings pack(const std::vector<MeasurementRow>& rows) {
  PackedReadings p;
  std::map<std::string, uint32_t> hostIndex, phaseIndex;
  auto indexOf = [](std::map<std::string, uint32_t>& index, Json& names, const std::string& name) {
    auto [it, added] = index.emplace(name, static_cast<uint32_t>(index.size()));
    if (added) names.push_back(name);
    return it->second;
  };
  // The host names first: the index width follows from their count.
  std::vector<std::pair<uint32_t, uint32_t>> ends;
  ends.reserve(rows.size());
  for (const auto& m : rows)
    ends.emplace_back(indexOf(hostIndex, p.hosts, m.src), indexOf(hostIndex, p.hosts, m.dst));
  p.hostBytes = indexBytes(hostIndex.size());
  p.records.reserve(rows.size() * recordBytes(p.hostBytes));
  auto put = [&](uint64_t v, int bytes) {
    for (int b = 0; b < bytes; ++b) p.records.push_back(static_cast<uint8_t>(v >> (8 * b)));
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& m = rows[i];
    uint64_t kind = 0;
    while (kind < std::size(kKinds) && m.kind != kKinds[kind]) ++kind;
    if (kind == std::size(kKinds))
      throw InvalidInput(
          fmt::format("store: a reading of kind '{}' (expected latency or bandwidth)", m.kind));
    if (phaseIndex.size() == 255 && !phaseIndex.count(m.phase))
      throw InvalidInput("store: a round's readings name more than 255 phases");
    put(ends[i].first, p.hostBytes);
    put(ends[i].second, p.hostBytes);
    uint64_t bits = 0;
    std::memcpy(&bits, &m.value, sizeof bits);
    put(bits, 8);
    put(kind, 1);
    put(indexOf(phaseIndex, p.phases, m.phase), 1);
  }
  return p;
}

void unpack(const std::string& path, const Json& hosts, const Json& phases, int64_t hostBytes,
            const std::vector<uint8_t>& records, std::vector<MeasurementRow>& out) {
  auto bad = [&](const std::string& why) {
    return IoError(fmt::format("{}: stored readings: {}", path, why));
  };
  if (hostBytes != 1 && hostBytes != 2 && hostBytes != 4)
    throw bad(fmt::format("host_bytes {} (1, 2 or 4 expected)", hostBytes));
  const int w = static_cast<int>(hostBytes);
  const size_t size = recordBytes(w);
  if (records.size() % size != 0 || !hosts.is_array() || !phases.is_array())
    throw bad(fmt::format("{} bytes of records (a multiple of {} expected)", records.size(), size));
  auto get = [&](size_t at, int bytes) {
    uint64_t v = 0;
    for (int b = 0; b < bytes; ++b) v |= static_cast<uint64_t>(records[at + b]) << (8 * b);
    return v;
  };
  auto name = [&](const Json& names, uint64_t i, const char* what) {
    if (i >= names.size() || !names[i].is_string())
      throw bad(fmt::format("{} index {} of {}", what, i, names.size()));
    return names[i].get<std::string>();
  };
  for (size_t at = 0; at < records.size(); at += size) {
    MeasurementRow m;
    m.src = name(hosts, get(at, w), "host");
    m.dst = name(hosts, get(at + w, w), "host");
    const uint64_t bits = get(at + 2 * w, 8);
    std::memcpy(&m.value, &bits, sizeof bits);
    const uint64_t kind = get(at + 2 * w + 8, 1);
    if (kind >= std::size(kKinds)) throw bad(fmt::format("kind {}", kind));
    m.kind = kKinds[kind];
    m.phase = name(phases, get(at + 2 * w + 9, 1), "phase");
    out.push_back(std::move(m));
  }
}

}  // namespace

std::vector<MeasurementRow> measurementRows(const std::vector<probe::Reading>& readings,
                                            const std::vector<Host>& hosts) {
  std::vector<MeasurementRow> rows;
  rows.reserve(readings.size());
  for (const auto& r : readings)
    rows.push_back({hosts.at(static_cast<size_t>(r.src)).name,
                    hosts.at(static_cast<size_t>(r.dst)).name, r.kind, r.value, r.phase});
  return rows;
}

Json RoundRecord::toJson() const {
  Json j = {{"id", id},
            {"kind", kind},
            {"started_at", startedAt},
            {"finished_at", finishedAt},
            {"status", status},
            {"hosts", hosts},
            {"pairs_total", pairsTotal},
            {"pairs_missing", pairsMissing},
            {"seconds", seconds},
            {"error", error}};
  j["topology_version"] = topologyVersion ? Json(*topologyVersion) : Json(nullptr);
  return j;
}

Json TopologyRecord::toJson() const {
  Json j = {{"version", version}, {"created_at", createdAt}, {"hash", hash}, {"hosts", hosts}};
  j["round_id"] = roundId ? Json(*roundId) : Json(nullptr);
  return j;
}

Store::Store(const std::string& stateDir) : dir_(stateDir), path_(stateDir + "/rankmapd.db") {
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
    throw IoError(fmt::format("state dir {}: cannot create: {}", dir_, std::strerror(errno)));
  open();
}

Store::~Store() {
  if (db_) sqlite3_close_v2(db_);
}

void Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw IoError(fmt::format("{}: {:.60}: {}", path_, sql, msg));
  }
}

std::optional<std::string> Store::writeProblem() {
  if (::access(dir_.c_str(), W_OK) != 0)
    return fmt::format("state dir {}: not writable: {}", dir_, std::strerror(errno));
  std::lock_guard<std::mutex> lock(mu_);
  // A readiness check waits for another writer a moment, not the store's 5 s.
  sqlite3_busy_timeout(db_, 200);
  std::optional<std::string> problem;
  try {
    Transaction t(db_, path_);  // BEGIN IMMEDIATE: the write lock; rolled back at scope end
  } catch (const IoError& e) {
    problem = e.what();
  }
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  return problem;
}

void Store::open() {
  // Attempt 0 opens what is there; if it is corrupt, it is moved aside and attempt 1 starts
  // from an empty database.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string problem;
    int rc = sqlite3_open_v2(path_.c_str(), &db_,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                             nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close_v2(db_);
      db_ = nullptr;
      if (rc != SQLITE_NOTADB && rc != SQLITE_CORRUPT)
        throw IoError(fmt::format("{}: cannot open: {}", path_, msg));
      problem = msg;
    } else {
      sqlite3_busy_timeout(db_, kBusyTimeoutMs);
      try {
        exec("PRAGMA journal_mode=WAL");
        // The log keeps the size of the largest transaction unless limited: a round's readings
        // at 4096 hosts (~11 MB) stayed on disk beside the database as a second copy.
        exec(fmt::format("PRAGMA journal_size_limit={}", kWalLimitBytes).c_str());
        exec("PRAGMA synchronous=FULL");
        exec("PRAGMA foreign_keys=ON");
        Stmt check(db_, path_, "PRAGMA quick_check");
        std::string verdict = check.step() ? check.text(0) : "no answer";
        if (verdict != "ok") problem = "quick_check: " + verdict;
      } catch (const IoError& e) {
        int code = sqlite3_errcode(db_);
        if (code != SQLITE_NOTADB && code != SQLITE_CORRUPT) throw;
        problem = e.what();
      }
    }
    if (problem.empty()) break;
    if (attempt == 1)
      throw IoError(fmt::format("{}: still unusable after moving the corrupt file aside: {}", path_,
                                problem));
    if (db_) sqlite3_close_v2(db_);
    db_ = nullptr;
    std::string aside = fmt::format("{}.corrupt-{}", path_, utcStamp());
    for (int k = 1; fileExists(aside); ++k)
      aside = fmt::format("{}.corrupt-{}.{}", path_, utcStamp(), k);
    if (::rename(path_.c_str(), aside.c_str()) != 0)
      throw IoError(fmt::format("{}: corrupt ({}) and cannot be moved aside to {}: {}", path_,
                                problem, aside, std::strerror(errno)));
    for (const char* suffix : {"-wal", "-shm"})
      if (fileExists(path_ + suffix)) ::rename((path_ + suffix).c_str(), (aside + suffix).c_str());
    RANKMAP_ERROR(Agent, "store {}: corrupt ({}); moved it aside to {} and started a new one",
                  path_, problem, aside);
    recoveredFrom_ = aside;
  }
  Transaction tx(db_, path_);
  exec(kSchema);
  Stmt ver(db_, path_, "SELECT value FROM meta WHERE key = 'schema_version'");
  if (ver.step()) {
    const std::string was = ver.text(0);
    ver.reset();  // a statement still stepping locks the tables the migration drops
    if (was == "1") {
      migrateReadings();
    } else if (was == "2") {
      // Schema 2's parts keep their 4-byte indexes (the column's default); new parts are narrow.
      exec("ALTER TABLE readings ADD COLUMN host_bytes INTEGER NOT NULL DEFAULT 4");
      setSchemaVersion();
    } else if (was != std::to_string(kSchemaVersion)) {
      throw IoError(
          fmt::format("{}: schema version {}, this rankmapd knows {}", path_, was, kSchemaVersion));
    }
  } else {
    Stmt ins(db_, path_, "INSERT INTO meta(key, value) VALUES('schema_version', ?)");
    ins.bind(1, std::to_string(kSchemaVersion)).run();
  }
  tx.commit();
}

void Store::setSchemaVersion() {
  Stmt v(db_, path_, "UPDATE meta SET value = ? WHERE key = 'schema_version'");
  v.bind(1, std::to_string(kSchemaVersion)).run();
}

// Schema 1 -> 3, inside open()'s transaction: every round's rows of `measurements` packed into
// `readings`, the old table dropped.
void Store::migrateReadings() {
  size_t rows = 0;
  {
    Stmt old(db_, path_,
             "SELECT round_id, src, dst, kind, value, phase FROM measurements "
             "ORDER BY round_id, rowid");
    std::optional<int64_t> round;
    std::vector<MeasurementRow> part;
    auto flush = [&] {
      if (part.empty()) return;
      insertReadings(*round, part);
      rows += part.size();
      part.clear();
    };
    while (old.step()) {
      if (round != old.integer(0)) {
        flush();
        round = old.integer(0);
      }
      part.push_back({old.text(1), old.text(2), old.text(3), old.real(4), old.text(5)});
    }
    flush();
  }
  exec("DROP TABLE measurements");
  setSchemaVersion();
  RANKMAP_INFO(Agent, "store {}: schema 1 -> {}: {} readings packed by round", path_,
               kSchemaVersion, rows);
}

int64_t Store::beginRound(const std::string& kind, int64_t hosts, int64_t pairsTotal) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_,
         "INSERT INTO rounds(kind, started_at, status, hosts, pairs_total) "
         "VALUES(?, ?, 'running', ?, ?)");
  s.bind(1, kind).bind(2, utcNow()).bind(3, hosts).bind(4, pairsTotal).run();
  return sqlite3_last_insert_rowid(db_);
}

void Store::finishRound(const RoundRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_,
         "UPDATE rounds SET finished_at = ?, status = ?, pairs_total = ?, pairs_missing = ?, "
         "seconds = ?, topology_version = ?, error = ? WHERE id = ?");
  s.bind(1, r.finishedAt.empty() ? utcNow() : r.finishedAt)
      .bind(2, r.status)
      .bind(3, r.pairsTotal)
      .bind(4, r.pairsMissing)
      .bind(5, r.seconds)
      .bind(6, r.topologyVersion)
      .bind(7, r.error)
      .bind(8, r.id)
      .run();
}

int64_t Store::abandonRunningRounds() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_,
         "UPDATE rounds SET status = 'failed', finished_at = ?, "
         "error = 'agent stopped during the round' WHERE status = 'running'");
  s.bind(1, utcNow()).run();
  return sqlite3_changes(db_);
}

void Store::addMeasurements(int64_t roundId, const std::vector<MeasurementRow>& rows) {
  if (rows.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  insertReadings(roundId, rows);
}

void Store::insertReadings(int64_t roundId, const std::vector<MeasurementRow>& rows) {
  const PackedReadings p = pack(rows);
  Stmt s(db_, path_,
         "INSERT INTO readings(round_id, hosts, phases, count, records, host_bytes) "
         "VALUES(?, ?, ?, ?, ?, ?)");
  s.bind(1, roundId)
      .bind(2, p.hosts.dump())
      .bind(3, p.phases.dump())
      .bind(4, static_cast<int64_t>(rows.size()))
      .bind(5, p.records)
      .bind(6, static_cast<int64_t>(p.hostBytes))
      .run();
}

size_t Store::measurementCount(int64_t roundId) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_, "SELECT COALESCE(SUM(count), 0) FROM readings WHERE round_id = ?");
  s.bind(1, roundId);
  return s.step() ? static_cast<size_t>(s.integer(0)) : 0;
}

std::vector<MeasurementRow> Store::measurements(int64_t roundId) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_,
         "SELECT hosts, phases, host_bytes, records FROM readings WHERE round_id = ? ORDER BY id");
  s.bind(1, roundId);
  std::vector<MeasurementRow> out;
  while (s.step())
    unpack(path_, parseJson(s.text(0), path_ + " readings hosts"),
           parseJson(s.text(1), path_ + " readings phases"), s.integer(2), s.blob(3), out);
  return out;
}

std::optional<RoundRecord> Store::round(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = fmt::format("SELECT {} FROM rounds WHERE id = ?", kRoundColumns);
  Stmt s(db_, path_, sql.c_str());
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return roundFrom(s);
}

std::vector<RoundRecord> Store::rounds(size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = fmt::format("SELECT {} FROM rounds ORDER BY id DESC LIMIT ?", kRoundColumns);
  Stmt s(db_, path_, sql.c_str());
  s.bind(1, static_cast<int64_t>(limit));
  std::vector<RoundRecord> out;
  while (s.step()) out.push_back(roundFrom(s));
  return out;
}

int64_t Store::addTopology(Topology& t, std::optional<int64_t> roundId) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(db_, path_);
  Stmt next(db_, path_, "SELECT COALESCE(MAX(version), 0) + 1 FROM topologies");
  next.step();
  t.version = next.integer(0);
  Stmt s(db_, path_,
         "INSERT INTO topologies(version, created_at, round_id, hash, hosts, document) "
         "VALUES(?, ?, ?, ?, ?, ?)");
  const std::string doc = t.toJson().dump();
  s.bind(1, t.version)
      .bind(2, utcNow())
      .bind(3, roundId)
      .bind(4, contentHashOf(doc))
      .bind(5, static_cast<int64_t>(t.size()))
      .bind(6, doc)
      .run();
  tx.commit();
  return t.version;
}

bool Store::putTopology(const Topology& t) {
  if (t.version <= 0) RANKMAP_THROW(InvalidInput, "pushed topology without a version");
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(db_, path_);
  Stmt s(db_, path_,
         "INSERT OR IGNORE INTO topologies(version, created_at, round_id, hash, hosts, document) "
         "VALUES(?, ?, NULL, ?, ?, ?)");
  const std::string doc = t.toJson().dump();
  s.bind(1, t.version)
      .bind(2, utcNow())
      .bind(3, contentHashOf(doc))
      .bind(4, static_cast<int64_t>(t.size()))
      .bind(5, doc)
      .run();
  bool inserted = sqlite3_changes(db_) > 0;
  tx.commit();
  return inserted;
}

std::optional<Topology> Store::topologyWhere(const char* sql, int64_t arg, bool bind) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_, sql);
  if (bind) s.bind(1, arg);
  if (!s.step()) return std::nullopt;
  int64_t version = s.integer(0);
  Topology t = Topology::parse(s.text(1), fmt::format("{} topology version {}", path_, version));
  t.version = version;
  return t;
}

std::optional<Topology> Store::latestTopology() {
  return topologyWhere("SELECT version, document FROM topologies ORDER BY version DESC LIMIT 1", 0,
                       false);
}

std::optional<Topology> Store::topology(int64_t version) {
  return topologyWhere("SELECT version, document FROM topologies WHERE version = ?", version, true);
}

std::vector<TopologyRecord> Store::topologies(size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_,
         "SELECT version, created_at, round_id, hash, hosts FROM topologies "
         "ORDER BY version DESC LIMIT ?");
  s.bind(1, static_cast<int64_t>(limit));
  std::vector<TopologyRecord> out;
  while (s.step()) {
    TopologyRecord r;
    r.version = s.integer(0);
    r.createdAt = s.text(1);
    if (!s.isNull(2)) r.roundId = s.integer(2);
    r.hash = s.text(3);
    r.hosts = s.integer(4);
    out.push_back(std::move(r));
  }
  return out;
}

int64_t Store::addPlan(const Plan& p, const std::string& hostsKey) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_,
         "INSERT INTO plans(created_at, hosts_key, topology_version, hash, document) "
         "VALUES(?, ?, ?, ?, ?)");
  s.bind(1, utcNow())
      .bind(2, hostsKey)
      .bind(3, p.epoch)
      .bind(4, p.hash)
      .bind(5, p.toJson().dump())
      .run();
  return sqlite3_last_insert_rowid(db_);
}

std::optional<Plan> Store::latestPlan(const std::string& hostsKey) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, path_, "SELECT document FROM plans WHERE hosts_key = ? ORDER BY id DESC LIMIT 1");
  s.bind(1, hostsKey);
  if (!s.step()) return std::nullopt;
  return Plan::parse(s.text(0), path_ + " plan");
}

void Store::prune(const Retention& keep) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction tx(db_, path_);
  // The newest round that goes: past the count, or past the bytes (length() of a blob reads
  // only its record header).
  std::optional<int64_t> cut;
  {
    Stmt q(db_, path_,
           "SELECT r.id, (SELECT COALESCE(SUM(length(records)), 0) FROM readings "
           "WHERE round_id = r.id) FROM rounds r ORDER BY r.id DESC");
    size_t n = 0;
    uint64_t bytes = 0;
    while (q.step()) {
      const auto b = static_cast<uint64_t>(q.integer(1));
      if (n == keep.rounds || (n > 0 && bytes + b > keep.bytes)) {
        cut = q.integer(0);
        break;
      }
      bytes += b;
      ++n;
    }
  }
  if (cut) {
    Stmt m(db_, path_, "DELETE FROM readings WHERE round_id <= ?");
    m.bind(1, *cut).run();
    Stmt r(db_, path_, "DELETE FROM rounds WHERE id <= ?");
    r.bind(1, *cut).run();
  }
  size_t topologies = keep.topologies;
  Stmt newest(db_, path_,
              "SELECT length(CAST(document AS BLOB)) FROM topologies ORDER BY version DESC "
              "LIMIT 1");
  if (newest.step() && newest.integer(0) > 0)
    topologies = std::min<uint64_t>(
        topologies, std::max<uint64_t>(1, keep.bytes / static_cast<uint64_t>(newest.integer(0))));
  Stmt t(db_, path_,
         "DELETE FROM topologies WHERE version NOT IN "
         "(SELECT version FROM topologies ORDER BY version DESC LIMIT ?)");
  t.bind(1, static_cast<int64_t>(topologies)).run();
  // A plan per topology version and host set: every published version added one.
  Stmt p(db_, path_,
         "DELETE FROM plans WHERE id NOT IN (SELECT id FROM (SELECT MAX(id) AS id FROM plans "
         "GROUP BY hosts_key) ORDER BY id DESC LIMIT ?)");
  p.bind(1, static_cast<int64_t>(keep.hostSets)).run();
  tx.commit();
}

}  // namespace rankmap::agent
