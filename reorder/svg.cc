#include "reorder/svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numbers>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "common/error.h"
#include "reorder/mesh.h"
#include "reorder/numeric.h"
#include "reorder/report.h"

namespace rankmap::reorder {
namespace {

constexpr double kLeft = 150, kTop = 175, kPanel = 520, kGap = 90;
constexpr double kWidth = kLeft + 2 * kPanel + kGap + 60;
constexpr double kHeight = kTop + kPanel + 250;
// Below the heatmaps, when the plan has them: the shares strip and the packed trees.
constexpr double kSharesHeight = 120, kTreesHeight = 370, kTreeBox = 280;
constexpr size_t kTreesDrawn = 4;

std::string esc(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Viridis, by five stops: dark purple (0) to yellow (1).
std::string color(double t) {
  static const double stops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  int i = std::min(3, static_cast<int>(t));
  double f = t - i;
  int rgb[3];
  for (int k = 0; k < 3; ++k)
    rgb[k] = static_cast<int>(std::lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k])));
  return fmt::format("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]);
}

struct Scale {
  double lo = 0, hi = 0;
  bool higherIsBetter = true;
  // Brightness in [0, 1]: bright = good (fast or near).
  double t(double v) const {
    if (!(hi > lo)) return 1;
    double x = (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo));
    return higherIsBetter ? x : 1 - x;
  }
};

// renderSvg()'s phases: a layout of the hosts in plan order, the values of the heatmaps' cells,
// then one function per part of the picture, each appending to the SVG text.

// Where each host is drawn: positions in plan order, binned into at most kMaxCells cells.
struct Layout {
  size_t n = 0;                      // hosts
  size_t m = 0;                      // cells per side (n, or kMaxCells blocks above it)
  double cell = 0;                   // cell side, px
  std::vector<int> topo;             // position -> topology index
  std::map<std::string, int> posOf;  // host -> position
  // Group of each position per level of plan.groups (-1: none), for boundaries and medians.
  std::vector<std::vector<int>> groupAt;
  size_t bin(size_t p) const { return p * m / n; }
  size_t position(const std::string& host) const {
    auto it = posOf.find(host);
    if (it == posOf.end())
      throw InvalidInput(fmt::format("plan host '{}' is in hosts but not in order", host));
    return static_cast<size_t>(it->second);
  }
};

Layout layoutHosts(const Topology& t, const Plan& plan) {
  Layout L;
  L.n = plan.order.size();
  L.topo.resize(L.n);
  for (size_t p = 0; p < L.n; ++p) {
    L.topo[p] = t.indexOf(plan.order[p]);
    if (L.topo[p] < 0)
      throw InvalidInput(fmt::format("plan host '{}' is not in the topology", plan.order[p]));
    L.posOf[plan.order[p]] = static_cast<int>(p);
  }
  L.m = std::min(L.n, kMaxCells);
  L.cell = kPanel / static_cast<double>(L.m);
  L.groupAt.assign(plan.groups.size(), std::vector<int>(L.n, -1));
  for (size_t l = 0; l < plan.groups.size(); ++l)
    for (size_t g = 0; g < plan.groups[l].groups.size(); ++g)
      for (const auto& h : plan.groups[l].groups[g]) {
        auto it = L.posOf.find(h);
        if (it != L.posOf.end()) L.groupAt[l][it->second] = static_cast<int>(g);
      }
  return L;
}

// One heatmap: a value per cell (the measured value of one pair, or the median of a block's
// measured pairs; nullopt where nothing was measured) and its colour scale.
struct Heatmap {
  std::vector<std::optional<double>> value;  // m * m, row-major
  Scale scale;
};

// The pairs (positions a, b) a heatmap summarises, with their values for panel k (0 bandwidth,
// 1 latency). With matrices: every pair, its measured value (nullopt where missing). Without (a
// link model beyond kDenseMaxHosts hosts): the pairs of every step-th position, at most
// kSampledHosts of them (cells are blocks of hosts by then, and medians over a few of a block's
// pairs show the same), valued by the link model; latency only where it knows any.
constexpr size_t kSampledHosts = 512;

