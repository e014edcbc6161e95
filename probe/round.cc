#include "probe/round.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string_view>

#include "common/error.h"
#include "common/log.h"
#include "probe/contention.h"

namespace rankmap::probe {
namespace {

// Union-find over 0..n-1 (path halving, union by index: the root is the lowest member).
class Components {
 public:
  explicit Components(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int find(int x) {
    while (parent_[static_cast<size_t>(x)] != x) {
      auto& p = parent_[static_cast<size_t>(x)];
      p = parent_[static_cast<size_t>(p)];
      x = p;
    }
    return x;
  }
  bool unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b) return false;
    if (b < a) std::swap(a, b);
    parent_[static_cast<size_t>(b)] = a;
    return true;
  }

 private:
  std::vector<int> parent_;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

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

// Groups numbered 0.. in order of their lowest member; -1 stays -1.
std::vector<int> renumber(const std::vector<int>& label) {
  std::vector<int> out(label.size(), -1);
  std::map<int, int> seen;
  for (size_t h = 0; h < label.size(); ++h) {
    if (label[h] < 0) continue;
    auto [it, fresh] = seen.emplace(label[h], static_cast<int>(seen.size()));
    out[h] = it->second;
  }
  return out;
}

int groupCount(const std::vector<int>& groupOf) {
  int g = 0;
  for (int x : groupOf) g = std::max(g, x + 1);
  return g;
}

std::vector<std::vector<int>> membersOf(const std::vector<int>& groupOf) {
  std::vector<std::vector<int>> m(static_cast<size_t>(groupCount(groupOf)));
  for (size_t h = 0; h < groupOf.size(); ++h)
    if (groupOf[h] >= 0) m[static_cast<size_t>(groupOf[h])].push_back(static_cast<int>(h));
  return m;
}

}  // namespace

// ---- RoundState ----------------------------------------------------------------------------

RoundState::RoundState(Fleet& fleet, const RoundOptions& opts, Deadline d,
                       const RoundProgressFn& progress, const std::atomic<bool>* cancel)
    : fleet_(fleet),
      opts_(opts),
      deadline_(d),
      progress_(progress),
      cancel_(cancel),
      live_(fleet.size(), 1),
      strikes_(fleet.size(), 0) {}

bool RoundState::stopped() const { return cancelled() || deadline_.expired(); }

std::vector<int> RoundState::liveHosts() const {
  std::vector<int> out;
  for (size_t h = 0; h < live_.size(); ++h)
    if (live_[h]) out.push_back(static_cast<int>(h));
  return out;
}

void RoundState::drop(int h, const std::string& why) {
  if (!live_[static_cast<size_t>(h)]) return;
  live_[static_cast<size_t>(h)] = 0;
  dropped.push_back(fleet_.host(h).name);
  RANKMAP_WARN(Probe, "probe round: host {} ({}) is out of this round: {}", fleet_.host(h).name,
               fleet_.host(h).address, why);
}

void RoundState::report(const RoundProgress& p) const {
  if (progress_) progress_(p);
}

template <typename T>
void RoundState::judge(const std::vector<HostPair>& pairs, const std::vector<Outcome<T>>& out) {
  for (size_t k = 0; k < pairs.size(); ++k) {
    const auto& o = out[k];
    if (o.value) continue;
    failures[o.reason.empty() ? "peer" : o.reason]++;
    int culprit = o.culprit >= 0 ? o.culprit : pairs[k].second;
    if (!o.asked || !live(culprit)) continue;
    // Not accepting connections is final (the fleet retried them); a slow answer gets a second
    // chance.
    strikes_[static_cast<size_t>(culprit)] += o.reason == "connect" ? kMaxStrikes : 1;
    if (strikes_[static_cast<size_t>(culprit)] >= kMaxStrikes)
      drop(culprit, fmt::format("{} -> {}: {} ({})", fleet_.host(pairs[k].first).name,
                                fleet_.host(pairs[k].second).name, o.message, o.reason));
  }
}

std::vector<std::optional<LatencyStats>> RoundState::ping(const std::vector<HostPair>& pairs,
                                                          const std::string& phase) {
  std::vector<std::optional<LatencyStats>> res(pairs.size());
  if (pairs.empty() || stopped()) return res;
  auto out = fleet_.latency(pairs, opts_.latency, deadline_);
  judge(pairs, out);
  for (size_t k = 0; k < pairs.size(); ++k) {
    res[k] = out[k].value;
    if (res[k])
      readings.push_back({pairs[k].first, pairs[k].second, "latency", res[k]->minUs, phase, true});
  }
  return res;
}

std::vector<std::optional<double>> RoundState::run(const std::vector<HostPair>& flows,
                                                   const std::string& phase, bool alone,
                                                   const std::vector<int>& units, bool splittable,
                                                   const BandwidthOptions* window) {
  std::vector<std::optional<double>> res(flows.size());
  // Parts: consecutive runs of whole units up to maxFlowsPerTrial flows.
  std::vector<std::pair<size_t, size_t>> parts;
  size_t cap = splittable && opts_.maxFlowsPerTrial > 0 ? opts_.maxFlowsPerTrial : flows.size();
  for (size_t begin = 0; begin < flows.size();) {
    size_t end = begin;
    while (end < flows.size()) {
      size_t unitEnd = end + 1;
      while (!units.empty() && unitEnd < flows.size() && units[unitEnd] == units[end]) ++unitEnd;
      if (end > begin && unitEnd - begin > cap) break;
      end = unitEnd;
    }
    parts.emplace_back(begin, end);
    begin = end;
  }
  for (auto [begin, end] : parts) {
    if (stopped()) break;
    std::vector<HostPair> part;
    std::vector<size_t> at;
    for (size_t k = begin; k < end; ++k)
      if (live(flows[k].first) && live(flows[k].second)) {
        part.push_back(flows[k]);
        at.push_back(k);
      }
    if (part.empty()) continue;
    auto out = fleet_.bandwidth(part, window ? *window : opts_.bandwidth, deadline_);
    judge(part, out);
    for (size_t i = 0; i < part.size(); ++i) {
      res[at[i]] = out[i].value;
      if (out[i].value)
        readings.push_back(
            {part[i].first, part[i].second, "bandwidth", *out[i].value, phase, alone});
    }
  }
  return res;
}

// ---- 1. liveness -----------------------------------------------------------------------------

std::vector<bool> checkLiveness(RoundState& s) {
  s.report({"liveness", 0, s.fleet().size(), ""});
  auto up = s.fleet().alive(s.deadline());
  for (size_t h = 0; h < up.size(); ++h)
    if (!up[h]) {
      s.failures["connect"]++;
      s.drop(static_cast<int>(h), "not answering");
    }
  return up;
}

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

// ---- 3. links -------------------------------------------------------------------------------

std::vector<LinkCapacity> measureHostLinks(RoundState& s,
                                           const std::vector<std::vector<int>>& groups,
                                           size_t progressTotal) {
  const size_t n = s.fleet().size();
  std::vector<LinkCapacity> hostLinks(n);
  auto note = [&](const std::vector<HostPair>& flows,
                  const std::vector<std::optional<double>>& got) {
    for (size_t k = 0; k < flows.size(); ++k) {
      if (!got[k]) continue;
      auto& out = hostLinks[static_cast<size_t>(flows[k].first)].outMbps;
      auto& in = hostLinks[static_cast<size_t>(flows[k].second)].inMbps;
      out = std::max(out, *got[k]);
      in = std::max(in, *got[k]);
    }
  };
  for (int shift : {1, 2}) {
    std::vector<HostPair> flows;
    std::vector<int> unit;
    for (size_t g = 0; g < groups.size(); ++g) {
      std::vector<int> m;
      for (int h : groups[g])
        if (s.live(h)) m.push_back(h);
      size_t k = m.size();
      if (k < 2 || (shift == 2 && k < 3)) continue;
      for (size_t i = 0; i < k; ++i) {
        flows.emplace_back(m[i], m[(i + static_cast<size_t>(shift)) % k]);
        unit.push_back(static_cast<int>(g));
      }
    }
    note(flows, s.run(flows, "hosts", true, unit, true));
    s.report({"links", static_cast<size_t>(shift), progressTotal,
              fmt::format("host links: shift {} inside {} groups", shift, groups.size())});
  }
  // Hosts alone in their group (a VM alone in its rack): no shift reaches them, so each sends
  // one flow to the next lone host and receives one (or, alone of their kind, trade with any
  // other host). Across an uplink the reading is a lower bound; the best reading of any phase
  // below still counts.
  {
    std::vector<int> lone;
    for (const auto& g : groups) {
      std::vector<int> m;
      for (int h : g)
        if (s.live(h)) m.push_back(h);
      if (m.size() == 1) lone.push_back(m.front());
    }
    std::vector<HostPair> flows;
    if (lone.size() >= 2) {
      for (size_t i = 0; i < lone.size(); ++i)
        flows.emplace_back(lone[i], lone[(i + 1) % lone.size()]);
    } else if (lone.size() == 1) {
      for (int h : s.liveHosts())
        if (h != lone.front()) {
          flows = {{lone.front(), h}, {h, lone.front()}};
          break;
        }
    }
    if (!flows.empty()) {
      note(flows, s.run(flows, "hosts", true, {}, true));
      s.report({"links", 2, progressTotal,
                fmt::format("host links: {} hosts alone in their group", lone.size())});
    }
  }
  // A host link carries at least the best rate any flow of the host reached, in any phase (the
  // near flows of the structure trials included): a flow cannot beat its host link, while any
  // one reading can be held back by the machine.
  for (const auto& r : s.readings) {
    if (r.kind != "bandwidth") continue;
    auto& out = hostLinks[static_cast<size_t>(r.src)].outMbps;
    auto& in = hostLinks[static_cast<size_t>(r.dst)].inMbps;
    out = std::max(out, r.value);
    in = std::max(in, r.value);
  }
  // A flow alone far below what both its hosts reached elsewhere was held back by something
  // else (a descheduled sender, a burst of other traffic): measured again, and the best reading
  // stands.
  {
    std::map<HostPair, double> bestAlone;
    for (const auto& r : s.readings)
      if (r.kind == "bandwidth" && r.phase == "hosts") {
        auto& v = bestAlone[{r.src, r.dst}];
        v = std::max(v, r.value);
      }
    std::vector<HostPair> again;
    for (const auto& [p, v] : bestAlone) {
      double expect = std::min(hostLinks[static_cast<size_t>(p.first)].outMbps,
                               hostLinks[static_cast<size_t>(p.second)].inMbps);
      if (v < kConfirmFraction * expect) again.push_back(p);
    }
    // Inside groups (no uplink), each host in at most two of them: all at once, in parts of
    // maxFlowsPerTrial where the machines cannot carry more.
    size_t batch = s.opts().maxFlowsPerTrial > 0 ? s.opts().maxFlowsPerTrial
                                                 : std::max<size_t>(1, again.size());
    for (size_t i = 0; i < again.size() && !s.stopped(); i += batch) {
      std::vector<HostPair> part(
          again.begin() + static_cast<long>(i),
          again.begin() + static_cast<long>(std::min(again.size(), i + batch)));
      s.run(part, "confirm", true);
    }
    // A flow still far below after that, beyond any noise, was held back twice (on a loaded
    // machine the batch's other flows can share the CPUs that hold it back): once more, each
    // alone in the fleet. A link that really carries less reads low a third time.
    for (const auto& r : s.readings)
      if (r.kind == "bandwidth" && r.phase == "confirm" && bestAlone.count({r.src, r.dst})) {
        auto& v = bestAlone[{r.src, r.dst}];
        v = std::max(v, r.value);
      }
    std::vector<std::pair<double, HostPair>> low;  // best / expected, the furthest below first
    for (const auto& p : again) {
      double expect = std::min(hostLinks[static_cast<size_t>(p.first)].outMbps,
                               hostLinks[static_cast<size_t>(p.second)].inMbps);
      if (bestAlone[p] < kReconfirmFraction * expect) low.push_back({bestAlone[p] / expect, p});
    }
    std::sort(low.begin(), low.end());
    std::vector<HostPair> third;
    for (size_t i = 0; i < low.size() && i < kMaxReconfirms; ++i) third.push_back(low[i].second);
    for (size_t i = 0; i < third.size() && !s.stopped(); ++i) s.run({third[i]}, "confirm", true);
    if (!again.empty())
      s.report({"links", 2, progressTotal,
                fmt::format("host links: {} flows measured again, {} of them a third time",
                            again.size(), third.size())});
  }

  // The estimate: the mean of the readings within kHostBand of the best. The best alone would
  // carry the noise of one reading upwards (a few percent over a handful of readings); the
  // band still leaves out readings that something else held back.
  {
    std::vector<std::vector<double>> outs(n), ins(n);
    for (const auto& r : s.readings) {
      if (r.kind != "bandwidth") continue;
      outs[static_cast<size_t>(r.src)].push_back(r.value);
      ins[static_cast<size_t>(r.dst)].push_back(r.value);
    }
    auto band = [](const std::vector<double>& v, double best) {
      double sum = 0;
      int k = 0;
      for (double x : v)
        if (x >= kHostBand * best) {
          sum += x;
          ++k;
        }
      return k ? sum / k : best;
    };
    for (size_t h = 0; h < n; ++h) {
      hostLinks[h].outMbps = band(outs[h], hostLinks[h].outMbps);
      hostLinks[h].inMbps = band(ins[h], hostLinks[h].inMbps);
    }
  }
  return hostLinks;
}

std::vector<LinkCapacity> measureUplinks(RoundState& s, const Structure& st, size_t l,
                                         const std::vector<LinkCapacity>& hostLinks,
                                         const std::vector<char>& only) {
  const auto& groupOf = st.levels[l];
  int ng = groupCount(groupOf);
  auto members = membersOf(groupOf);
  std::vector<LinkCapacity> cap(static_cast<size_t>(ng));
  // Children of each parent group (the level above, or the root).
  std::map<int, std::vector<int>> children;
  for (int g = 0; g < ng; ++g) {
    if (members[static_cast<size_t>(g)].empty()) continue;  // no host in the round
    int any = members[static_cast<size_t>(g)].front();
    int parent = l + 1 < st.levels.size() ? st.levels[l + 1][static_cast<size_t>(any)] : 0;
    children[parent].push_back(g);
  }
  auto liveMembers = [&](int g) {
    std::vector<int> m;
    for (int h : members[static_cast<size_t>(g)])
      if (s.live(h)) m.push_back(h);
    return m;
  };
  auto best = [&](int g, bool out) {
    int pick = -1;
    double rate = -1;
    for (int h : liveMembers(g)) {
      const auto& c = hostLinks[static_cast<size_t>(h)];
      double v = out ? c.outMbps : c.inMbps;
      if (v > rate) {
        rate = v;
        pick = h;
      }
    }
    return pick;
  };
  // One flow per uplink: the single-flow rate across it. A single flow alone on an uplink
  // fills it: when it stays below its hosts' rate, that reading is the uplink's capacity, and
  // the load trials below (whose flows' windows never line up exactly, so their sum runs
  // high) do not raise it. A flow from group a to group b reads the narrower of a's uplink out
  // and b's in, so it is only a lower bound on each: when the bound readings of the first shift
  // differ beyond the noise (uplinks of unequal rates), further shifts pair every group with
  // other partners (up to kUplinkShifts in all), and each direction keeps its best reading.
  std::vector<std::pair<bool, bool>> bound(static_cast<size_t>(ng), {false, false});  // out, in
  std::vector<std::pair<double, double>> hostRate(static_cast<size_t>(ng), {0, 0});   // out, in
  std::vector<double> boundReadings;
  struct Tried {
    HostPair flow;
    std::pair<int, int> across;  // groups: out of first, into second
    double mbps;
  };
  std::vector<Tried> tried;
  BandwidthOptions longer = s.opts().bandwidth;
  // A longer window than the other trials: one trial per level, and a slow uplink needs
  // time for its reading to settle (a 25 Mbit/s link reads ~15% low in 150 ms).
  longer.maxMs *= kUplinkWindowFactor;
  auto runFlows = [&](const std::vector<HostPair>& flows,
                      const std::vector<std::pair<int, int>>& across, const char* what) {
    auto got = s.run(flows, "uplinks", true, {}, false, &longer);
    for (size_t k = 0; k < flows.size(); ++k) {
      RANKMAP_DEBUG(Probe, "uplinks level {} {}: group {} -> {} (host {} -> {}): {}", l, what,
                    across[k].first, across[k].second, flows[k].first, flows[k].second,
                    got[k] ? fmt::format("{:.1f} Mbit/s", *got[k]) : std::string("no reading"));
      if (!got[k]) continue;
      auto a = static_cast<size_t>(across[k].first), b = static_cast<size_t>(across[k].second);
      cap[a].outMbps = std::max(cap[a].outMbps, *got[k]);
      cap[b].inMbps = std::max(cap[b].inMbps, *got[k]);
      double hosts = std::min(hostLinks[static_cast<size_t>(flows[k].first)].outMbps,
                              hostLinks[static_cast<size_t>(flows[k].second)].inMbps);
      hostRate[a].first = std::max(hostRate[a].first, hosts);
      hostRate[b].second = std::max(hostRate[b].second, hosts);
      if (*got[k] < kUplinkBoundFraction * hosts) {
        boundReadings.push_back(*got[k]);
        tried.push_back({flows[k], across[k], *got[k]});
      }
    }
  };
  for (size_t shift = 1; shift <= kUplinkShifts; ++shift) {
    if (shift > 1) {
      if (boundReadings.size() < 2) break;
      auto [lo, hi] = std::minmax_element(boundReadings.begin(), boundReadings.end());
      if (*hi <= *lo * (1 + 2 * kProbeNoise)) break;  // equal uplinks: one shift tells all
    }
    std::vector<HostPair> flows;
    std::vector<std::pair<int, int>> across;
    for (const auto& [parent, kids] : children) {
      if (kids.size() <= shift) continue;
      for (size_t i = 0; i < kids.size(); ++i) {
        int a = kids[i], b = kids[(i + shift) % kids.size()];
        if (!only.empty() && !only[static_cast<size_t>(a)] && !only[static_cast<size_t>(b)])
          continue;
        int src = best(a, true), dst = best(b, false);
        if (src < 0 || dst < 0 || src == dst) continue;
        flows.emplace_back(src, dst);
        across.emplace_back(a, b);
      }
    }
    if (flows.empty()) continue;
    runFlows(flows, across, fmt::format("shift {}", shift).c_str());
  }
  // Confirmation: a single flow reads its uplink low now and then (a sender or receiver
  // descheduled on a busy machine: one of eight flows 8-15% low in about one trial in three on
  // the emulated cloud), and one shift of equal uplinks is all the round takes. A flow below
  // kConfirmFraction of the level's best uplink-bound reading runs once more, alone on its two
  // uplinks (one flow per uplink direction), and the best reading stands: for the pair
  // (`measured`) and for both uplinks. Uplinks that really are slower cost one more trial.
  if (!tried.empty()) {
    double top = *std::max_element(boundReadings.begin(), boundReadings.end());
    std::vector<HostPair> flows;
    std::vector<std::pair<int, int>> across;
    std::set<int> outUsed, inUsed;
    std::set<HostPair> done;
    for (const auto& t : tried) {
      if (t.mbps >= kConfirmFraction * top || done.count(t.flow)) continue;
      if (outUsed.count(t.across.first) || inUsed.count(t.across.second)) continue;
      outUsed.insert(t.across.first);
      inUsed.insert(t.across.second);
      done.insert(t.flow);
      flows.push_back(t.flow);
      across.push_back(t.across);
    }
    if (!flows.empty()) runFlows(flows, across, "confirm");
  }
  // Held by the uplink: its best reading stayed below its hosts' rate.
  for (size_t g = 0; g < static_cast<size_t>(ng); ++g) {
    bound[g].first =
        cap[g].outMbps > 0 && cap[g].outMbps < kUplinkBoundFraction * hostRate[g].first;
    bound[g].second =
        cap[g].inMbps > 0 && cap[g].inMbps < kUplinkBoundFraction * hostRate[g].second;
  }
  // Every host of a group to the next group at once (shift 1 and 2): what the uplink carries.
  for (size_t shift : {size_t{1}, size_t{2}}) {
    std::vector<HostPair> flows;
    std::vector<std::pair<int, int>> across;
    for (const auto& [parent, kids] : children) {
      if (kids.size() < 2 || (shift == 2 && kids.size() < 3)) continue;
      for (size_t i = 0; i < kids.size(); ++i) {
        int a = kids[i], b = kids[(i + shift) % kids.size()];
        if (!only.empty() && !only[static_cast<size_t>(a)] && !only[static_cast<size_t>(b)])
          continue;
        auto from = liveMembers(a), to = liveMembers(b);
        for (size_t p = 0; p < std::min(from.size(), to.size()); ++p) {
          flows.emplace_back(from[p], to[p]);
          across.emplace_back(a, b);
        }
      }
    }
    if (flows.empty()) continue;
    auto got = s.run(flows, "load", false);
    std::vector<double> out(static_cast<size_t>(ng), 0), in(static_cast<size_t>(ng), 0);
    for (size_t k = 0; k < flows.size(); ++k) {
      if (!got[k]) continue;
      out[static_cast<size_t>(across[k].first)] += *got[k];
      in[static_cast<size_t>(across[k].second)] += *got[k];
    }
    for (size_t g = 0; g < static_cast<size_t>(ng); ++g) {
      if (!bound[g].first) cap[g].outMbps = std::max(cap[g].outMbps, out[g]);
      if (!bound[g].second) cap[g].inMbps = std::max(cap[g].inMbps, in[g]);
    }
  }
  // A group alone under its parent: nothing crosses its uplink without crossing the parent's,
  // so it is never the narrowest link measured; it is stated as its hosts' total.
  for (int g = 0; g < ng; ++g) {
    auto& c = cap[static_cast<size_t>(g)];
    double total = 0;
    for (int h : members[static_cast<size_t>(g)])
      total += hostLinks[static_cast<size_t>(h)].outMbps;
    if (c.outMbps == 0) c.outMbps = total;
    if (c.inMbps == 0) c.inMbps = total;
  }
  return cap;
}

TopologyLinks measureLinks(RoundState& s, const Structure& st) {
  const size_t n = s.fleet().size();
  TopologyLinks links;
  // Host links: shifts inside each innermost group (the whole fleet when there is none).
  std::vector<int> inner(n, -1);
  if (!st.levels.empty()) {
    inner = st.levels.front();
  } else {
    for (int h : s.liveHosts()) inner[static_cast<size_t>(h)] = 0;
  }
  const size_t steps = 2 + 3 * st.levels.size();
  links.hosts = measureHostLinks(s, membersOf(inner), steps);
  // Uplinks, level by level.
  for (size_t l = 0; l < st.levels.size(); ++l) {
    links.uplinks.push_back(measureUplinks(s, st, l, links.hosts));
    s.report({"links", 2 + 3 * (l + 1), steps,
              fmt::format("{} uplinks: {} groups", levelName(l), links.uplinks.back().size())});
  }
  // Latency per tier from the round trips of each level (one way = half a round trip).
  if (!st.levelRttUs.empty()) {
    links.hostLatencyUs = st.levelRttUs[0] / 4;
    for (size_t l = 0; l + 1 < st.levelRttUs.size() && l < st.levels.size(); ++l)
      links.uplinkLatencyUs.push_back(std::max(0.0, (st.levelRttUs[l + 1] - st.levelRttUs[l]) / 4));
    links.uplinkLatencyUs.resize(st.levels.size(), 0);
  }
  return links;
}

// ---- 4. assemble ----------------------------------------------------------------------------

std::vector<SharedLink> oversubscribedGroups(const Topology& t) {
  std::vector<SharedLink> out;
  if (!t.links) return out;
  const TopologyLinks& lk = *t.links;
  std::map<std::string_view, size_t> index;
  for (size_t h = 0; h < t.size(); ++h) index.emplace(t.hosts[h].name, h);
  for (size_t l = 0; l < t.groups.size(); ++l) {
    const auto& groups = t.groups[l].groups;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].size() < 2) continue;
      double hostsOut = 0, hostsIn = 0;
      for (const auto& name : groups[g]) {
        const auto& c = lk.hosts[index.at(name)];
        hostsOut += c.outMbps;
        hostsIn += c.inMbps;
      }
      const auto& up = lk.uplinks[l][g];
      if (up.outMbps < 0.9 * hostsOut || up.inMbps < 0.9 * hostsIn)
        out.push_back({groups[g], std::min(up.outMbps, up.inMbps)});
    }
  }
  return out;
}

