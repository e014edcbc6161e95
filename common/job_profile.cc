#include "common/job_profile.h"

#include <algorithm>
#include <iterator>
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

}  // namespace rankmap
