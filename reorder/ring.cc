#include "reorder/ring.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "reorder/numeric.h"

namespace rankmap::reorder {
namespace {

constexpr size_t kNeighbours = 8;
constexpr int kMaxPasses = 50;
constexpr double kRelImprove = 1e-9;

// The maximum of per-link values, with the number of links at it: O(1) updates, and a rescan
// only when the last link at the maximum goes below it.
class MaxTracker {
 public:
  explicit MaxTracker(size_t n) : v_(n, 0.0) {}
  void set(size_t i, double x) {
    double old = v_[i];
    v_[i] = x;
    if (x > max_) {
      max_ = x;
      count_ = 1;
    } else if (x == max_) {
      if (old != max_) ++count_;
    } else if (old == max_ && --count_ == 0) {
      rescan();
    }
  }
  double max() const { return max_; }

 private:
  void rescan() {
    max_ = 0;
    count_ = 0;
    for (double x : v_) {
      if (x > max_) {
        max_ = x;
        count_ = 1;
      } else if (x == max_ && x > 0) {
        ++count_;
      }
    }
  }
  std::vector<double> v_;
  double max_ = 0;
  size_t count_ = 0;
};

// Crossings per link and the inverse rates that bound a ring's slowest flow. rho (1/Mbit/s) is
// the largest of: flows per direction / capacity over links, 1 / measured cap over edges, and
// 1 / intra-host rate when hosts run several ranks.
class RingState {
 public:
  RingState(const NetworkModel& net, const RingParams& p)
      : net_(net), cross_(net.links(), 0), links_(net.links()) {
    size_t n = net.n;
    size_t k = static_cast<size_t>(p.ranksPerHost);
    world_ = n * k;
    scale_ = world_ > 1 ? 2.0 * (world_ - 1) / world_ : 0.0;
    bits_ = 8.0 * static_cast<double>(p.bytes);
    intraHops_ = n >= 2 ? n * (k - 1) : (k > 1 ? k : 0);
    constLatency_ = intraHops_ * p.intraHostLatencyUs + world_ * p.stepOverheadUs;
    floorRho_ = k > 1 ? 1.0 / p.intraHostMbps : 0.0;
    lowerRho_ = floorRho_;
    if (n >= 2) lowerRho_ = std::max(lowerRho_, 1.0 / net.ringBoundMbps());
  }

  // While `to` is set, edge() appends (link, load before the change) for each link it changes
  // (a link may appear more than once; its first entry has its load before all of them).
  void record(std::vector<std::pair<size_t, double>>* to) { record_ = to; }
  void edge(int a, int b, int sign) {
    net_.forEachLink(a, b, [&](size_t link, bool) {
      if (record_) record_->emplace_back(link, load(link));
      int now = cross_[link] + sign;
      cross_[link] = now;
      links_.set(link, ratio(link, now));
    });
    double cap = net_.capMbps(a, b);
    if (std::isfinite(cap)) {
      if (sign > 0)
        caps_.insert(1.0 / cap);
      else
        caps_.erase(caps_.find(1.0 / cap));
    }
  }
  double rho() const {
    double r = floorRho_;
    r = std::max(r, links_.max());
    if (!caps_.empty()) r = std::max(r, *caps_.rbegin());
    return r;
  }
  double lowerRho() const { return lowerRho_; }
  double objective(double networkLatency, double rho) const {
    return scale_ * (networkLatency + constLatency_ + bits_ * rho);
  }
  double constLatency() const { return constLatency_; }
  // The inverse rates of the hops between ranks of one host, summed.
  double intraHopsInverseRate() const { return static_cast<double>(intraHops_) * floorRho_; }
  // A link's load: flows per direction over capacity.
  double load(size_t link) const { return ratio(link, cross_[link]); }
  // The noise of a difference in objective (see ringNoiseUs): `tol` of the ring time resting on
  // `latencyUs` of hops that differ, and on the bottleneck term when the bottleneck links differ.
  double noiseUs(double latencyUs, double rhoA, double rhoB, bool sameBottleneck,
                 double tol) const {
    double bw = sameBottleneck ? std::abs(rhoA - rhoB) : rhoA + rhoB;
    return scale_ * tol * (latencyUs + bits_ * bw);
  }

