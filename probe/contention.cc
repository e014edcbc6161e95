#include "probe/contention.h"

#include "probe/partition.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "common/error.h"
#include "common/maxmin.h"
#include "probe/partition.h"

namespace rankmap::probe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kFloorMbps = 1.0;
// A flow below this fraction of its host rates was slowed by something else.
constexpr double kSlowFraction = 0.85;
// An aggregate within this fraction of an uplink's largest one counts as "at capacity".
constexpr double kAtCapacity = 0.9;

// Renumbers groups 0.. in order of their first host.
std::vector<int> normalize(const std::vector<int>& g) {
  std::map<int, int> ids;
  std::vector<int> out(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    auto it = ids.find(g[i]);
    if (it == ids.end()) it = ids.emplace(g[i], static_cast<int>(ids.size())).first;
    out[i] = it->second;
  }
  return out;
}

class Fitter {
 public:
  Fitter(int n, const std::vector<ObservedTrial>& trials) : n_(n), trials_(trials) {
    hostCapacities(n, trials, hostOut_, hostIn_);
    std::vector<double> sums, sat;
    std::vector<char> slowAny;
    double maxSum = 0;
    for (const auto& t : trials_) {
      std::vector<HostPair> f;
      std::vector<char> slow;
      double sum = 0;
      bool any = false;
      for (const auto& x : t) {
        f.emplace_back(x.src, x.dst);
        double cap =
            std::min(hostOut_[static_cast<size_t>(x.src)], hostIn_[static_cast<size_t>(x.dst)]);
        slow.push_back(x.mbps < kSlowFraction * cap);
        any = any || slow.back();
        sum += x.mbps;
      }
      flows_.push_back(std::move(f));
      slow_.push_back(std::move(slow));
      flowCount_ += t.size();
      sums.push_back(sum);
      slowAny.push_back(any);
      maxSum = std::max(maxSum, sum);
    }
    // The total link: the median aggregate of the trials that were near the largest aggregate
    // while something slowed down; unlimited when no trial shows such a ceiling.
    for (size_t t = 0; t < sums.size(); ++t)
      if (slowAny[t] && sums[t] >= kAtCapacity * maxSum) sat.push_back(sums[t]);
    if (!sat.empty()) {
      std::nth_element(sat.begin(), sat.begin() + static_cast<long>(sat.size() / 2), sat.end());
      total_ = sat[sat.size() / 2];
    }
  }

  size_t flowCount() const { return flowCount_; }
  const std::vector<double>& hostOut() const { return hostOut_; }
  const std::vector<double>& hostIn() const { return hostIn_; }

