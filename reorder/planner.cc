#include "reorder/planner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/log.h"
#include "reorder/measurements.h"
#include "reorder/packed_trees.h"
#include "reorder/report.h"

namespace rankmap::reorder {
namespace {

void validate(const PlanOptions& o) {
  if (o.ranksPerHost < 1 || o.ranksPerHost > (1 << 16))
    throw InvalidInput(fmt::format("ranks per host {}: expected 1 to 65536", o.ranksPerHost));
  if (o.collectives.empty()) throw InvalidInput("collectives: expected at least one");
  for (const auto& c : o.collectives)
    if (!isKnownCollective(c))
      throw InvalidInput(
          fmt::format("collective '{}': expected one of allreduce, allgather, "
                      "reducescatter, broadcast",
                      c));
  if (!(o.intraHostMbps > 0) || !(o.intraHostLatencyUs >= 0) || !(o.stepOverheadUs >= 0))
    throw InvalidInput("intra-host rate must be positive, latencies non-negative");
  if (!(o.fabricMbps > 0))
    throw InvalidInput(
        fmt::format("fabric rate {}: expected a positive rate in Mbit/s (or "
                    "unlimited)",
                    o.fabricMbps));
  if (!(o.fabricBurstBytes >= 0) || !std::isfinite(o.fabricBurstBytes))
    throw InvalidInput(fmt::format("fabric burst {}: expected a non-negative number of bytes",
                                   o.fabricBurstBytes));
  if (!(o.noise >= 0 && o.noise < 1))
    throw InvalidInput(fmt::format("measurement noise {}: expected 0 <= noise < 1", o.noise));
  if (o.ringBytes == 0) throw InvalidInput("ring design size: expected at least 1 byte");
}

PlanResult fallbackPlan(PlanResult r, const std::vector<std::string>& names, const PlanOptions& o,
                        std::string why) {
  RANKMAP_WARN(Reorder, "plan: {}: identity order, confidence 0", why);
  r.warnings.push_back(why + ": identity order, confidence 0");
  if (!o.mesh.empty())
    r.warnings.push_back(fmt::format("the mesh {} was not placed (identity order for every group)",
                                     meshText(o.mesh)));
  r.fallback = true;
  std::string hash = r.plan.topologyHash;
  int64_t epoch = r.plan.epoch;
  std::string time = r.plan.topologyTime;
  r.plan = Plan::identity(names, o.ranksPerHost);
  r.plan.topologyHash = hash;
  r.plan.epoch = epoch;
  r.plan.topologyTime = time;
  r.plan.predicted.basis = "none (identity fallback)";
  r.plan.seal();
  r.order.resize(names.size());
  std::iota(r.order.begin(), r.order.end(), 0);
  return r;
}

// planTopology()'s phases. Each reads the options and what the earlier phases left in the
// result, and adds its part.

// The hierarchy and the network model inferred from the measured matrices, or why there is too
// little data to plan (the identity fallback).
std::optional<std::string> modelFromMeasurements(const Topology& t, const PlanOptions& o,
                                                 const std::vector<std::string>& names,
                                                 PlanResult& r) {
  size_t n = t.size();
  Measurements m = cleanMeasurements(t, o.source, r.warnings);
  r.coverage = m.coverage();
  std::vector<std::string> unmeasured;
  for (size_t h = 0; h < n; ++h)
    if (m.hostPairs[h] == 0) unmeasured.push_back(names[h]);
  if (!unmeasured.empty()) {
    std::string list;
    for (size_t i = 0; i < unmeasured.size() && i < 3; ++i) list += (i ? ", " : "") + unmeasured[i];
    if (unmeasured.size() > 3) list += fmt::format(" and {} more", unmeasured.size() - 3);
    return fmt::format("{}: no measured pair for host(s) {}", o.source, list);
  }
  if (m.coverage() < kMinCoverage)
    return fmt::format("{}: only {:.0f}% of host pairs measured (need {:.0f}%)", o.source,
                       100 * m.coverage(), 100 * kMinCoverage);

  std::vector<std::vector<int>> sharedSets;
  std::vector<double> sharedMbps;
  for (const auto& s : t.sharedLinks) {
    std::vector<int> set;
    for (const auto& name : s.hosts) set.push_back(t.indexOf(name));
    sharedSets.push_back(std::move(set));
    sharedMbps.push_back(s.capacityMbps);
  }
  if (o.useTopologyGroups && !t.groups.empty())
    r.hierarchy = hierarchyFromLevels(t.groups, names, o.source);
  else
    r.hierarchy = inferHierarchy(m, sharedSets);
  r.model = inferNetwork(std::move(m), r.hierarchy, sharedSets, sharedMbps, r.warnings);
  return std::nullopt;
}

// The hierarchy and the network model stated by the topology's link model: its groups, its
// capacities. Nothing is cleaned and nothing falls back for want of pairs: every pair is covered
// by the model, measured or inferred.
void modelFromLinks(const Topology& t, const PlanOptions& o, const std::vector<std::string>& names,
                    PlanResult& r) {
  r.hierarchy = hierarchyFromLevels(t.groups, names, o.source);
  r.model = networkFromLinks(t, r.hierarchy, r.warnings);
  r.linkModel = true;
  r.measuredPairs = t.measured.size();
  r.coverage = 1;
}

RingParams ringParams(const PlanOptions& o) {
  RingParams rp;
  rp.bytes = o.ringBytes;
  rp.ranksPerHost = o.ranksPerHost;
  rp.stepOverheadUs = o.stepOverheadUs;
  rp.intraHostMbps = o.intraHostMbps;
  rp.intraHostLatencyUs = o.intraHostLatencyUs;
  rp.noise = o.noise;
  return rp;
}

// Rings the probe measured as a collective runs them (topology.json "rings") over exactly
// these hosts, each with its measured bottleneck, stand as candidates of their own: their
// measurement decides, not the model. An order the probe did not measure (the planner's own,
// when it differs) is priced by the model times the worst ratio of measured to modelled among
// the checked rings (a model that missed a bottleneck there is trusted no more elsewhere), and
// replaces the best measured ring only when faster by more than kProbeNoise; the input order is
// kept unless another is faster by that much. Returns false when no check applies (the model
// alone decides, as without them).
bool orderRingByChecks(const PlanOptions& o, const std::vector<RingCheck>& checks,
                       const std::vector<int>& planned, PlanResult& r) {
  const NetworkModel& net = r.model;
  const size_t n = net.n;
  const RingParams rp = ringParams(o);
  const double world = static_cast<double>(n) * o.ranksPerHost;
  auto priced = [&](const std::vector<int>& order, double mbps) {
    RingCost c = evaluateRing(net, order, rp);
    c.bottleneckMbps = mbps;
    c.objectiveUs = ringAllreduceUs(c, static_cast<size_t>(world), static_cast<double>(rp.bytes));
    return c;
  };
  // The same ring, read either way round from any host.
  auto sameRing = [](const std::vector<int>& a, const std::vector<int>& b) {
    if (a.size() != b.size() || a.empty()) return false;
    auto at = std::find(b.begin(), b.end(), a[0]);
    if (at == b.end()) return false;
    const size_t m = a.size(), s0 = static_cast<size_t>(at - b.begin());
    bool fwd = true, back = true;
    for (size_t i = 0; i < m && (fwd || back); ++i) {
      fwd = fwd && a[i] == b[(s0 + i) % m];
      back = back && a[i] == b[(s0 + m - i) % m];
    }
    return fwd || back;
  };
  struct Candidate {
    std::string name;
    std::vector<int> order;
    RingCost cost;
    bool measured = false;
  };
  std::vector<Candidate> measured;
  double calibration = 1;
  for (const auto& c : checks) {
    if (c.order.size() != n) continue;
    auto b = c.bottleneckMbps(ringHopMbps(net, c.order, rp));
    if (!b) continue;
    const double model = evaluateRing(net, c.order, rp).bottleneckMbps;
    if (model > 0 && std::isfinite(model)) {
      calibration = std::min(calibration, *b / model);
      if (*b < kRingCheckAgreement * model) {
        auto why = fmt::format(
            "the {} ring measured {:.0f} Mbit/s where the link model predicts {:.0f}: the model "
            "misses a bottleneck; orders not measured are priced {:.0f}% lower",
            c.name, *b, model, 100 * (1 - calibration));
        RANKMAP_WARN(Reorder, "plan: {}", why);
        r.warnings.push_back(why);
      }
    }
    measured.push_back({c.name, c.order, priced(c.order, *b), true});
  }
  if (measured.empty()) return false;
  std::vector<int> input(n);
  std::iota(input.begin(), input.end(), 0);
  const Candidate* inputCand = nullptr;
  for (const auto& c : measured)
    if (sameRing(c.order, input)) inputCand = &c;
  Candidate inputModel{"input", input, priced(input, r.inputRing.bottleneckMbps * calibration)};
  if (!inputCand) inputCand = &inputModel;
  const Candidate* best = inputCand;
  for (const auto& c : measured)
    if (c.cost.objectiveUs < best->cost.objectiveUs * (1 - kProbeNoise)) best = &c;
  Candidate plan{"plan", planned, {}};
  bool planMeasured = false;
  for (const auto& c : measured) planMeasured = planMeasured || sameRing(c.order, planned);
  if (!planMeasured) {
    plan.cost = priced(planned, evaluateRing(net, planned, rp).bottleneckMbps * calibration);
    if (plan.cost.objectiveUs < best->cost.objectiveUs * (1 - kProbeNoise)) best = &plan;
  }
  RANKMAP_INFO(
      Reorder,
      "plan: ring checks: {} ({:.0f} Mbit/s measured{}), the input order's {:.0f} Mbit/s{}",
      best->name, best->cost.bottleneckMbps, best->measured ? "" : ", by the model",
      inputCand->cost.bottleneckMbps, inputCand->measured ? " measured" : "");
  r.order = best == inputCand ? input : rotateToBoundary(net, best->order);
  r.planRing = best->cost;
  r.inputRing = inputCand->cost;
  return true;
}

// The ring: the hierarchy walk, improved, exact when small (and tidied again when the exact
// search found a ring faster beyond the noise), rotated to a group boundary; the input order
// unless the ring is at least minGain faster, or no slower and leximin-lower in link loads.
// With ring checks, orderRingByChecks() decides between it, the measured rings and the input.
void orderRing(const PlanOptions& o, const std::vector<RingCheck>& checks, PlanResult& r) {
  const NetworkModel& net = r.model;
  size_t n = net.n;
  RingParams rp = ringParams(o);
  std::vector<int> input(n);
  std::iota(input.begin(), input.end(), 0);
  r.inputRing = evaluateRing(net, input, rp);
  std::vector<int> ring = improveRing(net, hierarchicalRing(net), rp);
  if (n <= std::min(o.exactMaxHosts, kExactMaxHosts)) {
    std::vector<int> exact = exactRing(net, ring, rp);
    if (exact != ring) ring = improveRing(net, std::move(exact), rp);
  }
  ring = rotateToBoundary(net, ring);
  if (orderRingByChecks(o, checks, ring, r)) return;
  RingCost best = evaluateRing(net, ring, rp);
  bool faster = best.objectiveUs < r.inputRing.objectiveUs * (1 - o.minGain);
  // As fast (never slower) and loading the links less: a shared network's other tenants and
  // the job's later collectives get what the input order would take for nothing.
  bool tidier = !faster && best.objectiveUs <= r.inputRing.objectiveUs &&
                compareLinkLoads(net, ring, input) < 0;
  if (tidier)
    RANKMAP_INFO(Reorder,
                 "plan: the best ring is only {:.2f}% faster than the input order but loads the "
                 "links less: taking it",
                 100 * (1 - best.objectiveUs / r.inputRing.objectiveUs));
  if (!faster && !tidier) {
    if (best.objectiveUs < r.inputRing.objectiveUs)
      RANKMAP_INFO(Reorder,
                   "plan: the best ring is only {:.2f}% faster than the input order and loads "
                   "the links no less: keeping the input order",
                   100 * (1 - best.objectiveUs / r.inputRing.objectiveUs));
    ring = input;
    best = r.inputRing;
  }
  r.order = ring;
  r.planRing = best;
}

// With a mesh: the order for every group's traffic at once (mesh.h), replacing the world ring's
// order (kept in worldRingOrder); the plan's ring is then the world ring in that order.
void orderMesh(const PlanOptions& o, PlanResult& r) {
  if (o.mesh.empty()) return;
  RingParams rp = ringParams(o);
  MeshModel model(r.model, o.mesh, rp);
  r.worldRingOrder = r.order;
  MeshPlacement m = placeMesh(model, r.order, o.minGain);
  std::vector<int> input(r.model.n);
  std::iota(input.begin(), input.end(), 0);
  PlanMesh pm;
  pm.dims = o.mesh;
  std::vector<std::vector<double>> groupUs = model.groupUs(m.order);
  for (size_t d = 0; d < pm.dims.size(); ++d) {
    pm.dims[d].predictedUs = m.times.dimUs[d];
    pm.dims[d].groupsUs = std::move(groupUs[d]);
  }
  pm.stepUs = m.times.stepUs;
  pm.worldRingStepUs = model.stepUs(r.worldRingOrder);
  pm.inputStepUs = model.stepUs(input);
  r.plan.mesh = std::move(pm);
  r.meshBasis = m.basis;
  r.order = std::move(m.order);
  r.planRing = evaluateRing(r.model, r.order, rp);
}

// Chunk weights per position of `order` in proportion to the host link rates.
std::vector<double> hostRateWeights(const NetworkModel& net, const std::vector<int>& order) {
  double total = 0;
  for (int h : order) total += net.hostMbps[h];
  std::vector<double> w;
  for (int h : order) w.push_back(std::round(net.hostMbps[h] / total * 1e6) / 1e6);
  return w;
}

// Chunk weights that balance hier's cross-group phase over unequal uplinks, per position of
// `order`; empty unless there are 3 to kMaxShareGroups innermost groups whose capacities (the
// uplink, or the leader's host link when slower) differ by more than kHeterogeneousRatio (with 2
// groups every group moves the vector once each way whatever its share).
//
// With chunk weights hier reduces each piece across its m groups by direct exchange, a group of
// share x moving 1 + (m-2) x of the vector each way over its uplink (collectives/algorithms/
// hier.cc), so the cross-group phase takes at least max_g (1 + (m-2) x_g) / c_g. The shares
// minimising it: s_g(T) = max(0, (T c_g - 1) / (m-2)), T the larger of max_g 1/c_g (no group
// moves less than the vector once each way) and the T at which the s_g sum to 1, and
// x_g = s_g(T) / sum s(T), so a group behind an uplink too slow to help gets share 0 and the
// slack goes to the fastest groups. Inside a group the whole share goes to one member, its
// leader (the fastest host link, the first of equals in the order): the cross-group exchange is
// then one flow per pair of groups each way through each uplink, where shares spread over the
// members made a dozen concurrent flows through the slowest uplink, whose queue dropped their
// tails (1.5-2.4 s against 1.24-1.40 s for the same bytes on the emulated cloud's 4+3+3 racks;
// docs/performance.md, "Unequal racks"). The engine chain-reduces each group's vector to its
// leader on the host links, which the cost model prices. Rounded to 1e-6, as hostRateWeights.
constexpr size_t kMaxShareGroups = 16;

std::vector<double> uplinkBalancedWeights(const NetworkModel& net, const std::vector<int>& order) {
  std::vector<double> w;
  if (net.levels == 0) return w;
  std::map<int, size_t> index;  // innermost switch -> group
  std::vector<size_t> leader;   // per group: the position of its fastest host link, first of equals
  std::vector<double> capacity;
  std::vector<size_t> groupOf;
  for (size_t p = 0; p < order.size(); ++p) {
    const int h = order[p];
    const int sw = net.switchAt(h, 0);
    auto [it, fresh] = index.emplace(sw, leader.size());
    if (fresh) {
      leader.push_back(p);
      capacity.push_back(net.uplinkMbps[static_cast<size_t>(sw)]);
    } else if (net.hostMbps[h] > net.hostMbps[order[leader[it->second]]]) {
      leader[it->second] = p;
    }
    groupOf.push_back(it->second);
  }
  const size_t m = leader.size();
  if (m < 3 || m > kMaxShareGroups) return w;
  for (size_t g = 0; g < m; ++g)
    capacity[g] = std::min(capacity[g], net.hostMbps[order[leader[g]]]);
  auto [lo, hi] = std::minmax_element(capacity.begin(), capacity.end());
  if (!(*lo > 0) || !std::isfinite(*hi) || *hi <= kHeterogeneousRatio * *lo) return w;
  auto shares = [&](double t) {
    std::vector<double> s;
    for (double c : capacity) s.push_back(std::max(0.0, (t * c - 1) / static_cast<double>(m - 2)));
    return s;
  };
  auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  double t = 1 / *lo;
  if (sum(shares(t)) < 1) {  // bisection: sum(shares(T)) grows with T
    double below = t, above = t;
    while (sum(shares(above)) < 1) above *= 2;
    for (int i = 0; i < 100; ++i) {
      const double mid = (below + above) / 2;
      (sum(shares(mid)) < 1 ? below : above) = mid;
    }
    t = above;
  }
  const std::vector<double> x = shares(t);
  const double total = sum(x);
  for (size_t p = 0; p < order.size(); ++p) {
    const size_t g = groupOf[p];
    w.push_back(leader[g] == p ? std::round(x[g] / total * 1e6) / 1e6 : 0.0);
  }
  return w;
}

// Ring weights that relieve slow host links, per position of `order`; empty with fewer than 3
// hosts or unknown rates. The ring's flow from position p to p + 1 carries 2 - w_p - w_(p+1) of
// the vector (Plan::ringWeights) through p's host link out and p + 1's in, so the fastest ring
// on the host links solves: minimise T subject to w_p + w_(p+1) >= 2 - T min(c_p, c_(p+1)) for
// every p (cyclic), sum w = 1, w >= 0 (c: host link rates). For a given T the least total weight
// meeting the pair bounds is found exactly: with w_0 = t fixed, pushing weight forward (each
// w_(p+1) = max(0, d_p - w_p), the last one also covering the pair that closes the cycle) is
// optimal, and the least total is convex in t (ternary search). T is the smallest (bisection)
// whose least total is at most 1; the slack is spread evenly. One host at half the others' rate
// gets the whole vector: its ring neighbours' flows then carry it once each way, the others' 2
// at twice the rate. Uplinks are left to the cost model, which prices the result.
std::vector<double> ringOffloadWeights(const NetworkModel& net, const std::vector<int>& order) {
  const size_t n = order.size();
  std::vector<double> pairCap(n);
  for (size_t p = 0; p < n; ++p) {
    pairCap[p] = std::min(net.hostMbps[order[p]], net.hostMbps[order[(p + 1) % n]]);
    if (!(pairCap[p] > 0) || !std::isfinite(pairCap[p])) return {};
  }
  if (n < 3) return {};
  std::vector<double> d(n), w(n);
  // The least weights for bounds d with w_0 = t, and their total.
  auto fill = [&](double t) {
    w[0] = t;
    for (size_t p = 0; p + 1 < n; ++p) w[p + 1] = std::max(0.0, d[p] - w[p]);
    w[n - 1] = std::max(w[n - 1], d[n - 1] - t);
    return std::accumulate(w.begin(), w.end(), 0.0);
  };
  auto leastTotal = [&](double time) {
    double hi = 0;
    for (size_t p = 0; p < n; ++p) hi = std::max(hi, d[p] = std::max(0.0, 2 - time * pairCap[p]));
    double lo = 0;
    for (int i = 0; i < 80 && hi - lo > 1e-12; ++i) {
      const double a = lo + (hi - lo) / 3, b = hi - (hi - lo) / 3;
      if (fill(a) <= fill(b))
        hi = b;
      else
        lo = a;
    }
    return fill((lo + hi) / 2);
  };
  // Equal weights meet every bound at this T, so the answer is at most it.
  double above =
      (2 - 2.0 / static_cast<double>(n)) / *std::min_element(pairCap.begin(), pairCap.end());
  double below = 0;
  for (int i = 0; i < 60; ++i) {
    const double mid = (below + above) / 2;
    (leastTotal(mid) <= 1 ? above : below) = mid;
  }
  const double total = leastTotal(above);
  if (!(total > 0) || total > 1 + 1e-9) return {};
  for (double& x : w) x += (1 - total) / static_cast<double>(n);
  for (double& x : w) x = std::round(x * 1e6) / 1e6;
  return w;
}

// The ring must gain at least this much from ring weights to take them: below it the gain is
// within the model's noise, and a plan that differs from the uniform one for nothing is a
// switch for nothing.
constexpr double kRingWeightsGain = 0.05;

// Every algorithm's model per collective, the table of the fastest per size range, the chunk
// weights that make hier fastest (where any beat uniform shares) and packed trees where host
// rates differ.
void chooseAlgorithms(const PlanOptions& o, PlanResult& r) {
  const NetworkModel& net = r.model;
  CostContext ctx;
  ctx.net = &net;
  ctx.order = r.order;
  ctx.ring = ringParams(o);
  std::vector<std::pair<std::string_view, std::vector<double>>> candidates;  // basis, weights
  if (net.heterogeneousHosts()) {
    if (o.chunkWeights)
      candidates.emplace_back(Plan::kWeightsByHostRates, hostRateWeights(net, r.order));
    ctx.trees = packTrees(net, r.order);
  }
  if (auto w = uplinkBalancedWeights(net, r.order); o.chunkWeights && !w.empty())
    candidates.emplace_back(Plan::kWeightsByUplinks, std::move(w));
  // Uneven shares only where they make hier faster at the design size, the fastest of them.
  // An allreduce algorithm's time at the design size in the context as it stands (+inf when
  // unavailable).
  auto timeAt = [&](Algorithm algo) {
    for (const auto& c : algorithmCosts(ctx, "allreduce"))
      if (c.algo == algo && c.available) return c.timeUs(static_cast<double>(o.ringBytes));
    return std::numeric_limits<double>::infinity();
  };
  double best = timeAt(Algorithm::kHier);
  std::vector<double> chosen;
  std::string_view chosenBasis;
  for (auto& [basis, w] : candidates) {
    ctx.chunkWeights = w;
    double t = timeAt(Algorithm::kHier);
    if (t < best) {
      best = t;
      chosen = w;
      chosenBasis = basis;
    }
  }
  ctx.chunkWeights = chosen;
  // Ring weights where they make the ring faster at the design size by kRingWeightsGain.
  if (net.heterogeneousHosts()) {
    const double uniform = timeAt(Algorithm::kRing);
    ctx.ringWeights = ringOffloadWeights(net, r.order);
    if (!ctx.ringWeights.empty() && !(timeAt(Algorithm::kRing) < uniform * (1 - kRingWeightsGain)))
      ctx.ringWeights.clear();
  }
  size_t world = net.n * static_cast<size_t>(o.ranksPerHost);
  Plan& p = r.plan;
  for (const auto& coll : o.collectives) {
    auto costs = algorithmCosts(ctx, coll);
    const double bound = lowerBoundUsPerByte(ctx, coll);
    p.collectives[coll] = chooseRanges(costs, coll, world, bound);
    // The lines the ranges were cut from, for consumers that choose themselves (NCCL's tuner).
    CollectiveModel& model = p.models[coll];
    model.lowerBoundUsPerByte = bound;
    for (const auto& c : costs)
      if (c.available) model.algorithms[c.algo] = {c.alphaUs, c.betaUsPerByte};
    r.algorithms[coll] = std::move(costs);
  }
  p.chunkWeights = ctx.chunkWeights;
  p.ringWeights = ctx.ringWeights;
  p.chunkWeightsBasis = chosen.empty() ? "" : std::string(chosenBasis);
  bool treesUsed = false;
  for (const auto& [coll, ranges] : p.collectives)
    for (const auto& range : ranges) treesUsed = treesUsed || range.algorithm == Algorithm::kTrees;
  if (treesUsed) p.trees = ctx.trees;
}

// Open MPI's decision per collective and size range in the plan's order, for `rankmap run` to
// hand to coll_tuned; ranges also split where the engine (its table for the same collective,
// when planned) is kEngineAdviceRatio faster than Open MPI's best.
void chooseOpenMpi(const PlanOptions& o, PlanResult& r) {
  if (!o.openMpi) return;
  CostContext ctx;
  ctx.net = &r.model;
  ctx.order = r.order;
  ctx.ring = ringParams(o);
  for (auto& [name, costs] : allMpiAlgorithmCosts(ctx)) {
    auto engine = r.algorithms.find(std::string(engineCollective(name)));
    r.plan.openMpi[name] =
        chooseMpiRanges(costs, engine == r.algorithms.end() ? nullptr : &engine->second);
    r.mpiAlgorithms[name] = std::move(costs);
  }
}

// Prediction: the ring in the plan's order against the ring in the input order, which is what
// an unmodified MPI job sees when only the rank order changes.
void predict(const PlanOptions& o, PlanResult& r) {
  size_t world = r.model.n * static_cast<size_t>(o.ranksPerHost);
  Plan& p = r.plan;
  double bytes = static_cast<double>(o.ringBytes);
  p.predicted.basis = fmt::format("allreduce {} ring", sizeText(o.ringBytes));
  p.predicted.planUs = ringAllreduceUs(r.planRing, world, bytes);
  p.predicted.inputOrderUs = ringAllreduceUs(r.inputRing, world, bytes);
  p.predicted.speedup = p.predicted.planUs > 0 ? p.predicted.inputOrderUs / p.predicted.planUs : 1;
  auto finite = [](double x) { return std::isfinite(x) ? x : 0.0; };
  p.predicted.bottleneckMbps = finite(r.planRing.bottleneckMbps);
  p.predicted.inputBottleneckMbps = finite(r.inputRing.bottleneckMbps);
  // With ring weights the engine's ring is the allreduce model's ring (chooseAlgorithms).
  p.predicted.ringWeightsUs = 0;
  if (!p.ringWeights.empty())
    if (auto it = r.algorithms.find("allreduce"); it != r.algorithms.end())
      for (const auto& c : it->second)
        if (c.algo == Algorithm::kRing && c.available) p.predicted.ringWeightsUs = c.timeUs(bytes);
}

// The declared placement compared with the measured groups (reorder/prior.h), recorded in the
// plan; the plan's groups stay the measured ones. The innermost measured level is what the
// declaration's lowest switch is compared with; with no level every host is one group
// ("network"), and an identity fallback has no groups to compare ("").
void attachPrior(const Topology& t, const PlanOptions& o, PlanResult& r) {
  if (!o.prior) return;
  std::vector<int> groupOf;
  std::string level;
  if (!r.fallback) {
    if (r.hierarchy.levels.empty()) {
      groupOf.assign(t.size(), 0);
      level = "network";
    } else {
      groupOf = r.hierarchy.levels.front().groupOf;
      level = r.hierarchy.levels.front().name;
    }
  }
  r.plan.prior = comparePrior(*o.prior, t, groupOf, level);
  r.plan.seal();
}

// Hosts, order, groups, confidence and permutation; then the hash.
void finishPlan(const std::vector<std::string>& names, const PlanOptions& o, PlanResult& r) {
  Plan& p = r.plan;
  p.hosts = names;
  p.ranksPerHost = o.ranksPerHost;
  for (int h : r.order) p.order.push_back(names[h]);
  p.groups = r.hierarchy.toLevels(names);
  if (r.hierarchy.levels.empty()) {
    p.confidence = std::round(std::min(1.0, r.coverage / 0.8) * 1000) / 1000;
  } else {
    p.confidence = 1;
    for (const auto& l : r.hierarchy.levels) p.confidence = std::min(p.confidence, l.confidence);
  }
  p.derivePermutation();
  p.seal();
}

}  // namespace

PlanResult planTopology(const Topology& t, const PlanOptions& o) {
  validate(o);
  PlanResult r;
  size_t n = t.size();
  std::vector<std::string> names;
  for (const auto& h : t.hosts) names.push_back(h.name);
  r.plan.topologyHash = o.hashTopology ? t.contentHash() : "";
  r.plan.epoch = t.version;
  r.plan.topologyTime = t.time;
  if (n == 0) throw InvalidInput(fmt::format("{}: no hosts to plan", o.source));
  if (!o.mesh.empty())
    checkMeshWorld(o.mesh, n * static_cast<size_t>(o.ranksPerHost), o.meshSource);
  if (n == 1) {
    r = fallbackPlan(std::move(r), names, o, "a single host: nothing to reorder");
    attachPrior(t, o, r);
    return r;
  }
  if (t.links) {
    modelFromLinks(t, o, names, r);
  } else if (auto why = modelFromMeasurements(t, o, names, r)) {
    r = fallbackPlan(std::move(r), names, o, std::move(*why));
    attachPrior(t, o, r);
    return r;
  }
  r.designBytes = o.ringBytes;
  r.model.fabricMbps = o.fabricMbps;
  r.model.fabricBurstBytes = o.fabricBurstBytes;
  orderRing(o, t.rings, r);
  orderMesh(o, r);
  chooseAlgorithms(o, r);
  chooseOpenMpi(o, r);
  predict(o, r);
  finishPlan(names, o, r);
  attachPrior(t, o, r);
  RANKMAP_INFO(Reorder, "plan: {} hosts, {} level(s), predicted {:.2f}x for {}{}", n,
               r.hierarchy.levels.size(), r.plan.predicted.speedup, r.plan.predicted.basis,
               r.linkModel ? fmt::format(" (link model, {} of {} pairs measured)", r.measuredPairs,
                                         n * (n - 1))
                           : "");
  return r;
}

Plan makePlan(const Topology& topology, const PlanOptions& options) {
  return planTopology(topology, options).plan;
}

Topology selectHosts(const Topology& t, const std::vector<HostsEntry>& hosts,
                     std::string_view hostsSource, std::string_view topologySource) {
  std::vector<int> idx;
  std::vector<Host> hs;
  for (const auto& e : hosts) {
    int i = t.indexOf(e.name);
    if (i < 0)
      throw InvalidInput(fmt::format("{}:{}: host '{}' is not in {}", hostsSource, e.line, e.name,
                                     topologySource));
    idx.push_back(i);
    hs.push_back({e.name, e.address.empty() ? t.hosts[i].address : e.address});
  }
  size_t n = idx.size();
  // The matrices only when the topology has them (a link model may stand in for them).
  Topology s = t.hasMatrices() ? Topology::empty(std::move(hs)) : Topology();
  if (t.hasMatrices()) {
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) {
        s.bandwidthMbps.at(a, b) = t.bandwidthMbps.at(idx[a], idx[b]);
        s.latencyUs.at(a, b) = t.latencyUs.at(idx[a], idx[b]);
      }
  } else {
    s.hosts = std::move(hs);
  }
  s.probe = t.probe;
  s.time = t.time;
  s.version = t.version;
  std::set<std::string> keep;
  for (const auto& h : s.hosts) keep.insert(h.name);
  for (const auto& link : t.sharedLinks) {
    SharedLink l;
    l.capacityMbps = link.capacityMbps;
    for (const auto& h : link.hosts)
      if (keep.count(h)) l.hosts.push_back(h);
    if (l.hosts.size() >= 2) s.sharedLinks.push_back(std::move(l));
  }
  // Groups keep their order; emptied ones go, and with them their uplinks in the link model.
  std::vector<std::vector<size_t>> keptGroups(t.groups.size());
  for (size_t li = 0; li < t.groups.size(); ++li) {
    const auto& level = t.groups[li];
    HierarchyLevel l;
    l.name = level.name;
    l.confidence = level.confidence;
    for (size_t g = 0; g < level.groups.size(); ++g) {
      std::vector<std::string> members;
      for (const auto& h : level.groups[g])
        if (keep.count(h)) members.push_back(h);
      if (members.empty()) continue;
      l.groups.push_back(std::move(members));
      keptGroups[li].push_back(g);
    }
    s.groups.push_back(std::move(l));
  }
  if (t.links) {
    TopologyLinks links;
    for (int i : idx) links.hosts.push_back(t.links->hosts.at(i));
    for (size_t li = 0; li < keptGroups.size(); ++li) {
      std::vector<LinkCapacity> level;
      for (size_t g : keptGroups[li]) level.push_back(t.links->uplinks.at(li).at(g));
      links.uplinks.push_back(std::move(level));
    }
    links.hostLatencyUs = t.links->hostLatencyUs;
    links.uplinkLatencyUs = t.links->uplinkLatencyUs;
    s.links = std::move(links);
  }
  // Measured pairs between selected hosts, in the new indices and the original order.
  std::vector<int> newIndex(t.size(), -1);
  for (size_t a = 0; a < n; ++a) newIndex[idx[a]] = static_cast<int>(a);
  for (auto [src, dst] : t.measured)
    if (newIndex[src] >= 0 && newIndex[dst] >= 0)
      s.measured.emplace_back(newIndex[src], newIndex[dst]);
  // Rings measured over exactly the selected hosts (another set of hosts is another ring).
  for (const auto& c : t.rings) {
    if (c.order.size() != n) continue;
    RingCheck k{c.name, {}, c.mbps};
    for (int h : c.order)
      if (newIndex[h] >= 0) k.order.push_back(newIndex[h]);
    if (k.order.size() == n) s.rings.push_back(std::move(k));
  }
  return s;
}

}  // namespace rankmap::reorder