template <typename F>
void forEachPairValue(const Topology& t, const Layout& L, F&& f) {
  if (t.hasMatrices()) {
    for (size_t a = 0; a < L.n; ++a)
      for (size_t b = 0; b < L.n; ++b) {
        if (a == b) continue;
        const auto& bw = t.bandwidthMbps.at(L.topo[a], L.topo[b]);
        const auto& lat = t.latencyUs.at(L.topo[a], L.topo[b]);
        f(a, b, bw, lat ? std::optional<double>(lat->minUs) : std::nullopt);
      }
    return;
  }
  size_t step = (L.n + kSampledHosts - 1) / kSampledHosts;
  for (size_t a = 0; a < L.n; a += step)
    for (size_t b = 0; b < L.n; b += step) {
      if (a == b) continue;
      auto lat = t.pathLatencyUs(L.topo[a], L.topo[b]);
      f(a, b, t.pathMbps(L.topo[a], L.topo[b]), lat && *lat > 0 ? lat : std::nullopt);
    }
}

// The bandwidth (k = 0) and latency (k = 1) heatmaps.
std::array<Heatmap, 2> heatmaps(const Topology& t, const Layout& L) {
  const size_t m = L.m;
  std::vector<std::vector<double>> bwCells(m * m), latCells(m * m);
  forEachPairValue(t, L,
                   [&](size_t a, size_t b, std::optional<double> bw, std::optional<double> lat) {
                     size_t c = L.bin(a) * m + L.bin(b);
                     if (bw) bwCells[c].push_back(*bw);
                     if (lat) latCells[c].push_back(std::max(*lat, 1e-3));
                   });
  std::array<Heatmap, 2> h;
  h[0].scale = Scale{1e300, 0, true};
  h[1].scale = Scale{1e300, 0, false};
  for (int k = 0; k < 2; ++k) h[k].value.resize(m * m);
  for (size_t c = 0; c < m * m; ++c) {
    for (int k = 0; k < 2; ++k) {
      auto& cells = k == 0 ? bwCells[c] : latCells[c];
      if (cells.empty()) continue;
      double v = upperMedianInPlace(cells);
      h[k].value[c] = v;
      h[k].scale.lo = std::min(h[k].scale.lo, v);
      h[k].scale.hi = std::max(h[k].scale.hi, v);
    }
  }
  return h;
}

// The <svg> element, patterns, the arrow marker, the colour-bar gradients and the background.
void appendPreamble(std::string& s, double height) {
  s += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans, Helvetica, Arial, "
      "sans-serif\">\n",
      kWidth, height);
  s += "<defs>\n"
       "<pattern id=\"missing\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">"
       "<rect width=\"6\" height=\"6\" fill=\"#d9d9d9\"/>"
       "<path d=\"M0,6 L6,0\" stroke=\"#9a9a9a\" stroke-width=\"1\"/></pattern>\n"
       "<marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" "
       "markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" "
       "fill=\"#ff4d00\"/></marker>\n";
  for (int k = 0; k < 2; ++k) {
    s += fmt::format("<linearGradient id=\"scale{}\" x1=\"0\" x2=\"1\" y1=\"0\" y2=\"0\">", k);
    for (int i = 0; i <= 8; ++i)
      s += fmt::format("<stop offset=\"{:.3f}\" stop-color=\"{}\"/>", i / 8.0, color(i / 8.0));
    s += "</linearGradient>\n";
  }
  s += "</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
}