  // Uplink capacities for a partition: the largest aggregate seen through each uplink, or
  // unlimited when no trial shows it limiting anything (a flow through it slowed below its host
  // rate while the aggregate was at that maximum): an uplink that never saturated says nothing
  // about its capacity beyond "at least this much".
  LinkModel model(const std::vector<int>& groupOf) const {
    LinkModel m;
    m.groupOf = groupOf;
    m.hostOut = hostOut_;
    m.hostIn = hostIn_;
    auto groups = static_cast<size_t>(probe::groupCount(groupOf));
    size_t trials = trials_.size();
    // Per trial and group: aggregate out/in and whether a flow through it slowed down.
    // Flat arrays indexed [t * groups + g]; reused across calls of this thread.
    thread_local std::vector<double> sumOut, sumIn;
    thread_local std::vector<char> slowOut, slowIn;
    sumOut.assign(trials * groups, 0);
    sumIn.assign(trials * groups, 0);
    slowOut.assign(trials * groups, 0);
    slowIn.assign(trials * groups, 0);
    std::vector<double> out(groups, 0), in(groups, 0);
    for (size_t t = 0; t < trials; ++t) {
      for (size_t k = 0; k < trials_[t].size(); ++k) {
        const auto& f = trials_[t][k];
        auto gs = static_cast<size_t>(groupOf[static_cast<size_t>(f.src)]);
        auto gd = static_cast<size_t>(groupOf[static_cast<size_t>(f.dst)]);
        if (gs == gd) continue;
        sumOut[t * groups + gs] += f.mbps;
        sumIn[t * groups + gd] += f.mbps;
        if (slow_[t][k]) slowOut[t * groups + gs] = slowIn[t * groups + gd] = 1;
      }
      for (size_t g = 0; g < groups; ++g) {
        out[g] = std::max(out[g], sumOut[t * groups + g]);
        in[g] = std::max(in[g], sumIn[t * groups + g]);
      }
    }
    // The capacity is the median aggregate of the trials where the uplink was saturated (a flow
    // slowed, the aggregate near the largest): one noisy burst does not inflate it.
    m.upOut.assign(groups, kUnlimited);
    m.upIn.assign(groups, kUnlimited);
    std::vector<double> sat;
    auto median = [&] {
      std::nth_element(sat.begin(), sat.begin() + static_cast<long>(sat.size() / 2), sat.end());
      return sat[sat.size() / 2];
    };
    for (size_t g = 0; g < groups; ++g) {
      sat.clear();
      for (size_t t = 0; t < trials; ++t)
        if (slowOut[t * groups + g] && sumOut[t * groups + g] >= kAtCapacity * out[g])
          sat.push_back(sumOut[t * groups + g]);
      if (!sat.empty()) m.upOut[g] = median();
      sat.clear();
      for (size_t t = 0; t < trials; ++t)
        if (slowIn[t * groups + g] && sumIn[t * groups + g] >= kAtCapacity * in[g])
          sat.push_back(sumIn[t * groups + g]);
      if (!sat.empty()) m.upIn[g] = median();
    }
    // The total: the same rule over all flows of a trial (independent of the partition).
    m.total = total_;
    return m;
  }

  double error(const std::vector<int>& groupOf) const {
    LinkModel m = model(groupOf);
    double e = 0;
    for (size_t t = 0; t < trials_.size(); ++t) {
      auto pred = maxMinRates(m, flows_[t]);
      for (size_t k = 0; k < pred.size(); ++k) {
        double obs = std::max(trials_[t][k].mbps, kFloorMbps);
        // Relative to the larger of the two: bounded by 1, so one wild measurement (a stalled
        // host) cannot outweigh the structure that all the others show.
        double r = (pred[k] - obs) / std::max(pred[k], obs);
        e += r * r;
      }
    }
    return e;
  }

 private:
  int n_;
  const std::vector<ObservedTrial>& trials_;
  std::vector<std::vector<HostPair>> flows_;
  std::vector<std::vector<char>> slow_;  // per trial and flow: below kSlowFraction of host rates
  double total_ = kUnlimited;
  std::vector<double> hostOut_, hostIn_;
  size_t flowCount_ = 0;
};

// Components of the graph with an edge wherever `edge(i, j)`.
std::vector<int> components(int n, const std::function<bool(int, int)>& edge) {
  std::vector<int> parent(static_cast<size_t>(n));
  std::iota(parent.begin(), parent.end(), 0);
  std::function<int(int)> find = [&](int x) {
    while (parent[static_cast<size_t>(x)] != x)
      x = parent[static_cast<size_t>(x)] =
          parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  };
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (edge(i, j)) parent[static_cast<size_t>(find(i))] = find(j);
  std::vector<int> g(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) g[static_cast<size_t>(i)] = find(i);
  return normalize(g);
}

}  // namespace

void hostCapacities(int n, const std::vector<ObservedTrial>& trials, std::vector<double>& out,
                    std::vector<double>& in) {
  out.assign(static_cast<size_t>(n), 0);
  in.assign(static_cast<size_t>(n), 0);
  for (const auto& t : trials)
    for (const auto& f : t) {
      if (f.src < 0 || f.src >= n || f.dst < 0 || f.dst >= n || f.src == f.dst)
        RANKMAP_THROW(InternalError, "flow {} -> {} outside 0..{}", f.src, f.dst, n - 1);
      out[static_cast<size_t>(f.src)] = std::max(out[static_cast<size_t>(f.src)], f.mbps);
      in[static_cast<size_t>(f.dst)] = std::max(in[static_cast<size_t>(f.dst)], f.mbps);
    }
  for (auto* v : {&out, &in})
    for (auto& x : *v)
      if (x <= 0) x = kUnlimited;  // never observed: no constraint from this host
}

