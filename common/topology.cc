#include "common/topology.h"

#include <cstdio>
#include <ctime>
#include <map>
#include <set>

#include "common/crypto.h"
#include "common/error.h"
#include "common/files.h"

namespace rankmap {
namespace {

Json optNumber(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

void checkSchema(const JsonReader& r, std::string_view kind) {
  auto version = r.at("schema_version", "an integer").integer();
  if (version != Topology::kSchemaVersion)
    throw InvalidInput(fmt::format("{}: at /schema_version: expected {} schema version {}, got {}",
                                   r.source(), kind, Topology::kSchemaVersion, version));
}

}  // namespace

std::vector<HierarchyLevel> parseHierarchy(const JsonReader& r,
                                           const std::vector<std::string>& hostNames) {
  std::set<std::string> known(hostNames.begin(), hostNames.end());
  std::vector<HierarchyLevel> levels;
  size_t nLevels = r.arraySize();
  for (size_t li = 0; li < nLevels; ++li) {
    auto lr = r.at(li);
    HierarchyLevel level;
    level.name = lr.at("name", "a string").nonEmptyStr();
    auto conf = lr.at("confidence", "a number in [0, 1]");
    level.confidence = conf.nonNegative();
    if (level.confidence > 1) conf.fail("a number in [0, 1]");
    auto gr = lr.at("groups", "an array of arrays of host names");
    std::set<std::string> seen;
    for (size_t gi = 0, ng = gr.arraySize(); gi < ng; ++gi) {
      auto g = gr.at(gi);
      std::vector<std::string> members;
      for (size_t mi = 0, nm = g.arraySize(); mi < nm; ++mi) {
        auto m = g.at(mi);
        auto name = m.nonEmptyStr();
        if (!known.count(name)) m.fail("the name of a host listed in /hosts");
        if (!seen.insert(name).second) m.fail("a host not already in another group of this level");
        members.push_back(std::move(name));
      }
      if (members.empty()) g.fail("a non-empty group");
      level.groups.push_back(std::move(members));
    }
    if (seen.size() != known.size())
      throw InvalidInput(fmt::format("{}: at {}: expected every host in exactly one group, {} of {} "
                                     "covered",
                                     gr.source(), gr.path(), seen.size(), known.size()));
    levels.push_back(std::move(level));
  }
  return levels;
}

Json hierarchyToJson(const std::vector<HierarchyLevel>& levels) {
  Json arr = Json::array();
  for (const auto& l : levels)
    arr.push_back({{"name", l.name}, {"confidence", l.confidence}, {"groups", l.groups}});
  return arr;
}

int Topology::indexOf(std::string_view name) const {
  for (size_t i = 0; i < hosts.size(); ++i)
    if (hosts[i].name == name) return static_cast<int>(i);
  return -1;
}

Topology Topology::empty(std::vector<Host> hs) {
  Topology t;
  size_t n = hs.size();
  t.hosts = std::move(hs);
  t.bandwidthMbps = SquareMatrix<std::optional<double>>(n);
  t.latencyUs = SquareMatrix<std::optional<LatencyStats>>(n);
  return t;
}

Topology Topology::fromJson(const Json& doc, std::string_view source) {
  JsonReader r(doc, source);
  r.expectObject();
  checkSchema(r, "topology");

  auto hr = r.at("hosts", "an array of {name, address}");
  size_t n = hr.arraySize();
  if (n == 0) hr.fail("at least one host");
  std::vector<Host> hs;
  std::set<std::string> names;
  for (size_t i = 0; i < n; ++i) {
    auto h = hr.at(i);
    Host host;
    auto nameR = h.at("name", "a string");
    host.name = nameR.nonEmptyStr();
    if (!names.insert(host.name).second) nameR.fail("a unique host name");
    if (auto a = h.find("address")) host.address = a->str();
    hs.push_back(std::move(host));
  }
  Topology t = empty(std::move(hs));

  auto br = r.at("bandwidth_mbps", "an N x N array of numbers or null");
  br.arraySize(n);
  for (size_t i = 0; i < n; ++i) {
    auto row = br.at(i);
    row.arraySize(n);
    for (size_t j = 0; j < n; ++j) {
      auto c = row.at(j);
      if (!c.isNull()) t.bandwidthMbps.at(i, j) = c.nonNegative();
    }
  }
  auto lr = r.at("latency_us", "an N x N array of {min, median, p90, p99} or null");
  lr.arraySize(n);
  for (size_t i = 0; i < n; ++i) {
    auto row = lr.at(i);
    row.arraySize(n);
    for (size_t j = 0; j < n; ++j) {
      auto c = row.at(j);
      if (c.isNull()) continue;
      LatencyStats s;
      s.minUs = c.at("min", "a number").nonNegative();
      s.medianUs = c.at("median", "a number").nonNegative();
      s.p99Us = c.at("p99", "a number").nonNegative();
      s.p90Us = c.find("p90") ? c.at("p90").nonNegative() : s.p99Us;
      if (!(s.minUs <= s.medianUs && s.medianUs <= s.p99Us))
        c.fail("latency statistics with min <= median <= p99");
      t.latencyUs.at(i, j) = s;
    }
  }
  if (auto p = r.find("probe")) {
    if (auto v = p->find("latency_samples")) t.probe.latencySamples = v->integerIn(0, INT32_MAX);
    if (auto v = p->find("bandwidth_max_ms")) t.probe.bandwidthMaxMs = v->integerIn(0, INT64_MAX);
    if (auto v = p->find("bandwidth_max_bytes"))
      t.probe.bandwidthMaxBytes = v->integerIn(0, INT64_MAX);
    if (auto v = p->find("contention")) t.probe.contention = v->boolean();
  }
  if (auto v = r.find("time")) {
    t.time = v->str();
    if (!t.time.empty() && !parseUtcTime(t.time))
      v->fail("an RFC 3339 UTC time (\"2026-11-21T12:00:00Z\") or \"\"");
  }
  if (auto v = r.find("version")) t.version = v->integerIn(0, INT64_MAX);
  std::vector<std::string> hostNames;
  for (const auto& h : t.hosts) hostNames.push_back(h.name);
  if (auto g = r.find("groups")) t.groups = parseHierarchy(*g, hostNames);
  if (auto s = r.find("shared_links")) {
    for (size_t i = 0, m = s->arraySize(); i < m; ++i) {
      auto e = s->at(i);
      SharedLink link;
      link.capacityMbps = e.at("capacity_mbps", "a number").nonNegative();
      auto hl = e.at("hosts", "an array of host names");
      for (size_t k = 0, nh = hl.arraySize(); k < nh; ++k) {
        auto name = hl.at(k).nonEmptyStr();
        if (!names.count(name)) hl.at(k).fail("the name of a host listed in /hosts");
        link.hosts.push_back(std::move(name));
      }
      t.sharedLinks.push_back(std::move(link));
    }
  }
  return t;
}

Topology Topology::parse(std::string_view text, std::string_view source) {
  return fromJson(parseJson(text, source), source);
}

Topology Topology::load(const std::string& path) { return fromJson(readJsonFile(path), path); }

Json Topology::toJson() const {
  size_t n = hosts.size();
  Json j;
  j["schema_version"] = kSchemaVersion;
  j["hosts"] = Json::array();
  for (const auto& h : hosts) j["hosts"].push_back({{"name", h.name}, {"address", h.address}});
  Json bw = Json::array(), lat = Json::array();
  for (size_t i = 0; i < n; ++i) {
    Json brow = Json::array(), lrow = Json::array();
    for (size_t k = 0; k < n; ++k) {
      brow.push_back(optNumber(bandwidthMbps.at(i, k)));
      const auto& l = latencyUs.at(i, k);
      if (l)
        lrow.push_back({{"min", l->minUs}, {"median", l->medianUs}, {"p90", l->p90Us},
                        {"p99", l->p99Us}});
      else
        lrow.push_back(nullptr);
    }
    bw.push_back(std::move(brow));
    lat.push_back(std::move(lrow));
  }
  j["bandwidth_mbps"] = std::move(bw);
  j["latency_us"] = std::move(lat);
  j["probe"] = {{"latency_samples", probe.latencySamples},
                {"bandwidth_max_ms", probe.bandwidthMaxMs},
                {"bandwidth_max_bytes", probe.bandwidthMaxBytes},
                {"contention", probe.contention}};
  j["time"] = time;
  j["version"] = version;
  if (!groups.empty()) j["groups"] = hierarchyToJson(groups);
  if (!sharedLinks.empty()) {
    j["shared_links"] = Json::array();
    for (const auto& s : sharedLinks)
      j["shared_links"].push_back({{"hosts", s.hosts}, {"capacity_mbps", s.capacityMbps}});
  }
  return j;
}

std::string Topology::dump() const { return toJson().dump(1) + "\n"; }

void Topology::save(const std::string& path) const { writeFileAtomic(path, dump()); }

std::string Topology::contentHash() const { return "sha256:" + sha256Hex(toJson().dump()); }

std::optional<std::chrono::system_clock::time_point> parseUtcTime(std::string_view s) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  std::string text(s);
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6 ||
      used != 19)
    return std::nullopt;
  size_t i = 19;
  double frac = 0;
  if (i < s.size() && s[i] == '.') {
    double scale = 0.1;
    ++i;
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return std::nullopt;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      frac += (s[i] - '0') * scale;
      scale /= 10;
      ++i;
    }
  }
  if (i + 1 != s.size() || s[i] != 'Z') return std::nullopt;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  std::time_t t = timegm(&tm);
  return std::chrono::system_clock::from_time_t(t) +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(frac));
}


}  // namespace rankmap