// The title (hosts, groups, confidence) and the predicted gain.
void appendTitle(std::string& s, const Plan& plan, size_t n) {
  size_t innermost = plan.groups.empty() ? 0 : plan.groups.front().groups.size();
  std::string what = plan.groups.empty()
                         ? "no groups found"
                         : fmt::format("{} {}s", innermost, plan.groups.front().name);
  for (size_t l = 1; l < plan.groups.size(); ++l)
    what += fmt::format(" in {} {}s", plan.groups[l].groups.size(), plan.groups[l].name);
  s += fmt::format(
      "<text x=\"{}\" y=\"34\" font-size=\"22\" font-weight=\"bold\">rankmap plan: "
      "{} hosts, {} (confidence {:.2f})</text>\n",
      kLeft, n, esc(what), plan.confidence);
  std::string gain;
  if (plan.confidence == 0 && plan.predicted.planUs == 0)
    gain = "identity order: not enough data to plan (fallback)";
  else
    gain = fmt::format(
        "predicted {:.2f}x faster than the input order: {} {} -> {}, ring "
        "bottleneck {:.4g} -> {:.4g} Mbit/s",
        plan.predicted.speedup, plan.predicted.basis, timeText(plan.predicted.inputOrderUs),
        timeText(plan.predicted.planUs), plan.predicted.inputBottleneckMbps,
        plan.predicted.bottleneckMbps);
  s += fmt::format("<text x=\"{}\" y=\"62\" font-size=\"16\" fill=\"#b33000\">{}</text>\n", kLeft,
                   esc(gain));
}

// One panel (k = 0 bandwidth, k = 1 latency): what it draws, and where.
struct Panel {
  int k = 0;
  double x0 = 0, y0 = 0;
  const Heatmap* map = nullptr;
};

// The panel's title and, with groups, why they are what they are: the median of the pairs
// inside the innermost groups against the median across them.
void appendPanelTitle(std::string& s, const Topology& t, const Plan& plan, const Layout& L,
                      const Panel& P) {
  static const char* titles[2] = {"bandwidth, Mbit/s (row sends to column)",
                                  "latency, us one-way minimum (row to column)"};
  const size_t n = L.n;
  double ty = kTop - (n <= 48 ? 78 : 28);
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                   P.x0, ty, titles[P.k]);
  if (L.groupAt.empty()) return;
  std::vector<double> in, out;
  forEachPairValue(t, L,
                   [&](size_t a, size_t b, std::optional<double> bw, std::optional<double> lat) {
                     std::optional<double> v = P.k == 0 ? bw : lat;
                     if (v) (L.groupAt[0][a] == L.groupAt[0][b] ? in : out).push_back(*v);
                   });
  if (in.empty() || out.empty()) return;
  double mi = upperMedianInPlace(in), mo = upperMedianInPlace(out);
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"13\" fill=\"#444\">median within "
      "{}s {:.4g}, across {:.4g} ({:.2f}x)</text>\n",
      P.x0, ty + 18, esc(plan.groups.front().name), mi, mo, P.k == 0 ? mi / mo : mo / mi);
}

// The heatmap's cells: white diagonal (one host per cell), colour by value, hatched if missing.
void appendCells(std::string& s, const Layout& L, const Panel& P) {
  const size_t m = L.m;
  s += fmt::format("<g shape-rendering=\"crispEdges\">\n");
  for (size_t r = 0; r < m; ++r)
    for (size_t c = 0; c < m; ++c) {
      const auto& v = P.map->value[r * m + c];
      std::string fill;
      if (r == c && L.n == m)
        fill = "#ffffff";
      else if (v)
        fill = color(P.map->scale.t(*v));
      else
        fill = "url(#missing)";
      s += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
          "fill=\"{}\"/>\n",
          P.x0 + c * L.cell, P.y0 + r * L.cell, L.cell + 0.05, L.cell + 0.05, fill);
    }
  s += "</g>\n";
}

// Group boundaries: thin white for the innermost level, thick dark for outer ones; then the
// panel's frame.
void appendBoundaries(std::string& s, const Layout& L, const Panel& P) {
  const size_t n = L.n;
  for (size_t l = 0; l < L.groupAt.size(); ++l) {
    for (size_t p = 1; p < n; ++p) {
      if (L.groupAt[l][p] == L.groupAt[l][p - 1]) continue;
      bool outerToo = false;
      for (size_t u = l + 1; u < L.groupAt.size(); ++u)
        outerToo = outerToo || L.groupAt[u][p] != L.groupAt[u][p - 1];
      if (outerToo) continue;  // drawn by the outer level
      double at = static_cast<double>(p) * kPanel / n;
      const char* style = l == 0 ? "stroke=\"#ffffff\" stroke-width=\"2\""
                                 : "stroke=\"#e8175d\" stroke-width=\"3.5\"";
      s += fmt::format(
          "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\" {3}/>"
          "<line x1=\"{4:.2f}\" y1=\"{5:.2f}\" x2=\"{6:.2f}\" y2=\"{5:.2f}\" {3}/>\n",
          P.x0 + at, P.y0, P.y0 + kPanel, style, P.x0, P.y0 + at, P.x0 + kPanel);
    }
  }
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
      "stroke=\"#333\" stroke-width=\"1\"/>\n",
      P.x0, P.y0, kPanel, kPanel);
}

