#include "probe/schedule.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "common/error.h"

namespace rankmap::probe {

std::vector<Round> roundRobin(int n) {
  if (n < 0) RANKMAP_THROW(InvalidInput, "roundRobin: {} hosts", n);
  std::vector<Round> rounds;
  if (n < 2) return rounds;
  // Circle method on an even number of seats; with n odd, seat n is a bye.
  int seats = n % 2 == 0 ? n : n + 1;
  int m = seats - 1;  // seat m stays fixed, seats 0..m-1 rotate
  for (int r = 0; r < m; ++r) {
    Round round;
    auto add = [&](int a, int b) {
      if (a >= n || b >= n) return;  // the bye
      round.emplace_back(std::min(a, b), std::max(a, b));
    };
    add(r, m);
    for (int i = 1; i < seats / 2; ++i) add((r + i) % m, (r - i + m) % m);
    rounds.push_back(std::move(round));
  }
  return rounds;
}

std::vector<Round> packFlows(const std::vector<HostPair>& flows, const std::vector<int>& groupOf,
                             size_t maxPerSlot) {
  // Resources: host h -> h; outbound uplink of group g -> -(2g+1); inbound -> -(2g+2).
  auto groupOfHost = [&](int h) {
    return groupOf.empty() ? h : groupOf.at(static_cast<size_t>(h));
  };
  std::vector<std::vector<long>> res(flows.size());
  for (size_t k = 0; k < flows.size(); ++k) {
    const auto& f = flows[k];
    res[k] = {f.first, f.second};
    int gs = groupOfHost(f.first), gd = groupOfHost(f.second);
    if (gs != gd) {
      res[k].push_back(-(2L * gs + 1));
      res[k].push_back(-(2L * gd + 2));
    }
  }
  std::vector<Round> out;
  if (flows.size() > kPackLoadFirstMaxFlows) {
    // First fit in the given order: O(flows x slots), for very large sets.
    std::vector<std::set<long>> used;
    for (size_t k = 0; k < flows.size(); ++k) {
      size_t target = out.size();
      for (size_t s = 0; s < out.size(); ++s) {
        if (maxPerSlot && out[s].size() >= maxPerSlot) continue;
        bool clash = false;
        for (long r : res[k]) clash = clash || used[s].count(r);
        if (!clash) {
          target = s;
          break;
        }
      }
      if (target == out.size()) {
        out.emplace_back();
        used.emplace_back();
      }
      out[target].push_back(flows[k]);
      used[target].insert(res[k].begin(), res[k].end());
    }
    return out;
  }
  // Slot by slot, flows on the most loaded resources first: the busiest uplink (or host) is
  // used in every slot, so the slot count approaches its load, the lower bound (first fit in
  // input order left 54 slots for the 192 cross-rack flows of 16 hosts in 4 racks, where 48
  // suffice). Ties keep the input order; deterministic.
  std::map<long, size_t> load;
  for (const auto& r : res)
    for (long x : r) ++load[x];
  std::vector<size_t> left(flows.size());
  std::iota(left.begin(), left.end(), 0);
  std::vector<std::pair<size_t, size_t>> key(flows.size());  // (max load, sum of loads)
  while (!left.empty()) {
    for (size_t k : left) {
      size_t mx = 0, sum = 0;
      for (long x : res[k]) {
        mx = std::max(mx, load[x]);
        sum += load[x];
      }
      key[k] = {mx, sum};
    }
    std::stable_sort(left.begin(), left.end(), [&](size_t a, size_t b) { return key[a] > key[b]; });
    Round slot;
    std::set<long> used;
    std::vector<size_t> rest;
    for (size_t k : left) {
      bool take = !(maxPerSlot && slot.size() >= maxPerSlot);
      for (long r : res[k]) take = take && !used.count(r);
      if (!take) {
        rest.push_back(k);
        continue;
      }
      slot.push_back(flows[k]);
      used.insert(res[k].begin(), res[k].end());
      for (long x : res[k]) --load[x];
    }
    std::sort(rest.begin(), rest.end());  // back to input order for the next tie-break
    left = std::move(rest);
    out.push_back(std::move(slot));
  }
  return out;
}

std::vector<Round> shiftTrials(int n, int maxTrials) {
  std::vector<Round> trials;
  if (n < 2 || maxTrials <= 0) return trials;
  int count = std::min(n - 1, maxTrials);
  for (int k = 0; k < count; ++k) {
    // Spread the chosen shifts evenly over 1..n-1.
    int s = 1 + static_cast<int>((static_cast<long>(k) * (n - 1)) / count);
    Round t;
    for (int i = 0; i < n; ++i) t.emplace_back(i, (i + s) % n);
    trials.push_back(std::move(t));
  }
  return trials;
}

std::vector<Round> contentionTrials(int n, int count, unsigned seed) {
  std::vector<Round> trials = shiftTrials(n, count);
  if (n < 2) return trials;
  std::mt19937 rng(seed);
  while (static_cast<int>(trials.size()) < count) {
    std::vector<int> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    // Sattolo's algorithm: a uniformly random single cycle, hence a derangement.
    for (int i = n - 1; i > 0; --i) {
      std::uniform_int_distribution<int> pick(0, i - 1);
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(pick(rng))]);
    }
    Round t;
    for (int i = 0; i < n; ++i) t.emplace_back(i, perm[static_cast<size_t>(i)]);
    trials.push_back(std::move(t));
  }
  return trials;
}

}  // namespace rankmap::probe