std::vector<double> maxMinRates(const LinkModel& m, const std::vector<HostPair>& flows) {
  // Links: host out (h), host in (n + h), group out (2n + g), group in (2n + G + g), total
  // (2n + 2G). Each flow uses 3 or 5 of them. Buffers are per thread: the fit calls this millions
  // of times.
  const size_t n = m.hostOut.size();
  const size_t groups = m.upOut.size();
  const size_t links = 2 * n + 2 * groups + 1;
  const auto totalLink = static_cast<uint32_t>(links - 1);
  thread_local std::vector<double> room;
  thread_local FlowLinks paths;
  thread_local MaxMinFiller filler;
  room.resize(links);
  for (size_t h = 0; h < n; ++h) {
    room[h] = m.hostOut[h];
    room[n + h] = m.hostIn[h];
  }
  for (size_t g = 0; g < groups; ++g) {
    room[2 * n + g] = m.upOut[g];
    room[2 * n + groups + g] = m.upIn[g];
  }
  room[totalLink] = m.total;
  paths.clear();
  for (const auto& [src, dst] : flows) {
    auto s = static_cast<size_t>(src), d = static_cast<size_t>(dst);
    paths.push(static_cast<uint32_t>(s));
    paths.push(static_cast<uint32_t>(n + d));
    paths.push(totalLink);
    auto gs = static_cast<size_t>(m.groupOf[s]), gd = static_cast<size_t>(m.groupOf[d]);
    if (gs != gd) {
      paths.push(static_cast<uint32_t>(2 * n + gs));
      paths.push(static_cast<uint32_t>(2 * n + groups + gd));
    }
    paths.endFlow();
  }
  std::vector<double> rate;
  filler.fill(room, paths, {}, rate);
  return rate;
}

std::vector<std::vector<int>> Inference::sharedGroups() const {
  std::vector<std::vector<int>> out;
  int groups = groupCount();
  for (int g = 0; g < groups; ++g) {
    std::vector<int> members;
    double demand = 0;
    for (size_t h = 0; h < model.groupOf.size(); ++h)
      if (model.groupOf[h] == g) {
        members.push_back(static_cast<int>(h));
        demand += std::isfinite(model.hostOut[h]) ? model.hostOut[h] : 0;
      }
    double cap = uplinkCapacity(g);
    if (members.size() >= 2 && cap > 0 && cap < 0.95 * demand) out.push_back(std::move(members));
  }
  return out;
}

double Inference::uplinkCapacity(int group) const {
  double a = model.upOut.at(static_cast<size_t>(group));
  double b = model.upIn.at(static_cast<size_t>(group));
  double c = std::min(a, b);
  if (!std::isfinite(c)) c = std::isfinite(a) ? a : (std::isfinite(b) ? b : 0);
  return c;
}

double Inference::confidence() const {
  if (baselineError <= 0) return 0;
  return std::clamp((baselineError - error) / baselineError, 0.0, 1.0);
}

int Inference::groupCount() const { return probe::groupCount(model.groupOf); }