// The rings: the cells (sender row, receiver column) each ring's hops use. The input order's
// as hollow squares joined by a dashed line; the plan's (the superdiagonal, position p sends to
// p + 1, and the closing hop) as dots joined by arrows. Hops inside one block are not marked.
void appendRings(std::string& s, const Plan& plan, const Layout& L, const Panel& P) {
  const size_t n = L.n, m = L.m;
  auto centre = [&](size_t a, size_t b) {
    return std::pair{P.x0 + (L.bin(b) + 0.5) * L.cell, P.y0 + (L.bin(a) + 0.5) * L.cell};
  };
  double mark = std::clamp(L.cell * 0.22, 2.0, 9.0);
  {
    std::string path;
    std::string marks;
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < 512; ++i) {
      size_t a = L.position(plan.hosts[i]), b = L.position(plan.hosts[(i + 1) % n]);
      if (n > 1 && L.bin(a) == L.bin(b) && m < n) continue;
      auto [x, y] = centre(a, b);
      path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", x, y);
      marks += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"none\" stroke=\"#000\" stroke-width=\"1.6\"/>\n",
          x - mark, y - mark, 2 * mark, 2 * mark);
      ++shown;
    }
    if (n > 1 && !path.empty())
      s += fmt::format(
          "<path d=\"{}\" fill=\"none\" stroke=\"#000\" stroke-opacity=\"0.45\" "
          "stroke-width=\"1.2\" stroke-dasharray=\"4 3\"/>\n{}",
          path, marks);
  }
  if (n <= 1) return;
  std::string marks;
  std::pair<double, double> prev{0, 0};
  bool have = false;
  for (size_t p = 0; p < n; ++p) {
    size_t a = p, b = (p + 1) % n;
    if (L.bin(a) == L.bin(b) && m < n) continue;
    auto cur = centre(a, b);
    if (have && b != 0)
      s += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
          "stroke=\"#ff4d00\" stroke-width=\"2\" marker-end=\"url(#arrow)\"/>\n",
          prev.first, prev.second, cur.first, cur.second);
    marks += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"#ff4d00\" "
        "stroke=\"#fff\" stroke-width=\"1\"/>\n",
        cur.first, cur.second, mark);
    prev = cur;
    have = true;
  }
  s += marks;
}

// A mesh dimension's colour and marker (the first kMeshDimsDrawn dimensions are drawn).
constexpr size_t kMeshDimsDrawn = 4;
constexpr std::array<const char*, kMeshDimsDrawn> kMeshColours = {"#00b4d8", "#e040fb", "#76ff03",
                                                                  "#ffffff"};
// Cells marked per dimension at most (the rest are in `rankmap show`'s text).
constexpr size_t kMeshMarksPerDim = 4096;

// A diamond of half-width r at (x, y); `attrs` go into the element.
std::string diamond(double x, double y, double r, const char* fill, const std::string& attrs) {
  return fmt::format(
      "<path {}d=\"M{:.1f},{:.1f} L{:.1f},{:.1f} L{:.1f},{:.1f} L{:.1f},{:.1f} Z\" fill=\"{}\" "
      "stroke=\"#000\" stroke-width=\"0.8\"/>\n",
      attrs, x, y - r, x + r, y, x, y + r, x - r, y, fill);
}

