#include "reorder/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "common/error.h"

namespace rankmap::reorder {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A transfer between ranks of `fraction` bytes per byte of the message.
struct Xfer {
  int src = 0, dst = 0;
  double fraction = 0;
};

class Model {
 public:
  explicit Model(const CostContext& ctx)
      : ctx_(ctx), net_(*ctx.net), k_(ctx.ring.ranksPerHost), n_(ctx.order.size()) {
    RANKMAP_ASSERT(net_.n == n_);
    world_ = n_ * static_cast<size_t>(k_);
  }
  size_t world() const { return world_; }
  size_t hosts() const { return n_; }
  int k() const { return k_; }
  int hostOfRank(int r) const { return ctx_.order[r / k_]; }
  double overhead() const { return ctx_.ring.stepOverheadUs; }
  double intraPerByte() const { return 1.0 / bytesPerUs(ctx_.ring.intraHostMbps); }
  // One-way latency of a hop between ranks, with the per-hop overhead.
  double hopUs(int a, int b) const {
    int ha = hostOfRank(a), hb = hostOfRank(b);
    return (ha == hb ? ctx_.ring.intraHostLatencyUs : net_.latencyUs(ha, hb)) + overhead();
  }
  double hostHopUs(int ha, int hb) const { return net_.latencyUs(ha, hb) + overhead(); }

  // Per-byte time of concurrent transfers: network flows share max-min; intra-host copies run
  // at the intra-host rate each.
  double perByte(const std::vector<Xfer>& xs) const {
    std::vector<Flow> flows;
    double intra = 0;
    for (const auto& x : xs) {
      if (x.fraction <= 0) continue;
      int a = hostOfRank(x.src), b = hostOfRank(x.dst);
      if (a == b)
        intra = std::max(intra, x.fraction * intraPerByte());
      else
        flows.push_back({a, b, x.fraction});
    }
    return std::max(intra, completionUs(net_, flows));
  }
  const NetworkModel& net() const { return net_; }
  const CostContext& ctx() const { return ctx_; }

 private:
  const CostContext& ctx_;
  const NetworkModel& net_;
  int k_;
  size_t n_;
  size_t world_ = 0;
};

AlgoCost unavailable(Algorithm algo, std::string why) {
  AlgoCost c;
  c.algo = algo;
  c.available = false;
  c.note = std::move(why);
  return c;
}

AlgoCost ringCost(const Model& m, std::string_view coll) {
  AlgoCost c;
  c.algo = Algorithm::kRing;
  RingCost rc = evaluateRing(m.net(), m.ctx().order, m.ctx().ring);
  double w = static_cast<double>(m.world());
  double perByte = std::isfinite(rc.bottleneckMbps) ? 1.0 / bytesPerUs(rc.bottleneckMbps) : 0;
  if (coll == "allreduce") {
    c.alphaUs = 2 * (w - 1) / w * rc.latencyUs;
    c.betaUsPerByte = 2 * (w - 1) / w * perByte;
  } else if (coll == "broadcast") {  // a pipelined chain: w - 1 of the ring's w hops
    c.alphaUs = (w - 1) / w * rc.latencyUs;
    c.betaUsPerByte = perByte;
  } else {
    c.alphaUs = (w - 1) / w * rc.latencyUs;
    c.betaUsPerByte = (w - 1) / w * perByte;
  }
  return c;
}

AlgoCost treeCost(const Model& m, std::string_view coll) {
  AlgoCost c;
  c.algo = Algorithm::kTree;
  int n = static_cast<int>(m.hosts());
  int k = m.k();
  bool reduce = coll == "allreduce";
  double intraLat = (k - 1) * (m.ctx().ring.intraHostLatencyUs + m.overhead());
  double intraBeta = k > 1 ? m.intraPerByte() : 0;
  auto [t1, t2] = doubleBinaryTree(n);
  std::vector<Flow> flows;
  double depth = 0;
  for (const auto* parent : {&t1, &t2}) {
    std::vector<double> lat(n, -1);
    for (int p = 0; p < n; ++p) {
      // Latency from p to the root, memoised along the path.
      std::vector<int> chain;
      int x = p;
      while (x >= 0 && lat[x] < 0) {
        chain.push_back(x);
        x = (*parent)[x];
      }
      double base = x >= 0 ? lat[x] : 0;
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        int y = *it, up = (*parent)[y];
        base = up < 0 ? 0 : base + m.hostHopUs(m.ctx().order[y], m.ctx().order[up]);
        lat[y] = base;
      }
      depth = std::max(depth, lat[p]);
      int up = (*parent)[p];
      if (up < 0) continue;
      int a = m.ctx().order[p], b = m.ctx().order[up];
      if (reduce) flows.push_back({a, b, 0.5});
      flows.push_back({b, a, 0.5});
    }
  }
  double net = completionUs(m.net(), flows);
  c.alphaUs = (reduce ? 2 : 1) * (depth + intraLat);
  c.betaUsPerByte = std::max(net, intraBeta);
  return c;
}

