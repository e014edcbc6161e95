#include "common/job_profile.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/plan.h"
#include "common/topology.h"

namespace rankmap {
namespace {

constexpr std::string_view kSchema = "rankmap.profile";
// A profile is a job's description, not a measurement log: a bound that no real job reaches.
constexpr int64_t kMaxWorld = 1 << 24;

}  // namespace

std::string JobProfile::dump() const {
  Json j;
  j["schema"] = kSchema;
  j["version"] = kVersion;
  j["program"] = program;
  j["world_size"] = worldSize;
  j["recorded"] = recorded;
  Json sj = Json::array();
  for (const auto& s : sets) {
    Json e;
    e["made_by"] = s.madeBy;
    e["call"] = s.call;
    e["groups"] = s.groups;
    Json t = Json::array();
    for (const auto& x : s.traffic)
      t.push_back({{"collective", x.collective}, {"calls", x.calls}, {"bytes", x.bytes}});
    e["traffic"] = std::move(t);
    sj.push_back(std::move(e));
  }
  j["sets"] = std::move(sj);
  return j.dump(1) + "\n";
}

JobProfile JobProfile::parse(std::string_view text, std::string_view source) {
  Json doc = parseJson(text, source);
  JsonReader r(doc, source);
  r.expectObject();
  auto schema = r.at("schema", "\"rankmap.profile\"");
  if (schema.str() != kSchema) schema.fail("\"rankmap.profile\" (a job profile)");
  auto version = r.at("version", "an integer");
  if (version.integer() != kVersion) version.fail(fmt::format("profile version {}", kVersion));
  JobProfile p;
  p.program = r.at("program", "the program's file name").nonEmptyStr();
  p.worldSize = static_cast<int>(r.at("world_size", "an integer").integerIn(1, kMaxWorld));
  auto rec = r.at("recorded", "an RFC 3339 UTC time");
  p.recorded = rec.str();
  if (!parseUtcTime(p.recorded)) rec.fail("an RFC 3339 UTC time (\"2026-12-04T12:00:00Z\")");
  auto sets = r.at("sets", "an array of group sets");
  for (size_t i = 0, n = sets.arraySize(); i < n; ++i) {
    auto e = sets.at(i);
    e.expectObject();
    ProfileSet s;
    s.madeBy = e.at("made_by", "the call that made the groups").nonEmptyStr();
    s.call = static_cast<int>(e.at("call", "an integer").integerIn(0, INT32_MAX));
    auto groups = e.at("groups", "an array of groups (arrays of ranks)");
    std::set<int64_t> seen;
    for (size_t g = 0, gn = groups.arraySize(); g < gn; ++g) {
      auto gr = groups.at(g);
      std::vector<int> members;
      for (size_t k = 0, kn = gr.arraySize(); k < kn; ++k) {
        auto m = gr.at(k);
        int64_t rank = m.integerIn(0, p.worldSize - 1);
        if (!members.empty() && rank <= members.back()) m.fail("ranks in ascending order");
        if (!seen.insert(rank).second) m.fail("a rank in one group of the set only");
        members.push_back(static_cast<int>(rank));
      }
      if (members.empty()) gr.fail("a group of at least one rank");
      if (!s.groups.empty() && members.front() <= s.groups.back().front())
        gr.fail("groups in ascending order of their first rank");
      s.groups.push_back(std::move(members));
    }
    auto traffic = e.at("traffic", "an array of traffic entries");
    for (size_t t = 0, tn = traffic.arraySize(); t < tn; ++t) {
      auto te = traffic.at(t);
      te.expectObject();
      ProfileTraffic x;
      auto coll = te.at("collective", "a collective");
      x.collective = coll.str();
      if (!isMeshCollective(x.collective)) coll.fail(kMeshCollectivesText);
      for (const auto& y : s.traffic)
        if (y.collective == x.collective) coll.fail("each collective once per set");
      x.calls = te.at("calls", "a count").unsignedInt();
      x.bytes = te.at("bytes", "a byte count").unsignedInt();
      s.traffic.push_back(std::move(x));
    }
    p.sets.push_back(std::move(s));
  }
  return p;
}

JobProfile JobProfile::load(const std::string& path) {
  return parse(readFile(path, 64u << 20), path);
}

JobProfile JobProfile::merge(const std::vector<std::string>& records, std::string program,
                             std::string recorded) {
  struct Counter {
    uint64_t calls = 0, bytes = 0;
  };
  using Traffic = std::map<std::string, Counter>;
  // (call, made by) -> group -> its traffic, as its members saw it.
  std::map<std::pair<int, std::string>, std::map<std::vector<int>, Traffic>> sets;
  // Entries that name their communicator by key (the NCCL shim's): (call, made by) -> key ->
  // the ranks that hold it and its traffic; groups once every record is read.
  std::map<std::pair<int, std::string>, std::map<std::string, std::pair<std::vector<int>, Traffic>>>
      keyed;
  const int world = static_cast<int>(records.size());
  if (world < 1) RANKMAP_THROW(InvalidInput, "no rank's profile record");
  // The world's point-to-point messages: (from, to) -> messages and bytes.
  std::map<std::pair<int, int>, Counter> p2p;
  for (int r = 0; r < world; ++r) {
    const std::string source = fmt::format("profile record of rank {}", r);
    Json doc = parseJson(records[static_cast<size_t>(r)], source);
    JsonReader a(doc, source);
    for (size_t i = 0, n = a.arraySize(); i < n; ++i) {
      auto e = a.at(i);
      e.expectObject();
      std::pair<int, std::string> key{
          static_cast<int>(e.at("c", "the set's call number").integerIn(0, INT32_MAX)),
          e.at("m", "the call that made the set").nonEmptyStr()};
      Traffic* traffic = nullptr;
      if (auto k = e.find("k")) {
        if (e.find("g")) k->fail("either the group's ranks (g) or its communicator's key (k)");
        auto& [members, t] = keyed[key][k->nonEmptyStr()];
        members.push_back(r);
        traffic = &t;
      } else {
        std::vector<int> members;
        auto g = e.at("g", "the group's ranks");
        for (size_t k = 0, kn = g.arraySize(); k < kn; ++k)
          members.push_back(static_cast<int>(g.at(k).integerIn(0, world - 1)));
        traffic = &sets[key][members];
      }
      auto t = e.at("t", "the traffic by collective");
      t.expectObject();
      for (const auto& item : t.json().items()) {
        auto v = t.at(item.key());
        v.arraySize(2);
        Counter& c = (*traffic)[item.key()];
        uint64_t calls = v.at(0).unsignedInt(), bytes = v.at(1).unsignedInt();
        if (item.key() == "sendrecv") {  // messages: every member's own
          c.calls += calls;
          c.bytes += bytes;
        } else {  // a collective: every member passed the same buffer
          c.calls = std::max(c.calls, calls);
          c.bytes = std::max(c.bytes, bytes);
        }
      }
      if (auto p = e.find("p")) {
        if (key.first != 0) p->fail("point-to-point peers only in the set of call 0 (the world)");
        for (size_t k = 0, kn = p->arraySize(); k < kn; ++k) {
          auto m = p->at(k);
          m.arraySize(3);
          int to = static_cast<int>(m.at(0).integerIn(0, world - 1));
          Counter& c = p2p[{r, to}];
          c.calls += m.at(1).unsignedInt();
          c.bytes += m.at(2).unsignedInt();
        }
      }
    }
  }
  // A keyed communicator's group: the ranks that hold it, ascending (records are read in rank
  // order); a set whose keys disagree with its ranks comes out overlapping and is refused below.
  for (auto& [key, groups] : keyed)
    for (auto& [k, group] : groups) sets[key][std::move(group.first)] = std::move(group.second);
  // Ranks joined by messages on the world: each connected part of two or more is a group.
  std::vector<int> parent(static_cast<size_t>(world));
  std::iota(parent.begin(), parent.end(), 0);
  auto rootOf = [&](int x) {
    while (parent[static_cast<size_t>(x)] != x)
      x = parent[static_cast<size_t>(x)] =
          parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  };
  for (const auto& [edge, c] : p2p)
    if (edge.first != edge.second)
      parent[static_cast<size_t>(rootOf(edge.first))] = rootOf(edge.second);
  std::map<int, std::vector<int>> parts;  // root -> ranks, ascending
  for (int r = 0; r < world; ++r) parts[rootOf(r)].push_back(r);
  int lastCall = 0;
  for (const auto& [key, groups] : sets) lastCall = std::max(lastCall, key.first);
  std::map<std::vector<int>, Traffic> p2pGroups;
  for (const auto& [root, ranks] : parts) {
    if (ranks.size() < 2) continue;
    Counter& c = p2pGroups[ranks]["sendrecv"];
    for (const auto& [edge, e] : p2p)
      if (rootOf(edge.first) == root) {
        c.calls += e.calls;
        c.bytes += e.bytes;
      }
  }
  if (!p2pGroups.empty()) {
    sets[{lastCall + 1, std::string(kPointToPointSet)}] = std::move(p2pGroups);
    for (auto& [key, groups] : sets)  // those messages are the new set's, not the world's
      if (key.first == 0)
        for (auto& [members, traffic] : groups) traffic.erase("sendrecv");
  }

  JobProfile p;
  p.program = std::move(program);
  p.worldSize = world;
  p.recorded = std::move(recorded);
  for (auto& [key, groups] : sets) {
    ProfileSet s;
    s.call = key.first;
    s.madeBy = key.second;
    std::map<std::string, std::pair<double, double>> sum;
    for (auto& [members, traffic] : groups) {
      s.groups.push_back(members);
      for (const auto& [coll, c] : traffic) {
        sum[coll].first += static_cast<double>(c.calls);
        sum[coll].second += static_cast<double>(c.bytes);
      }
    }
    const double k = static_cast<double>(groups.size());
    for (const auto& [coll, v] : sum)
      s.traffic.push_back({coll, static_cast<uint64_t>(std::llround(v.first / k)),
                           static_cast<uint64_t>(std::llround(v.second / k))});
    p.sets.push_back(std::move(s));
  }
  // What the reader would refuse (groups that overlap: ranks that disagree) is not written.
  return parse(p.dump(), "the recorded profile");
}

JobProfile JobProfile::fromRecords(std::string_view text, std::string_view source,
                                   std::string recorded) {
  Json doc = parseJson(text, source);
  JsonReader r(doc, source);
  r.expectObject();
  auto schema = r.at("schema", "\"rankmap.profile-records\"");
  if (schema.str() != "rankmap.profile-records")
    schema.fail("\"rankmap.profile-records\" (a torchrun job's profile records)");
  auto version = r.at("version", "an integer");
  if (version.integer() != 1) version.fail("records version 1");
  std::string program = r.at("program", "the script's file name").nonEmptyStr();
  auto recs = r.at("records", "every rank's record");
  const size_t n = recs.arraySize();
  if (n > static_cast<size_t>(kMaxWorld)) recs.fail(fmt::format("at most {} records", kMaxWorld));
  std::vector<std::string> parts;
  for (size_t i = 0; i < n; ++i) parts.push_back(recs.at(i).str());
  return merge(parts, std::move(program), std::move(recorded));
}

}  // namespace rankmap
