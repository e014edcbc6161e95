#include "tests/sim/scenario.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "common/error.h"
#include "probe/round.h"
#include "reorder/cost_model.h"
#include "reorder/hierarchy.h"
#include "reorder/planner.h"

namespace rankmap::sim {
namespace {

constexpr uint64_t kRingBytes = 16ull << 20;
// Pairs scored for pairs_within_10pct beyond which a fixed sample stands for them all; with
// tenants each pair costs a max-min fill over their flows, so fewer.
constexpr size_t kPairSample = 200000;
constexpr size_t kPairSampleWithTenants = 5000;

const char* const kKeys[] = {
    "hosts",     "pods",    "racks_per_pod", "rack_sizes",  "rack_over",   "pod_over",
    "host_mbps", "host_us", "rack_us",       "pod_us",      "jitter_us",   "noise",
    "dead",      "slow",    "slow_factor",   "thin",        "thin_factor", "background",
    "asym",      "shuffle", "seed",          "ring_checks", "agent_cores"};

double number(const std::string& key, const std::string& value) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || !std::isfinite(v))
    throw InvalidInput(fmt::format("scenario: {}={}: expected a number", key, value));
  return v;
}

int integer(const std::string& key, const std::string& value, int min) {
  double v = number(key, value);
  if (v != std::floor(v) || v < min || v > 1e7)
    throw InvalidInput(
        fmt::format("scenario: {}={}: expected a whole number >= {}", key, value, min));
  return static_cast<int>(v);
}

std::vector<int> integers(const std::string& key, const std::string& value, int min) {
  std::vector<int> out;
  std::stringstream ss(value);
  for (std::string t; std::getline(ss, t, ',');) out.push_back(integer(key, t, min));
  if (out.empty())
    throw InvalidInput(
        fmt::format("scenario: {}={}: expected a list such as 32 or 4,8,16", key, value));
  return out;
}

double fraction(const std::string& key, const std::string& value, bool zeroAllowed) {
  double v = number(key, value);
  if (v < 0 || v > 1 || (!zeroAllowed && v == 0))
    throw InvalidInput(fmt::format("scenario: {}={}: expected a fraction in {}0, 1]", key, value,
                                   zeroAllowed ? "[" : "("));
  return v;
}

double atLeast(const std::string& key, const std::string& value, double min) {
  double v = number(key, value);
  if (v < min) throw InvalidInput(fmt::format("scenario: {}={}: expected >= {}", key, value, min));
  return v;
}

// Adjusted Rand index of `found` (host -> group, -1 = none) against `truth` over live hosts.
double ari(const Datacenter& dc, const std::vector<int>& found, bool pods) {
  std::vector<int> a, b;
  for (size_t h = 0; h < dc.hosts(); ++h) {
    if (!dc.alive(static_cast<int>(h))) continue;
    a.push_back(pods ? dc.podOf(static_cast<int>(h)) : dc.rackOf(static_cast<int>(h)));
    b.push_back(found.empty() ? 0 : found[h]);
  }
  return reorder::adjustedRandIndex(a, b);
}

// Share of live directed pairs whose stated rate is within 10% of the true alone rate.
double pairsWithin(const Datacenter& dc, const Topology& t, const std::vector<int>& live,
                   uint64_t seed) {
  const size_t n = live.size();
  if (n < 2) return 1;
  const size_t all = n * (n - 1);
  const size_t cap = dc.spec().backgroundFlows > 0 ? kPairSampleWithTenants : kPairSample;
  auto stated = [&](int a, int b) -> std::optional<double> {
    if (t.hasMatrices()) return t.bandwidthMbps.at(static_cast<size_t>(a), static_cast<size_t>(b));
    return t.pathMbps(a, b);
  };
  size_t within = 0, scored = 0;
  auto score = [&](int a, int b) {
    ++scored;
    auto s = stated(a, b);
    double truth = dc.aloneMbps(a, b);
    if (s && std::abs(*s - truth) <= 0.1 * truth) ++within;
  };
  if (all <= cap) {
    for (int a : live)
      for (int b : live)
        if (a != b) score(a, b);
  } else {
    std::mt19937_64 rng(seed ^ 0x3c6ef372fe94f82bull);
    std::uniform_int_distribution<size_t> pick(0, n - 1);
    while (scored < cap) {
      int a = live[pick(rng)], b = live[pick(rng)];
      if (a != b) score(a, b);
    }
  }
  return static_cast<double>(within) / static_cast<double>(scored);
}