Inference inferGroups(int n, const std::vector<ObservedTrial>& trials, const InferOptions& opts) {
  Fitter fit(n, trials);
  auto start = Clock::now();
  auto outOfTime = [&] { return Clock::now() - start > opts.timeBudget; };
  double minGain = opts.minGainPerFlow * static_cast<double>(std::max<size_t>(fit.flowCount(), 1));

  std::vector<int> singletons(static_cast<size_t>(n));
  std::iota(singletons.begin(), singletons.end(), 0);

  // Seeds.
  std::vector<std::vector<int>> seeds = {singletons};
  // Full-rate components: pairs that reached nearly their host rate in some direction are
  // likely behind the same uplink when uplinks are slower than hosts.
  std::vector<std::vector<double>> best(static_cast<size_t>(n),
                                        std::vector<double>(static_cast<size_t>(n), 0));
  for (const auto& t : trials)
    for (const auto& f : t) {
      double cap = std::min(fit.hostOut()[static_cast<size_t>(f.src)],
                            fit.hostIn()[static_cast<size_t>(f.dst)]);
      double frac = std::isfinite(cap) && cap > 0 ? f.mbps / cap : 0;
      auto& b = best[static_cast<size_t>(std::min(f.src, f.dst))]
                    [static_cast<size_t>(std::max(f.src, f.dst))];
      b = std::max(b, frac);
    }
  for (double thr : {0.9, 0.75, 0.6})
    seeds.push_back(components(n, [&](int i, int j) {
      return best[static_cast<size_t>(i)][static_cast<size_t>(j)] >= thr;
    }));
  // Constrained agglomeration: a pair whose flow ever slowed down well below its host rates
  // crossed a saturated uplink, so the two hosts are in different groups ("cannot link"); a
  // pair at full rate in a trial where other flows slowed is evidence for the same group.
  // Groups are grown from the strongest evidence, never across a cannot-link.
  for (double slowThr : {0.6, 0.72, opts.slowFraction}) {
    std::vector<std::vector<char>> slowed(static_cast<size_t>(n),
                                          std::vector<char>(static_cast<size_t>(n), 0));
    std::vector<std::vector<int>> full(static_cast<size_t>(n),
                                       std::vector<int>(static_cast<size_t>(n), 0));
    for (const auto& t : trials) {
      bool informative = false;
      for (const auto& f : t) {
        double cap = std::min(fit.hostOut()[static_cast<size_t>(f.src)],
                              fit.hostIn()[static_cast<size_t>(f.dst)]);
        if (std::isfinite(cap) && f.mbps < slowThr * cap) {
          informative = true;
          slowed[static_cast<size_t>(f.src)][static_cast<size_t>(f.dst)] = 1;
          slowed[static_cast<size_t>(f.dst)][static_cast<size_t>(f.src)] = 1;
        }
      }
      if (!informative) continue;
      for (const auto& f : t) {
        double cap = std::min(fit.hostOut()[static_cast<size_t>(f.src)],
                              fit.hostIn()[static_cast<size_t>(f.dst)]);
        if (std::isfinite(cap) && f.mbps >= 0.9 * cap) {
          ++full[static_cast<size_t>(f.src)][static_cast<size_t>(f.dst)];
          ++full[static_cast<size_t>(f.dst)][static_cast<size_t>(f.src)];
        }
      }
    }
    std::vector<std::tuple<int, int, int>> evidence;  // (-score, a, b): strongest first
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        if (!slowed[static_cast<size_t>(a)][static_cast<size_t>(b)] &&
            full[static_cast<size_t>(a)][static_cast<size_t>(b)] > 0)
          evidence.emplace_back(-full[static_cast<size_t>(a)][static_cast<size_t>(b)], a, b);
    std::sort(evidence.begin(), evidence.end());
    std::vector<int> group(static_cast<size_t>(n));
    std::iota(group.begin(), group.end(), 0);
    for (auto [score, a, b] : evidence) {
      int ga = group[static_cast<size_t>(a)], gb = group[static_cast<size_t>(b)];
      if (ga == gb) continue;
      bool conflict = false;
      for (int x = 0; x < n && !conflict; ++x)
        for (int y = 0; y < n && !conflict; ++y)
          conflict = group[static_cast<size_t>(x)] == ga && group[static_cast<size_t>(y)] == gb &&
                     slowed[static_cast<size_t>(x)][static_cast<size_t>(y)];
      if (conflict) continue;
      for (auto& g : group)
        if (g == gb) g = ga;
    }
    seeds.push_back(normalize(group));
    // Colouring of the cannot-link graph (DSatur, fewest colours greedily): exact for two
    // groups once the cannot-links connect every host, a good start for more.
    std::vector<int> colour(static_cast<size_t>(n), -1);
    for (int step = 0; step < n; ++step) {
      int pick = -1;
      size_t pickSat = 0, pickDeg = 0;
      for (int v = 0; v < n; ++v) {
        if (colour[static_cast<size_t>(v)] >= 0) continue;
        std::set<int> sat;
        size_t deg = 0;
        for (int u = 0; u < n; ++u)
          if (slowed[static_cast<size_t>(v)][static_cast<size_t>(u)]) {
            ++deg;
            if (colour[static_cast<size_t>(u)] >= 0) sat.insert(colour[static_cast<size_t>(u)]);
          }
        if (pick < 0 || sat.size() > pickSat || (sat.size() == pickSat && deg > pickDeg)) {
          pick = v;
          pickSat = sat.size();
          pickDeg = deg;
        }
      }
      std::set<int> used;
      for (int u = 0; u < n; ++u)
        if (slowed[static_cast<size_t>(pick)][static_cast<size_t>(u)] &&
            colour[static_cast<size_t>(u)] >= 0)
          used.insert(colour[static_cast<size_t>(u)]);
      int c = 0;
      while (used.count(c)) ++c;
      colour[static_cast<size_t>(pick)] = c;
    }
    seeds.push_back(normalize(colour));
  }

  // Deduplicate seeds.
  std::set<std::vector<int>> unique;
  std::vector<std::vector<int>> todo;
  for (auto& s : seeds)
    if (unique.insert(s).second) todo.push_back(s);

  // Every partition with two of part's groups merged: the best one replaces (bestPart,
  // bestErr) if its error is lower.
  auto tryMerges = [&](const std::vector<int>& part, double& bestErr, std::vector<int>& bestPart) {
    int groups = probe::groupCount(part);
    for (int a = 0; a < groups; ++a)
      for (int b = a + 1; b < groups; ++b) {
        auto cand = part;
        for (auto& g : cand)
          if (g == b) g = a;
        cand = normalize(cand);
        double e = fit.error(cand);
        if (e < bestErr) {
          bestErr = e;
          bestPart = std::move(cand);
        }
      }
  };

  double baseline = fit.error(singletons);
  std::vector<int> bestPart;
  double bestErr = kUnlimited;
  bool search = n <= kMaxSearchHosts;
  for (auto part : todo) {
    double err = fit.error(part);
    // Local search: the best single move (one host to another group or alone, or two groups
    // merged) while it gains more than the noise allowance.
    while (search && !outOfTime()) {
      int groups = probe::groupCount(part);
      double moveErr = err;
      std::vector<int> movePart;
      for (int h = 0; h < n; ++h) {
        int from = part[static_cast<size_t>(h)];
        for (int to = 0; to <= groups; ++to) {
          if (to == from) continue;
          auto cand = part;
          cand[static_cast<size_t>(h)] = to;  // `groups` = a new group of its own
          cand = normalize(cand);
          double e = fit.error(cand);
          if (e < moveErr) {
            moveErr = e;
            movePart = std::move(cand);
          }
        }
      }
      tryMerges(part, moveErr, movePart);
      if (movePart.empty() || err - moveErr <= minGain) break;
      part = std::move(movePart);
      err = moveErr;
    }
    // Occam: merge groups as long as the fit stays within the noise allowance. Groups whose
    // mutual flows never slowed down are indistinguishable from one group, and claiming an
    // uplink between them that nothing showed would invent structure.
    for (bool merged = true; merged && !outOfTime();) {
      merged = false;
      double mergeErr = kUnlimited;
      std::vector<int> mergePart;
      tryMerges(part, mergeErr, mergePart);
      if (!mergePart.empty() && mergeErr <= err + minGain) {
        part = std::move(mergePart);
        err = mergeErr;
        merged = true;
      }
    }
    // The best fit wins; fits within the noise allowance of each other are told apart by the
    // number of groups (fewer: simpler).
    bool better = bestPart.empty() || err < bestErr - 0.5 * minGain;
    bool tie = std::fabs(err - bestErr) <= 0.5 * minGain &&
               probe::groupCount(part) < probe::groupCount(bestPart);
    if (better || tie) {
      bestErr = err;
      bestPart = part;
    }
  }

  Inference inf;
  inf.model = fit.model(bestPart);
  inf.error = bestErr;
  inf.baselineError = baseline;
  inf.flows = fit.flowCount();
  return inf;
}

double partitionError(int n, const std::vector<ObservedTrial>& trials,
                      const std::vector<int>& groupOf) {
  if (static_cast<int>(groupOf.size()) != n)
    RANKMAP_THROW(InternalError, "partition of {} hosts for {}", groupOf.size(), n);
  return Fitter(n, trials).error(normalize(groupOf));
}

}  // namespace rankmap::probe
