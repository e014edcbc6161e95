#include "common/topology.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "common/crypto.h"
#include "common/error.h"
#include "common/files.h"

namespace rankmap {
namespace {

// Parsing is one function per part of the document, in dependency order: the schema version,
// the hosts, the groups (they name hosts), the link model (sized by hosts and groups), the
// matrices (optional with a link model), the measured pairs (checked against the matrices),
// then the fields nothing else depends on.

Json optNumber(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

// "<source>: at <path>: expected <what>, got <got>" for checks JsonReader has no verb for.
[[noreturn]] void failAt(const JsonReader& r, std::string_view expected, std::string_view got) {
  throw InvalidInput(fmt::format("{}: at {}: expected {}, got {}", r.source(),
                                 r.path().empty() ? "/" : r.path(), expected, got));
}

// 1 or 2. Schema 1 -> 2 needs no rewriting: a schema 1 document is a schema 2 document without
// "links" and "measured" (every value present measured), so the version only decides whether
// those two fields are read.
int readSchemaVersion(const JsonReader& r) {
  auto v = r.at("schema_version", "an integer");
  int64_t version = v.integer();
  if (version < Topology::kOldestSchemaVersion || version > Topology::kSchemaVersion)
    failAt(v,
           fmt::format("topology schema version {} to {}", Topology::kOldestSchemaVersion,
                       Topology::kSchemaVersion),
           std::to_string(version));
  return static_cast<int>(version);
}

std::vector<Host> parseHosts(const JsonReader& r) {
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
  return hs;
}

void parseMatrices(const JsonReader& r, Topology& t) {
  size_t n = t.size();
  t.bandwidthMbps = SquareMatrix<std::optional<double>>(n);
  t.latencyUs = SquareMatrix<std::optional<LatencyStats>>(n);
  auto br =
      r.at("bandwidth_mbps",
           "an N x N array of numbers or null (required without /links, and with /latency_us)");
  br.arraySize(n);
  for (size_t i = 0; i < n; ++i) {
    auto row = br.at(i);
    row.arraySize(n);
    for (size_t j = 0; j < n; ++j) {
      auto c = row.at(j);
      if (!c.isNull()) t.bandwidthMbps.at(i, j) = c.nonNegative();
    }
  }
  auto lr = r.at("latency_us",
                 "an N x N array of {min, median, p90, p99} or null (required with "
                 "/bandwidth_mbps)");
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
}

LinkCapacity parseCapacity(const JsonReader& r) {
  r.expectObject();
  LinkCapacity c;
  c.outMbps = r.at("out_mbps", "a number (Mbit/s)").nonNegative();
  c.inMbps = r.at("in_mbps", "a number (Mbit/s)").nonNegative();
  return c;
}

// An array of `count` entries, one per `what`.
void expectCount(const JsonReader& r, size_t count, std::string_view what) {
  size_t got = r.arraySize();
  if (got != count)
    failAt(r, fmt::format("one entry per {} ({})", what, count), fmt::format("{}", got));
}

TopologyLinks parseLinks(const JsonReader& r, size_t hosts,
                         const std::vector<HierarchyLevel>& levels) {
  r.expectObject();
  TopologyLinks links;
  auto hr = r.at("hosts", "an array of {out_mbps, in_mbps}, one per host");
  expectCount(hr, hosts, "host of /hosts");
  for (size_t i = 0; i < hosts; ++i) links.hosts.push_back(parseCapacity(hr.at(i)));
  auto ur = r.at("uplinks", "an array per level of /groups of {out_mbps, in_mbps} per group");
  expectCount(ur, levels.size(), "level of /groups");
  for (size_t l = 0; l < levels.size(); ++l) {
    auto lr = ur.at(l);
    size_t groups = levels[l].groups.size();
    expectCount(lr, groups, fmt::format("group of /groups/{}/groups", l));
    std::vector<LinkCapacity> level;
    for (size_t g = 0; g < groups; ++g) level.push_back(parseCapacity(lr.at(g)));
    links.uplinks.push_back(std::move(level));
  }
  links.hostLatencyUs = r.at("host_latency_us", "a number (us, 0 = unknown)").nonNegative();
  auto lat = r.at("uplink_latency_us", "an array of numbers (us), one per level of /groups");
  expectCount(lat, levels.size(), "level of /groups");
  for (size_t l = 0; l < levels.size(); ++l)
    links.uplinkLatencyUs.push_back(lat.at(l).nonNegative());
  return links;
}

std::vector<std::pair<int, int>> parseMeasured(const JsonReader& r, const Topology& t) {
  size_t m = r.arraySize();
  if (m > 0 && !t.links)
    failAt(r, "no measured pairs without /links (without a link model every value is measured)",
           fmt::format("{} pairs", m));
  int last = static_cast<int>(t.size()) - 1;
  std::set<std::pair<int, int>> seen;
  std::vector<std::pair<int, int>> out;
  out.reserve(m);
  for (size_t k = 0; k < m; ++k) {
    auto e = r.at(k);
    e.arraySize(2);
    int src = static_cast<int>(e.at(0).integerIn(0, last));
    int dst = static_cast<int>(e.at(1).integerIn(0, last));
    if (src == dst) failAt(e, "a pair of two different hosts", fmt::format("[{}, {}]", src, dst));
    if (!seen.insert({src, dst}).second)
      failAt(e, "a pair not listed before", fmt::format("[{}, {}] again", src, dst));
    if (t.hasMatrices() && !t.bandwidthMbps.at(src, dst))
      failAt(
          e,
          fmt::format("a pair whose /bandwidth_mbps/{}/{} is a number (it was measured)", src, dst),
          "null there");
    out.emplace_back(src, dst);
  }
  return out;
}

void parseProbeAndTime(const JsonReader& r, Topology& t) {
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
}

std::vector<SharedLink> parseSharedLinks(const JsonReader& s, const Topology& t) {
  std::vector<SharedLink> out;
  for (size_t i = 0, m = s.arraySize(); i < m; ++i) {
    auto e = s.at(i);
    SharedLink link;
    link.capacityMbps = e.at("capacity_mbps", "a number").nonNegative();
    auto hl = e.at("hosts", "an array of host names");
    for (size_t k = 0, nh = hl.arraySize(); k < nh; ++k) {
      auto name = hl.at(k).nonEmptyStr();
      if (t.indexOf(name) < 0) hl.at(k).fail("the name of a host listed in /hosts");
      link.hosts.push_back(std::move(name));
    }
    out.push_back(std::move(link));
  }
  return out;
}

std::vector<RingCheck> parseRings(const JsonReader& r, const Topology& t) {
  std::vector<RingCheck> out;
  const int64_t last = static_cast<int64_t>(t.size()) - 1;
  for (size_t i = 0, m = r.arraySize(); i < m; ++i) {
    auto e = r.at(i);
    RingCheck c;
    c.name = e.at("name", "a string").nonEmptyStr();
    auto order = e.at("order", "an array of host indices");
    std::set<int> seen;
    for (size_t k = 0, n = order.arraySize(); k < n; ++k) {
      auto h = order.at(k);
      int v = static_cast<int>(h.integerIn(0, last));
      if (!seen.insert(v).second) h.fail("a host index not listed before in this ring");
      c.order.push_back(v);
    }
    if (c.order.size() < 2) order.fail("a ring of at least two hosts");
    auto mbps = e.at("mbps", "an array of rates (Mbit/s) or nulls, one per host of the order");
    if (mbps.arraySize() != c.order.size())
      mbps.fail(fmt::format("{} rates, one per hop of the order", c.order.size()));
    for (size_t k = 0; k < c.order.size(); ++k) {
      auto v = mbps.at(k);
      c.mbps.push_back(v.isNull() ? std::nullopt : std::optional<double>(v.nonNegative()));
    }
    out.push_back(std::move(c));
  }
  return out;
}

Json capacityToJson(const LinkCapacity& c) {
  return {{"out_mbps", c.outMbps}, {"in_mbps", c.inMbps}};
}

Json linksToJson(const TopologyLinks& links) {
  Json hosts = Json::array(), uplinks = Json::array();
  for (const auto& c : links.hosts) hosts.push_back(capacityToJson(c));
  for (const auto& level : links.uplinks) {
    Json l = Json::array();
    for (const auto& c : level) l.push_back(capacityToJson(c));
    uplinks.push_back(std::move(l));
  }
  return {{"hosts", std::move(hosts)},
          {"uplinks", std::move(uplinks)},
          {"host_latency_us", links.hostLatencyUs},
          {"uplink_latency_us", links.uplinkLatencyUs}};
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
      throw InvalidInput(
          fmt::format("{}: at {}: expected every host in exactly one group, {} of {} "
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

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

std::optional<double> RingCheck::bottleneckMbps(std::span<const double> modelMbps) const {
  struct Hop {
    double reading, model;
  };
  std::vector<Hop> v;
  for (size_t i = 0; i < mbps.size(); ++i)
    if (mbps[i]) v.push_back({*mbps[i], modelMbps.size() == mbps.size() ? modelMbps[i] : 0.0});
  const size_t missing = mbps.size() - v.size();
  if (v.empty() ||
      static_cast<double>(missing) > kMaxMissingHops * static_cast<double>(mbps.size()))
    return std::nullopt;
  std::sort(v.begin(), v.end(), [](const Hop& a, const Hop& b) { return a.reading < b.reading; });
  std::vector<Hop> band;
  for (const Hop& h : v)
    if (h.reading <= v.front().reading * (1 + 2 * kProbeNoise)) band.push_back(h);
  // Does the model tell the band's hops apart? Its rates explain the readings when they deviate
  // from them, after one common factor, by less than half the noise in the median.
  auto explains = [&] {
    std::vector<double> ratio, deviation;
    for (const Hop& h : band) {
      if (!(h.model > 0) || !std::isfinite(h.model)) return false;
      ratio.push_back(h.reading / h.model);
    }
    const double common = median(ratio);
    for (double r : ratio) deviation.push_back(std::abs(r / common - 1));
    return median(deviation) <= kProbeNoise / 2;
  };
  if (band.size() >= kRingBandForMedian && explains()) {
    double slowest = std::numeric_limits<double>::infinity();
    for (const Hop& h : band) slowest = std::min(slowest, h.model);
    std::erase_if(band, [&](const Hop& h) { return h.model > slowest * (1 + kProbeNoise); });
  }
  if (band.size() < kRingBandForMedian) return v.front().reading;
  return band[(band.size() - 1) / 2].reading;
}

// Host name -> its first index. Heterogeneous lookup: a string_view finds a std::string key.
struct Topology::NameIndex {
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int, Hash, std::equal_to<>> byName;
};

int Topology::indexOf(std::string_view name) const {
  // Callers look up every host of a group or link list: a scan each would be O(N^2) per
  // topology (1024 hosts: a third of what every agent spent storing a pushed version).
  auto lookup = [&](const NameIndex& idx) {
    auto it = idx.byName.find(name);
    if (it == idx.byName.end()) return -1;
    const auto i = static_cast<size_t>(it->second);
    return i < hosts.size() && hosts[i].name == name ? it->second : -1;
  };
  if (auto cached = nameCache_.index.load()) {
    if (int i = lookup(*cached); i >= 0) return i;
  }
  auto idx = std::make_shared<NameIndex>();
  idx->byName.reserve(hosts.size());
  for (size_t h = 0; h < hosts.size(); ++h) idx->byName.emplace(hosts[h].name, static_cast<int>(h));
  nameCache_.index.store(idx);
  return lookup(*idx);
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
  int schema = readSchemaVersion(r);
  Topology t;  // the matrices stay 0 x 0 unless the document has them
  t.hosts = parseHosts(r);
  std::vector<std::string> hostNames;
  for (const auto& h : t.hosts) hostNames.push_back(h.name);
  auto groups = r.find("groups");
  if (groups) t.groups = parseHierarchy(*groups, hostNames);
  if (auto lr = schema >= 2 ? r.find("links") : std::nullopt) {
    if (!groups)
      failAt(*lr, "/groups beside it (the levels its uplinks belong to; [] for none)",
             "links without /groups");
    t.links = parseLinks(*lr, t.size(), t.groups);
  }
  bool sparse = t.links && !r.find("bandwidth_mbps") && !r.find("latency_us");
  if (!sparse) parseMatrices(r, t);
  if (auto mr = schema >= 2 ? r.find("measured") : std::nullopt) t.measured = parseMeasured(*mr, t);
  parseProbeAndTime(r, t);
  if (auto s = r.find("shared_links")) t.sharedLinks = parseSharedLinks(*s, t);
  if (auto rr = schema >= 2 ? r.find("rings") : std::nullopt) t.rings = parseRings(*rr, t);
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
  if (hasMatrices()) {
    Json bw = Json::array(), lat = Json::array();
    for (size_t i = 0; i < n; ++i) {
      Json brow = Json::array(), lrow = Json::array();
      for (size_t k = 0; k < n; ++k) {
        brow.push_back(optNumber(bandwidthMbps.at(i, k)));
        const auto& l = latencyUs.at(i, k);
        if (l)
          lrow.push_back(
              {{"min", l->minUs}, {"median", l->medianUs}, {"p90", l->p90Us}, {"p99", l->p99Us}});
        else
          lrow.push_back(nullptr);
      }
      bw.push_back(std::move(brow));
      lat.push_back(std::move(lrow));
    }
    j["bandwidth_mbps"] = std::move(bw);
    j["latency_us"] = std::move(lat);
  }
  j["probe"] = {{"latency_samples", probe.latencySamples},
                {"bandwidth_max_ms", probe.bandwidthMaxMs},
                {"bandwidth_max_bytes", probe.bandwidthMaxBytes},
                {"contention", probe.contention}};
  j["time"] = time;
  j["version"] = version;
  // With a link model "groups" is written even when empty: "links" requires it.
  if (!groups.empty() || links) j["groups"] = hierarchyToJson(groups);
  if (!sharedLinks.empty()) {
    j["shared_links"] = Json::array();
    for (const auto& s : sharedLinks)
      j["shared_links"].push_back({{"hosts", s.hosts}, {"capacity_mbps", s.capacityMbps}});
  }
  if (links) j["links"] = linksToJson(*links);
  if (links || !measured.empty()) {
    Json m = Json::array();
    for (auto [src, dst] : measured) m.push_back({src, dst});
    j["measured"] = std::move(m);
  }
  if (!rings.empty()) {
    Json arr = Json::array();
    for (const auto& c : rings) {
      Json mbps = Json::array();
      for (const auto& v : c.mbps) mbps.push_back(optNumber(v));
      arr.push_back({{"name", c.name}, {"order", c.order}, {"mbps", std::move(mbps)}});
    }
    j["rings"] = std::move(arr);
  }
  return j;
}

std::string Topology::dump() const { return toJson().dump(1) + "\n"; }

void Topology::save(const std::string& path) const { writeFileAtomic(path, dump()); }

std::string contentHashOf(std::string_view canonicalJson) {
  return "sha256:" + sha256Hex(canonicalJson);
}

std::string Topology::contentHash() const { return contentHashOf(toJson().dump()); }

// Host -> (group, place in the group) per level. An entry is current when that place of that
// group still holds the host's name: pathIndex() checks the entries of the two hosts a call
// reads, so whatever was edited since (groups reassigned, hosts renamed or reordered), a stale
// index is never used; with valid groups (each host in one group per level) the check is exact.
struct Topology::PathIndex {
  size_t hosts = 0, levels = 0;
  std::vector<int> groupOf;  // host * levels + level
  std::vector<int> placeOf;  // host * levels + level: index in groups[level].groups[group]

  bool current(const Topology& t, int host) const {
    if (t.hosts.size() != hosts || t.groups.size() != levels) return false;
    size_t at = static_cast<size_t>(host) * levels;
    for (size_t l = 0; l < levels; ++l, ++at) {
      const auto& groups = t.groups[l].groups;
      size_t g = static_cast<size_t>(groupOf[at]), p = static_cast<size_t>(placeOf[at]);
      if (g >= groups.size() || p >= groups[g].size() || groups[g][p] != t.hosts[host].name)
        return false;
    }
    return true;
  }
};

std::shared_ptr<const Topology::PathIndex> Topology::pathIndex(int a, int b) const {
  auto cached = pathCache_.index.load();
  if (cached && cached->current(*this, a) && cached->current(*this, b)) return cached;
  auto idx = std::make_shared<PathIndex>();
  size_t n = hosts.size(), L = groups.size();
  idx->hosts = n;
  idx->levels = L;
  std::unordered_map<std::string_view, int> byName;
  for (size_t h = 0; h < n; ++h) byName.emplace(hosts[h].name, static_cast<int>(h));
  idx->groupOf.assign(n * L, -1);
  idx->placeOf.assign(n * L, -1);
  for (size_t l = 0; l < L; ++l) {
    for (size_t g = 0; g < groups[l].groups.size(); ++g)
      for (size_t p = 0; p < groups[l].groups[g].size(); ++p) {
        const std::string& name = groups[l].groups[g][p];
        auto it = byName.find(name);
        if (it == byName.end())
          RANKMAP_THROW(InvalidInput, "topology: group {} of level {} names '{}', not a host", g, l,
                        name);
        size_t at = static_cast<size_t>(it->second) * L + l;
        idx->groupOf[at] = static_cast<int>(g);
        idx->placeOf[at] = static_cast<int>(p);
      }
    for (size_t h = 0; h < n; ++h)
      if (idx->groupOf[h * L + l] < 0)
        RANKMAP_THROW(InvalidInput, "topology: host '{}' is in no group of level {}", hosts[h].name,
                      l);
  }
  pathCache_.index.store(idx);
  return idx;
}

namespace {

// Calls f(level, group of a, group of b) for each level below the lowest group a and b share.
template <typename F>
void forEachUplinkLevel(const std::vector<int>& groupOf, size_t levels, int a, int b, F&& f) {
  const int* ga = groupOf.data() + static_cast<size_t>(a) * levels;
  const int* gb = groupOf.data() + static_cast<size_t>(b) * levels;
  for (size_t l = 0; l < levels && ga[l] != gb[l]; ++l) f(l, ga[l], gb[l]);
}

void checkLinksFit(const Topology& t, int a, int b) {
  size_t n = t.size();
  RANKMAP_ASSERT(a >= 0 && b >= 0 && static_cast<size_t>(a) < n && static_cast<size_t>(b) < n);
  const TopologyLinks& links = *t.links;
  bool fits = links.hosts.size() == n && links.uplinks.size() == t.groups.size() &&
              links.uplinkLatencyUs.size() == t.groups.size();
  for (size_t l = 0; fits && l < t.groups.size(); ++l)
    fits = links.uplinks[l].size() == t.groups[l].groups.size();
  if (!fits)
    RANKMAP_THROW(InvalidInput,
                  "topology: links hold {} host(s) and {} level(s) of uplinks for {} host(s) and "
                  "{} level(s) of groups (one uplink per group, one latency per level)",
                  links.hosts.size(), links.uplinks.size(), n, t.groups.size());
}

}  // namespace

std::optional<double> Topology::pathMbps(int a, int b) const {
  if (!links) return std::nullopt;
  checkLinksFit(*this, a, b);
  if (a == b) return std::nullopt;
  auto idx = pathIndex(a, b);
  double r = std::min(links->hosts[a].outMbps, links->hosts[b].inMbps);
  forEachUplinkLevel(idx->groupOf, groups.size(), a, b, [&](size_t l, int ga, int gb) {
    r = std::min({r, links->uplinks[l][ga].outMbps, links->uplinks[l][gb].inMbps});
  });
  return r;
}

std::optional<double> Topology::pathLatencyUs(int a, int b) const {
  if (!links) return std::nullopt;
  checkLinksFit(*this, a, b);
  if (a == b) return std::nullopt;
  auto idx = pathIndex(a, b);
  double sum = 2 * links->hostLatencyUs;
  forEachUplinkLevel(idx->groupOf, groups.size(), a, b,
                     [&](size_t l, int, int) { sum += 2 * links->uplinkLatencyUs[l]; });
  return sum;
}

std::string utcNow() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, ms);
}

std::optional<std::chrono::system_clock::time_point> parseUtcTime(std::string_view s) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, used = 0;
  std::string text(s);
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) !=
          6 ||
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
  // %d also reads signs: fields are bounded on both sides. Years stay inside what
  // system_clock's nanoseconds hold (1677..2262): 9999 overflowed from_time_t (UBSan, found by
  // tests/fuzz).
  if (y < 1970 || y > 2200 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 ||
      mi > 59 || sec < 0 || sec > 60)
    return std::nullopt;
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

std::string levelName(size_t level) {
  static const char* kNames[] = {"rack", "pod", "zone"};
  if (level < 3) return kNames[level];
  return fmt::format("level{}", level + 1);
}

}  // namespace rankmap
