#include "probe/recheck.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "common/log.h"

namespace rankmap::probe {
namespace {

// A directed link of the topology's model: a host link (level -1, index = host) or the uplink
// of group `index` at `level`; `in` = towards the host or group.
using LinkKey = std::tuple<int, int, bool>;

// The topology's levels over its hosts: groupOf[l][h] = index of h's group in groups[l].
std::vector<std::vector<int>> levelsOf(const Topology& t) {
  std::unordered_map<std::string_view, int> index;
  for (size_t h = 0; h < t.size(); ++h) index.emplace(t.hosts[h].name, static_cast<int>(h));
  std::vector<std::vector<int>> out;
  for (const auto& level : t.groups) {
    std::vector<int> g(t.size(), -1);
    for (size_t k = 0; k < level.groups.size(); ++k)
      for (const auto& name : level.groups[k])
        g[static_cast<size_t>(index.at(name))] = static_cast<int>(k);
    out.push_back(std::move(g));
  }
  return out;
}

// Hosts the topology's round measured: those with a host link (all, when none has one).
std::vector<char> measuredHosts(const Topology& t) {
  std::vector<char> in(t.size(), 0);
  bool any = false;
  for (size_t h = 0; h < t.size(); ++h) {
    const auto& c = t.links->hosts[h];
    in[h] = c.outMbps > 0 || c.inMbps > 0;
    any |= in[h] != 0;
  }
  if (!any) std::fill(in.begin(), in.end(), 1);
  return in;
}

// The topology's levels as a round's Structure over the hosts `in` it (others -1), group
// indices those of Topology::groups.
Structure structureOf(const std::vector<std::vector<int>>& levels, const std::vector<char>& in) {
  Structure st;
  st.signal = "topology";
  for (auto g : levels) {
    for (size_t h = 0; h < g.size(); ++h)
      if (!in[h]) g[h] = -1;
    st.levels.push_back(std::move(g));
  }
  return st;
}

FleetCost spentSince(const FleetCost& before, const FleetCost& now) {
  return {now.seconds - before.seconds,
          now.latencyPairs - before.latencyPairs,
          now.bandwidthFlows - before.bandwidthFlows,
          now.trials - before.trials,
          now.bulkBytes - before.bulkBytes,
          now.requests - before.requests};
}

// Hosts of the topology's round that are out of `s` now, by name.
std::vector<std::string> lostHosts(RoundState& s, const Topology& t) {
  std::vector<std::string> out;
  if (!t.links || t.size() != s.fleet().size()) return out;
  const auto in = measuredHosts(t);
  for (size_t h = 0; h < t.size(); ++h)
    if (in[h] && !s.live(static_cast<int>(h))) out.push_back(t.hosts[h].name);
  return out;
}

// Flows compared with the model as one: a host-link flow, or the flows across one uplink.
struct Unit {
  int level = -1;  // -1: host links; else the uplink level
  int from = 0;    // host (host links) or group
  int to = 0;
  std::vector<HostPair> flows;
  std::vector<LinkKey> own;    // links of its own tier (cleared when it is unchanged)
  std::vector<LinkKey> lower;  // other links it crosses (blamed only if nothing clears them)
  double expected = 0;
  std::optional<double> got;
  bool changed = false;
};

double change(const Unit& u) { return u.got ? std::fabs(*u.got - u.expected) / u.expected : 0; }

// Runs `units` (whose flows share no link of their tier) in one trial, or in parts of whole
// units; sets each unit's total (nullopt when a flow failed).
void measure(RoundState& s, std::vector<Unit*>& units, bool longWindow) {
  std::vector<HostPair> flows;
  std::vector<int> owner;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& f : units[u]->flows) {
      flows.push_back(f);
      owner.push_back(static_cast<int>(u));
    }
  BandwidthOptions longer = s.opts().bandwidth;
  longer.maxMs *= kUplinkWindowFactor;
  auto got = s.run(flows, "check", true, owner, true, longWindow ? &longer : nullptr);
  for (auto* u : units) u->got = 0.0;
  for (size_t k = 0; k < flows.size(); ++k) {
    auto& u = *units[static_cast<size_t>(owner[k])];
    if (!got[k] || !u.got) {
      u.got.reset();
      continue;
    }
    *u.got += *got[k];
  }
}

// Members of `g` at `level` in the round, spread over their subgroups one level down (so that
// a load across a pod's uplink does not pile onto one rack's).
std::vector<int> spread(RoundState& s, const std::vector<std::vector<int>>& levels, size_t level,
                        int g) {
  std::map<int, std::vector<int>> bySub;
  std::vector<int> order;
  for (size_t h = 0; h < levels[level].size(); ++h) {
    if (levels[level][h] != g || !s.live(static_cast<int>(h))) continue;
    int sub = level == 0 ? 0 : levels[level - 1][h];
    if (!bySub.count(sub)) order.push_back(sub);
    bySub[sub].push_back(static_cast<int>(h));
  }
  std::vector<int> out;
  for (size_t i = 0;; ++i) {
    size_t before = out.size();
    for (int sub : order)
      if (i < bySub[sub].size()) out.push_back(bySub[sub][i]);
    if (out.size() == before) break;
  }
  return out;
}

std::string hostList(RoundState& s, const std::vector<int>& hosts) {
  std::vector<std::string> names;
  for (int h : hosts) names.push_back(s.fleet().host(h).name);
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

const char* recheckVerdictName(RecheckVerdict v) {
  switch (v) {
    case RecheckVerdict::Unchanged:
      return "unchanged";
    case RecheckVerdict::Groups:
      return "groups";
    case RecheckVerdict::Full:
      return "full";
  }
  return "?";
}

RecheckResult checkTopology(RoundState& s, const Topology& t, const RecheckOptions& o) {
  RecheckResult res;
  auto full = [&](std::string why) {
    res.verdict = RecheckVerdict::Full;
    res.reason = std::move(why);
    return res;
  };
  const size_t n = s.fleet().size();
  if (!t.links) return full("the topology has no link model");
  if (t.size() != n) return full(fmt::format("{} hosts, the topology has {}", n, t.size()));
  for (size_t h = 0; h < n; ++h)
    if (t.hosts[h].name != s.fleet().host(static_cast<int>(h)).name)
      return full(fmt::format("host {} is {}, {} in the topology", h,
                              s.fleet().host(static_cast<int>(h)).name, t.hosts[h].name));
  const TopologyLinks& lk = *t.links;
  const auto levels = levelsOf(t);

  // Liveness: the topology's hosts and no others.
  s.report({"check", 0, 0, "liveness"});
  const auto in = measuredHosts(t);
  auto up = checkLiveness(s);
  std::vector<int> dead, joined;
  for (size_t h = 0; h < n; ++h) {
    if (in[h] && !up[h]) dead.push_back(static_cast<int>(h));
    if (!in[h] && up[h]) joined.push_back(static_cast<int>(h));
  }
  if (!dead.empty()) return full(fmt::format("not answering: {}", hostList(s, dead)));
  if (!joined.empty())
    return full(fmt::format("answering, but out of the topology: {}", hostList(s, joined)));
  if (!s.opts().bandwidthEnabled) return res;

  // Units. Host links: shift 1 inside each innermost group (the fleet when there is none).
  std::vector<Unit> units;
  std::vector<int> inner(n, 0);
  if (!levels.empty()) inner = levels[0];
  {
    std::map<int, std::vector<int>> groups;
    for (int h : s.liveHosts()) groups[inner[static_cast<size_t>(h)]].push_back(h);
    for (const auto& [g, m] : groups) {
      if (m.size() < 2) continue;
      for (size_t i = 0; i < m.size(); ++i) {
        Unit u;
        u.from = m[i];
        u.to = m[(i + 1) % m.size()];
        u.flows = {{u.from, u.to}};
        u.own = {LinkKey{-1, u.from, false}, LinkKey{-1, u.to, true}};
        units.push_back(std::move(u));
      }
    }
  }
  const size_t hostUnits = units.size();
  // Uplinks: a ring of siblings under each parent, per level.
  std::vector<char> longWindow(levels.size(), 0);
  for (size_t l = 0; l < levels.size(); ++l) {
    std::map<int, std::vector<int>> children;  // parent -> groups with hosts in the round
    std::set<int> seen;
    for (int h : s.liveHosts()) {
      int g = levels[l][static_cast<size_t>(h)];
      if (!seen.insert(g).second) continue;
      children[l + 1 < levels.size() ? levels[l + 1][static_cast<size_t>(h)] : 0].push_back(g);
    }
    for (auto& [parent, kids] : children) {
      std::sort(kids.begin(), kids.end());
      if (kids.size() < 2) continue;
      for (size_t i = 0; i < kids.size(); ++i) {
        int a = kids[i], b = kids[(i + 1) % kids.size()];
        auto from = spread(s, levels, l, a), to = spread(s, levels, l, b);
        const auto& ca = lk.uplinks[l][static_cast<size_t>(a)];
        const auto& cb = lk.uplinks[l][static_cast<size_t>(b)];
        double bestOut = 0, bestIn = 0, sumOut = 0, sumIn = 0;
        int src = from.front(), dst = to.front();
        for (int h : from) {
          double v = lk.hosts[static_cast<size_t>(h)].outMbps;
          sumOut += v;
          if (v > bestOut) {
            bestOut = v;
            src = h;
          }
        }
        for (int h : to) {
          double v = lk.hosts[static_cast<size_t>(h)].inMbps;
          sumIn += v;
          if (v > bestIn) {
            bestIn = v;
            dst = h;
          }
        }
        Unit u;
        u.level = static_cast<int>(l);
        u.from = a;
        u.to = b;
        double cap = std::min(ca.outMbps, cb.inMbps);
        if (ca.outMbps < kUplinkBoundFraction * bestOut ||
            cb.inMbps < kUplinkBoundFraction * bestIn) {
          // One flow fills it: measured as measureLinks did.
          u.flows = {{src, dst}};
          longWindow[l] = 1;
        } else {
          double rate = std::min(sumOut / static_cast<double>(from.size()),
                                 sumIn / static_cast<double>(to.size()));
          size_t k = rate > 0 ? static_cast<size_t>(std::ceil(kLoadMargin * cap / rate)) : 1;
          k = std::clamp<size_t>(k, 1, std::min(from.size(), to.size()));
          for (size_t p = 0; p < k; ++p) u.flows.emplace_back(from[p], to[p]);
        }
        u.own = {LinkKey{static_cast<int>(l), a, false}, LinkKey{static_cast<int>(l), b, true}};
        for (auto [x, y] : u.flows) {
          u.lower.emplace_back(-1, x, false);
          u.lower.emplace_back(-1, y, true);
          for (size_t m = 0; m < l; ++m) {
            u.lower.emplace_back(static_cast<int>(m), levels[m][static_cast<size_t>(x)], false);
            u.lower.emplace_back(static_cast<int>(m), levels[m][static_cast<size_t>(y)], true);
          }
        }
        units.push_back(std::move(u));
      }
    }
  }
  for (auto& u : units) {
    double sum = 0;
    for (double r : predictRates(*t.links, levels, u.flows)) sum += r;
    u.expected = sum;
  }

  // Trials: host links (with their pings), then each level; suspects once more.
  auto tier = [&](int level) {
    std::vector<Unit*> out;
    for (auto& u : units)
      if (u.level == level) out.push_back(&u);
    return out;
  };
  std::vector<int> farCount(n, 0);
  {
    const bool tiers =
        lk.hostLatencyUs > 0 && !lk.uplinkLatencyUs.empty() && lk.uplinkLatencyUs[0] > 0;
    if (tiers && hostUnits > 0) {
      std::vector<HostPair> pairs;
      for (size_t k = 0; k < hostUnits; ++k) pairs.emplace_back(units[k].from, units[k].to);
      auto rtt = s.ping(pairs, "check");
      for (size_t k = 0; k < pairs.size(); ++k) {
        auto expect = t.pathLatencyUs(pairs[k].first, pairs[k].second);
        if (rtt[k] && expect && rtt[k]->minUs > kLatencyLevelRatio * 2 * *expect) {
          ++farCount[static_cast<size_t>(pairs[k].first)];
          ++farCount[static_cast<size_t>(pairs[k].second)];
        }
      }
    }
  }
  for (int level = -1; level < static_cast<int>(levels.size()); ++level) {
    if (s.stopped()) break;
    auto all = tier(level);
    if (all.empty()) continue;
    bool longer = level >= 0 && longWindow[static_cast<size_t>(level)];
    measure(s, all, longer);
    std::vector<Unit*> suspects;
    for (auto* u : all)
      if (u->got && u->expected > 0 && change(*u) > o.threshold) suspects.push_back(u);
    s.report({"check", static_cast<size_t>(level + 2), levels.size() + 1,
              fmt::format(
                  "{}: {} units, {} suspect",
                  level < 0 ? "host links" : t.groups[static_cast<size_t>(level)].name + " uplinks",
                  all.size(), suspects.size())});
    if (suspects.empty()) continue;
    measure(s, suspects, longer);
    for (auto* u : suspects) u->changed = u->got && change(*u) > o.threshold;
  }
  res.units = units.size();
  if (auto lost = lostHosts(s, t); !lost.empty())
    return full(fmt::format("failed during the check: {}", fmt::join(lost, ", ")));
  if (s.stopped()) return full("the check did not finish");

  // Moved hosts: both of a host's intra-group round trips, or both of its flows, far off.
  for (size_t k = 0; k < hostUnits; ++k) {
    const auto& u = units[k];
    if (u.got && *u.got < kFarFraction * u.expected) {
      ++farCount[static_cast<size_t>(u.from)];
      ++farCount[static_cast<size_t>(u.to)];
    }
  }
  for (size_t h = 0; h < n; ++h)
    if (farCount[h] >= 2) res.movedHosts.push_back(static_cast<int>(h));
  if (!res.movedHosts.empty())
    return full(fmt::format("away from their group: {}", hostList(s, res.movedHosts)));
  res.hostsInPlace = true;

  // Blame: clear the links of unchanged units' own tier; cover the changed units greedily by
  // the groups that explain most of them.
  std::set<LinkKey> clear;
  for (const auto& u : units)
    if (u.got && !u.changed) clear.insert(u.own.begin(), u.own.end());
  using Target = std::tuple<size_t, int, bool>;  // level, group, uplink (else host links)
  auto targetOf = [&](const LinkKey& k) -> Target {
    auto [level, index, dirIn] = k;
    if (level < 0) return {0, inner[static_cast<size_t>(index)], false};
    return {static_cast<size_t>(level), index, true};
  };
  std::vector<std::set<Target>> blame;
  for (const auto& u : units) {
    if (!u.changed) continue;
    double c = change(u);
    res.maxChange = std::max(res.maxChange, c);
    std::string what =
        u.level < 0
            ? fmt::format("{} -> {}", s.fleet().host(u.from).name, s.fleet().host(u.to).name)
            : fmt::format("{} {} -> {} {} ({} flows)", t.groups[static_cast<size_t>(u.level)].name,
                          u.from, t.groups[static_cast<size_t>(u.level)].name, u.to,
                          u.flows.size());
    res.changed.push_back({what, u.expected, *u.got});
    std::set<Target> b;
    for (const auto& k : u.own)
      if (!clear.count(k)) b.insert(targetOf(k));
    for (const auto& k : u.lower)
      if (!clear.count(k)) b.insert(targetOf(k));
    if (b.empty()) return full(fmt::format("no link explains {}", what));
    blame.push_back(std::move(b));
  }
  if (blame.empty()) return res;
  if (levels.empty()) return full("one group: its re-probe is a full round");
  std::set<Target> chosen;
  std::vector<char> covered(blame.size(), 0);
  for (;;) {
    std::map<Target, size_t> score;
    for (size_t i = 0; i < blame.size(); ++i)
      if (!covered[i])
        for (const auto& x : blame[i]) ++score[x];
    if (score.empty()) break;
    size_t top = 0;
    for (const auto& [x, c] : score) top = std::max(top, c);
    for (const auto& [x, c] : score)
      if (c == top) chosen.insert(x);  // ties: all of them (re-probing one more costs little)
    for (size_t i = 0; i < blame.size(); ++i)
      for (const auto& x : blame[i])
        if (chosen.count(x)) covered[i] = 1;
  }
  for (const auto& [level, group, uplink] : chosen) {
    // Init-captures: clang before 16 cannot capture structured bindings (scripts/fuzz uses clang).
    auto it = std::find_if(res.groups.begin(), res.groups.end(),
                           [level = level, group = group](const GroupChange& g) {
                             return g.level == level && g.group == group;
                           });
    if (it == res.groups.end()) it = res.groups.insert(res.groups.end(), GroupChange{level, group});
    (uplink ? it->uplink : it->hostLinks) = true;
  }
  for (const auto& g : res.groups)
    res.names.push_back(fmt::format("{} {} {}", t.groups[g.level].name, g.group,
                                    g.hostLinks && g.uplink ? "hosts and uplink"
                                    : g.uplink              ? "uplink"
                                                            : "hosts"));
  size_t innermost = t.groups[0].groups.size();
  if (res.groups.size() > kMaxRepairGroups ||
      static_cast<double>(res.groups.size()) > kMaxRepairFraction * static_cast<double>(innermost))
    return full(
        fmt::format("{} groups changed: {}", res.groups.size(), fmt::join(res.names, ", ")));
  res.verdict = RecheckVerdict::Groups;
  return res;
}

Topology repairGroups(RoundState& s, const Topology& t, const std::vector<GroupChange>& groups) {
  const size_t n = t.size();
  RANKMAP_ASSERT(t.links && s.fleet().size() == n);
  const auto levels = levelsOf(t);
  const auto in = measuredHosts(t);
  Structure st = structureOf(levels, in);
  TopologyLinks links = *t.links;
  const size_t steps = 2 + 3 * levels.size();
  // Which links are measured again.
  std::vector<char> hostRedo(n, 0);
  std::vector<std::vector<char>> upRedo(levels.size());
  for (size_t l = 0; l < levels.size(); ++l) upRedo[l].assign(t.groups[l].groups.size(), 0);
  std::vector<std::vector<int>> hostGroups;
  for (const auto& g : groups) {
    RANKMAP_ASSERT(g.level < levels.size() && g.group >= 0 &&
                   static_cast<size_t>(g.group) < t.groups[g.level].groups.size());
    if (g.uplink) upRedo[g.level][static_cast<size_t>(g.group)] = 1;
    if (!g.hostLinks) continue;
    std::vector<int> m;
    for (size_t h = 0; h < n; ++h)
      if (levels[0][h] == g.group && in[h]) {
        m.push_back(static_cast<int>(h));
        hostRedo[h] = 1;
      }
    hostGroups.push_back(std::move(m));
  }
  if (!hostGroups.empty()) {
    auto hl = measureHostLinks(s, hostGroups, steps);
    for (size_t h = 0; h < n; ++h)
      if (hostRedo[h]) links.hosts[h] = hl[h];
  }
  for (size_t l = 0; l < levels.size() && !s.stopped(); ++l) {
    if (std::none_of(upRedo[l].begin(), upRedo[l].end(), [](char c) { return c != 0; })) continue;
    auto cap = measureUplinks(s, st, l, links, upRedo[l]);
    for (size_t g = 0; g < upRedo[l].size() && g < cap.size(); ++g)
      if (upRedo[l][g]) links.uplinks[l][g] = cap[g];
    s.report({"links", 2 + 3 * (l + 1), steps,
              fmt::format("{} uplinks measured again", t.groups[l].name)});
  }

  Topology out = t;
  out.links = std::move(links);
  out.sharedLinks = oversubscribedGroups(out);
  auto affected = [&](int a, int b) {
    if (hostRedo[static_cast<size_t>(a)] || hostRedo[static_cast<size_t>(b)]) return true;
    for (size_t l = 0; l < levels.size(); ++l) {
      int ga = levels[l][static_cast<size_t>(a)], gb = levels[l][static_cast<size_t>(b)];
      if (ga == gb) break;
      if (upRedo[l][static_cast<size_t>(ga)] || upRedo[l][static_cast<size_t>(gb)]) return true;
    }
    return false;
  };
  std::map<HostPair, double> alone;
  for (const auto& r : s.readings)
    if (r.kind == "bandwidth" && r.alone && !r.overruled && affected(r.src, r.dst)) {
      auto& v = alone[{r.src, r.dst}];
      v = std::max(v, r.value);
    }
  out.measured.clear();
  for (const auto& p : t.measured)
    if (!affected(p.first, p.second)) out.measured.push_back(p);
  for (const auto& [p, v] : alone) out.measured.push_back(p);
  if (out.hasMatrices())
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) {
        auto& v = out.bandwidthMbps.at(a, b);
        if (a == b || !v || !affected(static_cast<int>(a), static_cast<int>(b))) continue;
        auto it = alone.find({static_cast<int>(a), static_cast<int>(b)});
        v = it != alone.end() ? it->second : out.pathMbps(static_cast<int>(a), static_cast<int>(b));
      }
  return out;
}

RecheckOutcome runRecheck(Fleet& fleet, const Topology& t, const RecheckOptions& o,
                          const RoundOptions& opts, Deadline d, const std::atomic<bool>* cancel) {
  FleetCost before = fleet.cost();
  RoundState s(fleet, opts, d, {}, cancel);
  RecheckOutcome out;
  out.result = checkTopology(s, t, o);
  out.readings = std::move(s.readings);
  out.deadHosts = lostHosts(s, t);
  out.failures = s.failures;
  out.cost = spentSince(before, fleet.cost());
  return out;
}

RoundOutcome runRepair(Fleet& fleet, const Topology& t, const std::vector<GroupChange>& groups,
                       const RoundOptions& opts, Deadline d, const RoundProgressFn& progress,
                       const std::atomic<bool>* cancel) {
  FleetCost before = fleet.cost();
  RoundState s(fleet, opts, d, progress, cancel);
  RoundOutcome res;
  res.topology = repairGroups(s, t, groups);
  res.topology.time = utcNow();
  res.structure = structureOf(levelsOf(t), measuredHosts(t));
  res.deadHosts = lostHosts(s, t);
  res.failures = s.failures;
  res.readings = std::move(s.readings);
  res.cost = spentSince(before, fleet.cost());
  res.phaseSeconds["repair"] = res.cost.seconds;
  res.cancelled = s.cancelled();
  s.report({"done", 1, 1, ""});
  return res;
}

}  // namespace rankmap::probe
