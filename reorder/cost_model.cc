#include "reorder/cost_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

#include "common/error.h"
#include "common/openmpi.h"
#include "reorder/numeric.h"

namespace rankmap::reorder {
namespace {

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

  // Per-byte time of concurrent transfers: network flows share max-min (and the fabric, as
  // completionUs); intra-host copies run at the intra-host rate each.
  double perByte(const std::vector<Xfer>& xs) const {
    Parts p = perByteParts(xs);
    return std::max(p.links, p.fabric);
  }
  // perByte in two parts: the links' (and intra-host copies') time, and the fabric's (0 when
  // unlimited); perByte is the larger.
  struct Parts {
    double links = 0, fabric = 0;
  };
  Parts perByteParts(const std::vector<Xfer>& xs) const {
    std::vector<Flow> flows;
    double intra = 0, total = 0;
    for (const auto& x : xs) {
      if (x.fraction <= 0) continue;
      int a = hostOfRank(x.src), b = hostOfRank(x.dst);
      if (a == b) {
        intra = std::max(intra, x.fraction * intraPerByte());
      } else {
        flows.push_back({a, b, x.fraction});
        total += x.fraction;
      }
    }
    Parts p;
    p.links = std::max(intra, linksCompletionUs(net_, flows));
    if (std::isfinite(net_.fabricMbps)) p.fabric = total / bytesPerUs(net_.fabricMbps);
    return p;
  }
  // The fabric's burst as time at its rate (NetworkModel::fabricBurstBytes).
  double fabricBurstUs() const {
    return std::isfinite(net_.fabricMbps) ? net_.fabricBurstBytes / bytesPerUs(net_.fabricMbps) : 0;
  }
  // perByte of one transfer alone, without building a flow set: the narrowest of its links, its
  // pair cap and the fabric.
  double perByteAlone(int src, int dst) const {
    int a = hostOfRank(src), b = hostOfRank(dst);
    if (a == b) return intraPerByte();
    double rate = std::min(net_.capMbps(a, b), net_.fabricMbps);
    net_.forEachLink(a, b, [&](size_t link, bool) { rate = std::min(rate, net_.linkMbps(link)); });
    return 1.0 / bytesPerUs(rate);
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

// The ring's line: latency sum and bottleneck (T_ring, reorder/ring.h), an upper bound on the
// step-by-step time that ringAllreduceUs states, since the tables' ranges need a line in S.
AlgoCost ringCost(const Model& m, std::string_view coll) {
  AlgoCost c;
  c.algo = Algorithm::kRing;
  RingCost rc = evaluateRing(m.net(), m.ctx().order, m.ctx().ring);
  double w = static_cast<double>(m.world());
  // Every host sends one ring flow to the next host: the fabric shares out among the hosts.
  double bottleneck = rc.bottleneckMbps;
  if (m.hosts() > 1) bottleneck = std::min(bottleneck, m.net().fabricMbps / m.hosts());
  double perByte = std::isfinite(bottleneck) ? 1.0 / bytesPerUs(bottleneck) : 0;
  const auto& rw = m.ctx().ringWeights;
  if (coll == "allreduce" && !rw.empty()) {
    // Uneven blocks: one phase of every rank's flow to the next, 2 - w_r - w_(r+1) of S each (a
    // host's weight shared by its ranks, as the engine does).
    const int k = m.k();
    double total = 0;
    for (double x : rw) total += x;
    RANKMAP_ASSERT(rw.size() == m.hosts() && total > 0);
    auto weightOf = [&](size_t r) { return rw[r / static_cast<size_t>(k)] / total / k; };
    std::vector<Xfer> xs;
    const size_t world = m.world();
    for (size_t r = 0; r < world; ++r) {
      const size_t next = (r + 1) % world;
      xs.push_back({static_cast<int>(r), static_cast<int>(next), 2 - weightOf(r) - weightOf(next)});
    }
    c.alphaUs = 2 * (w - 1) / w * rc.latencyUs;
    c.betaUsPerByte = m.perByte(xs);
  } else if (coll == "allreduce") {
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
  // over the group's (the whole vector on the first member when the group weighs 0); a group's
  // share of each piece in the cross-group phase is its weight over the total (by size without
  // weights).
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
    for (int r : g) share[r] = gw > 0 ? weight(r) / gw : (r == g.front() ? 1.0 : 0.0);
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

// ---- Open MPI 4.1's coll_tuned algorithms (ompi/mca/coll/base), communicator ranks in the
// context's order, root 0. Each is built as Open MPI runs it: the same partners, the same
// fractions of the buffer, the same phases. ----

// Phases run one after the other; a phase is a set of concurrent messages, as long as its slowest
// hop plus its bytes over the links they share (Model::perByte, max-min and the fabric).
// A phase whose largest message passes kOmpiEagerLimit pays one more round trip of its slowest
// hop from that size on (a jump).
struct Phases {
  double alphaUs = 0;
  double betaUsPerByte = 0;
  std::vector<std::pair<double, double>> jumps;
  std::vector<std::pair<double, double>> slopes;  // MpiAlgoCost::slopes
  // The bytes of `times` phases, each max(links * S, fabric * S - burst) (parts per byte of S):
  // the links' line, and the fabric's excess from the size where it binds.
  void addBytes(const Model& m, Model::Parts pb, double times = 1) {
    double burst = m.fabricBurstUs();
    if (pb.fabric <= pb.links || burst <= 0) {
      betaUsPerByte += times * std::max(pb.links, pb.fabric);
      return;
    }
    betaUsPerByte += times * pb.links;
    slopes.emplace_back(burst / (pb.fabric - pb.links), times * (pb.fabric - pb.links));
  }
  void add(const Model& m, const std::vector<Xfer>& xs) {
    double lat = 0, largest = 0;
    for (const auto& x : xs)
      if (x.fraction > 0) {
        lat = std::max(lat, m.hopUs(x.src, x.dst));
        largest = std::max(largest, x.fraction);
      }
    alphaUs += lat;
    addBytes(m, m.perByteParts(xs));
    if (largest > 0) jumps.emplace_back(kOmpiEagerLimit / largest, 2 * lat);
  }
  // `times` identical phases one after the other (the steps of a ring), priced once.
  void add(const Model& m, const std::vector<Xfer>& xs, int times) {
    if (times <= 0) return;
    Phases one;
    one.add(m, xs);
    alphaUs += times * one.alphaUs;
    betaUsPerByte += times * one.betaUsPerByte;
    for (const auto& [from, extra] : one.jumps) jumps.emplace_back(from, times * extra);
    for (const auto& [from, extra] : one.slopes) slopes.emplace_back(from, times * extra);
  }
  void add(const Model& m, int src, int dst, double fraction) { add(m, {{src, dst, fraction}}); }
  void add(const Phases& other) {
    alphaUs += other.alphaUs;
    betaUsPerByte += other.betaUsPerByte;
    jumps.insert(jumps.end(), other.jumps.begin(), other.jumps.end());
    slopes.insert(slopes.end(), other.slopes.begin(), other.slopes.end());
  }
  Phases then(const Phases& other) const {
    Phases p = *this;
    p.add(other);
    return p;
  }
  static Phases of(const MpiAlgoCost& c) {
    Phases p;
    p.alphaUs = c.alphaUs;
    p.betaUsPerByte = c.betaUsPerByte;
    p.jumps = c.jumps;
    p.slopes = c.slopes;
    return p;
  }
};

// Jumps sorted, those from one size summed (a linear root receives from w - 1 ranks in turn: one
// threshold, not w - 1).
void compactJumps(std::vector<std::pair<double, double>>& jumps) {
  std::sort(jumps.begin(), jumps.end());
  std::vector<std::pair<double, double>> out;
  for (const auto& j : jumps) {
    if (!out.empty() && out.back().first == j.first)
      out.back().second += j.second;
    else
      out.push_back(j);
  }
  jumps = std::move(out);
}

MpiAlgoCost mpiLine(int algorithm, const Phases& p, uint32_t segsize = 0, int faninout = 0) {
  MpiAlgoCost c;
  c.algorithm = algorithm;
  c.segsize = segsize;
  c.faninout = faninout;
  c.alphaUs = p.alphaUs;
  c.betaUsPerByte = p.betaUsPerByte;
  c.jumps = p.jumps;
  compactJumps(c.jumps);
  c.slopes = p.slopes;
  compactJumps(c.slopes);
  return c;
}

MpiAlgoCost mpiUnavailable(int algorithm, std::string why) {
  MpiAlgoCost c;
  c.algorithm = algorithm;
  c.available = false;
  c.note = std::move(why);
  return c;
}

int floorPow2(int w) {
  int p = 1;
  while (p * 2 <= w) p *= 2;
  return p;
}

// Trees over ranks 0..w-1 rooted at 0, as parent arrays (-1 for the root), built as
// ompi/mca/coll/base/coll_base_topo.c builds them.

// ompi_coll_base_topo_build_tree: rank r at level l (levels of fanout^l ranks) has children
// r + fanout^l * i, i = 1..fanout.
std::vector<int> fanoutTree(int w, int fanout) {
  std::vector<int> parent(w, -1);
  int first = 0, width = 1;  // the level's first rank and its fanout^level
  for (int r = 0; r < w; ++r) {
    while (r >= first + width) {
      first += width;
      width *= fanout;
    }
    for (int i = 1; i <= fanout; ++i) {
      long child = r + static_cast<long>(width) * i;
      if (child >= w) break;
      parent[child] = r;
    }
  }
  return parent;
}

// ompi_coll_base_topo_build_bmtree: the parent clears the highest set bit.
std::vector<int> binomialTree(int w) {
  std::vector<int> parent(w, -1);
  for (int r = 1; r < w; ++r) {
    int high = 1;
    while (high * 2 <= r) high *= 2;
    parent[r] = r ^ high;
  }
  return parent;
}

// ompi_coll_base_topo_build_in_order_bmtree: the parent clears the lowest set bit.
std::vector<int> inOrderBinomialTree(int w) {
  std::vector<int> parent(w, -1);
  for (int r = 1; r < w; ++r) parent[r] = r & (r - 1);
  return parent;
}

// ompi_coll_base_topo_build_kmtree: radix-ary, parent = r rounded down to its lowest non-zero
// radix digit's place.
std::vector<int> knomialTree(int w, int radix) {
  std::vector<int> parent(w, -1);
  for (int r = 1; r < w; ++r)
    for (long mask = 1; mask < w; mask *= radix)
      if (r % (radix * mask)) {
        parent[r] = static_cast<int>(r / (radix * mask) * (radix * mask));
        break;
      }
  return parent;
}

// ompi_coll_base_topo_build_chain: `fanout` chains of consecutive ranks hang off the root, the
// first (w - 1) % fanout of them one rank longer.
std::vector<int> chainTree(int w, int fanout) {
  std::vector<int> parent(w, -1);
  if (w < 2) return parent;
  fanout = std::clamp(fanout, 1, w - 1);
  int len = (w - 1) / fanout, extra = (w - 1) % fanout;
  int r = 1;
  for (int c = 0; c < fanout; ++c) {
    int n = len + (c < extra ? 1 : 0);
    for (int i = 0; i < n; ++i, ++r) parent[r] = i == 0 ? 0 : r - 1;
  }
  return parent;
}

// ompi_coll_base_topo_build_in_order_bintree: root w - 1; the left subtree is the lower half of
// the remaining ranks, the right the upper.
std::vector<int> inOrderBinaryTree(int w) {
  std::vector<int> parent(w, -1);
  for (int rank = 0; rank < w; ++rank) {
    int size = w, my = rank, delta = 0, par = w - 1;
    while (my != par) {
      int rightsize = size >> 1;
      int lchild = size - 1 > 0 ? par - 1 : -1;
      int rchild = lchild > 0 ? rightsize - 1 : -1;
      if (my > rchild) {
        if (my == lchild) parent[rank] = par + delta;
        size = size - rightsize - 1;
        delta += rightsize;
        my -= rightsize;
        par = size - 1;
      } else {
        if (my == rchild) parent[rank] = par + delta;
        size = rightsize;
        par = rchild;
      }
    }
  }
  return parent;
}

// The root's rank in a parent array.
int treeRoot(const std::vector<int>& parent) {
  for (size_t r = 0; r < parent.size(); ++r)
    if (parent[r] < 0) return static_cast<int>(r);
  return 0;
}

// What a pipelined tree (coll_base_bcast_intra_generic, coll_base_reduce_generic) costs, whatever
// its segment size: every edge carries every segment (down for bcast, up for reduce), all edges
// busy at once; `fraction` is the share of the buffer the tree carries.
struct TreeShape {
  Model::Parts bytes;        // per byte: all edges as concurrent flows
  double hopUs = 0;          // the slowest edge
  double pathUs = 0;         // the slowest path from a rank to the root
  int depth = 0;             // edges on the deepest path
  bool empty = true;
};

TreeShape treeShape(const Model& m, const std::vector<int>& parent, bool up,
                    double fraction = 1.0) {
  int w = static_cast<int>(parent.size());
  TreeShape t;
  std::vector<Xfer> edges;
  // Path latency and depth to the root, each rank's from its parent's (chains are w deep).
  std::vector<double> lat(w, -1);
  std::vector<int> depth(w, 0), walk;
  for (int r = 0; r < w; ++r) {
    for (int x = r; x >= 0 && lat[x] < 0; x = parent[x]) walk.push_back(x);
    while (!walk.empty()) {
      int x = walk.back();
      walk.pop_back();
      int up1 = parent[x];
      lat[x] = up1 < 0 ? 0 : lat[up1] + m.hopUs(x, up1);
      depth[x] = up1 < 0 ? 0 : depth[up1] + 1;
    }
    if (parent[r] < 0) continue;
    edges.push_back(up ? Xfer{r, parent[r], fraction} : Xfer{parent[r], r, fraction});
    t.hopUs = std::max(t.hopUs, m.hopUs(r, parent[r]));
    t.pathUs = std::max(t.pathUs, lat[r]);
    t.depth = std::max(t.depth, depth[r]);
  }
  if (edges.empty()) return t;
  t.empty = false;
  t.bytes = m.perByteParts(edges);
  return t;
}

// The tree pipelined in segments of `seg` bytes: each segment costs a hop of software and latency
// (three above the eager limit: a rendezvous round trip more), and the last one crosses the
// depth of the tree.
Phases pipelinedTree(const Model& m, const TreeShape& t, uint32_t seg) {
  Phases p;
  if (t.empty) return p;
  double s = static_cast<double>(seg);
  double rendezvous = s >= kOmpiEagerLimit ? 3 : 1;
  double hop = t.hopUs * rendezvous, path = t.pathUs * rendezvous;
  double beta = std::max(t.bytes.links, t.bytes.fabric);
  p.alphaUs = std::max(0.0, path + (t.depth - 1) * s * beta - hop);
  // The pipeline is one phase: the fabric's burst once.
  p.addBytes(m, t.bytes);
  p.betaUsPerByte += hop / s;
  return p;
}

// coll_base_reduce_intra_basic_linear: the root receives the whole buffer from one rank after
// the other.
Phases reduceLinear(const Model& m) {
  Phases p;
  double rendezvous = 0;
  for (int r = static_cast<int>(m.world()) - 1; r > 0; --r) {
    double hop = m.hopUs(r, 0);
    p.alphaUs += hop;
    p.betaUsPerByte += m.perByteAlone(r, 0);
    rendezvous += 2 * hop;
  }
  p.jumps.emplace_back(kOmpiEagerLimit, rendezvous);
  return p;
}

// coll_base_bcast_intra_basic_linear: the root sends the whole buffer to every rank at once.
Phases bcastLinear(const Model& m, double fraction = 1.0) {
  std::vector<Xfer> xs;
  for (int r = 1; r < static_cast<int>(m.world()); ++r) xs.push_back({0, r, fraction});
  Phases p;
  p.add(m, xs);
  return p;
}

// One ring step: every rank sends `fraction` of the buffer to the next.
std::vector<Xfer> ringStep(int w, double fraction) {
  std::vector<Xfer> xs;
  for (int r = 0; r < w; ++r) xs.push_back({r, (r + 1) % w, fraction});
  return xs;
}

// Rabenseifner's reduce-scatter (recursive halving, distance doubling) over the power-of-two
// ranks left after the fold, `real` mapping them back; and its allgather (the reverse).
void halvingDoubling(const Model& m, int P, const std::function<int(int)>& real, bool scatter,
                     bool gather, Phases& p) {
  if (scatter)
    for (int mask = 1; mask < P; mask <<= 1) {
      std::vector<Xfer> xs;
      for (int v = 0; v < P; ++v) xs.push_back({real(v), real(v ^ mask), 0.5 / mask});
      p.add(m, xs);
    }
  if (gather)
    for (int mask = P / 2; mask > 0; mask >>= 1) {
      std::vector<Xfer> xs;
      for (int v = 0; v < P; ++v) xs.push_back({real(v), real(v ^ mask), 0.5 / mask});
      p.add(m, xs);
    }
}

std::vector<MpiAlgoCost> reduceCosts(const Model& m) {
  int w = static_cast<int>(m.world());
  std::vector<MpiAlgoCost> out;
  out.push_back(mpiLine(1, reduceLinear(m)));
  TreeShape chain = treeShape(m, chainTree(w, 4), true);
  TreeShape pipeline = treeShape(m, chainTree(w, 1), true);
  TreeShape binary = treeShape(m, fanoutTree(w, 2), true);
  TreeShape binomial = treeShape(m, inOrderBinomialTree(w), true);
  // The in-order binary tree reduces to rank w - 1, which sends the result to the root.
  auto ioTree = inOrderBinaryTree(w);
  TreeShape inOrder = treeShape(m, ioTree, true);
  Phases handOver;
  if (treeRoot(ioTree) != 0) handOver.add(m, treeRoot(ioTree), 0, 1.0);
  for (uint32_t seg : kMpiSegments) {
    out.push_back(mpiLine(2, pipelinedTree(m, chain, seg), seg, 4));
    out.push_back(mpiLine(3, pipelinedTree(m, pipeline, seg), seg));
    out.push_back(mpiLine(4, pipelinedTree(m, binary, seg), seg));
    out.push_back(mpiLine(5, pipelinedTree(m, binomial, seg), seg));
    Phases io = pipelinedTree(m, inOrder, seg);
    io.add(handOver);
    out.push_back(mpiLine(6, io, seg));
  }
  // Rabenseifner: the fold (the first 2r ranks exchange halves, odd ones hand theirs to the even
  // ones), the reduce-scatter, then a binomial gather of the shards to the root.
  int P = floorPow2(w), rem = w - P;
  auto real = [rem](int v) { return v < rem ? 2 * v : v + rem; };
  Phases rab;
  if (rem > 0) {
    std::vector<Xfer> swap, hand;
    for (int i = 0; i < rem; ++i) {
      swap.push_back({2 * i, 2 * i + 1, 0.5});
      swap.push_back({2 * i + 1, 2 * i, 0.5});
      hand.push_back({2 * i + 1, 2 * i, 0.5});
    }
    rab.add(m, swap);
    rab.add(m, hand);
  }
  halvingDoubling(m, P, real, true, false, rab);
  for (int mask = 1; mask < P; mask <<= 1) {
    std::vector<Xfer> xs;
    for (int v = 0; v < P; ++v)
      if ((v & (2 * mask - 1)) == mask) xs.push_back({real(v), real(v - mask), double(mask) / P});
    rab.add(m, xs);
  }
  out.push_back(mpiLine(7, rab));
  return out;
}

std::vector<MpiAlgoCost> bcastCosts(const Model& m) {
  int w = static_cast<int>(m.world());
  std::vector<MpiAlgoCost> out;
  out.push_back(mpiLine(1, bcastLinear(m)));
  TreeShape chain = treeShape(m, chainTree(w, 4), false);
  TreeShape pipeline = treeShape(m, chainTree(w, 1), false);
  auto bin = fanoutTree(w, 2);
  TreeShape binary = treeShape(m, bin, false);
  TreeShape binomial = treeShape(m, binomialTree(w), false);
  // coll_tuned_bcast_knomial_radix: 4 unless the user sets it (then rankmap writes no rules).
  TreeShape knomial = treeShape(m, knomialTree(w, 4), false);
  // Split binary tree: each half of the buffer down one subtree of the binary tree, then every
  // rank swaps halves with its partner in the other subtree.
  TreeShape halves = treeShape(m, bin, false, 0.5);
  Phases swapPhase;
  if (w > 2) {
    std::vector<int> left, right;
    for (int r = 1; r < w; ++r) {
      int x = r;
      while (bin[x] != 0) x = bin[x];
      (x == 1 ? left : right).push_back(r);
    }
    std::vector<Xfer> swap;
    for (size_t i = 0; i < std::min(left.size(), right.size()); ++i) {
      swap.push_back({left[i], right[i], 0.5});
      swap.push_back({right[i], left[i], 0.5});
    }
    swapPhase.add(m, swap);
  }
  for (uint32_t seg : kMpiSegments) {
    out.push_back(mpiLine(2, pipelinedTree(m, chain, seg), seg, 4));
    out.push_back(mpiLine(3, pipelinedTree(m, pipeline, seg), seg));
    if (w > 2) {
      Phases split = pipelinedTree(m, halves, seg);
      split.add(swapPhase);
      out.push_back(mpiLine(4, split, seg));
    } else {
      out.push_back(mpiUnavailable(4, "split binary tree needs more than 2 ranks"));
    }
    out.push_back(mpiLine(5, pipelinedTree(m, binary, seg), seg));
    out.push_back(mpiLine(6, pipelinedTree(m, binomial, seg), seg));
    out.push_back(mpiLine(7, pipelinedTree(m, knomial, seg), seg));
  }
  // Scatter down a binomial tree (the largest blocks to the farthest ranks first), then an
  // allgather by recursive doubling (8) or around the ring (9).
  Phases scatter;
  int high = floorPow2(std::max(1, w - 1));
  for (int mask = high; mask > 0; mask >>= 1) {
    std::vector<Xfer> xs;
    for (int v = 0; v + mask < w; v += 2 * mask)
      xs.push_back({v, v + mask, double(std::min(2 * mask, w - v) - mask) / w});
    scatter.add(m, xs);
  }
  Phases sag = scatter;
  for (int mask = 1; mask < w; mask <<= 1) {
    std::vector<Xfer> xs;
    for (int v = 0; v < w; ++v)
      if ((v ^ mask) < w) xs.push_back({v, v ^ mask, double(mask) / w});
    sag.add(m, xs);
  }
  out.push_back(mpiLine(8, sag));
  Phases sagRing = scatter;
  sagRing.add(m, ringStep(w, 1.0 / w), w - 1);
  out.push_back(mpiLine(9, sagRing));
  return out;
}

std::vector<MpiAlgoCost> allreduceCosts(const Model& m, const std::vector<MpiAlgoCost>& reduces,
                                        const std::vector<MpiAlgoCost>& bcasts) {
  int w = static_cast<int>(m.world());
  int P = floorPow2(w), extra = w - P;
  std::vector<MpiAlgoCost> out;
  Phases linear = reduceLinear(m);
  linear.add(bcastLinear(m));
  out.push_back(mpiLine(1, linear));
  // Nonoverlapping: coll_tuned's own reduce then its own bcast, as the rules choose them: every
  // pair of lines (their lower envelope is the sum of the two envelopes).
  for (const auto& r : reduces)
    for (const auto& b : bcasts)
      if (r.available && b.available) {
        out.push_back(mpiLine(2, Phases::of(r).then(Phases::of(b))));
      }
  // Recursive doubling: the first 2 * extra ranks fold in pairs (even to odd, the whole buffer),
  // the power of two left exchange the whole buffer at distance 1, 2, 4, ..., then unfold.
  {
    auto real = [extra](int v) { return v < extra ? 2 * v + 1 : v + extra; };
    Phases p;
    std::vector<Xfer> fold, unfold;
    for (int i = 0; i < extra; ++i) {
      fold.push_back({2 * i, 2 * i + 1, 1.0});
      unfold.push_back({2 * i + 1, 2 * i, 1.0});
    }
    if (extra) p.add(m, fold);
    for (int d = 1; d < P; d <<= 1) {
      std::vector<Xfer> xs;
      for (int v = 0; v < P; ++v) xs.push_back({real(v), real(v ^ d), 1.0});
      p.add(m, xs);
    }
    if (extra) p.add(m, unfold);
    out.push_back(mpiLine(3, p));
  }
  // Ring: 2(w - 1) steps of 1/w of the buffer to the next rank; the segmented ring runs the
  // reduce-scatter in phases of `seg`-byte pieces (more steps, same bytes), then the allgather.
  {
    std::vector<Xfer> step = ringStep(w, 1.0);
    double hop = 0;
    for (const auto& x : step) hop = std::max(hop, m.hopUs(x.src, x.dst));
    auto stepBytes = m.perByteParts(step);  // per byte each rank sends in a step
    Phases steps;
    steps.addBytes(m, {stepBytes.links / w, stepBytes.fabric / w}, 2.0 * (w - 1));
    steps.alphaUs = 2 * (w - 1) * hop;
    steps.jumps = {{w * kOmpiEagerLimit, 2 * (w - 1) * 2 * hop}};
    MpiAlgoCost ring = mpiLine(4, steps);
    out.push_back(ring);
    // Segmented: below w x seg Open MPI runs the ring itself; above, the ring's bytes in
    // (w - 1)(S / (w seg) + 1) steps instead of 2(w - 1), never fewer. The line keeps the ring's
    // alpha (an overestimate of (w - 1) hops above w x seg), so it is never below the ring.
    for (uint32_t seg : kMpiSegments) {
      MpiAlgoCost c = ring;
      c.algorithm = 5;
      c.segsize = seg;
      c.betaUsPerByte += (w - 1) * hop / (static_cast<double>(w) * seg);
      out.push_back(c);
    }
  }
  // Rabenseifner: the fold as reduce's, reduce-scatter and allgather by halving and doubling, the
  // whole result back to the folded ranks.
  {
    auto real = [extra](int v) { return v < extra ? 2 * v : v + extra; };
    Phases p;
    if (extra) {
      std::vector<Xfer> swap, hand, unfold;
      for (int i = 0; i < extra; ++i) {
        swap.push_back({2 * i, 2 * i + 1, 0.5});
        swap.push_back({2 * i + 1, 2 * i, 0.5});
        hand.push_back({2 * i + 1, 2 * i, 0.5});
        unfold.push_back({2 * i, 2 * i + 1, 1.0});
      }
      p.add(m, swap);
      p.add(m, hand);
      halvingDoubling(m, P, real, true, true, p);
      p.add(m, unfold);
    } else {
      halvingDoubling(m, P, real, true, true, p);
    }
    out.push_back(mpiLine(6, p));
  }
  return out;
}

std::vector<MpiAlgoCost> allgatherCosts(const Model& m) {
  int w = static_cast<int>(m.world());
  std::vector<MpiAlgoCost> out;
  // Linear: a gather of every block to the root, then a linear bcast of the whole buffer.
  {
    std::vector<Xfer> gather;
    for (int r = 1; r < w; ++r) gather.push_back({r, 0, 1.0 / w});
    Phases p;
    p.add(m, gather);
    p.add(bcastLinear(m));
    out.push_back(mpiLine(1, p));
  }
  // Bruck: at distance 1, 2, 4, ... every rank sends what it holds (up to half) to rank - d.
  {
    Phases p;
    for (int d = 1; d < w; d <<= 1) {
      std::vector<Xfer> xs;
      for (int r = 0; r < w; ++r)
        xs.push_back({r, (r - d + w) % w, double(std::min(d, w - d)) / w});
      p.add(m, xs);
    }
    out.push_back(mpiLine(2, p));
  }
  if ((w & (w - 1)) == 0) {
    Phases p;
    for (int d = 1; d < w; d <<= 1) {
      std::vector<Xfer> xs;
      for (int r = 0; r < w; ++r) xs.push_back({r, r ^ d, double(d) / w});
      p.add(m, xs);
    }
    out.push_back(mpiLine(3, p));
  } else {
    out.push_back(mpiUnavailable(3, "recursive doubling needs a power-of-two rank count"));
  }
  {
    Phases p;
    p.add(m, ringStep(w, 1.0 / w), w - 1);
    out.push_back(mpiLine(4, p));
  }
  // Neighbor exchange: even rank counts; one block with one neighbour, then w/2 - 1 steps of two
  // blocks, alternating between the two neighbours.
  if (w % 2 == 0 && w > 2) {
    // Steps alternate between two patterns: each priced once.
    auto pattern = [&](int parity, double blocks) {
      std::vector<Xfer> xs;
      for (int r = 0; r < w; ++r) {
        bool towardsNext = (r % 2 == 0) == (parity == 0);
        xs.push_back({r, (r + (towardsNext ? 1 : w - 1)) % w, blocks / w});
      }
      return xs;
    };
    Phases p;
    int steps = w / 2;  // step 0 (one block), then steps 1 .. steps - 1 (two blocks)
    p.add(m, pattern(0, 1.0));
    p.add(m, pattern(1, 2.0), steps / 2);        // odd steps
    p.add(m, pattern(0, 2.0), (steps - 1) / 2);  // even steps from 2
    out.push_back(mpiLine(5, p));
  } else {
    out.push_back(mpiUnavailable(5, "neighbor exchange needs an even rank count above 2"));
  }
  if (w == 2) {
    Phases p;
    p.add(m, {{0, 1, 0.5}, {1, 0, 0.5}});
    out.push_back(mpiLine(6, p));
  } else {
    out.push_back(mpiUnavailable(6, "two_proc needs exactly 2 ranks"));
  }
  return out;
}

std::vector<MpiAlgoCost> reduceScatterCosts(const Model& m,
                                            const std::vector<MpiAlgoCost>& reduces) {
  int w = static_cast<int>(m.world());
  int P = floorPow2(w), rem = w - P;
  auto real = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  std::vector<MpiAlgoCost> out;
  // Non-overlapping: coll_tuned's reduce to rank 0, then a linear scatter of the blocks.
  {
    Phases scatter = bcastLinear(m, 1.0 / w);
    for (const auto& r : reduces)
      if (r.available) {
        out.push_back(mpiLine(1, Phases::of(r).then(scatter)));
      }
  }
  // Recursive halving (the largest halves to the farthest ranks first) and butterfly (to the
  // nearest first): the first 2 * rem ranks fold even to odd (the whole buffer), the power of
  // two left exchange halves, then each folded rank gets its block back.
  auto halving = [&](bool farFirst) {
    Phases p;
    std::vector<Xfer> fold, back;
    for (int i = 0; i < rem; ++i) {
      fold.push_back({2 * i, 2 * i + 1, 1.0});
      back.push_back({2 * i + 1, 2 * i, 1.0 / w});
    }
    if (rem) p.add(m, fold);
    for (int k = 0, mask = farFirst ? P / 2 : 1; k < 31 && mask > 0 && mask < P;
         ++k, mask = farFirst ? mask / 2 : mask * 2) {
      std::vector<Xfer> xs;
      for (int v = 0; v < P; ++v) xs.push_back({real(v), real(v ^ mask), 0.5 / (1 << k)});
      p.add(m, xs);
    }
    if (rem) p.add(m, back);
    return p;
  };
  out.push_back(mpiLine(2, halving(true)));
  {
    Phases p;
    p.add(m, ringStep(w, 1.0 / w), w - 1);
    out.push_back(mpiLine(3, p));
  }
  out.push_back(mpiLine(4, halving(false)));
  return out;
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
  const NetworkModel& net = *ctx.net;
  const size_t n = net.n;
  if (n < 2) return 0;  // ranks of one host: its memory, which the model does not bound
  // Every host sends and receives busFactor(n) S over its own link (its ranks may combine
  // first, so the host, not the rank, is the unit).
  double bound = 0;
  for (double mbps : net.hostMbps)
    if (std::isfinite(mbps) && mbps > 0)
      bound = std::max(bound, busFactor(collective, n) / bytesPerUs(mbps));
  // Every uplink is a cut between the k hosts below it and the other n - k: allreduce and
  // broadcast move at least S across it in one direction (a side learns the other side's sum or
  // the root's data); allgather and reducescatter at least the larger side's share,
  // max(k, n - k) / n S.
  for (size_t s = 0; s < net.switches(); ++s) {
    const double k = net.switchSize[s], rest = static_cast<double>(n) - k;
    const double mbps = net.uplinkMbps[s];
    if (rest <= 0 || !std::isfinite(mbps) || mbps <= 0) continue;
    const double bytes = collective == "allreduce" || collective == "broadcast"
                             ? 1.0
                             : std::max(k, rest) / static_cast<double>(n);
    bound = std::max(bound, bytes / bytesPerUs(mbps));
  }
  return bound;
}

std::vector<EnvelopePiece> lowerEnvelope(const std::vector<std::pair<double, double>>& lines) {
  std::vector<EnvelopePiece> out;
  if (lines.empty()) return out;
  auto timeAt = [&](size_t i, double s) { return lines[i].first + lines[i].second * s; };
  // Ties: smaller beta, then the earlier line.
  auto better = [&](size_t a, size_t b, double s) {
    double ta = timeAt(a, s), tb = timeAt(b, s);
    if (ta != tb) return ta < tb;
    return lines[a].second < lines[b].second;
  };
  size_t cur = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (better(i, cur, 0)) cur = i;
  double start = 0;
  // Crossovers beyond 1 TiB are of no practical use (and tiny slope differences put them at
  // exabytes); the line best below that keeps the open range.
  constexpr double kMaxBoundary = 1099511627776.0;
  while (true) {
    size_t next = lines.size();
    double cross = kInf;
    for (size_t c = 0; c < lines.size(); ++c) {
      if (c == cur || lines[c].second >= lines[cur].second) continue;
      double s = (lines[c].first - lines[cur].first) / (lines[cur].second - lines[c].second);
      if (s <= start) s = start;
      if (s < cross ||
          (s == cross && next < lines.size() && lines[c].second < lines[next].second)) {
        cross = s;
        next = c;
      }
    }
    if (next == lines.size() || cross >= kMaxBoundary) {
      out.push_back({start, kInf, cur});
      break;
    }
    out.push_back({start, cross, cur});
    start = cross;
    cur = next;
  }
  return out;
}

namespace {

// Integer ranges [lo, hi) from envelope pieces: boundaries rounded up, empty pieces dropped, the
// last open. `key` says which pieces are one choice; neighbours with equal keys merge.
template <typename Key>
std::vector<std::pair<std::pair<uint64_t, uint64_t>, size_t>> integerRanges(
    const std::vector<EnvelopePiece>& pieces, Key key) {
  std::vector<std::pair<std::pair<uint64_t, uint64_t>, size_t>> out;  // ([lo, hi), line)
  for (const auto& p : pieces) {
    uint64_t lo = out.empty() ? 0 : out.back().first.second;
    uint64_t hi =
        std::isfinite(p.hi) ? static_cast<uint64_t>(std::ceil(p.hi)) : AlgoRange::kUnbounded;
    if (hi <= lo) continue;
    if (!out.empty() && key(out.back().second) == key(p.line))
      out.back().first.second = hi;
    else
      out.push_back({{lo, hi}, p.line});
  }
  return out;
}

}  // namespace

double representativeBytes(uint64_t minBytes, uint64_t maxBytes) {
  double lo = std::max<double>(1.0, static_cast<double>(minBytes));
  return maxBytes == AlgoRange::kUnbounded ? 2 * lo : std::sqrt(lo * static_cast<double>(maxBytes));
}

std::vector<AlgoRange> chooseRanges(const std::vector<AlgoCost>& costs, std::string_view collective,
                                    size_t world, double lowerBoundPerByte) {
  std::vector<const AlgoCost*> avail;
  std::vector<std::pair<double, double>> lines;
  for (const auto& c : costs)
    if (c.available) {
      avail.push_back(&c);
      lines.emplace_back(c.alphaUs, c.betaUsPerByte);
    }
  std::vector<AlgoRange> merged;
  auto pieces = integerRanges(lowerEnvelope(lines), [&](size_t i) { return avail[i]->algo; });
  for (const auto& [range, line] : pieces) {
    AlgoRange r;
    r.minBytes = range.first;
    r.maxBytes = range.second;
    r.algorithm = avail[line]->algo;
    double s = representativeBytes(r.minBytes, r.maxBytes);
    double t = avail[line]->timeUs(s);
    r.predictedUs = t;
    r.predictedBusbwGBps = t > 0 ? busFactor(collective, world) * s / t / 1000.0 : 0;
    r.lowerBoundUs = lowerBoundPerByte * s;
    merged.push_back(r);
  }
  return merged;
}

std::vector<MpiAlgoCost> mpiAlgorithmCosts(const CostContext& ctx, std::string_view collective) {
  const OmpiCollective* coll = findOmpiCollective(collective);
  if (!coll)
    throw InvalidInput(fmt::format("Open MPI collective '{}': expected one of {}", collective,
                                   ompiCollectiveList()));
  Model m(ctx);
  if (m.world() < 2) return {};
  if (collective == "allreduce") return allreduceCosts(m, reduceCosts(m), bcastCosts(m));
  if (collective == "bcast") return bcastCosts(m);
  if (collective == "reduce") return reduceCosts(m);
  if (collective == "allgather") return allgatherCosts(m);
  return reduceScatterCosts(m, reduceCosts(m));
}

std::vector<std::pair<std::string, std::vector<MpiAlgoCost>>> allMpiAlgorithmCosts(
    const CostContext& ctx) {
  std::vector<std::pair<std::string, std::vector<MpiAlgoCost>>> out;
  Model m(ctx);
  if (m.world() < 2) return out;
  auto reduces = reduceCosts(m);
  auto bcasts = bcastCosts(m);
  out.emplace_back("allreduce", allreduceCosts(m, reduces, bcasts));
  out.emplace_back("allgather", allgatherCosts(m));
  out.emplace_back("reduce_scatter", reduceScatterCosts(m, reduces));
  out.emplace_back("bcast", std::move(bcasts));
  out.emplace_back("reduce", std::move(reduces));
  return out;
}

std::vector<int> mpiTree(MpiTree kind, int ranks, int fanout) {
  if (ranks < 1) return {};
  switch (kind) {
    case MpiTree::kFanout:
      return fanoutTree(ranks, std::max(1, fanout));
    case MpiTree::kBinomial:
      return binomialTree(ranks);
    case MpiTree::kInOrderBinomial:
      return inOrderBinomialTree(ranks);
    case MpiTree::kKnomial:
      return knomialTree(ranks, std::max(2, fanout));
    case MpiTree::kChain:
      return chainTree(ranks, fanout);
    case MpiTree::kInOrderBinary:
      return inOrderBinaryTree(ranks);
  }
  return {};
}

std::string_view engineCollective(std::string_view collective) {
  if (collective == "allreduce" || collective == "allgather") return collective;
  if (collective == "bcast") return "broadcast";
  if (collective == "reduce_scatter") return "reducescatter";
  return {};
}

std::vector<OmpiRange> chooseMpiRanges(const std::vector<MpiAlgoCost>& costs,
                                       const std::vector<AlgoCost>* engine) {
  std::vector<const MpiAlgoCost*> avail;
  for (const auto& c : costs)
    if (c.available) avail.push_back(&c);
  std::vector<OmpiRange> out;
  if (avail.empty()) return out;
  std::vector<std::pair<double, double>> engLines;
  if (engine)
    for (const auto& c : *engine)
      if (c.available) engLines.emplace_back(c.alphaUs, c.betaUsPerByte);
  auto engEnv = lowerEnvelope(engLines);
  auto engineAt = [&](double s) {
    for (const auto& p : engEnv)
      if (s < p.hi) return engLines[p.line];
    return engLines[engEnv.back().line];
  };
  // Elementary intervals: between two of them every Open MPI candidate is one line (its jumps
  // and slope changes fixed) and so is the engine's best.
  std::vector<double> cuts{0};
  for (const auto* c : avail) {
    for (const auto& [from, extra] : c->jumps)
      if (from > 0 && std::isfinite(from)) cuts.push_back(from);
    for (const auto& [from, extra] : c->slopes)
      if (from > 0 && std::isfinite(from)) cuts.push_back(from);
  }
  for (const auto& p : engEnv) cuts.push_back(p.lo);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  struct Piece {
    double lo, hi;
    size_t cand;
    bool faster;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < cuts.size(); ++i) {
    double lo = cuts[i], hi = i + 1 < cuts.size() ? cuts[i + 1] : kInf;
    std::vector<std::pair<double, double>> lines;
    for (const auto* c : avail) {
      double a = c->alphaUs, b = c->betaUsPerByte;
      for (const auto& [from, extra] : c->jumps)
        if (lo >= from) a += extra;
      for (const auto& [from, extra] : c->slopes)
        if (lo >= from) {
          a -= extra * from;
          b += extra;
        }
      lines.emplace_back(a, b);
    }
    for (const auto& e : lowerEnvelope(lines)) {
      double plo = std::max(lo, e.lo), phi = std::min(hi, e.hi);
      if (!(phi > plo)) continue;
      const auto& ml = lines[e.line];
      // Split where the engine's best, kEngineAdviceRatio faster, crosses Open MPI's best:
      // ratio * (a_e + b_e s) = a_m + b_m s.
      std::vector<double> at{plo};
      if (!engEnv.empty()) {
        double mid = std::isfinite(phi) ? (plo + phi) / 2 : 2 * std::max(plo, 1.0);
        auto el = engineAt(mid);
        double db = kEngineAdviceRatio * el.second - ml.second;
        double x = db != 0 ? (ml.first - kEngineAdviceRatio * el.first) / db : kInf;
        if (x > plo && x < phi && x < 1099511627776.0) at.push_back(x);
      }
      at.push_back(phi);
      for (size_t k = 0; k + 1 < at.size(); ++k) {
        double s = std::isfinite(at[k + 1]) ? (at[k] + at[k + 1]) / 2 : 2 * std::max(at[k], 1.0);
        bool faster = false;
        if (!engEnv.empty()) {
          auto el = engineAt(s);
          faster = kEngineAdviceRatio * (el.first + el.second * s) < ml.first + ml.second * s;
        }
        pieces.push_back({at[k], at[k + 1], e.line, faster});
      }
    }
  }
  auto key = [&](size_t i) {
    const MpiAlgoCost* c = avail[pieces[i].cand];
    return std::make_tuple(c->algorithm, c->segsize, c->faninout, pieces[i].faster);
  };
  std::vector<EnvelopePiece> indexed;  // line = index into pieces
  for (size_t i = 0; i < pieces.size(); ++i) indexed.push_back({pieces[i].lo, pieces[i].hi, i});
  for (const auto& [range, i] : integerRanges(indexed, key)) {
    const MpiAlgoCost* c = avail[pieces[i].cand];
    OmpiRange r;
    r.minBytes = range.first;
    r.maxBytes = range.second;
    r.algorithm = c->algorithm;
    r.segsize = c->segsize;
    r.faninout = c->faninout;
    double s = representativeBytes(r.minBytes, r.maxBytes);
    // The best line of this choice at the representative size (a merged range may span lines of
    // one algorithm with other parameters' jumps: the candidate's own function decides).
    r.predictedUs = c->timeUs(s);
    for (const auto* o : avail)
      if (o->algorithm == c->algorithm && o->segsize == c->segsize && o->faninout == c->faninout)
        r.predictedUs = std::min(r.predictedUs, o->timeUs(s));
    if (!engEnv.empty()) {
      auto el = engineAt(s);
      r.engineUs = el.first + el.second * s;
    }
    out.push_back(r);
  }
  return out;
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
  ctx.ringWeights = plan.ringWeights;
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
