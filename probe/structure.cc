// Phase 2 of the probe round (probe/round.h): the hierarchy from round trips, else from
// bandwidth trials, else (small fleets) the contention fit.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "common/log.h"
#include "probe/contention.h"
#include "probe/partition.h"
#include "probe/round.h"
#include "probe/stats.h"

namespace rankmap::probe {
namespace {

// Boundaries between levels of `values` (positive): the geometric midpoints of the gaps where
// one sorted value is at least `ratio` times the one below it, ascending. A gap counts only with
// at least two values below it and, above it, at least two values and `minUpperFraction` of all
// (a lone slow reading is noise, not a tier).
std::vector<double> levelBoundaries(std::vector<double> values, double ratio,
                                    double minUpperFraction) {
  std::vector<double> out;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  size_t minUpper = std::max<size_t>(2, static_cast<size_t>(std::ceil(minUpperFraction * n)));
  for (size_t i = 1; i + minUpper <= n; ++i) {
    if (i < 2) continue;
    if (values[i] >= ratio * values[i - 1]) out.push_back(std::sqrt(values[i] * values[i - 1]));
  }
  return out;
}

}  // namespace

// ---- 2. structure ---------------------------------------------------------------------------
namespace {

struct Ping {
  int a, b;
  double rttUs;
};

// Fresh pings that the racks of `rackOf` predict: inside each rack of two or more, up to
// kConfirmPairs pairs of members, and from each rack to each of the next kConfirmPairs racks a
// pair across, each not pinged before where the racks allow it (leader clustering pings only
// host-leader pairs, so a rack made by noise is a star around its leader that no other pair
// has tested). True when at most kMaxConfirmDisagreement of those inside racks, and of those
// across, contradict the racks (below `boundary` inside, above across).
bool confirmRacks(RoundState& s, const std::vector<int>& rackOf, const std::vector<Ping>& pinged,
                  double boundary) {
  constexpr size_t kConfirmPairs = 3;
  std::set<HostPair> seen;
  auto key = [](int a, int b) { return HostPair{std::min(a, b), std::max(a, b)}; };
  for (const auto& p : pinged) seen.insert(key(p.a, p.b));
  auto members = membersOf(rackOf);
  for (auto& m : members) {
    std::vector<int> live;
    for (int h : m)
      if (s.live(h)) live.push_back(h);
    m = std::move(live);
  }
  std::vector<HostPair> pairs;
  std::vector<char> inside;
  std::set<HostPair> chosen;
  // The first pair of `from` x `to` neither pinged nor chosen before, else the first not chosen.
  auto pick = [&](const std::vector<int>& from, const std::vector<int>& to, bool in) {
    std::optional<HostPair> fallback;
    for (int a : from)
      for (int b : to) {
        if (a == b || chosen.count(key(a, b))) continue;
        if (!fallback) fallback = HostPair{a, b};
        if (seen.count(key(a, b))) continue;
        fallback = HostPair{a, b};
        goto done;
      }
  done:
    if (!fallback) return;
    chosen.insert(key(fallback->first, fallback->second));
    pairs.push_back(*fallback);
    inside.push_back(in ? 1 : 0);
  };
  const size_t racks = members.size();
  for (size_t r = 0; r < racks; ++r) {
    for (size_t k = 0; k < kConfirmPairs && members[r].size() >= 2; ++k)
      pick(members[r], members[r], true);
    for (size_t k = 1; k <= kConfirmPairs && k < racks; ++k)
      pick(members[r], members[(r + k) % racks], false);
  }
  if (pairs.empty()) return true;
  auto rtt = s.ping(pairs, "confirm");
  // Inside and across judged apart: noise that stalls most agents makes every ping slow (the
  // pairs across agree, those inside do not), noise that stalls a few makes most fast.
  size_t answered[2] = {0, 0}, disagree[2] = {0, 0};
  for (size_t k = 0; k < pairs.size(); ++k) {
    if (!rtt[k]) continue;
    const size_t in = inside[k] ? 1 : 0;
    ++answered[in];
    disagree[in] += (rtt[k]->minUs <= boundary) != (in == 1);
  }
  for (size_t in : {1, 0})
    if (static_cast<double>(disagree[in]) >
        kMaxConfirmDisagreement * static_cast<double>(answered[in])) {
      RANKMAP_INFO(Probe,
                   "probe round: round trips do not confirm the {} racks they suggest: {} of {} "
                   "fresh pings {} racks disagree (boundary {:.1f} us)",
                   racks, disagree[in], answered[in], in ? "inside" : "across", boundary);
      return false;
    }
  return true;
}

// Leader clustering on round trips; nullopt when the round trips show no levels.
std::optional<Structure> latencyStructure(RoundState& s) {
  std::vector<int> hosts = s.liveHosts();
  const size_t n = s.fleet().size();
  if (hosts.size() < 2) return std::nullopt;
  std::mt19937_64 rng(s.opts().seed);
  std::shuffle(hosts.begin(), hosts.end(), rng);

  Components racks(n);
  std::vector<char> placed(n, 0);
  std::vector<int> leaders;  // every leader, in order of election
  std::vector<double> rackRtts;
  std::optional<double> rackBoundary;
  std::vector<int> unplaced = hosts;
  std::vector<Ping> pinged;
  size_t want = static_cast<size_t>(std::max(1, s.opts().firstLeaders));
  for (int round = 0; !unplaced.empty() && !s.stopped(); ++round) {
    std::vector<int> fresh;
    for (int h : unplaced)
      if (fresh.size() < want && s.live(h)) fresh.push_back(h);
    if (fresh.empty()) break;
    std::vector<HostPair> pairs;
    for (int u : unplaced)
      for (int l : fresh)
        if (u != l) pairs.emplace_back(u, l);
    auto rtt = s.ping(pairs, "structure");
    for (size_t k = 0; k < pairs.size(); ++k)
      if (rtt[k]) pinged.push_back({pairs[k].first, pairs[k].second, rtt[k]->minUs});
    if (!rackBoundary) {
      std::vector<double> v;
      for (const auto& r : rtt)
        if (r) v.push_back(r->minUs);
      auto b = levelBoundaries(v, kLatencyLevelRatio, 0.05);
      if (b.empty()) {
        RANKMAP_INFO(Probe, "probe round: round trips show no levels ({} pings, {:.1f}-{:.1f} us)",
                     v.size(), v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()),
                     v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()));
        return std::nullopt;
      }
      rackBoundary = b.front();
    }
    for (int l : fresh) {
      placed[static_cast<size_t>(l)] = 1;
      leaders.push_back(l);
    }
    for (size_t k = 0; k < pairs.size(); ++k) {
      if (!rtt[k] || rtt[k]->minUs > *rackBoundary) continue;
      auto [u, l] = pairs[k];
      rackRtts.push_back(rtt[k]->minUs);
      if (placed[static_cast<size_t>(u)]) {
        racks.unite(u, l);  // a second leader of the same rack, or a host close to two leaders
      } else {
        placed[static_cast<size_t>(u)] = 1;
        racks.unite(u, l);
      }
    }
    std::vector<int> still;
    for (int u : unplaced)
      if (!placed[static_cast<size_t>(u)] && s.live(u)) still.push_back(u);
    s.report({"structure", hosts.size() - still.size(), hosts.size(),
              fmt::format("{} of {} hosts placed after {} leader rounds",
                          hosts.size() - still.size(), hosts.size(), round + 1)});
    unplaced = std::move(still);
    want *= 2;
  }

