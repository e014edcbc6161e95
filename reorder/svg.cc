#include "reorder/svg.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "common/error.h"
#include "reorder/report.h"

namespace rankmap::reorder {
namespace {

constexpr double kLeft = 150, kTop = 175, kPanel = 520, kGap = 90;
constexpr double kWidth = kLeft + 2 * kPanel + kGap + 60;
constexpr double kHeight = kTop + kPanel + 250;

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

double medianOf(std::vector<double>& v) {
  auto mid = v.begin() + v.size() / 2;
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

std::string renderSvg(const Topology& t, const Plan& plan) {
  size_t n = plan.order.size();
  std::vector<int> topo(n);  // position -> topology index
  std::map<std::string, int> posOf;
  for (size_t p = 0; p < n; ++p) {
    topo[p] = t.indexOf(plan.order[p]);
    if (topo[p] < 0)
      throw InvalidInput(fmt::format("plan host '{}' is not in the topology", plan.order[p]));
    posOf[plan.order[p]] = static_cast<int>(p);
  }
  size_t m = std::min(n, kMaxCells);
  auto bin = [&](size_t p) { return p * m / n; };
  double cell = kPanel / static_cast<double>(m);

  // Cell values: the measured value (one pair), or the median of a block's measured pairs.
  std::vector<std::vector<double>> bwCells(m * m), latCells(m * m);
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b) {
      if (a == b) continue;
      size_t c = bin(a) * m + bin(b);
      const auto& bw = t.bandwidthMbps.at(topo[a], topo[b]);
      const auto& lat = t.latencyUs.at(topo[a], topo[b]);
      if (bw) bwCells[c].push_back(*bw);
      if (lat) latCells[c].push_back(std::max(lat->minUs, 1e-3));
    }
  std::vector<std::optional<double>> bw(m * m), lat(m * m);
  Scale bwScale{1e300, 0, true}, latScale{1e300, 0, false};
  for (size_t c = 0; c < m * m; ++c) {
    if (!bwCells[c].empty()) {
      bw[c] = medianOf(bwCells[c]);
      bwScale.lo = std::min(bwScale.lo, *bw[c]);
      bwScale.hi = std::max(bwScale.hi, *bw[c]);
    }
    if (!latCells[c].empty()) {
      lat[c] = medianOf(latCells[c]);
      latScale.lo = std::min(latScale.lo, *lat[c]);
      latScale.hi = std::max(latScale.hi, *lat[c]);
    }
  }

  // Group of each position per level, for boundaries.
  std::vector<std::vector<int>> groupAt(plan.groups.size(), std::vector<int>(n, -1));
  for (size_t l = 0; l < plan.groups.size(); ++l)
    for (size_t g = 0; g < plan.groups[l].groups.size(); ++g)
      for (const auto& h : plan.groups[l].groups[g]) {
        auto it = posOf.find(h);
        if (it != posOf.end()) groupAt[l][it->second] = static_cast<int>(g);
      }

  std::string s;
  s += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans, Helvetica, Arial, "
      "sans-serif\">\n",
      kWidth, kHeight);
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

  // Title.
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

  const char* titles[2] = {"bandwidth, Mbit/s (row sends to column)",
                           "latency, us one-way minimum (row to column)"};
  for (int k = 0; k < 2; ++k) {
    double x0 = kLeft + k * (kPanel + kGap), y0 = kTop;
    const auto& val = k == 0 ? bw : lat;
    const Scale& sc = k == 0 ? bwScale : latScale;
    double ty = kTop - (n <= 48 ? 78 : 28);
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                     x0, ty, titles[k]);
    if (!groupAt.empty()) {
      // Why the groups are what they are: the median inside groups against across them.
      std::vector<double> in, out;
      for (size_t a = 0; a < n; ++a)
        for (size_t b = 0; b < n; ++b) {
          if (a == b) continue;
          double v = 0;
          if (k == 0 && t.bandwidthMbps.at(topo[a], topo[b]))
            v = *t.bandwidthMbps.at(topo[a], topo[b]);
          else if (k == 1 && t.latencyUs.at(topo[a], topo[b]))
            v = t.latencyUs.at(topo[a], topo[b])->minUs;
          else
            continue;
          (groupAt[0][a] == groupAt[0][b] ? in : out).push_back(v);
        }
      if (!in.empty() && !out.empty()) {
        double mi = medianOf(in), mo = medianOf(out);
        s += fmt::format(
            "<text x=\"{}\" y=\"{}\" font-size=\"13\" fill=\"#444\">median within "
            "{}s {:.4g}, across {:.4g} ({:.2f}x)</text>\n",
            x0, ty + 18, esc(plan.groups.front().name), mi, mo, k == 0 ? mi / mo : mo / mi);
      }
    }
    s += fmt::format("<g shape-rendering=\"crispEdges\">\n");
    for (size_t r = 0; r < m; ++r)
      for (size_t c = 0; c < m; ++c) {
        std::string fill;
        if (r == c && n == m)
          fill = "#ffffff";
        else if (val[r * m + c])
          fill = color(sc.t(*val[r * m + c]));
        else
          fill = "url(#missing)";
        s += fmt::format(
            "<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
            "fill=\"{}\"/>\n",
            x0 + c * cell, y0 + r * cell, cell + 0.05, cell + 0.05, fill);
      }
    s += "</g>\n";
    // Group boundaries: thin white for the innermost level, thick dark for outer ones.
    for (size_t l = 0; l < groupAt.size(); ++l) {
      for (size_t p = 1; p < n; ++p) {
        if (groupAt[l][p] == groupAt[l][p - 1]) continue;
        bool outerToo = false;
        for (size_t u = l + 1; u < groupAt.size(); ++u)
          outerToo = outerToo || groupAt[u][p] != groupAt[u][p - 1];
        if (outerToo) continue;  // drawn by the outer level
        double at = static_cast<double>(p) * kPanel / n;
        const char* style = l == 0 ? "stroke=\"#ffffff\" stroke-width=\"2\""
                                   : "stroke=\"#e8175d\" stroke-width=\"3.5\"";
        s += fmt::format(
            "<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\" {3}/>"
            "<line x1=\"{4:.2f}\" y1=\"{5:.2f}\" x2=\"{6:.2f}\" y2=\"{5:.2f}\" {3}/>\n",
            x0 + at, y0, y0 + kPanel, style, x0, y0 + at, x0 + kPanel);
      }
    }
    s += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
        "stroke=\"#333\" stroke-width=\"1\"/>\n",
        x0, y0, kPanel, kPanel);