// The job's groups (plan.mesh): per dimension, the cells (sender row, receiver column) its groups'
// traffic uses between hosts, as diamonds in the dimension's colour, side by side in the lower
// part of a cell (the plan ring's dot is at its centre).
void appendMeshGroups(std::string& s, const Plan& plan, const Layout& L, const Panel& P) {
  if (!plan.mesh) return;
  const auto& dims = plan.mesh->dims;
  size_t drawn = std::min(dims.size(), kMeshDimsDrawn);
  size_t rph = static_cast<size_t>(std::max(1, plan.ranksPerHost));
  double r = std::clamp(L.cell * 0.16, 1.5, 6.0);
  for (size_t d = 0; d < drawn; ++d) {
    std::set<std::pair<size_t, size_t>> cells;
    for (const auto& g : meshGroups(dims, d))
      for (const MeshHop& h : meshGroupTraffic(dims[d], g)) {
        size_t a = static_cast<size_t>(h.from) / rph, b = static_cast<size_t>(h.to) / rph;
        if (a != b && cells.size() < kMeshMarksPerDim) cells.insert({L.bin(a), L.bin(b)});
      }
    double dx = (static_cast<double>(d) - (static_cast<double>(drawn) - 1) / 2) * 2.2 * r;
    std::string attrs = fmt::format("class=\"mesh-hop\" data-dim=\"{}\" ", esc(dims[d].name));
    for (auto [a, b] : cells)
      s += diamond(P.x0 + (b + 0.5) * L.cell + dx, P.y0 + (a + 0.75) * L.cell, r, kMeshColours[d],
                   attrs);
  }
}

// Axis labels: host names when they fit (48 hosts), else nothing but the boundaries. Row labels
// on the first panel only.
void appendAxisLabels(std::string& s, const Plan& plan, const Layout& L, const Panel& P) {
  if (L.n > 48) return;
  double font = std::min(12.0, L.cell * 0.6);
  for (size_t p = 0; p < L.n; ++p) {
    double c = (p + 0.5) * L.cell;
    if (P.k == 0)
      s += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{:.1f}\" "
          "text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n",
          P.x0 - 6, P.y0 + c, font, esc(plan.order[p]));
    s += fmt::format(
        "<text x=\"{0:.1f}\" y=\"{1:.1f}\" font-size=\"{2:.1f}\" "
        "transform=\"rotate(-60 {0:.1f} {1:.1f})\">{3}</text>\n",
        P.x0 + c, P.y0 - 6, font, esc(plan.order[p]));
  }
}

// The colour bar under the panel: dark (slow, far) on the left, bright (fast, near) on the
// right, for both panels, with five values on a log scale.
void appendColourBar(std::string& s, const Panel& P) {
  const Scale& sc = P.map->scale;
  double by = P.y0 + kPanel + 26;
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"14\" fill=\"url(#scale{})\" "
      "stroke=\"#333\" stroke-width=\"0.5\"/>\n",
      P.x0, by, kPanel, P.k);
  if (sc.hi >= sc.lo) {
    for (int i = 0; i <= 4; ++i) {
      double from = P.k == 0 ? sc.lo : sc.hi, to = P.k == 0 ? sc.hi : sc.lo;
      double v = std::exp(std::log(from) + i / 4.0 * (std::log(to) - std::log(from)));
      double tx = i / 4.0;
      s += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" "
          "text-anchor=\"middle\">{:.3g}</text>\n",
          P.x0 + tx * kPanel, by + 30, v);
    }
  } else {
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\">no measurements</text>\n", P.x0,
                     by + 30);
  }
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" text-anchor=\"end\" "
      "fill=\"#555\">brighter = {}</text>\n",
      P.x0 + kPanel, by - 6, P.k == 0 ? "faster" : "nearer");
}