// The largest relative error of stated uplinks (both directions) of found groups that are
// exactly a true rack (level 0 of the truth) or pod (1): nullopt where none matched.
std::vector<std::optional<double>> uplinkErrors(const Datacenter& dc, const Topology& t) {
  std::vector<std::optional<double>> err(2);
  if (!t.links) return err;
  // True groups as sets of live host indices.
  std::map<std::vector<int>, std::pair<int, int>> truth;  // members -> (tier, index)
  for (int tier = 0; tier < 2; ++tier) {
    std::map<int, std::vector<int>> m;
    for (size_t h = 0; h < dc.hosts(); ++h)
      if (dc.alive(static_cast<int>(h)))
        m[tier == 0 ? dc.rackOf(static_cast<int>(h)) : dc.podOf(static_cast<int>(h))].push_back(
            static_cast<int>(h));
    for (auto& [g, members] : m) truth.emplace(members, std::make_pair(tier, g));
  }
  for (size_t l = 0; l < t.groups.size() && l < t.links->uplinks.size(); ++l)
    for (size_t g = 0; g < t.groups[l].groups.size(); ++g) {
      std::vector<int> members;
      for (const auto& name : t.groups[l].groups[g]) {
        int h = t.indexOf(name);
        if (h >= 0 && dc.alive(h)) members.push_back(h);
      }
      std::sort(members.begin(), members.end());
      auto it = truth.find(members);
      if (it == truth.end() || g >= t.links->uplinks[l].size()) continue;
      auto [tier, index] = it->second;
      const double out = tier == 0 ? dc.rackUplinkMbps(index) : dc.podUplinkMbps(index);
      const double in = tier == 0 ? dc.rackInMbps(index) : dc.podInMbps(index);
      const auto& c = t.links->uplinks[l][g];
      const double e = std::max(std::abs(c.outMbps - out) / out, std::abs(c.inMbps - in) / in);
      auto& slot = err[static_cast<size_t>(tier)];
      slot = std::max(slot.value_or(0.0), e);
    }
  return err;
}

Json optionalNumber(const std::optional<double>& v, double scale = 1) {
  return v ? Json(std::round(*v * scale) / scale) : Json(nullptr);
}

double rounded(double v, double scale) { return std::round(v * scale) / scale; }

}  // namespace