  Structure st;
  st.signal = "latency";
  std::vector<int> rackOf(n, -1);
  for (int h : hosts)
    if (s.live(h) && placed[static_cast<size_t>(h)]) rackOf[static_cast<size_t>(h)] = racks.find(h);
  rackOf = renumber(rackOf);
  // A tier is a property of every pair: each ping must agree with the racks found (below the
  // boundary inside a rack, above it across). Noise that opened a gap by chance (busy machines,
  // an emulated network) leaves pings that disagree, and then round trips show nothing.
  size_t disagree = 0;
  for (const auto& p : pinged) {
    int ra = rackOf[static_cast<size_t>(p.a)], rb = rackOf[static_cast<size_t>(p.b)];
    if (ra >= 0 && rb >= 0 && (ra == rb) != (p.rttUs <= *rackBoundary)) ++disagree;
  }
  if (static_cast<double>(disagree) >
      kMaxLatencyDisagreement * static_cast<double>(pinged.size())) {
    RANKMAP_INFO(Probe,
                 "probe round: round trips do not form tiers: {} of {} pings disagree with the "
                 "racks they suggest",
                 disagree, pinged.size());
    return std::nullopt;
  }
  if (!confirmRacks(s, rackOf, pinged, *rackBoundary)) return std::nullopt;
  st.levelRttUs.push_back(median(rackRtts));
  int nRacks = groupCount(rackOf);
  if (nRacks >= 2) st.levels.push_back(rackOf);

