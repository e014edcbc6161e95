#include "tests/unit/reorder/tree_packing_lp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace rankmap::reorder::test {
namespace {

constexpr double kEps = 1e-11;

struct Lp {
  std::vector<double> x;  // per column
  std::vector<double> y;  // duals per row
  double value = 0;
};

// max c.x subject to A x <= b, x >= 0, with b >= 0 (the slack basis is feasible): a dense
// tableau simplex with Bland's rule (lowest entering index, lowest leaving basis index on ties),
// which cannot cycle.
Lp simplex(const std::vector<std::vector<double>>& columns, const std::vector<double>& b,
           const std::vector<double>& c) {
  const size_t m = b.size(), n = columns.size(), width = n + m + 1;
  std::vector<std::vector<double>> t(m + 1, std::vector<double>(width, 0));
  for (size_t i = 0; i < m; ++i) {
    for (size_t j = 0; j < n; ++j) t[i][j] = columns[j][i];
    t[i][n + i] = 1;
    t[i][width - 1] = b[i];
  }
  for (size_t j = 0; j < n; ++j) t[m][j] = -c[j];
  std::vector<size_t> basis(m);
  for (size_t i = 0; i < m; ++i) basis[i] = n + i;
  for (int pivots = 0;; ++pivots) {
    if (pivots > 1000000) throw std::runtime_error("simplex: too many pivots");
    size_t enter = width;
    for (size_t j = 0; j + 1 < width; ++j)
      if (t[m][j] < -kEps) {
        enter = j;
        break;
      }
    if (enter == width) break;
    size_t leave = m;
    double best = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < m; ++i) {
      if (t[i][enter] <= kEps) continue;
      double ratio = t[i][width - 1] / t[i][enter];
      if (ratio < best - kEps || (ratio <= best + kEps && leave < m && basis[i] < basis[leave])) {
        best = ratio;
        leave = i;
      }
    }
    if (leave == m) throw std::runtime_error("simplex: unbounded");
    const double pv = t[leave][enter];
    for (auto& v : t[leave]) v /= pv;
    for (size_t i = 0; i <= m; ++i) {
      if (i == leave || t[i][enter] == 0) continue;
      const double f = t[i][enter];
      for (size_t j = 0; j < width; ++j) t[i][j] -= f * t[leave][j];
    }
    basis[leave] = enter;
  }
  Lp r;
  r.x.assign(n, 0);
  for (size_t i = 0; i < m; ++i)
    if (basis[i] < n) r.x[basis[i]] = t[i][width - 1];
  for (size_t i = 0; i < m; ++i) r.y.push_back(t[m][n + i]);
  r.value = t[m][width - 1];
  return r;
}

// u_T(l) for a tree given by parent[] over hosts.
std::vector<double> usage(const NetworkModel& net, const std::vector<int>& parentOfHost) {
  std::vector<double> u(net.links(), 0);
  for (size_t h = 0; h < parentOfHost.size(); ++h)
    if (parentOfHost[h] >= 0)
      net.forEachLink(static_cast<int>(h), parentOfHost[h],
                      [&](size_t link, bool) { u[link] += 1; });
  return u;
}

// Minimum spanning tree of the complete graph of hosts under cost(a, b) = sum of y over the
// links of the path a - b (Prim, rooted at host 0). Returns parent[] and the total cost.
std::pair<std::vector<int>, double> cheapestTree(const NetworkModel& net,
                                                 const std::vector<double>& y) {
  const size_t n = net.n;
  auto cost = [&](int a, int b) {
    double s = 0;
    net.forEachLink(a, b, [&](size_t link, bool) { s += y[link]; });
    return s;
  };
  std::vector<int> parent(n, -1);
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  std::vector<char> in(n, 0);
  best[0] = 0;
  double total = 0;
  for (size_t step = 0; step < n; ++step) {
    int u = -1;
    for (size_t v = 0; v < n; ++v)
      if (!in[v] && (u < 0 || best[v] < best[static_cast<size_t>(u)])) u = static_cast<int>(v);
    in[static_cast<size_t>(u)] = 1;
    total += best[static_cast<size_t>(u)];
    for (size_t v = 0; v < n; ++v) {
      if (in[v]) continue;
      double c = cost(u, static_cast<int>(v));
      if (c < best[v]) {
        best[v] = c;
        parent[v] = u;
      }
    }
  }
  return {parent, total};
}

}  // namespace

TreePacking optimalTreePacking(const NetworkModel& net, int maxRounds) {
  TreePacking out;
  if (net.n < 2) return out;
  const size_t links = net.links();
  double scale = 0;
  for (size_t l = 0; l < links; ++l) scale = std::max(scale, net.linkMbps(l));
  std::vector<double> b;
  for (size_t l = 0; l < links; ++l) b.push_back(net.linkMbps(l) / scale);
  std::vector<std::vector<double>> columns;
  std::vector<std::vector<int>> trees;
  Lp lp;
  lp.y.assign(links, 0);
  double upper = std::numeric_limits<double>::infinity();
  for (out.rounds = 0; out.rounds < maxRounds; ++out.rounds) {
    auto [parent, price] = cheapestTree(net, lp.y);
    double dual = 0;
    for (size_t l = 0; l < links; ++l) dual += b[l] * lp.y[l];
    if (price > kEps) upper = std::min(upper, dual / price);
    if (!trees.empty() && price >= 1 - 1e-9) break;  // no tree prices below 1: optimal
    columns.push_back(usage(net, parent));
    trees.push_back(parent);
    lp = simplex(columns, b, std::vector<double>(columns.size(), 1.0));
  }
  out.rateMbps = lp.value * scale;
  out.upperBoundMbps = upper * scale;
  for (size_t t = 0; t < trees.size(); ++t)
    if (lp.x[t] > kEps) out.trees.push_back({lp.x[t] / lp.value, trees[t]});
  return out;
}

double packingUsPerByte(const NetworkModel& net, const std::vector<PackedTree>& trees,
                        const std::vector<int>& order) {
  std::vector<double> load(net.links(), 0);
  for (const auto& t : trees) {
    std::vector<int> parentOfHost(net.n, -1);
    for (size_t p = 0; p < t.parent.size(); ++p)
      if (t.parent[p] >= 0)
        parentOfHost[static_cast<size_t>(order[p])] = order[static_cast<size_t>(t.parent[p])];
    auto u = usage(net, parentOfHost);
    for (size_t l = 0; l < load.size(); ++l) load[l] += t.weight * u[l];
  }
  double worst = 0;
  for (size_t l = 0; l < load.size(); ++l)
    worst = std::max(worst, load[l] / bytesPerUs(net.linkMbps(l)));
  return worst;
}

}  // namespace rankmap::reorder::test
