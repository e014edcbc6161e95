#include "common/plan.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <tuple>

#include "common/crypto.h"
#include "common/error.h"
#include "common/files.h"
#include "common/openmpi.h"

namespace rankmap {

Plan Plan::identity(std::vector<std::string> hs, int rph) {
  Plan p;
  p.order = hs;
  p.hosts = std::move(hs);
  p.ranksPerHost = rph;
  p.derivePermutation();
  p.seal();
  return p;
}

void Plan::derivePermutation() {
  std::map<std::string, int> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
  permutation.assign(worldSize(), 0);
  for (size_t h = 0; h < hosts.size(); ++h) {
    int p = pos.at(hosts[h]);
    for (int l = 0; l < ranksPerHost; ++l) permutation[h * ranksPerHost + l] = p * ranksPerHost + l;
  }
}

std::vector<int> Plan::inversePermutation() const {
  std::vector<int> inv(permutation.size());
  for (size_t i = 0; i < permutation.size(); ++i) inv[permutation[i]] = static_cast<int>(i);
  return inv;
}

std::optional<Algorithm> Plan::algorithmFor(std::string_view collective, uint64_t bytes) const {
  auto it = collectives.find(std::string(collective));
  if (it == collectives.end()) return std::nullopt;
  for (const auto& r : it->second)
    if (bytes >= r.minBytes && bytes < r.maxBytes) return r.algorithm;
  return std::nullopt;
}

namespace {
Json priorToJson(const PlanPrior& p) {
  Json hosts = Json::object();
  for (const auto& [name, ids] : p.hosts) hosts[name] = ids;
  Json dis = Json::array();
  for (const auto& d : p.disagreements)
    dis.push_back({{"kind", d.kind},
                   {"declared", d.declared},
                   {"measured", d.measured},
                   {"hosts", d.parts},
                   {"between_mbps", d.betweenMbps}});
  return {{"source", p.source},
          {"format", p.format},
          {"levels", p.levels},
          {"declared", p.declared},
          {"hosts", std::move(hosts)},
          {"measured_level", p.measuredLevel},
          {"same_group_mbps", p.sameGroupMbps},
          {"cross_group_mbps", p.crossGroupMbps},
          {"disagreements", std::move(dis)}};
}

// "prior": the hosts it names must be the plan's, each with one ID per declared level; each
// disagreement names parts of plan hosts, with one declared switch and a measured group per part
// (declared_together) or one measured group and a declared switch per part (declared_apart).
PlanPrior priorFromJson(const JsonReader& r, const Plan& plan) {
  r.expectObject();
  PlanPrior p;
  p.source = r.at("source", "a string").str();
  auto fr = r.at("format", "a string");
  p.format = fr.str();
  if (p.format != "native" && p.format != "aws" && p.format != "gcp" && p.format != "k8s_labels")
    fr.fail("one of native, aws, gcp, k8s_labels");
  auto lr = r.at("levels", "an array of level names");
  for (size_t i = 0, n = lr.arraySize(); i < n; ++i) p.levels.push_back(lr.at(i).nonEmptyStr());
  if (p.levels.empty()) lr.fail("at least one level");
  p.declared = r.at("declared", "an integer").unsignedInt();
  std::set<std::string> planHosts(plan.hosts.begin(), plan.hosts.end());
  auto hr = r.at("hosts", "an object host -> group IDs");
  hr.expectObject();
  for (const auto& [name, val] : hr.json().items()) {
    JsonReader h(val, r.source(), hr.path() + "/" + name);
    if (!planHosts.count(name)) h.fail("a host of the plan's /hosts");
    auto& ids = p.hosts[name];
    for (size_t i = 0, n = h.arraySize(p.levels.size()); i < n; ++i)
      ids.push_back(h.at(i).nonEmptyStr());
  }
  if (p.hosts.size() > p.declared) hr.fail("no more hosts than /prior/declared");
  p.measuredLevel = r.at("measured_level", "a string").str();
  p.sameGroupMbps = r.at("same_group_mbps", "a number").nonNegative();
  p.crossGroupMbps = r.at("cross_group_mbps", "a number").nonNegative();
  auto dr = r.at("disagreements", "an array");
  if (p.measuredLevel.empty() && dr.arraySize() != 0)
    dr.fail("no disagreements when nothing was compared (measured_level \"\")");
  int measuredGroups = 1;  // "network": one group
  if (p.measuredLevel != "network" && !p.measuredLevel.empty()) {
    auto it = std::find_if(plan.groups.begin(), plan.groups.end(),
                           [&](const HierarchyLevel& l) { return l.name == p.measuredLevel; });
    if (it == plan.groups.end())
      r.at("measured_level").fail("a level of /groups, \"network\" or \"\"");
    measuredGroups = static_cast<int>(it->groups.size());
  }
  for (size_t i = 0, n = dr.arraySize(); i < n; ++i) {
    auto e = dr.at(i);
    e.expectObject();
    PriorDisagreement d;
    auto kr = e.at("kind", "a string");
    d.kind = kr.str();
    bool together = d.kind == PriorDisagreement::kDeclaredTogether;
    if (!together && d.kind != PriorDisagreement::kDeclaredApart)
      kr.fail(fmt::format("\"{}\" or \"{}\"", PriorDisagreement::kDeclaredTogether,
                          PriorDisagreement::kDeclaredApart));
    auto pr = e.at("hosts", "an array of host lists");
    size_t parts = pr.arraySize();
    if (parts < 2) pr.fail("at least two parts");
    for (size_t k = 0; k < parts; ++k) {
      auto part = pr.at(k);
      auto& names = d.parts.emplace_back();
      for (size_t m = 0, pn = part.arraySize(); m < pn; ++m) {
        names.push_back(part.at(m).nonEmptyStr());
        if (!p.hosts.count(names.back())) part.at(m).fail("a host of /prior/hosts");
      }
      if (names.empty()) part.fail("at least one host");
    }
    auto decl = e.at("declared", "an array of switch IDs");
    for (size_t k = 0, dn = decl.arraySize(together ? 1 : parts); k < dn; ++k)
      d.declared.push_back(decl.at(k).nonEmptyStr());
    auto meas = e.at("measured", "an array of measured group indices");
    for (size_t k = 0, mn = meas.arraySize(together ? parts : 1); k < mn; ++k)
      d.measured.push_back(static_cast<int>(meas.at(k).integerIn(0, measuredGroups - 1)));
    d.betweenMbps = e.at("between_mbps", "a number").nonNegative();
    p.disagreements.push_back(std::move(d));
  }
  return p;
}

Json meshToJson(const PlanMesh& m) {
  Json dims = Json::array();
  for (const auto& d : m.dims) {
    Json j = {{"name", d.name},
              {"size", d.size},
              {"collective", d.collective},
              {"bytes", d.bytes},
              {"predicted_us", d.predictedUs}};
    if (!d.groupsUs.empty()) j["groups_us"] = d.groupsUs;
    dims.push_back(std::move(j));
  }
  return {{"dims", std::move(dims)},
          {"step_us", m.stepUs},
          {"world_ring_step_us", m.worldRingStepUs},
          {"input_step_us", m.inputStepUs}};
}

// "mesh": dimensions with unique names, known collectives and sizes whose product is the world.
PlanMesh meshFromJson(const JsonReader& r, size_t world) {
  r.expectObject();
  PlanMesh m;
  auto dims = r.at("dims", "an array of mesh dimensions");
  std::set<std::string> names;
  size_t product = 1;
  for (size_t i = 0, n = dims.arraySize(); i < n; ++i) {
    auto e = dims.at(i);
    e.expectObject();
    MeshDim d;
    auto name = e.at("name", "a dimension name");
    d.name = name.nonEmptyStr();
    if (!names.insert(d.name).second) name.fail("a dimension name not used twice");
    d.size = static_cast<int>(e.at("size", "an integer").integerIn(1, 1 << 24));
    auto coll = e.at("collective", "a collective");
    d.collective = coll.str();
    if (!isMeshCollective(d.collective)) coll.fail(kMeshCollectivesText);
    d.bytes = e.at("bytes", "a byte count").unsignedInt();
    d.predictedUs = e.at("predicted_us", "a number").nonNegative();
    product *= static_cast<size_t>(d.size);
    if (product > world) break;
    if (auto g = e.find("groups_us")) {
      size_t groups = world / static_cast<size_t>(d.size);
      for (size_t k = 0, count = g->arraySize(groups); k < count; ++k)
        d.groupsUs.push_back(g->at(k).nonNegative());
    }
    m.dims.push_back(std::move(d));
  }
  if (product != world || m.dims.empty())
    dims.fail(fmt::format("dimensions whose sizes multiply to the world size {}", world));
  m.stepUs = r.at("step_us", "a number").nonNegative();
  m.worldRingStepUs = r.at("world_ring_step_us", "a number").nonNegative();
  m.inputStepUs = r.at("input_step_us", "a number").nonNegative();
  return m;
}

Json contentJson(const Plan& p) {
  Json j;
  // A plan without a mesh is written as version 1, byte for byte as before (its hash and the
  // readers of version 1 unchanged); "mesh" needs version 2.
  j["schema_version"] = p.mesh ? Plan::kSchemaVersion : Plan::kMinSchemaVersion;
  j["hosts"] = p.hosts;
  j["order"] = p.order;
  j["permutation"] = p.permutation;
  j["ranks_per_host"] = p.ranksPerHost;
  j["groups"] = hierarchyToJson(p.groups);
  j["confidence"] = p.confidence;
  Json colls = Json::object();
  for (const auto& [name, ranges] : p.collectives) {
    Json arr = Json::array();
    for (const auto& r : ranges)
      arr.push_back(
          {{"min_bytes", r.minBytes},
           {"max_bytes", r.maxBytes == AlgoRange::kUnbounded ? Json(nullptr) : Json(r.maxBytes)},
           {"algorithm", algorithmName(r.algorithm)},
           {"predicted_us", r.predictedUs},
           {"predicted_busbw_gbps", r.predictedBusbwGBps},
           {"lower_bound_us", r.lowerBoundUs}});
    colls[name] = std::move(arr);
  }
  j["collectives"] = std::move(colls);
  // Written only when present, so that plans without it keep their hash.
  if (!p.openMpi.empty()) {
    Json ompi = Json::object();
    for (const auto& [name, ranges] : p.openMpi) {
      const OmpiCollective* coll = findOmpiCollective(name);
      Json arr = Json::array();
      for (const auto& r : ranges) {
        const OmpiAlgorithm* a = coll ? findOmpiAlgorithm(*coll, r.algorithm) : nullptr;
        arr.push_back(
            {{"min_bytes", r.minBytes},
             {"max_bytes", r.maxBytes == AlgoRange::kUnbounded ? Json(nullptr) : Json(r.maxBytes)},
             {"algorithm", a ? a->name : std::string_view("?")},
             {"segsize", r.segsize},
             {"faninout", r.faninout},
             {"predicted_us", r.predictedUs},
             {"engine_us", r.engineUs}});
      }
      ompi[name] = std::move(arr);
    }
    j["open_mpi"] = std::move(ompi);
  }
  j["chunk_weights"] = p.chunkWeights;
  // Written only when present, so that plans without it keep their hash.
  if (!p.chunkWeightsBasis.empty()) j["chunk_weights_basis"] = p.chunkWeightsBasis;
  if (!p.ringWeights.empty()) j["ring_weights"] = p.ringWeights;  // likewise
  Json trees = Json::array();
  for (const auto& t : p.trees) trees.push_back({{"weight", t.weight}, {"parent", t.parent}});
  j["trees"] = std::move(trees);
  j["predicted"] = {{"basis", p.predicted.basis},
                    {"plan_us", p.predicted.planUs},
                    {"input_order_us", p.predicted.inputOrderUs},
                    {"speedup", p.predicted.speedup},
                    {"bottleneck_mbps", p.predicted.bottleneckMbps},
                    {"input_bottleneck_mbps", p.predicted.inputBottleneckMbps}};
  // Written only when present, so that plans without ring weights keep their hash.
  if (p.predicted.ringWeightsUs > 0) j["predicted"]["ring_weights_us"] = p.predicted.ringWeightsUs;
  // Written only when present, so that plans without models keep their hash.
  if (!p.models.empty()) {
    Json models = Json::object();
    for (const auto& [name, m] : p.models) {
      Json algos = Json::object();
      for (const auto& [algo, a] : m.algorithms)
        algos[std::string(algorithmName(algo))] = {{"alpha_us", a.alphaUs},
                                                   {"beta_us_per_byte", a.betaUsPerByte}};
      models[name] = {{"algorithms", std::move(algos)},
                      {"lower_bound_us_per_byte", m.lowerBoundUsPerByte}};
    }
    j["models"] = std::move(models);
  }
  j["topology_hash"] = p.topologyHash;
  j["epoch"] = p.epoch;
  // Written only when known, so that plans without it keep their hash.
  if (!p.topologyTime.empty()) j["topology_time"] = p.topologyTime;
  // Written only when present, so that plans without a prior keep their hash.
  if (p.prior) j["prior"] = priorToJson(*p.prior);
  if (p.mesh) j["mesh"] = meshToJson(*p.mesh);
  return j;
}
// The bounds of range i of a table of n ranges contiguous from 0, the last open (max_bytes
// null): min_bytes must be `expectMin`, max_bytes above it.
std::pair<uint64_t, uint64_t> rangeBounds(const JsonReader& e, size_t i, size_t n,
                                          uint64_t expectMin) {
  auto minR = e.at("min_bytes", "an integer");
  const uint64_t lo = minR.unsignedInt();
  if (lo != expectMin) minR.fail(fmt::format("{} (ranges contiguous from 0)", expectMin));
  auto maxR = e.at("max_bytes", "an integer or null");
  const uint64_t hi = maxR.isNull() ? AlgoRange::kUnbounded : maxR.unsignedInt();
  if (hi <= lo) maxR.fail("a bound greater than min_bytes");
  if (hi == AlgoRange::kUnbounded && i + 1 != n) maxR.fail("a bound (only the last range is open)");
  return {lo, hi};
}

}  // namespace

std::string Plan::computeHash() const {
  // nlohmann::json objects are key-sorted, so dump() is canonical for equal content.
  return "sha256:" + sha256Hex(contentJson(*this).dump());
}

void Plan::seal() { hash = computeHash(); }

Json Plan::toJson() const {
  Json j = contentJson(*this);
  j["hash"] = hash;
  return j;
}

std::string Plan::dump() const { return toJson().dump(1) + "\n"; }

void Plan::save(const std::string& path) const { writeFileAtomic(path, dump()); }

Plan Plan::parse(std::string_view text, std::string_view source) {
  return fromJson(parseJson(text, source), source);
}

Plan Plan::load(const std::string& path) { return fromJson(readJsonFile(path), path); }

Plan Plan::fromJson(const Json& doc, std::string_view source) {
  JsonReader r(doc, source);
  r.expectObject();
  auto sv = r.at("schema_version", "an integer");
  int64_t version = sv.integer();
  if (version < kMinSchemaVersion || version > kSchemaVersion)
    sv.fail(fmt::format("plan schema version {} to {}", kMinSchemaVersion, kSchemaVersion));

  Plan p;
  auto readNames = [&](const JsonReader& a, std::vector<std::string>& out) {
    std::set<std::string> seen;
    for (size_t i = 0, n = a.arraySize(); i < n; ++i) {
      auto e = a.at(i);
      auto name = e.nonEmptyStr();
      if (!seen.insert(name).second) e.fail("a host name not listed twice");
      out.push_back(std::move(name));
    }
  };
  auto hr = r.at("hosts", "an array of host names");
  readNames(hr, p.hosts);
  if (p.hosts.empty()) hr.fail("at least one host");
  auto orr = r.at("order", "an array of host names");
  orr.arraySize(p.hosts.size());
  readNames(orr, p.order);
  {
    std::set<std::string> a(p.hosts.begin(), p.hosts.end());
    for (size_t i = 0; i < p.order.size(); ++i)
      if (!a.count(p.order[i])) orr.at(i).fail("a host listed in /hosts");
  }
  p.ranksPerHost = static_cast<int>(r.at("ranks_per_host", "an integer").integerIn(1, 1 << 16));
  if (p.hosts.size() * static_cast<size_t>(p.ranksPerHost) > (1u << 24))
    r.at("ranks_per_host").fail("a world size of at most 2^24 ranks");

  auto pr = r.at("permutation", "an array of new ranks, one per old rank");
  size_t world = p.worldSize();
  pr.arraySize(world);
  for (size_t i = 0; i < world; ++i)
    p.permutation.push_back(
        static_cast<int>(pr.at(i).integerIn(0, static_cast<int64_t>(world) - 1)));
  {
    Plan expect = p;
    expect.derivePermutation();
    for (size_t i = 0; i < world; ++i)
      if (p.permutation[i] != expect.permutation[i])
        pr.at(i).fail(fmt::format("{} (the rank given by /order with a host's ranks contiguous)",
                                  expect.permutation[i]));
  }

  if (auto g = r.find("groups")) p.groups = parseHierarchy(*g, p.hosts);
  if (auto c = r.find("confidence")) {
    p.confidence = c->nonNegative();
    if (p.confidence > 1) c->fail("a number in [0, 1]");
  }
  if (auto cr = r.find("collectives")) {
    cr->expectObject();
    for (const auto& [name, val] : cr->json().items()) {
      JsonReader ranges(val, source, cr->path() + "/" + name);
      std::vector<AlgoRange> out;
      uint64_t expectMin = 0;
      for (size_t i = 0, n = ranges.arraySize(); i < n; ++i) {
        auto e = ranges.at(i);
        AlgoRange a;
        std::tie(a.minBytes, a.maxBytes) = rangeBounds(e, i, n, expectMin);
        auto algR = e.at("algorithm", "an algorithm name");
        auto algo = parseAlgorithm(algR.str());
        if (!algo || !isPlanAlgorithm(*algo))
          algR.fail(fmt::format("one of {}", planAlgorithmList()));
        a.algorithm = *algo;
        if (auto v = e.find("predicted_us")) a.predictedUs = v->nonNegative();
        if (auto v = e.find("predicted_busbw_gbps")) a.predictedBusbwGBps = v->nonNegative();
        if (auto v = e.find("lower_bound_us")) a.lowerBoundUs = v->nonNegative();
        expectMin = a.maxBytes;
        out.push_back(std::move(a));
      }
      if (!out.empty() && out.back().maxBytes != AlgoRange::kUnbounded)
        ranges.fail("ranges whose last max_bytes is null (open)");
      p.collectives[name] = std::move(out);
    }
  }
  if (auto om = r.find("open_mpi")) {
    om->expectObject();
    for (const auto& [name, val] : om->json().items()) {
      JsonReader ranges(val, source, om->path() + "/" + name);
      const OmpiCollective* coll = findOmpiCollective(name);
      if (!coll) ranges.fail(fmt::format("a collective among {}", ompiCollectiveList()));
      std::vector<OmpiRange> out;
      uint64_t expectMin = 0;
      for (size_t i = 0, n = ranges.arraySize(); i < n; ++i) {
        auto e = ranges.at(i);
        OmpiRange o;
        std::tie(o.minBytes, o.maxBytes) = rangeBounds(e, i, n, expectMin);
        auto algR = e.at("algorithm", "an Open MPI algorithm name");
        const OmpiAlgorithm* a = findOmpiAlgorithm(*coll, algR.str());
        if (!a) algR.fail(fmt::format("one of {}", ompiAlgorithmList(*coll)));
        o.algorithm = a->id;
        if (auto v = e.find("segsize"))
          o.segsize = static_cast<uint32_t>(v->integerIn(0, INT32_MAX));
        if (auto v = e.find("faninout")) o.faninout = static_cast<int>(v->integerIn(0, 32));
        if (auto v = e.find("predicted_us")) o.predictedUs = v->nonNegative();
        if (auto v = e.find("engine_us")) o.engineUs = v->nonNegative();
        expectMin = o.maxBytes;
        out.push_back(o);
      }
      if (out.empty() || out.back().maxBytes != AlgoRange::kUnbounded)
        ranges.fail("at least one range, the last with max_bytes null (open)");
      p.openMpi[name] = std::move(out);
    }
  }
  if (auto cw = r.find("chunk_weights")) {
    size_t n = cw->arraySize();
    if (n != 0) cw->arraySize(p.hosts.size());
    for (size_t i = 0; i < n; ++i) p.chunkWeights.push_back(cw->at(i).nonNegative());
  }
  if (auto basis = r.find("chunk_weights_basis")) {
    p.chunkWeightsBasis = basis->str();
    if (p.chunkWeightsBasis != Plan::kWeightsByHostRates &&
        p.chunkWeightsBasis != Plan::kWeightsByUplinks)
      basis->fail(
          fmt::format("\"{}\" or \"{}\"", Plan::kWeightsByHostRates, Plan::kWeightsByUplinks));
    if (p.chunkWeights.empty()) basis->fail("no basis: chunk_weights is empty");
  }
  if (auto rw = r.find("ring_weights")) {
    size_t n = rw->arraySize();
    if (n != 0) rw->arraySize(p.hosts.size());
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += p.ringWeights.emplace_back(rw->at(i).nonNegative());
    if (n != 0 && !(total > 0)) rw->fail("weights with a positive sum");
  }
  if (auto tr = r.find("trees")) {
    for (size_t i = 0, n = tr->arraySize(); i < n; ++i) {
      auto t = tr->at(i);
      PackedTree pt;
      pt.weight = t.at("weight", "a number").nonNegative();
      auto par = t.at("parent", "an array of parent positions");
      par.arraySize(p.hosts.size());
      int roots = 0;
      for (size_t k = 0; k < p.hosts.size(); ++k) {
        int v = static_cast<int>(par.at(k).integerIn(-1, static_cast<int64_t>(p.hosts.size()) - 1));
        if (v == -1) ++roots;
        if (v == static_cast<int>(k)) par.at(k).fail("a parent other than the node itself");
        pt.parent.push_back(v);
      }
      if (roots != 1) par.fail("exactly one root (-1)");
      // Every host's chain of parents must reach the root (no cycle).
      for (size_t k = 0; k < pt.parent.size(); ++k) {
        int x = static_cast<int>(k);
        for (size_t steps = 0; x >= 0; ++steps) {
          if (steps > pt.parent.size())
            par.at(k).fail("a parent chain that reaches the root (this one loops)");
          x = pt.parent[static_cast<size_t>(x)];
        }
      }
      p.trees.push_back(std::move(pt));
    }
  }
  if (auto pd = r.find("predicted")) {
    if (auto v = pd->find("basis")) p.predicted.basis = v->str();
    if (auto v = pd->find("plan_us")) p.predicted.planUs = v->nonNegative();
    if (auto v = pd->find("input_order_us")) p.predicted.inputOrderUs = v->nonNegative();
    if (auto v = pd->find("speedup")) p.predicted.speedup = v->nonNegative();
    if (auto v = pd->find("bottleneck_mbps")) p.predicted.bottleneckMbps = v->nonNegative();
    if (auto v = pd->find("input_bottleneck_mbps"))
      p.predicted.inputBottleneckMbps = v->nonNegative();
    if (auto v = pd->find("ring_weights_us")) p.predicted.ringWeightsUs = v->nonNegative();
  }
  if (auto mr = r.find("models")) {
    mr->expectObject();
    for (const auto& [name, val] : mr->json().items()) {
      JsonReader m(val, source, mr->path() + "/" + name);
      m.expectObject();
      CollectiveModel cm;
      cm.lowerBoundUsPerByte = m.at("lower_bound_us_per_byte", "a number").nonNegative();
      auto ar = m.at("algorithms", "an object of algorithm models");
      ar.expectObject();
      for (const auto& [algoName, algoVal] : ar.json().items()) {
        JsonReader a(algoVal, source, ar.path() + "/" + algoName);
        auto algo = parseAlgorithm(algoName);
        if (!algo || !isPlanAlgorithm(*algo))
          a.fail(fmt::format("a model of one of {} (not {:?})", planAlgorithmList(), algoName));
        a.expectObject();
        AlgoModel am;
        am.alphaUs = a.at("alpha_us", "a number").nonNegative();
        am.betaUsPerByte = a.at("beta_us_per_byte", "a number").nonNegative();
        cm.algorithms[*algo] = am;
      }
      p.models[name] = std::move(cm);
    }
  }
  if (auto v = r.find("topology_hash")) p.topologyHash = v->str();
  p.epoch = r.at("epoch", "an integer").integerIn(0, INT64_MAX);
  if (auto v = r.find("topology_time")) {
    p.topologyTime = v->str();
    if (!parseUtcTime(p.topologyTime)) v->fail("an RFC 3339 UTC time (\"2026-11-21T12:00:00Z\")");
  }
  if (auto v = r.find("prior")) p.prior = priorFromJson(*v, p);
  if (auto v = r.find("mesh")) {
    if (version < 2) v->fail("no \"mesh\" in a plan of schema version 1 (version 2 has it)");
    p.mesh = meshFromJson(*v, p.worldSize());
  }
  auto hashR = r.at("hash", "a string \"sha256:<hex>\"");
  p.hash = hashR.str();
  std::string expect = p.computeHash();
  if (p.hash != expect)
    hashR.fail(fmt::format("the content hash {} (the plan was modified or truncated)", expect));
  return p;
}

}  // namespace rankmap