Scenario Scenario::parse(const std::vector<std::string>& settings) {
  Scenario sc;
  bool podsGiven = false;
  for (const auto& s : settings) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InvalidInput(fmt::format("scenario: \"{}\": expected KEY=VALUE", s));
    const std::string key = s.substr(0, eq), value = s.substr(eq + 1);
    if (key == "hosts") {
      sc.hosts = integer(key, value, 2);
    } else if (key == "pods") {
      sc.pods = integer(key, value, 1);
      podsGiven = true;
    } else if (key == "racks_per_pod") {
      sc.racksPerPod = integers(key, value, 1);
    } else if (key == "rack_sizes") {
      sc.rackSizes = integers(key, value, 1);
    } else if (key == "rack_over") {
      sc.rackOver = atLeast(key, value, 1);
    } else if (key == "pod_over") {
      sc.podOver = atLeast(key, value, 1);
    } else if (key == "host_mbps") {
      sc.hostMbps = atLeast(key, value, 1);
    } else if (key == "host_us") {
      sc.hostUs = atLeast(key, value, 0);
    } else if (key == "rack_us") {
      sc.rackUs = atLeast(key, value, 0);
    } else if (key == "pod_us") {
      sc.podUs = atLeast(key, value, 0);
    } else if (key == "jitter_us") {
      sc.jitterUs = atLeast(key, value, 0);
    } else if (key == "noise") {
      sc.noise = number(key, value);
      if (sc.noise < 0 || sc.noise >= 1)
        throw InvalidInput(fmt::format("scenario: noise={}: expected 0 <= noise < 1", value));
    } else if (key == "dead") {
      sc.dead = integer(key, value, 0);
    } else if (key == "slow") {
      sc.slow = fraction(key, value, true);
    } else if (key == "slow_factor") {
      sc.slowFactor = fraction(key, value, false);
    } else if (key == "thin") {
      sc.thin = integer(key, value, 0);
    } else if (key == "thin_factor") {
      sc.thinFactor = fraction(key, value, false);
    } else if (key == "background") {
      sc.background = integer(key, value, 0);
    } else if (key == "asym") {
      sc.asym = fraction(key, value, false);
    } else if (key == "shuffle") {
      sc.shuffle = integer(key, value, 0) != 0;
    } else if (key == "ring_checks") {
      sc.ringChecks = integer(key, value, 0) != 0;
    } else if (key == "agent_cores") {
      sc.timing.sharedCores = atLeast(key, value, 0);
    } else if (key == "seed") {
      sc.seed = static_cast<uint64_t>(integer(key, value, 0));
    } else {
      std::string keys;
      for (const char* k : kKeys) keys += (keys.empty() ? "" : " ") + std::string(k);
      throw InvalidInput(
          fmt::format("scenario: unknown key \"{}\" (expected one of: {})", key, keys));
    }
  }
  if (podsGiven && !sc.racksPerPod.empty())
    RANKMAP_THROW(InvalidInput,
                  "scenario: pods and racks_per_pod both given (expected one: racks_per_pod "
                  "decides the pods)");
  if (sc.dead >= sc.hosts)
    throw InvalidInput(
        fmt::format("scenario: dead={} of {} hosts (expected fewer)", sc.dead, sc.hosts));
  return sc;
}

DatacenterSpec Scenario::spec() const {
  DatacenterSpec s;
  // Racks in rack order.
  std::vector<int> rackOfSlot;
  for (size_t r = 0; static_cast<int>(rackOfSlot.size()) < hosts; ++r) {
    int size = rackSizes[r % rackSizes.size()];
    for (int k = 0; k < size && static_cast<int>(rackOfSlot.size()) < hosts; ++k)
      rackOfSlot.push_back(static_cast<int>(r));
  }
  const int racks = rackOfSlot.back() + 1;
  if (racksPerPod.empty()) {
    const int p = std::min(pods, racks);
    for (int r = 0; r < racks; ++r)
      s.rackPod.push_back(static_cast<int>(static_cast<int64_t>(r) * p / racks));
  } else {
    for (int pod = 0, r = 0; r < racks; ++pod)
      for (int k = 0; k < racksPerPod[static_cast<size_t>(pod) % racksPerPod.size()] && r < racks;
           ++k, ++r)
        s.rackPod.push_back(pod);
  }
  // The provider's order: host h of the datacenter is slot perm[h].
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 17);
  std::vector<int> perm(static_cast<size_t>(hosts));
  std::iota(perm.begin(), perm.end(), 0);
  if (shuffle) std::shuffle(perm.begin(), perm.end(), rng);
  for (int h = 0; h < hosts; ++h)
    s.rackOfHost.push_back(rackOfSlot[static_cast<size_t>(perm[static_cast<size_t>(h)])]);
  s.hostMbps = hostMbps;
  s.rackOversubscription = rackOver;
  s.podOversubscription = podOver;
  s.hostLatencyUs = hostUs / 4;  // rttUs: twice two host links
  s.rackLatencyUs = rackUs / 4;
  s.podLatencyUs = podUs / 4;
  s.hostJitterUs = jitterUs;
  s.sampleJitterUs = jitterUs;
  s.noise = noise;
  s.backgroundFlows = background;
  s.uplinkDownFactor = asym;
  s.seed = seed;
  // Dead, slow and thinned: distinct picks from the same generator.
  std::vector<int> order(static_cast<size_t>(hosts));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t next = 0;
  for (int k = 0; k < dead; ++k) s.deadHosts.push_back(order[next++]);
  const auto slowCount = static_cast<size_t>(std::floor(slow * hosts));
  for (size_t k = 0; k < slowCount && next < order.size(); ++k)
    s.slowHosts.emplace_back(order[next++], slowFactor);
  std::vector<int> rackOrder(static_cast<size_t>(racks));
  std::iota(rackOrder.begin(), rackOrder.end(), 0);
  std::shuffle(rackOrder.begin(), rackOrder.end(), rng);
  for (int k = 0; k < std::min(thin, racks); ++k)
    s.thinRacks.emplace_back(rackOrder[static_cast<size_t>(k)], thinFactor);
  return s;
}