  // Higher levels: one representative per rack, all pairs of them.
  std::vector<int> rep(static_cast<size_t>(nRacks), -1);
  for (int h : hosts)
    if (rackOf[static_cast<size_t>(h)] >= 0 &&
        rep[static_cast<size_t>(rackOf[static_cast<size_t>(h)])] < 0)
      rep[static_cast<size_t>(rackOf[static_cast<size_t>(h)])] = h;
  std::vector<HostPair> pairs;
  for (size_t a = 0; a < rep.size(); ++a)
    for (size_t b = a + 1; b < rep.size(); ++b) pairs.emplace_back(rep[a], rep[b]);
  auto rtt = s.ping(pairs, "structure");
  std::vector<double> v;
  for (const auto& r : rtt)
    if (r) v.push_back(r->minUs);
  auto bounds = levelBoundaries(v, kLatencyLevelRatio, 0.0);
  double below = *rackBoundary;
  std::vector<int> prev = rackOf;
  for (double b : bounds) {
    Components up(static_cast<size_t>(nRacks));
    std::vector<double> band;
    for (size_t k = 0; k < pairs.size(); ++k)
      if (rtt[k] && rtt[k]->minUs <= b) {
        up.unite(rackOf[static_cast<size_t>(pairs[k].first)],
                 rackOf[static_cast<size_t>(pairs[k].second)]);
        if (rtt[k]->minUs > below) band.push_back(rtt[k]->minUs);
      }
    std::vector<int> level(n, -1);
    for (size_t h = 0; h < n; ++h)
      if (rackOf[h] >= 0) level[h] = up.find(rackOf[h]);
    level = renumber(level);
    int g = groupCount(level);
    if (g >= 2 && g < groupCount(prev)) {
      st.levels.push_back(level);
      st.levelRttUs.push_back(median(band));
      prev = level;
    }
    below = b;
  }
  std::vector<double> top;
  for (const auto& r : rtt)
    if (r && r->minUs > below) top.push_back(r->minUs);
  if (!st.levels.empty()) st.levelRttUs.push_back(median(top));
  return st;
}