AlgoCost rhdCost(const Model& m, std::string_view coll) {
  int w = static_cast<int>(m.world());
  int P = 1, steps = 0;
  while (P * 2 <= w) {
    P *= 2;
    ++steps;
  }
  int extra = w - P;
  if (coll != "allreduce" && extra != 0)
    return unavailable(Algorithm::kRhd, "needs a power-of-two rank count for " + std::string(coll));
  AlgoCost c;
  c.algo = Algorithm::kRhd;
  auto real = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  auto step = [&](const std::vector<Xfer>& xs) {
    double lat = 0;
    for (const auto& x : xs) lat = std::max(lat, m.hopUs(x.src, x.dst));
    c.alphaUs += lat;
    c.betaUsPerByte += m.perByte(xs);
  };
  std::vector<Xfer> fold, unfold;
  for (int r = 0; r < extra; ++r) {
    fold.push_back({2 * r, 2 * r + 1, 1.0});
    unfold.push_back({2 * r + 1, 2 * r, 1.0});
  }
  auto halving = [&](int i) {
    std::vector<Xfer> xs;
    int d = 1 << i;
    for (int v = 0; v < P; ++v) xs.push_back({real(v), real(v ^ d), 1.0 / (2 << i)});
    return xs;
  };
  if (!fold.empty()) step(fold);
  if (coll != "allgather")
    for (int i = 0; i < steps; ++i) step(halving(i));
  if (coll != "reducescatter")
    for (int i = steps - 1; i >= 0; --i) step(halving(i));
  if (!unfold.empty()) step(unfold);
  return c;
}