 private:
  double ratio(size_t link, int crossings) const { return 0.5 * crossings / net_.linkMbps(link); }
  const NetworkModel& net_;
  std::vector<int> cross_;
  MaxTracker links_;
  std::multiset<double> caps_;
  std::vector<std::pair<size_t, double>>* record_ = nullptr;
  size_t world_ = 0, intraHops_ = 0;
  double scale_ = 0, bits_ = 0, constLatency_ = 0, floorRho_ = 0, lowerRho_ = 0;
};

double lat(const NetworkModel& net, int a, int b) { return net.latencyUs(a, b); }

// A hop's own load: its one flow per direction over the measured cap of the pair, 0 uncapped.
double capLoad(const NetworkModel& net, int a, int b) {
  double cap = net.capMbps(a, b);
  return std::isfinite(cap) ? 1.0 / cap : 0.0;
}

// Leximin order of two multisets of loads of equal size: -1 when `a` is lower (its largest
// value where the two differ is smaller), 0 equal, 1 higher. Sorts both.
int leximin(std::vector<double>& a, std::vector<double>& b) {
  RANKMAP_ASSERT(a.size() == b.size());
  std::sort(a.begin(), a.end(), std::greater<>());
  std::sort(b.begin(), b.end(), std::greater<>());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

// `ring` loaded into `st`: every link's load and every hop's cap load, and the bottleneck.
struct Loaded {
  std::vector<double> loads;
  double rho = 0;
};
Loaded loadRing(const NetworkModel& net, const std::vector<int>& ring, RingState& st) {
  Loaded out;
  size_t n = ring.size();
  if (n >= 2)
    for (size_t i = 0; i < n; ++i) st.edge(ring[i], ring[(i + 1) % n], +1);
  for (size_t k = 0; k < net.links(); ++k) out.loads.push_back(st.load(k));
  for (size_t i = 0; i < n && n >= 2; ++i)
    out.loads.push_back(capLoad(net, ring[i], ring[(i + 1) % n]));
  out.rho = st.rho();
  return out;
}

// Each hop's inverse rate (1/(Mbit/s)) with `ring` loaded into `st`: its most loaded link, or
// its measured cap when lower.
std::vector<double> hopLoads(const NetworkModel& net, const std::vector<int>& ring,
                             const RingState& st) {
  std::vector<double> out;
  const size_t n = ring.size();
  if (n < 2) return out;
  for (size_t i = 0; i < n; ++i) {
    const int a = ring[i], b = ring[(i + 1) % n];
    double hop = capLoad(net, a, b);
    net.forEachLink(a, b, [&](size_t link, bool) { hop = std::max(hop, st.load(link)); });
    out.push_back(hop);
  }
  return out;
}

// Each host's nearest candidates: same innermost group first, then by latency, then by index.
std::vector<std::vector<int>> neighbourLists(const NetworkModel& net, size_t k) {
  size_t n = net.n;
  std::vector<std::vector<int>> hostsOf(net.switches());
  for (size_t h = 0; h < n; ++h)
    for (size_t l = 0; l < net.levels; ++l) hostsOf[net.switchAt(h, l)].push_back(h);
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::vector<int>> out(n);
  for (size_t a = 0; a < n; ++a) {
    const std::vector<int>* pool = &all;
    for (size_t l = 0; l < net.levels; ++l) {
      const auto& members = hostsOf[net.switchAt(a, l)];
      if (members.size() > k) {
        pool = &members;
        break;
      }
    }
    std::vector<int> cand;
    for (int c : *pool)
      if (c != static_cast<int>(a)) cand.push_back(c);
    auto key = [&](int c) { return std::make_tuple(net.lcaLevel(a, c), lat(net, a, c), c); };
    size_t take = std::min(k, cand.size());
    std::partial_sort(cand.begin(), cand.begin() + take, cand.end(),
                      [&](int x, int y) { return key(x) < key(y); });
    cand.resize(take);
    out[a] = std::move(cand);
  }
  return out;
}

}  // namespace

double ringAllreduceUs(const RingCost& cost, size_t world, double bytes) {
  if (world < 2) return 0;
  const double w = static_cast<double>(world);
  const double chunk = bytes / w;
  const bool moves = std::isfinite(cost.bottleneckMbps);
  const double slowest = moves ? chunk / bytesPerUs(cost.bottleneckMbps) : 0;
  // The chunk's time over all hops, sum_h chunk / B_h: no hop is slower than the bottleneck, so
  // at most w times the slowest (a caller may have set a measured bottleneck), and that when
  // the sum is not known.
  const double allHops = cost.inverseRateSum > 0
                             ? std::min(chunk / bytesPerUs(1.0 / cost.inverseRateSum), w * slowest)
                             : w * slowest;
  const double meanHop = (cost.latencyUs + allHops) / w;
  return 2.0 * (w - 1) * std::max(slowest, meanHop);
}

RingCost evaluateRing(const NetworkModel& net, const std::vector<int>& ring,
                      const RingParams& params) {
  RANKMAP_ASSERT(ring.size() == net.n);
  RingState st(net, params);
  double l = 0;
  size_t n = ring.size();
  if (n >= 2)
    for (size_t i = 0; i < n; ++i) {
      st.edge(ring[i], ring[(i + 1) % n], +1);
      l += lat(net, ring[i], ring[(i + 1) % n]);
    }
  RingCost c;
  c.latencyUs = l + st.constLatency();
  double rho = st.rho();
  c.bottleneckMbps = rho > 0 ? 1.0 / rho : kInf;
  // The hops between ranks of one host at the intra-host rate.
  double inverse = st.intraHopsInverseRate();
  for (double hop : hopLoads(net, ring, st)) inverse += hop;
  c.inverseRateSum = inverse;
  c.objectiveUs = st.objective(l, rho);
  return c;
}

std::vector<double> ringHopMbps(const NetworkModel& net, const std::vector<int>& ring,
                                const RingParams& params) {
  RANKMAP_ASSERT(ring.size() == net.n);
  RingState st(net, params);
  loadRing(net, ring, st);
  std::vector<double> out = hopLoads(net, ring, st);
  for (double& x : out) x = x > 0 ? 1.0 / x : kInf;
  return out;
}

int compareLinkLoads(const NetworkModel& net, const std::vector<int>& a,
                     const std::vector<int>& b) {
  RANKMAP_ASSERT(a.size() == net.n && b.size() == net.n);
  RingParams p;
  RingState sa(net, p), sb(net, p);
  Loaded la = loadRing(net, a, sa), lb = loadRing(net, b, sb);
  return leximin(la.loads, lb.loads);
}

double ringNoiseUs(const NetworkModel& net, const std::vector<int>& a, const std::vector<int>& b,
                   const RingParams& params) {
  RANKMAP_ASSERT(a.size() == net.n && b.size() == net.n);
  size_t n = net.n;
  if (n < 2) return 0;
  RingState sa(net, params), sb(net, params);
  Loaded la = loadRing(net, a, sa), lb = loadRing(net, b, sb);
  // The same bottleneck: one link at the top of both rings (or equal bottlenecks); then the
  // difference of the bandwidth terms rests on one capacity, and only its own size is
  // uncertain. A capped hop on top counts as a different bottleneck (the larger noise).
  bool same = la.rho == lb.rho;
  for (size_t k = 0; k < net.links() && !same; ++k)
    same = sa.load(k) == la.rho && sb.load(k) == lb.rho;
  // Hops in one ring only.
  auto hops = [n](const std::vector<int>& r) {
    std::vector<std::pair<int, int>> e;
    for (size_t i = 0; i < n; ++i)
      e.emplace_back(std::min(r[i], r[(i + 1) % n]), std::max(r[i], r[(i + 1) % n]));
    std::sort(e.begin(), e.end());
    return e;
  };
  std::vector<std::pair<int, int>> ea = hops(a), eb = hops(b), diff;
  std::set_symmetric_difference(ea.begin(), ea.end(), eb.begin(), eb.end(),
                                std::back_inserter(diff));
  double latencyUs = 0;
  for (auto [x, y] : diff) latencyUs += lat(net, x, y);
  return sa.noiseUs(latencyUs, la.rho, lb.rho, same, params.noise);
}

std::vector<int> hierarchicalRing(const NetworkModel& net) {
  size_t n = net.n;
  std::vector<int> ring;
  if (net.levels == 0) {
    ring.resize(n);
    std::iota(ring.begin(), ring.end(), 0);
    return ring;
  }
  const auto tree = net.switchTree();
  std::function<void(int)> walk = [&](int s) {
    if (net.switchLevel[s] == 0) {
      ring.insert(ring.end(), tree.hostsOf[s].begin(), tree.hostsOf[s].end());
      return;
    }
    for (int c : tree.children[s]) walk(c);
  };
  for (int s : tree.tops) walk(s);
  RANKMAP_ASSERT(ring.size() == n);
  return ring;
}

std::vector<int> rotateToBoundary(const NetworkModel& net, const std::vector<int>& ring) {
  size_t n = ring.size();
  if (n < 2) return ring;
  size_t best = 0;
  size_t bestLevel = 0;
  for (size_t k = 0; k < n; ++k) {
    size_t lv = net.lcaLevel(ring[(k + n - 1) % n], ring[k]);
    if (k == 0 || lv > bestLevel || (lv == bestLevel && ring[k] < ring[best])) {
      best = k;
      bestLevel = lv;
    }
  }
  std::vector<int> out(ring.begin() + best, ring.end());
  out.insert(out.end(), ring.begin(), ring.begin() + best);
  return out;
}

std::vector<int> improveRing(const NetworkModel& net, std::vector<int> ring,
                             const RingParams& params) {
  size_t n = ring.size();
  if (n < 5) return n == 4 ? exactRing(net, ring, params) : ring;
  RingState st(net, params);
  std::vector<int> pos(n);
  double l = 0;
  for (size_t i = 0; i < n; ++i) {
    pos[ring[i]] = static_cast<int>(i);
    st.edge(ring[i], ring[(i + 1) % n], +1);
    l += lat(net, ring[i], ring[(i + 1) % n]);
  }
  double rho = st.rho();
  double obj = st.objective(l, rho);
  double best = obj;  // the fastest ring seen: tidying moves stay within the noise of it
  const double tol = params.noise;
  auto nb = neighbourLists(net, std::min(kNeighbours, n - 1));
  // Position i modulo n (i may be negative); the common cases without a division.
  auto wrap = [n](long i) -> size_t {
    const long m = static_cast<long>(n);
    if (i >= m) {
      i -= m;
      if (i >= m) i %= m;
    } else if (i < 0) {
      i += m;
      if (i < 0) {
        i %= m;
        if (i < 0) i += m;
      }
    }
    return static_cast<size_t>(i);
  };
  auto at = [&](long i) { return ring[wrap(i)]; };

  // Tries replacing `out` edges by `in` edges; keeps the change in `st` if it is faster beyond
  // its noise, or within its noise and leximin-better (see ring.h). Scratch space is reused.
  const bool hasCaps = net.caps != nullptr;
  std::vector<std::pair<size_t, int>> delta;       // (link, crossings added), per path crossed
  std::vector<std::pair<size_t, double>> changes;  // (link, load before), as st records them
  std::vector<double> before, after;
  auto attempt = [&](std::initializer_list<std::pair<int, int>> out,
                     std::initializer_list<std::pair<int, int>> in) {
    double dl = 0, changed = 0;
    for (auto [a, b] : out) {
      double x = lat(net, a, b);
      dl -= x;
      changed += x;
    }
    for (auto [a, b] : in) {
      double x = lat(net, a, b);
      dl += x;
      changed += x;
    }
    const double eps = obj * kRelImprove;
    // Even the best bottleneck any ring can have bounds what the move can reach: a gain beyond
    // the noise of the hops alone (the least noise it can have), or a tidier ring within the
    // noise of the fastest seen; only a hop crossing an uplink or capped can make it tidier
    // (the others load host links only, which every ring loads alike).
    double floor = st.objective(l + dl, st.lowerRho());
    bool mayGain = floor < obj - st.noiseUs(changed, 0, 0, true, tol) - eps;
    if (!mayGain) {
      if (floor > best * (1 + tol) + eps) return false;
      bool mayTidy = false;
      for (auto [a, b] : out)
        mayTidy = mayTidy || (net.levels > 0 && net.switchAt(a, 0) != net.switchAt(b, 0)) ||
                  (hasCaps && capLoad(net, a, b) > 0);
      if (!mayTidy) return false;
      // The links whose crossings change, and by how much: a tidier ring needs one to lose
      // some (or a capped hop to leave).
      delta.clear();
      for (auto [a, b] : out)
        net.forEachLink(a, b, [&](size_t k, bool) { delta.push_back({k, -1}); });
      for (auto [a, b] : in)
        net.forEachLink(a, b, [&](size_t k, bool) { delta.push_back({k, +1}); });
      std::sort(delta.begin(), delta.end());
      bool loses = false;
      for (size_t i = 0; i < delta.size() && !loses;) {
        size_t k = delta[i].first;
        int sum = 0;
        for (; i < delta.size() && delta[i].first == k; ++i) sum += delta[i].second;
        loses = sum < 0;
      }
      for (auto [a, b] : out) loses = loses || (hasCaps && capLoad(net, a, b) > 0);
      if (!loses) return false;
    }
    changes.clear();
    st.record(&changes);
    for (auto [a, b] : out) st.edge(a, b, -1);
    for (auto [a, b] : in) st.edge(a, b, +1);
    st.record(nullptr);
    // Each changed link once, with its load before the move (its first record); sorted only
    // when needed.
    bool unique = false;
    auto uniqueChanges = [&] {
      if (unique) return;
      std::stable_sort(changes.begin(), changes.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      changes.erase(std::unique(changes.begin(), changes.end(),
                                [](const auto& x, const auto& y) { return x.first == y.first; }),
                    changes.end());
      unique = true;
    };
    double r = st.rho();
    double o = st.objective(l + dl, r);
    bool same = r == rho;
    if (!same) uniqueChanges();
    for (size_t i = 0; i < changes.size() && !same; ++i)
      same = changes[i].second == rho && st.load(changes[i].first) == r;
    double noise = st.noiseUs(changed, rho, r, same, tol);
    double gain = obj - o;
    bool take = gain > noise + eps;
    if (!take && gain >= -noise - eps && o <= best * (1 + tol) + eps) {
      // Leximin over what changed: the changed links' loads before and after, and the caps of
      // the hops that leave and come.
      uniqueChanges();
      before.clear();
      after.clear();
      for (auto [link, was] : changes) {
        before.push_back(was);
        after.push_back(st.load(link));
      }
      for (auto [a, b] : out) before.push_back(capLoad(net, a, b));
      for (auto [a, b] : in) after.push_back(capLoad(net, a, b));
      take = leximin(after, before) < 0;
    }
    if (take) {
      l += dl;
      rho = r;
      obj = o;
      best = std::min(best, o);
      return true;
    }
    for (auto [a, b] : in) st.edge(a, b, -1);
    for (auto [a, b] : out) st.edge(a, b, +1);
    return false;
  };
  auto reindex = [&]() {
    for (size_t i = 0; i < n; ++i) pos[ring[i]] = static_cast<int>(i);
  };
  // Reverses positions i+1 .. j (cyclic), or the complement when that is shorter.
  auto reverse = [&](long i, long j) {
    long len = ((j - i) % long(n) + long(n)) % long(n);
    long s = i + 1, e = j;
    if (len > long(n) / 2) {
      s = j + 1;
      e = i + long(n);
      len = long(n) - len;
    }
    for (long k = 0; k < len / 2; ++k) {
      size_t x = wrap(s + k);
      size_t y = wrap(e - k);
      std::swap(ring[x], ring[y]);
      pos[ring[x]] = static_cast<int>(x);
      pos[ring[y]] = static_cast<int>(y);
    }
  };

  // Don't-look bits: a queue of hosts whose surroundings changed; every host starts in it.
  std::deque<int> queue;
  std::vector<char> queued(n, 1);
  for (size_t h = 0; h < n; ++h) queue.push_back(static_cast<int>(h));
  auto wake = [&](std::initializer_list<int> hosts) {
    for (int h : hosts)
      if (!queued[h]) {
        queued[h] = 1;
        queue.push_back(h);
      }
  };
  size_t budget = static_cast<size_t>(kMaxPasses) * n;
  while (!queue.empty() && budget-- > 0) {
    int a = queue.front();
    queue.pop_front();
    queued[a] = 0;
    for (int c : nb[a]) {
      // 2-opt, two ways of making a and c adjacent.
      for (int variant = 0; variant < 2; ++variant) {
        long i = pos[a], j = pos[c];
        if (variant == 1) {
          i = pos[at(i - 1)];
          j = pos[at(j - 1)];
        }
        int x = at(i), xn = at(i + 1), y = at(j), yn = at(j + 1);
        if (x == y || xn == y || yn == x) continue;
        if (attempt({{x, xn}, {y, yn}}, {{x, y}, {xn, yn}})) {
          reverse(i, j);
          wake({x, xn, y, yn});
        }
      }
      // Or-opt: move the segment of 1..3 hosts starting at a next to c.
      for (long len = 1; len <= 3 && len + 2 <= long(n); ++len) {
        long i = pos[a];
        bool inside = false;
        for (long k = 0; k < len; ++k) inside = inside || at(i + k) == c;
        int p = at(i - 1), s0 = at(i), s1 = at(i + len - 1), q = at(i + len);
        if (inside || p == c) continue;
        int cn = at(pos[c] + 1), cp = at(pos[c] - 1);
        bool cnInside = false, cpInside = false;
        for (long k = 0; k < len; ++k) {
          cnInside = cnInside || at(i + k) == cn;
          cpInside = cpInside || at(i + k) == cp;
        }
        bool moved = false;
        for (int side = 0; side < 2 && !moved; ++side) {
          if (side == 0) {  // c, s0..s1, cn
            if (cnInside) continue;
            moved = attempt({{p, s0}, {s1, q}, {c, cn}}, {{p, q}, {c, s0}, {s1, cn}});
          } else {  // cp, s1..s0, c
            if (cpInside) continue;
            moved = attempt({{p, s0}, {s1, q}, {cp, c}}, {{p, q}, {cp, s1}, {s0, c}});
          }
          if (!moved) continue;
          std::vector<int> seg;
          for (long k = 0; k < len; ++k) seg.push_back(at(i + k));
          if (side == 1) std::reverse(seg.begin(), seg.end());
          // The rest of the ring, from the host after the segment round to the one before it.
          std::vector<int> rest;
          rest.reserve(n);
          size_t from = wrap(i + len), count = n - static_cast<size_t>(len);
          size_t first = std::min(count, n - from);
          rest.insert(rest.end(), ring.begin() + from, ring.begin() + from + first);
          rest.insert(rest.end(), ring.begin(), ring.begin() + (count - first));
          int anchor = side == 0 ? c : cp;
          auto it = std::find(rest.begin(), rest.end(), anchor);
          rest.insert(it + 1, seg.begin(), seg.end());
          ring = std::move(rest);
          reindex();
          wake({p, q, s0, s1, c, cn, cp});
        }
      }
    }
  }
  return ring;
}

std::vector<int> exactRing(const NetworkModel& net, const std::vector<int>& incumbent,
                           const RingParams& params) {
  size_t n = net.n;
  if (n > kExactMaxHosts)
    throw InvalidInput(
        fmt::format("exact ring search: {} hosts, at most {} supported", n, kExactMaxHosts));
  RANKMAP_ASSERT(incumbent.size() == n);
  if (n <= 3) return incumbent;
  const double incumbentUs = evaluateRing(net, incumbent, params).objectiveUs;
  double best = incumbentUs;
  std::vector<int> bestRing = incumbent;
  // Candidates nearest first, so good rings are found early and prune the rest.
  std::vector<std::vector<int>> cand(n);
  double minLat = kInf;
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b)
      if (a != b) {
        cand[a].push_back(b);
        minLat = std::min(minLat, lat(net, a, b));
      }
    std::sort(cand[a].begin(), cand[a].end(), [&](int x, int y) {
      return std::make_tuple(lat(net, a, x), x) < std::make_tuple(lat(net, a, y), y);
    });
  }
  RingState st(net, params);
  std::vector<int> path = {0};
  std::vector<char> used(n, 0);
  used[0] = 1;
  std::function<void(double)> dfs = [&](double l) {
    int last = path.back();
    size_t remaining = n - path.size();  // edges still to add, including the closing one
    for (int c : cand[last]) {
      if (used[c]) continue;
      double l2 = l + lat(net, last, c);
      st.edge(last, c, +1);
      if (path.size() + 1 == n) {
        st.edge(c, 0, +1);
        double o = st.objective(l2 + lat(net, c, 0), st.rho());
        if (o < best * (1 - 1e-12)) {
          best = o;
          bestRing = path;
          bestRing.push_back(c);
        }
        st.edge(c, 0, -1);
      } else {
        double bound = st.objective(l2 + remaining * minLat, std::max(st.rho(), st.lowerRho()));
        if (bound < best * (1 - 1e-12)) {
          used[c] = 1;
          path.push_back(c);
          dfs(l2);
          path.pop_back();
          used[c] = 0;
        }
      }
      st.edge(last, c, -1);
    }
  };
  dfs(0);
  // The minimum replaces the incumbent only when it is faster beyond the noise of what differs.
  if (incumbentUs - best <= ringNoiseUs(net, incumbent, bestRing, params)) return incumbent;
  return bestRing;
}

}  // namespace rankmap::reorder