// The legend under the panels; returns the y of the line after it.
double appendLegend(std::string& s, const Topology& t, const Plan& plan, const Layout& L) {
  double ly = kTop + kPanel + 92;
  double lx = kLeft;
  s += fmt::format(
      "<circle cx=\"{}\" cy=\"{}\" r=\"7\" fill=\"#ff4d00\"/>"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#ff4d00\" "
      "stroke-width=\"2\" marker-end=\"url(#arrow)\"/>"
      "<text x=\"{}\" y=\"{}\" font-size=\"14\">plan ring: the host pairs the new rank "
      "order sends over (stays inside groups, crosses each boundary once)</text>\n",
      lx + 8, ly, lx + 16, ly, lx + 40, ly, lx + 50, ly + 5);
  ly += 26;
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"none\" "
      "stroke=\"#000\" stroke-width=\"1.6\"/><text x=\"{}\" y=\"{}\" "
      "font-size=\"14\">input-order ring: the pairs the original rank order sends "
      "over</text>\n",
      lx + 1, ly - 7, lx + 50, ly + 5);
  ly += 26;
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"30\" height=\"14\" fill=\"#3b528b\"/>"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#fff\" "
      "stroke-width=\"2\"/>",
      lx, ly - 7, lx + 15, ly - 7, lx + 15, ly + 7);
  std::string bounds =
      plan.groups.empty() ? "group boundary (none found)" : plan.groups.front().name + " boundary";
  if (plan.groups.size() > 1) {
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e8175d\" "
        "stroke-width=\"3.5\"/>",
        lx + 25, ly - 7, lx + 25, ly + 7);
    bounds += "; thick: " + plan.groups[1].name + " boundary";
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"14\">{}</text>", lx + 50, ly + 5,
                   esc(bounds));
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"30\" height=\"14\" fill=\"url(#missing)\"/>"
      "<text x=\"{}\" y=\"{}\" font-size=\"14\">not measured</text>\n",
      lx + 560, ly - 7, lx + 600, ly + 5);
  if (plan.mesh) {
    const auto& dims = plan.mesh->dims;
    for (size_t d = 0; d < dims.size() && d < kMeshDimsDrawn; ++d) {
      ly += 26;
      const MeshDim& dim = dims[d];
      std::string slowest;
      if (!dim.groupsUs.empty())
        slowest =
            fmt::format("; slowest group alone {}",
                        timeText(*std::max_element(dim.groupsUs.begin(), dim.groupsUs.end())));
      s += diamond(lx + 15, ly, 7, kMeshColours[d], "");
      s += fmt::format(
          "<text x=\"{}\" y=\"{}\" font-size=\"14\">{} groups ({} of {}, {} {} each): the host "
          "pairs their traffic uses; all at once {}{}</text>\n",
          lx + 50, ly + 5, esc(dim.name), plan.worldSize() / static_cast<size_t>(dim.size),
          dim.size, dim.collective, sizeText(dim.bytes), timeText(dim.predictedUs), slowest);
    }
  }
  if (L.m < L.n) {
    ly += 26;
    s += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"13\" fill=\"#555\">{} hosts drawn as "
        "{} x {} blocks (median of each block's pairs); hops inside a block are not "
        "marked</text>\n",
        lx, ly + 5, L.n, L.m, L.m);
  }
  if (t.links) {
    ly += 26;
    s += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"13\" fill=\"#555\">{}; cells show {}</text>\n", lx,
        ly + 5, esc(linkModelText(t.size(), t.measured.size())),
        t.hasMatrices() ? "the matrices (measured and inferred values)"
                        : "the link model (sampled pairs)");
  }
  return ly + 30;
}

// The plan's algorithm per collective and message size, one line each, from y = `ly`; returns
// the y of the line after them.
double appendAlgorithms(std::string& s, const Plan& plan, double ly) {
  for (const auto& [coll, ranges] : plan.collectives) {
    std::string line = coll + ":";
    for (const auto& r : ranges)
      line +=
          fmt::format(" {} {}{};", r.algorithm, r.maxBytes == AlgoRange::kUnbounded ? ">= " : "",
                      r.maxBytes == AlgoRange::kUnbounded
                          ? sizeText(r.minBytes)
                          : sizeText(r.minBytes) + " .. " + sizeText(r.maxBytes));
    line.pop_back();
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"14\">{}</text>\n", kLeft, ly, esc(line));
    ly += 22;
  }
  return ly;
}