AlgoCost hierCost(const Model& m) {
  const NetworkModel& net = m.net();
  const std::vector<int>& given = m.ctx().groupOf;
  if (given.empty() && net.levels == 0)
    return unavailable(Algorithm::kHier, "no groups were found");
  int k = m.k();
  // Ranks of each innermost group, in position order; groups in order of first position.
  std::map<int, size_t> slot;
  std::vector<std::vector<int>> groups;
  for (size_t p = 0; p < m.hosts(); ++p) {
    int host = m.ctx().order[p];
    int s = given.empty() ? net.switchAt(host, 0) : given[host];
    auto [it, fresh] = slot.emplace(s, groups.size());
    if (fresh) groups.emplace_back();
    for (int l = 0; l < k; ++l) groups[it->second].push_back(static_cast<int>(p) * k + l);
  }
  size_t G = groups.size();
  if (G < 2) return unavailable(Algorithm::kHier, "a single group");
  bool anyMulti = std::any_of(groups.begin(), groups.end(),
                              [](const std::vector<int>& g) { return g.size() > 1; });
  if (!anyMulti)
    return unavailable(Algorithm::kHier,
                       "every group is a single rank (nothing to reduce inside "
                       "groups)");

  // Shares as the engine cuts them (collectives/algorithms/hier.cc): a rank's weight is its
  // host's chunk weight over the host's ranks; a member's block inside its group is its weight
  // over the group's (equal blocks when the group weighs 0); a group's share of each piece in
  // the cross-group phase is its weight over the total (by size without weights).
  const auto& cw = m.ctx().chunkWeights;
  double all = 0;
  for (double x : cw) all += x;
  const bool weighted = !cw.empty() && all > 0;
  auto weight = [&](int r) { return weighted ? cw[r / k] / k : 1.0; };
  std::vector<double> share(m.world(), 0);  // of the vector, inside the rank's group
  std::vector<double> groupShare(groups.size(), 0);
  double total = 0;
  for (size_t x = 0; x < groups.size(); ++x) {
    const auto& g = groups[x];
    double gw = 0;
    for (int r : g) gw += weight(r);
    for (int r : g) share[r] = gw > 0 ? weight(r) / gw : 1.0 / g.size();
    groupShare[x] = gw;
    total += gw;
  }
  for (auto& x : groupShare) x /= total;

  AlgoCost c;
  c.algo = Algorithm::kHier;
  // Phases 1 and 3: a ring reduce-scatter (allgather) inside every group, all concurrently,
  // kg - 1 steps each. The engine streams segments from phase to phase (every step waits only
  // for the segments it reads: collectives/algorithms/hier.cc), so the last reduce-scatter step,
  // which produces the shards, runs alongside the cross-group phase, and so does the first
  // allgather step, which forwards them: those two in-group steps share the links with phase 2.
  // The other kg - 2 steps of each in-group ring run alone. Where the in-group rings and the
  // cross-group phase have the same bottleneck (a flat network) this changes nothing: the
  // overlap only pays when phase 2 waits on uplinks the in-group steps do not use.
  std::vector<Xfer> inside, alongside;
  double insideLat = 0;
  for (const auto& g : groups) {
    size_t kg = g.size();
    if (kg < 2) continue;
    double lat = 0;
    double steps = static_cast<double>(kg - 1);
    for (size_t i = 0; i < kg; ++i) {
      int a = g[i], b = g[(i + 1) % kg];
      // Over the reduce-scatter a sends every block but the one it ends with (its own), over
      // kg - 1 steps.
      double perStep = (1.0 - share[a]) / steps;
      inside.push_back({a, b, perStep * (steps - 1)});
      alongside.push_back({a, b, 2 * perStep});
      lat += m.hopUs(a, b);
    }
    insideLat = std::max(insideLat, lat * (kg - 1) / kg);
  }
  double insideBeta = m.perByte(inside);
  // Phase 2: each piece (the union of the groups' block boundaries) is held by one member of
  // every group and cut into sub-blocks by groupShare. Without chunk weights the engine runs a
  // ring over the holders (group x's holder sends the next group's 1 - share_x of the piece in
  // the reduce-scatter and 1 - share_(x+1) in the allgather); with them, a direct exchange
  // (holders a in group x and b in group y exchange b's sub-block for the reduce-scatter and
  // a's for the allgather: share_x + share_y of the piece each way). Walk the two groups'
  // blocks together to find each pair of holders and the length they share.
  const bool direct = !cw.empty();
  std::vector<Xfer> across;
  double acrossLat = 0;
  auto exchange = [&](size_t x, size_t y, double perLength, bool bothWays) {
    const auto& ga = groups[x];
    const auto& gb = groups[y];
    size_t i = 0, j = 0;
    double ea = share[ga[0]], eb = share[gb[0]], start = 0;
    while (i < ga.size() && j < gb.size()) {
      double end = std::min(ea, eb);
      if (end > start && perLength > 0) {
        across.push_back({ga[i], gb[j], perLength * (end - start)});
        if (bothWays) across.push_back({gb[j], ga[i], perLength * (end - start)});
      }
      start = end;
      if (ea <= end + 1e-15) {
        if (++i < ga.size()) ea += share[ga[i]];
      }
      if (eb <= end + 1e-15) {
        if (++j < gb.size()) eb += share[gb[j]];
      }
    }
  };
  if (direct) {
    for (size_t x = 0; x < G; ++x)
      for (size_t y = x + 1; y < G; ++y) {
        acrossLat = std::max(acrossLat, m.hopUs(groups[x].front(), groups[y].front()));
        exchange(x, y, groupShare[x] + groupShare[y], true);
      }
    acrossLat *= 2;  // two exchanges, one hop each
  } else {
    for (size_t x = 0; x < G; ++x) {
      const size_t y = (x + 1) % G;
      acrossLat += m.hopUs(groups[x].front(), groups[y].front());
      exchange(x, y, 2 - groupShare[x] - groupShare[y], false);
    }
    const double g = static_cast<double>(G);
    acrossLat *= 2 * (g - 1) / g;  // 2 (G-1) steps around the ring of groups
  }
  alongside.insert(alongside.end(), across.begin(), across.end());
  c.alphaUs = 2 * insideLat + acrossLat;
  c.betaUsPerByte = 2 * insideBeta + m.perByte(alongside);
  return c;
}

AlgoCost packedTreesCost(const Model& m) {
  const auto& trees = m.ctx().trees;
  if (trees.empty())
    return unavailable(Algorithm::kTrees,
                       m.net().heterogeneousHosts()
                           ? "too many hosts to pack trees"
                           : "host rates are uniform (trees only pay when they differ)");
  int n = static_cast<int>(m.hosts());
  int k = m.k();
  std::map<std::pair<int, int>, double> volume;
  double depth = 0;
  for (const auto& t : trees) {
    std::vector<double> lat(n, -1);
    for (int p = 0; p < n; ++p) {
      double d = 0;
      for (int x = p; t.parent[x] >= 0; x = t.parent[x])
        d += m.hostHopUs(m.ctx().order[x], m.ctx().order[t.parent[x]]);
      depth = std::max(depth, d);
      int up = t.parent[p];
      if (up < 0) continue;
      int a = m.ctx().order[p], b = m.ctx().order[up];
      volume[{a, b}] += t.weight;
      volume[{b, a}] += t.weight;
    }
  }
  std::vector<Flow> flows;
  for (const auto& [pair, v] : volume) flows.push_back({pair.first, pair.second, v});
  AlgoCost c;
  c.algo = Algorithm::kTrees;
  c.alphaUs = 2 * (depth + (k - 1) * (m.ctx().ring.intraHostLatencyUs + m.overhead()));
  c.betaUsPerByte = std::max(completionUs(m.net(), flows), k > 1 ? m.intraPerByte() : 0.0);
  return c;
}

}  // namespace