double trueRingUs(const Datacenter& dc, const std::vector<int>& order, uint64_t bytes) {
  const size_t n = order.size();
  if (n < 2) return 0;
  std::vector<std::pair<int, int>> flows;
  for (size_t i = 0; i < n; ++i) flows.emplace_back(order[i], order[(i + 1) % n]);
  const auto rates = dc.fairMbps(flows);
  const double chunkBits = 8.0 * static_cast<double>(bytes) / static_cast<double>(n);
  // Played out step by step, not by a formula (the planner states its prediction by one): rank
  // i starts sending step k once its step k-1 send has ended and step k-1 of rank i-1 has
  // arrived; the send takes the chunk at the hop's rate and arrives one-way latency later.
  std::vector<double> xfer(n), oneWay(n);
  for (size_t i = 0; i < n; ++i) {
    xfer[i] = chunkBits / rates[i];
    oneWay[i] = dc.oneWayUs(flows[i].first, flows[i].second);
  }
  std::vector<double> sent(n, 0.0);     // when rank i's last send ended
  std::vector<double> arrived(n, 0.0);  // when the last chunk sent to rank i arrived there
  std::vector<double> next(n);
  const size_t steps = 2 * (n - 1);
  for (size_t k = 0; k < steps; ++k) {
    for (size_t i = 0; i < n; ++i) sent[i] = std::max(sent[i], arrived[i]) + xfer[i];
    for (size_t i = 0; i < n; ++i) next[(i + 1) % n] = sent[i] + oneWay[i];
    arrived.swap(next);
  }
  return *std::max_element(arrived.begin(), arrived.end());
}