// The chunk weights as a strip of bars, hosts in ring order, each as wide as its share of the
// total (a slow host's bar is narrow, and orange); innermost groups in alternating shades.
// From y = `y0` down kSharesHeight.
void appendShares(std::string& s, const Plan& plan, const Layout& L, double y0) {
  const auto& w = plan.chunkWeights;
  const double width = 2 * kPanel + kGap;
  double total = 0, top = 0;
  for (double x : w) {
    total += x;
    top = std::max(top, x);
  }
  if (!(total > 0)) return;
  s += fmt::format(
      "<g id=\"shares\"><text x=\"{}\" y=\"{}\" font-size=\"15\" font-weight=\"bold\">hier "
      "shares (chunk weights), hosts in ring order: bar width = the host's share of its group's "
      "buffer</text>\n<text x=\"{}\" y=\"{}\" font-size=\"13\" fill=\"#444\">{}</text>\n",
      kLeft, y0 + 16, kLeft, y0 + 34,
      plan.chunkWeightsBasis == Plan::kWeightsByUplinks
          ? "shares balance the racks' uplinks in the cross-group exchange: one host per rack, "
            "its leader, holds the rack's share and exchanges it with the other leaders; orange "
            "hosts (width 0) chain-reduce to their leader (a rack all orange: its uplink is too "
            "slow to help)"
          : "shares follow the host link rates measured: orange hosts are slower and own less");
  double x = kLeft, by = y0 + 46;
  for (size_t p = 0; p < w.size() && p < L.n; ++p) {
    double bw = width * w[p] / total;
    bool small = w[p] < 0.99 * top;
    int group = L.groupAt.empty() ? 0 : L.groupAt[0][p];
    std::string fill = small ? "#ff8c1a" : (group % 2 ? "#3b528b" : "#21918c");
    s += fmt::format(
        "<rect class=\"share\" data-host=\"{0}\" data-weight=\"{1:.6g}\" x=\"{2:.2f}\" "
        "y=\"{3:.1f}\" width=\"{4:.2f}\" height=\"28\" fill=\"{5}\" stroke=\"#fff\" "
        "stroke-width=\"{6}\"><title>{0}: share {1:.4g} ({7:.2g}x the largest)</title></rect>\n",
        esc(plan.order[p]), w[p], x, by, bw, fill, L.n <= 128 ? 1 : 0, w[p] / top);
    if (L.n <= 48)
      s += fmt::format(
          "<text x=\"{0:.1f}\" y=\"{1:.1f}\" font-size=\"10\" "
          "transform=\"rotate(45 {0:.1f} {1:.1f})\">{2}</text>\n",
          x + bw / 2, by + 38, esc(plan.order[p]));
    x += bw;
  }
  s += "</g>\n";
}