bool isKnownCollective(std::string_view name) {
  return std::find(std::begin(kCollectives), std::end(kCollectives), name) !=
         std::end(kCollectives);
}

std::pair<std::vector<int>, std::vector<int>> doubleBinaryTree(int m) {
  std::vector<int> t1(std::max(m, 0), -1), t2(std::max(m, 0), -1);
  for (int r = 1; r < m; ++r) {
    int bit = r & -r;
    int up = (r ^ bit) | (bit << 1);
    if (up >= m) up = r ^ bit;
    t1[r] = up;
  }
  // The second tree relabels the first: mirrored for even m, shifted by one for odd m, so that
  // the first tree's leaves are the second's inner nodes.
  auto sigma = [m](int r) { return m % 2 == 0 ? m - 1 - r : (r + 1) % m; };
  for (int r = 0; r < m; ++r) t2[sigma(r)] = t1[r] < 0 ? -1 : sigma(t1[r]);
  return {t1, t2};
}

double busFactor(std::string_view collective, size_t world) {
  double w = static_cast<double>(world);
  if (world < 2) return 1.0;
  if (collective == "allreduce") return 2 * (w - 1) / w;
  if (collective == "broadcast") return 1.0;
  return (w - 1) / w;
}

std::vector<AlgoCost> algorithmCosts(const CostContext& ctx, std::string_view collective) {
  if (!isKnownCollective(collective))
    throw InvalidInput(
        fmt::format("collective '{}': expected one of allreduce, allgather, "
                    "reducescatter, broadcast",
                    collective));
  Model m(ctx);
  std::vector<AlgoCost> out;
  if (m.world() < 2) return out;
  out.push_back(ringCost(m, collective));
  if (collective == "allreduce" || collective == "broadcast")
    out.push_back(treeCost(m, collective));
  if (collective == "allreduce") out.push_back(hierCost(m));
  if (collective != "broadcast") out.push_back(rhdCost(m, collective));
  if (collective == "allreduce") out.push_back(packedTreesCost(m));
  return out;
}

double lowerBoundUsPerByte(const CostContext& ctx, std::string_view collective) {
  size_t world = ctx.order.size() * static_cast<size_t>(ctx.ring.ranksPerHost);
  if (world < 2) return 0;
  double bound = ctx.net->ringBoundMbps();
  if (ctx.ring.ranksPerHost > 1) bound = std::min(bound, ctx.ring.intraHostMbps);
  if (!std::isfinite(bound)) return 0;
  return busFactor(collective, world) / bytesPerUs(bound);
}