ScenarioResult runScenario(const Scenario& sc) {
  const auto t0 = std::chrono::steady_clock::now();
  Datacenter dc(sc.spec());
  SimFleet fleet(dc, sc.timing);
  probe::RoundOptions opts;
  opts.seed = sc.seed;
  auto out = probe::runRound(fleet, opts, Deadline::after(std::chrono::minutes(30)));

  // The job: the live hosts in the provider's order.
  std::vector<int> live;
  std::vector<HostsEntry> entries;
  for (size_t h = 0; h < dc.hosts(); ++h)
    if (dc.alive(static_cast<int>(h))) {
      live.push_back(static_cast<int>(h));
      entries.push_back({fleet.host(static_cast<int>(h)).name, "", 0});
    }
  reorder::PlanOptions po;
  po.hashTopology = false;
  po.openMpi = false;
  Topology found = reorder::selectHosts(out.topology, entries, "hosts", "probe");
  if (!sc.ringChecks) found.rings.clear();
  const Topology truth = reorder::selectHosts(truthTopology(dc, fleet), entries, "hosts", "truth");
  const auto planned = reorder::planTopology(found, po);
  const auto best = reorder::planTopology(truth, po);
  std::vector<std::string> names;
  for (const auto& h : found.hosts) names.push_back(h.name);
  auto hostsOf = [&](const std::vector<int>& positions) {
    std::vector<int> o;
    for (int i : positions) o.push_back(live[static_cast<size_t>(i)]);
    return o;
  };
  const std::vector<int> planOrder = hostsOf(planned.order);
  const double planUs = trueRingUs(dc, planOrder, kRingBytes);
  const double providerUs = trueRingUs(dc, live, kRingBytes);
  const double truthUs = trueRingUs(dc, hostsOf(best.order), kRingBytes);
  const double optimumUs = std::min({truthUs, providerUs, planUs});
  // What the plan states for its ring (Plan::predicted, the design size is kRingBytes).
  const double predictedUs = planned.plan.predicted.planUs;

  const auto& lv = out.structure.levels;
  std::set<std::string> truthDead;
  for (size_t h = 0; h < dc.hosts(); ++h)
    if (!dc.alive(static_cast<int>(h))) truthDead.insert(fleet.host(static_cast<int>(h)).name);
  size_t deadFound = 0;
  for (const auto& name : out.deadHosts) deadFound += truthDead.count(name);
  const auto uplinkErr = uplinkErrors(dc, out.topology);
  std::optional<double> uplinkMax;
  for (const auto& e : uplinkErr)
    if (e) uplinkMax = std::max(uplinkMax.value_or(0.0), *e);
  Json confidence = Json::array();
  for (const auto& level : out.topology.groups)
    confidence.push_back(rounded(level.confidence, 1e3));
  const double n = static_cast<double>(dc.hosts());
  const auto& c = out.cost;

  ScenarioResult r;
  r.topology = out.topology;
  r.truth = truth;
  Json& j = r.json;
  j = Json::object();
  j["hosts"] = dc.hosts();
  j["racks"] = dc.racks();
  j["pods"] = dc.pods();
  j["signal"] = out.structure.signal;
  j["levels"] = lv.size();
  j["rack_ari"] = rounded(ari(dc, lv.empty() ? std::vector<int>{} : lv[0], false), 1e3);
  j["pod_ari"] = rounded(ari(dc, lv.size() < 2 ? std::vector<int>{} : lv[1], true), 1e3);
  // Every found level (innermost first) against the true racks and pods.
  Json levelAri = Json::array();
  for (const auto& level : lv)
    levelAri.push_back(Json::array({rounded(ari(dc, level, false), 1e3),
                                    rounded(ari(dc, level, true), 1e3)}));
  j["level_ari"] = levelAri;
  j["flows_per_host"] = rounded(static_cast<double>(c.bandwidthFlows) / n, 1e2);
  // Where the flows went: bandwidth readings per host by the phase that took them.
  std::map<std::string, double> byPhase;
  for (const auto& rd : out.readings)
    if (rd.kind == "bandwidth") byPhase[rd.phase] += 1.0 / n;
  Json phases = Json::object();
  for (const auto& [phase, perHost] : byPhase) phases[phase] = rounded(perHost, 1e2);
  j["flows_by_phase"] = phases;
  j["trials"] = c.trials;
  j["requests"] = c.requests;
  j["pings"] = c.latencyPairs;
  j["sim_s"] = rounded(c.seconds, 1e2);
  j["agent_cores"] = sc.timing.sharedCores;
  Json seconds = Json::object();
  for (const auto& [name, sec] : out.phaseSeconds) seconds[name] = rounded(sec, 1e2);
  j["sim_s_by_phase"] = seconds;
  j["plan_true_ms"] = rounded(planUs / 1000, 1e2);
  j["optimum_ms"] = rounded(optimumUs / 1000, 1e2);
  j["provider_ms"] = rounded(providerUs / 1000, 1e2);
  j["plan_predicted_ms"] = rounded(predictedUs / 1000, 1e2);
  j["pairs_within_10pct"] = rounded(pairsWithin(dc, out.topology, live, sc.seed), 1e4);
  j["uplink_err_max"] = optionalNumber(uplinkMax, 1e3);
  j["uplink_err"] =
      Json::array({optionalNumber(uplinkErr[0], 1e3), optionalNumber(uplinkErr[1], 1e3)});
  j["dead_found"] = deadFound;
  j["confidence"] = confidence;
  j["wall_s"] =
      rounded(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1e2);
  return r;
}

}  // namespace rankmap::sim