Topology assembleTopology(RoundState& s, const Structure& st, const TopologyLinks& links) {
  const size_t n = s.fleet().size();
  std::vector<Host> hosts;
  for (size_t h = 0; h < n; ++h) hosts.push_back(s.fleet().host(static_cast<int>(h)));
  Topology t;
  t.hosts = hosts;
  t.probe.latencySamples = s.opts().latency.samples;
  t.probe.bandwidthMaxMs = s.opts().bandwidthEnabled ? s.opts().bandwidth.maxMs : 0;
  t.probe.bandwidthMaxBytes =
      s.opts().bandwidthEnabled ? static_cast<int64_t>(s.opts().bandwidth.maxBytes) : 0;
  t.probe.contention = s.opts().bandwidthEnabled;
  // `time` is the caller's (the agent's clock names the round).
  // Levels: hosts out of the round (or never placed) each a group of their own.
  for (size_t l = 0; l < st.levels.size(); ++l) {
    HierarchyLevel level;
    level.name = levelName(l);
    level.confidence = 1;
    auto members = membersOf(st.levels[l]);
    for (const auto& m : members) {
      std::vector<std::string> names;
      for (int h : m) names.push_back(hosts[static_cast<size_t>(h)].name);
      level.groups.push_back(std::move(names));
    }
    for (size_t h = 0; h < n; ++h)
      if (st.levels[l][h] < 0) level.groups.push_back({hosts[h].name});
    t.groups.push_back(std::move(level));
  }
  TopologyLinks lk = links;
  lk.hosts.resize(n);
  lk.uplinks.resize(st.levels.size());
  lk.uplinkLatencyUs.resize(st.levels.size(), 0);
  // Uplinks of the single-host groups added for hosts out of the round: nothing measured.
  for (size_t l = 0; l < st.levels.size(); ++l)
    lk.uplinks[l].resize(t.groups[l].groups.size(), LinkCapacity{});
  t.links = std::move(lk);
  t.sharedLinks = oversubscribedGroups(t);
  // Pairs measured alone: the best such reading of each directed pair. A host that left the
  // round after some of its pairs were measured has none: its matrix entries are null, and a
  // measured pair must have a value (the parser refuses it, as the agent's store did on restart).
  std::map<std::pair<int, int>, double> alone;
  for (const auto& r : s.readings)
    if (r.kind == "bandwidth" && r.alone && s.live(r.src) && s.live(r.dst)) {
      auto& v = alone[{r.src, r.dst}];
      v = std::max(v, r.value);
    }
  for (const auto& [p, v] : alone) t.measured.push_back(p);
  if (n <= kDenseMaxHosts) {
    t.bandwidthMbps = SquareMatrix<std::optional<double>>(n);
    t.latencyUs = SquareMatrix<std::optional<LatencyStats>>(n);
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) {
        if (a == b || !s.live(static_cast<int>(a)) || !s.live(static_cast<int>(b))) continue;
        auto it = alone.find({static_cast<int>(a), static_cast<int>(b)});
        t.bandwidthMbps.at(a, b) =
            it != alone.end() ? it->second : t.pathMbps(static_cast<int>(a), static_cast<int>(b));
      }
    // Latency (round trips, as measured): what was measured, else twice the tiers' one-way sum.
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) {
        if (a == b || !s.live(static_cast<int>(a)) || !s.live(static_cast<int>(b))) continue;
        double rtt = 2 * t.pathLatencyUs(static_cast<int>(a), static_cast<int>(b)).value_or(0);
        t.latencyUs.at(a, b) = LatencyStats{rtt, rtt, rtt, rtt};
      }
    for (const auto& r : s.readings)
      if (r.kind == "latency") {
        auto a = static_cast<size_t>(r.src), b = static_cast<size_t>(r.dst);
        LatencyStats v{r.value, r.value, r.value, r.value};
        t.latencyUs.at(a, b) = v;
        t.latencyUs.at(b, a) = v;
      }
  }
  return t;
}