// Near/far trials when round trips show nothing; see the file comment of round.h.
Structure bandwidthStructure(RoundState& s, double flatRttUs) {
  Structure st;
  st.signal = "bandwidth";
  st.levelRttUs.push_back(flatRttUs);
  const size_t n = s.fleet().size();
  std::vector<int> hosts = s.liveHosts();
  if (hosts.size() < 2) {
    st.signal = "none";
    return st;
  }
  std::mt19937_64 rng(s.opts().seed ^ 0x9e3779b97f4a7c15ull);
  Components comp(n);
  // Pairs of component roots (lower first) decided apart: kFarReadings slow readings between
  // them (one can be a descheduled near flow; two independent ones are not).
  std::set<std::pair<int, int>> far;
  auto key = [&](int a, int b) {
    a = comp.find(a);
    b = comp.find(b);
    return std::make_pair(std::min(a, b), std::max(a, b));
  };
  auto normalize = [&] {
    std::set<std::pair<int, int>> next;
    for (auto [a, b] : far)
      if (comp.find(a) != comp.find(b)) next.insert(key(a, b));
    far = std::move(next);
  };
  // Every trial as evidence for the contention fit (the fallback below), over the hosts live
  // at the start, renumbered.
  const std::vector<int> initial = hosts;
  std::vector<int> index(n, -1);
  for (size_t i = 0; i < initial.size(); ++i)
    index[static_cast<size_t>(initial[i])] = static_cast<int>(i);
  std::vector<ObservedTrial> evidence;
  auto runTrial = [&](const std::vector<HostPair>& flows) {
    auto got = s.run(flows, "structure", false);
    ObservedTrial t;
    for (size_t k = 0; k < flows.size(); ++k)
      if (got[k])
        t.push_back({index[static_cast<size_t>(flows[k].first)],
                     index[static_cast<size_t>(flows[k].second)], *got[k]});
    evidence.push_back(std::move(t));
    return got;
  };
  // Readings of the structure trials: every host sends one flow and receives one, so a near
  // flow gets its host rate and a far one what a congested uplink leaves it.
  struct Obs {
    int src, dst;
    double mbps;
    int trial;
  };
  std::vector<Obs> obs;
  double hostRate = 0;  // the top band of single-flow trials, once two bands were seen
  int bandsSeenAfter = -1;
  for (int trial = 0; trial < s.opts().maxStructureTrials && !s.stopped(); ++trial) {
    hosts = s.liveHosts();
    std::shuffle(hosts.begin(), hosts.end(), rng);
    std::vector<char> receiving(n, 0);
    std::set<std::pair<int, int>> testing;
    std::vector<HostPair> flows;
    size_t informative = 0;
    for (size_t i = 0; i < hosts.size(); ++i) {
      int h = hosts[i];
      int best = -1, second = -1, filler = -1;
      for (size_t j = 1; j < hosts.size() && best < 0; ++j) {
        int r = hosts[(i + j) % hosts.size()];
        if (receiving[static_cast<size_t>(r)]) continue;
        if (comp.find(r) == comp.find(h)) {
          if (filler < 0) filler = r;
          continue;
        }
        auto k = key(h, r);
        if (far.count(k)) {
          if (filler < 0 || comp.find(filler) == comp.find(h)) filler = r;
          continue;
        }
        if (!testing.count(k))
          best = r;
        else if (second < 0)
          second = r;
      }
      int r = best >= 0 ? best : second >= 0 ? second : filler;
      if (r < 0) continue;
      if (r == best || r == second) {
        ++informative;
        testing.insert(key(h, r));
      }
      receiving[static_cast<size_t>(r)] = 1;
      flows.emplace_back(h, r);
    }
    if (informative == 0 && bandsSeenAfter >= 0) break;
    auto got = runTrial(flows);
    for (size_t k = 0; k < flows.size(); ++k)
      if (got[k]) obs.push_back({flows[k].first, flows[k].second, *got[k], trial});
    if (log::enabled(log::Subsys::Probe, log::Level::Debug)) {
      std::string line;
      for (size_t k = 0; k < flows.size(); ++k)
        line += fmt::format(" {}>{}:{:.0f}", flows[k].first, flows[k].second, got[k].value_or(-1));
      RANKMAP_DEBUG(Probe, "structure trial {} (host rate {:.0f}):{}", trial + 1, hostRate, line);
    }
    if (hostRate == 0) {
      // The top band of single flows: readings within kBandwidthLevelRatio of the best (flows
      // inside a group, at their host rate). Two bands once some reading is below kFarFraction
      // of it.
      double best = 0;
      for (const auto& o : obs) best = std::max(best, o.mbps);
      std::vector<double> band;
      for (const auto& o : obs)
        if (o.mbps * kBandwidthLevelRatio >= best) band.push_back(o.mbps);
      const double top = median(band);
      const bool twoBands = std::any_of(obs.begin(), obs.end(),
                                        [&](const Obs& o) { return o.mbps < kFarFraction * top; });
      if (!twoBands) {
        // One band so far: either a network with no congested uplink, or no flow has yet run
        // inside a group. A few fresh trials decide which.
        s.report({"structure", static_cast<size_t>(trial + 1), 4,
                  fmt::format("trial {}: one band of rates so far", trial + 1)});
        if (trial >= 3) break;
        continue;
      }
      hostRate = top;
      bandsSeenAfter = trial;
    }
    // Near unites; far separates (kFarReadings of them from as many trials, or one below
    // kVeryFarFraction), unless a near reading between the two groups exists: a low reading can
    // be a descheduled sender, a high one cannot come from a congested uplink. In between a
    // reading decides nothing.
    for (const auto& o : obs)
      if (o.mbps >= kNearFraction * hostRate) comp.unite(o.src, o.dst);
    normalize();
    std::map<std::pair<int, int>, std::set<int>> slow;  // group pair -> trials with a slow one
    for (const auto& o : obs) {
      if (o.mbps >= kFarFraction * hostRate || comp.find(o.src) == comp.find(o.dst)) continue;
      auto& trials = slow[key(o.src, o.dst)];
      trials.insert(o.trial);
      if (o.mbps < kVeryFarFraction * hostRate || trials.size() >= kFarReadings)
        far.insert(key(o.src, o.dst));
    }
    std::set<int> roots;
    for (int h : s.liveHosts()) roots.insert(comp.find(h));
    size_t pairsOfGroups = roots.size() * (roots.size() - 1) / 2;
    s.report({"structure", far.size(), pairsOfGroups,
              fmt::format("trial {}: {} groups, {} of {} group pairs decided", trial + 1,
                          roots.size(), far.size(), pairsOfGroups)});
    if (far.size() >= pairsOfGroups) break;
  }
  if (bandsSeenAfter < 0) {
    // One band: no uplink congested enough in a blind permutation to stand out (a permutation
    // sends only about 1 - k/N of a group's flows across its uplink). A slight slow-down shared
    // by the hosts behind one uplink can still be explained by a fit over more permutations
    // (probe/contention.h), affordable for small fleets, which is where this case arises: in
    // large ones most of a group's flows cross its uplink.
    int live = static_cast<int>(initial.size());
    if (live < 3 || live > kMaxSearchHosts || s.stopped()) {
      st.signal = "none";
      return st;
    }
    auto trials = contentionTrials(live, 2 * (live - 1), 12345);
    for (size_t k = 0; k < trials.size() && !s.stopped(); ++k) {
      std::vector<HostPair> flows;
      for (auto [a, b] : trials[k])
        flows.emplace_back(initial[static_cast<size_t>(a)], initial[static_cast<size_t>(b)]);
      runTrial(flows);
      s.report({"structure", k + 1, trials.size(),
                fmt::format("contention trial {} of {}", k + 1, trials.size())});
    }
    Inference inf = inferGroups(live, evidence);
    if (inf.sharedGroups().empty() || inf.confidence() < kMinContentionConfidence) {
      if (!inf.sharedGroups().empty())
        RANKMAP_INFO(Probe, "probe round: the contention fit's groups explain too little ({:.2f})",
                     inf.confidence());
      st.signal = "none";
      return st;
    }
    std::vector<int> rackOf(n, -1);
    for (int i = 0; i < live; ++i)
      if (s.live(initial[static_cast<size_t>(i)]))
        rackOf[static_cast<size_t>(initial[static_cast<size_t>(i)])] =
            inf.model.groupOf[static_cast<size_t>(i)];
    rackOf = renumber(rackOf);
    st.signal = "contention";
    if (groupCount(rackOf) >= 2) {
      st.levels.push_back(rackOf);
      st.levelRttUs.push_back(flatRttUs);
    }
    return st;
  }
  std::vector<int> rackOf(n, -1);
  for (int h : s.liveHosts()) rackOf[static_cast<size_t>(h)] = comp.find(h);
  rackOf = renumber(rackOf);
  if (groupCount(rackOf) >= 2) {
    st.levels.push_back(rackOf);
    st.levelRttUs.push_back(flatRttUs);
  }
  return st;
}

}  // namespace

Structure findStructure(RoundState& s) {
  if (auto st = latencyStructure(s)) return *st;
  double flat = 0;
  {
    std::vector<double> v;
    for (const auto& r : s.readings)
      if (r.kind == "latency") v.push_back(r.value);
    flat = median(v);
  }
  if (!s.opts().bandwidthEnabled) {
    Structure st;
    st.signal = "none";
    st.levelRttUs.push_back(flat);
    return st;
  }
  return bandwidthStructure(s, flat);
}

}  // namespace rankmap::probe