std::vector<AlgoRange> chooseRanges(const std::vector<AlgoCost>& costs, std::string_view collective,
                                    size_t world, double lowerBoundPerByte) {
  std::vector<const AlgoCost*> avail;
  for (const auto& c : costs)
    if (c.available) avail.push_back(&c);
  std::vector<AlgoRange> out;
  if (avail.empty()) return out;
  // Lower envelope of the lines alpha + beta * S over S >= 0. Ties: smaller beta, then the
  // order of `costs`.
  auto better = [](const AlgoCost* a, const AlgoCost* b, double s) {
    double ta = a->timeUs(s), tb = b->timeUs(s);
    if (ta != tb) return ta < tb;
    return a->betaUsPerByte < b->betaUsPerByte;
  };
  const AlgoCost* cur = avail.front();
  for (const auto* c : avail)
    if (better(c, cur, 0)) cur = c;
  double start = 0;
  // Crossovers beyond 1 TiB are of no practical use (and tiny slope differences put them at
  // exabytes); the algorithm best below that keeps the open range.
  constexpr double kMaxBoundary = 1099511627776.0;
  while (true) {
    const AlgoCost* next = nullptr;
    double cross = kInf;
    for (const auto* c : avail) {
      if (c == cur || c->betaUsPerByte >= cur->betaUsPerByte) continue;
      double s = (c->alphaUs - cur->alphaUs) / (cur->betaUsPerByte - c->betaUsPerByte);
      if (s <= start) s = start;
      if (s < cross || (s == cross && next && c->betaUsPerByte < next->betaUsPerByte)) {
        cross = s;
        next = c;
      }
    }
    uint64_t lo = out.empty() ? 0 : out.back().maxBytes;
    if (!next || cross >= kMaxBoundary) {
      AlgoRange r;
      r.minBytes = lo;
      r.algorithm = cur->algo;
      out.push_back(r);
      break;
    }
    uint64_t hi = static_cast<uint64_t>(std::ceil(cross));
    if (hi > lo) {
      AlgoRange r;
      r.minBytes = lo;
      r.maxBytes = hi;
      r.algorithm = cur->algo;
      out.push_back(r);
    }
    start = cross;
    cur = next;
  }
  // Merge neighbours that ended up with the same algorithm.
  std::vector<AlgoRange> merged;
  for (const auto& r : out) {
    if (!merged.empty() && merged.back().algorithm == r.algorithm)
      merged.back().maxBytes = r.maxBytes;
    else
      merged.push_back(r);
  }
  for (auto& r : merged) {
    double lo = std::max<double>(1.0, static_cast<double>(r.minBytes));
    double s = r.maxBytes == AlgoRange::kUnbounded
                   ? 2 * lo
                   : std::sqrt(lo * static_cast<double>(r.maxBytes));
    const AlgoCost* c = nullptr;
    for (const auto* a : avail)
      if (a->algo == r.algorithm) c = a;
    double t = c->timeUs(s);
    r.predictedUs = t;
    r.predictedBusbwGBps = t > 0 ? busFactor(collective, world) * s / t / 1000.0 : 0;
    r.lowerBoundUs = lowerBoundPerByte * s;
  }
  return merged;
}

double predictedUs(const CostContext& ctx, std::string_view collective, Algorithm algorithm,
                   uint64_t bytes) {
  auto costs = algorithmCosts(ctx, collective);
  if (costs.empty()) return 0;  // a single rank
  for (const auto& c : costs)
    if (c.algo == algorithm && c.available) return c.timeUs(static_cast<double>(bytes));
  return kInf;
}

double predictedAllreduceUs(const NetworkModel& net, const std::vector<std::string>& hosts,
                            const Plan& plan, uint64_t bytes, RingParams params) {
  if (hosts.size() != net.n)
    throw InvalidInput(fmt::format("scoring a plan: {} host names for a network of {} hosts",
                                   hosts.size(), net.n));
  std::map<std::string, int> index;
  for (size_t h = 0; h < hosts.size(); ++h) index.emplace(hosts[h], static_cast<int>(h));
  if (plan.order.size() != net.n)
    throw InvalidInput(fmt::format("scoring a plan: the plan orders {} hosts, the network has {}",
                                   plan.order.size(), net.n));
  auto hostIndex = [&](const std::string& name) {
    auto it = index.find(name);
    if (it == index.end())
      throw InvalidInput(
          fmt::format("scoring a plan: plan host '{}' is not a host of the network", name));
    return it->second;
  };
  CostContext ctx;
  ctx.net = &net;
  std::vector<char> seen(net.n, 0);
  for (const auto& name : plan.order) {
    int h = hostIndex(name);
    if (seen[h]++)
      throw InvalidInput(fmt::format("scoring a plan: host '{}' is twice in its order", name));
    ctx.order.push_back(h);
  }
  params.ranksPerHost = plan.ranksPerHost;
  params.bytes = bytes;
  ctx.ring = params;
  ctx.chunkWeights = plan.chunkWeights;
  ctx.trees = plan.trees;
  // hier's groups as the engine forms them: the plan's innermost groups, else each host.
  ctx.groupOf.resize(net.n);
  for (size_t h = 0; h < net.n; ++h) ctx.groupOf[h] = static_cast<int>(h);
  if (!plan.groups.empty()) {
    const auto& groups = plan.groups.front().groups;
    for (size_t g = 0; g < groups.size(); ++g)
      for (const auto& name : groups[g]) ctx.groupOf[hostIndex(name)] = static_cast<int>(net.n + g);
  }
  Algorithm algorithm = plan.algorithmFor("allreduce", bytes).value_or(Algorithm::kRing);
  double t = predictedUs(ctx, "allreduce", algorithm, bytes);
  if (!std::isfinite(t) && algorithm != Algorithm::kRing)
    t = predictedUs(ctx, "allreduce", Algorithm::kRing, bytes);
  return t;
}

}  // namespace rankmap::reorder