std::vector<std::string> degradedHosts(const Topology& t) {
  std::vector<std::string> out;
  if (!t.links) return out;
  const auto& hl = t.links->hosts;
  std::vector<double> rates;
  for (const auto& l : hl)
    if (l.outMbps > 0 && l.inMbps > 0) rates.push_back(std::min(l.outMbps, l.inMbps));
  if (rates.size() < 3) return out;
  const double mid = median(rates);
  for (size_t h = 0; h < hl.size() && h < t.hosts.size(); ++h) {
    double r = std::min(hl[h].outMbps, hl[h].inMbps);
    if (hl[h].outMbps > 0 && hl[h].inMbps > 0 && r < kDegradedHostRatio * mid)
      out.push_back(fmt::format("{} {:.1f} Mbit/s (hosts' median {:.0f})", t.hosts[h].name, r, mid));
  }
  return out;
}

// ---- the round ------------------------------------------------------------------------------

RoundOutcome runRound(Fleet& fleet, const RoundOptions& opts, Deadline d,
                      const RoundProgressFn& progress, const std::atomic<bool>* cancel) {
  RoundState s(fleet, opts, d, progress, cancel);
  RoundOutcome res;
  double t0 = fleet.cost().seconds;
  double mark = t0;
  auto endPhase = [&](const std::string& name) {
    double now = fleet.cost().seconds;
    res.phaseSeconds[name] = now - mark;
    mark = now;
  };
  checkLiveness(s);
  endPhase("liveness");
  res.structure = findStructure(s);
  endPhase("structure");
  TopologyLinks links;
  if (opts.bandwidthEnabled && !s.stopped()) links = measureLinks(s, res.structure);
  endPhase("links");
  res.topology = assembleTopology(s, res.structure, links);
  res.degradedHosts = degradedHosts(res.topology);
  if (!res.degradedHosts.empty())
    RANKMAP_WARN(Probe, "probe round: degraded host links: {}", fmt::join(res.degradedHosts, ", "));
  res.failures = s.failures;
  res.deadHosts = s.dropped;
  res.readings = std::move(s.readings);
  res.cost = fleet.cost();
  res.cancelled = s.cancelled();
  s.report({"done", 1, 1, ""});
  return res;
}

}  // namespace rankmap::probe