    // Rings: the cells (sender row, receiver column) each ring's hops use.
    auto centre = [&](size_t a, size_t b) {
      return std::pair{x0 + (bin(b) + 0.5) * cell, y0 + (bin(a) + 0.5) * cell};
    };
    double mark = std::clamp(cell * 0.22, 2.0, 9.0);
    // Input order: hollow squares joined by a dashed line.
    {
      std::string path;
      std::string marks;
      size_t shown = 0;
      for (size_t i = 0; i < n && shown < 512; ++i) {
        size_t a = posOf[plan.hosts[i]], b = posOf[plan.hosts[(i + 1) % n]];
        if (n > 1 && bin(a) == bin(b) && m < n) continue;
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
    // Plan order: the superdiagonal (position p sends to p + 1) and the closing hop, arrows.
    if (n > 1) {
      std::string marks;
      std::pair<double, double> prev{0, 0};
      bool have = false;
      for (size_t p = 0; p < n; ++p) {
        size_t a = p, b = (p + 1) % n;
        if (bin(a) == bin(b) && m < n) continue;
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

    // Axis labels: host names when they fit, else nothing but the boundaries.
    if (n <= 48) {
      double font = std::min(12.0, cell * 0.6);
      for (size_t p = 0; p < n; ++p) {
        double c = (p + 0.5) * cell;
        if (k == 0)
          s += fmt::format(
              "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{:.1f}\" "
              "text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n",
              x0 - 6, y0 + c, font, esc(plan.order[p]));
        s += fmt::format(
            "<text x=\"{0:.1f}\" y=\"{1:.1f}\" font-size=\"{2:.1f}\" "
            "transform=\"rotate(-60 {0:.1f} {1:.1f})\">{3}</text>\n",
            x0 + c, y0 - 6, font, esc(plan.order[p]));
      }
    }
    // Colour bar.
    double by = y0 + kPanel + 26;
    s += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"14\" fill=\"url(#scale{})\" "
        "stroke=\"#333\" stroke-width=\"0.5\"/>\n",
        x0, by, kPanel, k);
    if (sc.hi >= sc.lo) {
      // Dark (slow, far) on the left, bright (fast, near) on the right, for both.
      for (int i = 0; i <= 4; ++i) {
        double from = k == 0 ? sc.lo : sc.hi, to = k == 0 ? sc.hi : sc.lo;
        double v = std::exp(std::log(from) + i / 4.0 * (std::log(to) - std::log(from)));
        double tx = i / 4.0;
        s += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" "
            "text-anchor=\"middle\">{:.3g}</text>\n",
            x0 + tx * kPanel, by + 30, v);
      }
    } else {
      s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\">no measurements</text>\n", x0,
                       by + 30);
    }
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" text-anchor=\"end\" "
        "fill=\"#555\">brighter = {}</text>\n",
        x0 + kPanel, by - 6, k == 0 ? "faster" : "nearer");
  }

  // Legend.
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
  if (m < n) {
    ly += 26;
    s += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"13\" fill=\"#555\">{} hosts drawn as "
        "{} x {} blocks (median of each block's pairs); hops inside a block are not "
        "marked</text>\n",
        lx, ly + 5, n, m, m);
  }
  ly += 30;
  for (const auto& [coll, ranges] : plan.collectives) {
    std::string line = coll + ":";
    for (const auto& r : ranges)
      line +=
          fmt::format(" {} {}{};", r.algorithm, r.maxBytes == AlgoRange::kUnbounded ? ">= " : "",
                      r.maxBytes == AlgoRange::kUnbounded
                          ? sizeText(r.minBytes)
                          : sizeText(r.minBytes) + " .. " + sizeText(r.maxBytes));
    line.pop_back();
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"14\">{}</text>\n", lx, ly, esc(line));
    ly += 22;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace rankmap::reorder