// Each packed tree (up to kTreesDrawn) as a diagram: hosts on a circle in ring order, a line
// from each host to its parent, the root a large dot, its weight and root in the title. From
// y = `y0` down kTreesHeight.
void appendTrees(std::string& s, const Plan& plan, const Layout& L, double y0) {
  const size_t n = L.n;
  std::vector<double> load = treeLoads(plan);
  double most = load.empty() ? 0 : *std::max_element(load.begin(), load.end());
  s += fmt::format(
      "<g id=\"trees\"><text x=\"{}\" y=\"{}\" font-size=\"15\" font-weight=\"bold\">packed "
      "trees: {} tree(s); the buffer is split by weight, each piece reduced to its root and "
      "broadcast back</text>\n<text x=\"{}\" y=\"{}\" font-size=\"13\" fill=\"#444\">hosts on "
      "a circle in ring order (position 0 at the top, clockwise); a line joins each host to its "
      "parent; the large dot is the root</text>\n<text x=\"{}\" y=\"{}\" font-size=\"13\" "
      "fill=\"#444\">a host's link carries its tree's piece once per line at it, each way: at "
      "most {:.3g}x the buffer over all trees (a ring: {:.3g}x on every host)</text>\n",
      kLeft, y0 + 16, plan.trees.size(), kLeft, y0 + 34, kLeft, y0 + 52, most,
      n > 0 ? 2.0 * (n - 1) / n : 0.0);
  const double radius = kTreeBox / 2 - 30, dot = std::clamp(240.0 / n, 1.2, 4.0);
  for (size_t t = 0; t < plan.trees.size() && t < kTreesDrawn; ++t) {
    const PackedTree& tree = plan.trees[t];
    double cx = kLeft + kTreeBox / 2 + t * (kTreeBox + 10), cy = y0 + 68 + kTreeBox / 2;
    auto at = [&](size_t p) {
      double a = 2 * std::numbers::pi * static_cast<double>(p) / n - std::numbers::pi / 2;
      return std::pair{cx + radius * std::cos(a), cy + radius * std::sin(a)};
    };
    size_t root = 0;
    for (size_t p = 0; p < tree.parent.size() && p < n; ++p)
      if (tree.parent[p] < 0) root = p;
    s += fmt::format("<g class=\"tree\" data-weight=\"{:.6g}\" data-root=\"{}\">\n", tree.weight,
                     esc(plan.order[root]));
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"13\" text-anchor=\"middle\">tree {}: "
        "{:.3g}% of the buffer, root {}</text>\n",
        cx, y0 + 76, t + 1, 100 * tree.weight, esc(plan.order[root]));
    for (size_t p = 0; p < tree.parent.size() && p < n; ++p) {
      if (tree.parent[p] < 0 || static_cast<size_t>(tree.parent[p]) >= n) continue;
      auto [x1, y1] = at(p);
      auto [x2, y2] = at(static_cast<size_t>(tree.parent[p]));
      s += fmt::format(
          "<line class=\"tree-edge\" x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
          "stroke=\"#3b528b\" stroke-opacity=\"0.6\" stroke-width=\"1\"/>\n",
          x1, y1, x2, y2);
    }
    for (size_t p = 0; p < n; ++p) {
      auto [x, y] = at(p);
      bool isRoot = p == root;
      s += fmt::format(
          "<circle class=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"{}\"><title>{}"
          "</title></circle>\n",
          isRoot ? "tree-root" : "tree-host", x, y, isRoot ? 7.0 : dot, isRoot ? "#ff4d00" : "#333",
          esc(plan.order[p]));
      if (n <= 24) {  // names fit around the circle
        auto [lx, ly] = at(p);
        double dx = lx - cx, dy = ly - cy, len = std::max(1e-9, std::hypot(dx, dy));
        s += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" text-anchor=\"middle\" "
            "dominant-baseline=\"middle\">{}</text>\n",
            lx + 14 * dx / len, ly + 14 * dy / len, esc(plan.order[p]));
      }
    }
    s += "</g>\n";
  }
  if (plan.trees.size() > kTreesDrawn)
    s += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"13\" fill=\"#444\">... and {} more trees (rankmap "
        "show lists them)</text>\n",
        kLeft, y0 + kTreesHeight - 6, plan.trees.size() - kTreesDrawn);
  s += "</g>\n";
}

}  // namespace

std::string renderSvg(const Topology& t, const Plan& plan) {
  const Layout L = layoutHosts(t, plan);
  const std::array<Heatmap, 2> maps = heatmaps(t, L);
  std::string s;
  appendTitle(s, plan, L.n);
  for (int k = 0; k < 2; ++k) {
    const Panel P{k, kLeft + k * (kPanel + kGap), kTop, &maps[k]};
    appendPanelTitle(s, t, plan, L, P);
    appendCells(s, L, P);
    appendBoundaries(s, L, P);
    appendRings(s, plan, L, P);
    appendMeshGroups(s, plan, L, P);
    appendAxisLabels(s, plan, L, P);
    appendColourBar(s, P);
  }
  double y = std::max(kHeight, appendAlgorithms(s, plan, appendLegend(s, t, plan, L)) + 10);
  if (!plan.chunkWeights.empty() && plan.chunkWeights.size() == L.n) {
    appendShares(s, plan, L, y);
    y += kSharesHeight;
  }
  if (!plan.trees.empty()) {
    appendTrees(s, plan, L, y);
    y += kTreesHeight;
  }
  std::string out;
  appendPreamble(out, y);
  return out + s + "</svg>\n";
}

}  // namespace rankmap::reorder
