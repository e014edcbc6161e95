#include "probe/drift.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "probe/stats.h"

namespace rankmap::probe {

double relativeChange(double a, double b) {
  if (a <= 0) return b > 0 ? std::numeric_limits<double>::infinity() : 0;
  return std::fabs(b - a) / a;
}

std::optional<double> pairMbps(const Topology& t, size_t a, size_t b) {
  if (t.hasMatrices()) return t.bandwidthMbps.at(a, b);
  return t.pathMbps(static_cast<int>(a), static_cast<int>(b));
}

size_t changedPairs(const Topology& a, const Topology& b, double threshold) {
  size_t n = 0;
  std::vector<int> inB(a.size());
  for (size_t i = 0; i < a.size(); ++i) inB[i] = b.indexOf(a.hosts[i].name);
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a.size(); ++j) {
      if (i == j || inB[i] < 0 || inB[j] < 0) continue;
      auto x = pairMbps(a, i, j);
      auto y = pairMbps(b, static_cast<size_t>(inB[i]), static_cast<size_t>(inB[j]));
      if (x && y && relativeChange(*x, *y) > threshold) ++n;
    }
  return n;
}

namespace {

// Whether `busy`, host `host`'s busy fraction, is at least kStandOut x the median of the other
// hosts' in `sendBusy`; none: nothing to compare with.
bool busyStandsOut(const std::string& host, double busy,
                   const std::map<std::string, double>& sendBusy) {
  std::vector<double> others;
  for (const auto& [h, f] : sendBusy)
    if (h != host) others.push_back(f);
  return !others.empty() && busy >= kStandOut * median(std::move(others));
}

}  // namespace

bool standsOut(const Backlog& b, const std::map<std::string, double>& sendBusy) {
  return b.mbps > 0 && busyStandsOut(b.src, b.busy, sendBusy);
}

std::set<std::string> slowSenders(const std::vector<Backlog>& backlogged,
                                  const std::map<std::string, double>& sendBusy,
                                  const std::map<std::string, double>& sendPeak) {
  std::set<std::string> out;
  for (const auto& b : backlogged)
    if (standsOut(b, sendBusy)) out.insert(b.src);
  for (const auto& [h, f] : sendPeak)
    if (f >= kSlowSenderBusy && busyStandsOut(h, f, sendPeak)) out.insert(h);
  return out;
}

std::optional<Topology> patchBacklogged(const Topology& t, const std::vector<Backlog>& backlogged,
                                        const std::map<std::string, double>& sendBusy,
                                        double threshold, std::vector<std::string>& notes) {
  std::map<int, double> sending;  // host index -> Mbit/s of its backlogged series
  for (const auto& b : backlogged) {
    const int h = t.indexOf(b.src);
    const int to = t.indexOf(b.dst);
    if (h < 0 || to < 0 || !standsOut(b, sendBusy)) continue;
    // A flow that gets what its path carries alone (an uplink narrower than the host links)
    // says nothing against the sender's host link.
    if (t.hasMatrices())
      if (const auto& alone = t.bandwidthMbps.at(static_cast<size_t>(h), static_cast<size_t>(to));
          alone && b.mbps >= *alone * (1 - threshold))
        continue;
    sending[h] += b.mbps;
  }
  std::optional<Topology> out;
  for (const auto& [h, mbps] : sending) {
    const size_t i = static_cast<size_t>(h);
    double model = 0;
    if (t.links) {
      model = t.links->hosts.at(i).outMbps;
    } else if (t.hasMatrices()) {
      for (size_t j = 0; j < t.size(); ++j)
        if (j != i && t.bandwidthMbps.at(i, j)) model = std::max(model, *t.bandwidthMbps.at(i, j));
    }
    if (!(model > 0) || !(mbps < model * (1 - threshold))) continue;
    if (!out) out = t;
    if (out->links) out->links->hosts.at(i).outMbps = mbps;
    if (out->hasMatrices())
      for (size_t j = 0; j < out->size(); ++j)
        if (auto& v = out->bandwidthMbps.at(i, j); v && *v > mbps) v = mbps;
    notes.push_back(
        fmt::format("{} sends at {:.0f} Mbit/s (job traffic, backlogged), {:.0f} "
                    "in topology version {}",
                    t.hosts[i].name, mbps, model, t.version));
  }
  if (out) {
    out->time = utcNow();
    out->version = 0;
    out->rings.clear();  // measured before the patch: no longer this network's rings
  }
  return out;
}

std::optional<std::string> groupsContradicted(const Topology& t) {
  if (!t.links || !t.hasMatrices() || t.links->uplinks.size() != t.groups.size())
    return std::nullopt;
  for (size_t level = 0; level < t.groups.size(); ++level) {
    std::map<std::string, size_t> groupOf;
    for (size_t g = 0; g < t.groups[level].groups.size(); ++g)
      for (const auto& h : t.groups[level].groups[g]) groupOf[h] = g;
    const auto& up = t.links->uplinks[level];
    for (const auto& [a, b] : t.measured) {
      const auto ia = static_cast<size_t>(a), ib = static_cast<size_t>(b);
      auto ga = groupOf.find(t.hosts[ia].name);
      auto gb = groupOf.find(t.hosts[ib].name);
      if (ga == groupOf.end() || gb == groupOf.end() || ga->second == gb->second) continue;
      if (ga->second >= up.size() || gb->second >= up.size()) continue;
      const auto& v = t.bandwidthMbps.at(ia, ib);
      const double cap = std::min(up[ga->second].outMbps, up[gb->second].inMbps);
      if (v && cap > 0 && *v > cap * kUplinkContradiction)
        return fmt::format("{} -> {} measured alone at {:.0f} Mbit/s across a {} uplink of {:.0f}",
                           t.hosts[ia].name, t.hosts[ib].name, *v, t.groups[level].name, cap);
    }
  }
  return std::nullopt;
}

bool keepGroupsUnderJobTraffic(Topology& t, const Topology& baseline, bool hostsInPlace,
                               std::string& note) {
  if (baseline.groups.empty() || t.links.has_value() != baseline.links.has_value()) return false;
  if (t.size() != baseline.size()) return false;
  for (size_t i = 0; i < t.size(); ++i)
    if (t.hosts[i].name != baseline.hosts[i].name) return false;
  std::string why = "found none";
  if (!t.groups.empty()) {
    if (auto contradiction = groupsContradicted(t))
      why = fmt::format("found groups that its own pairs contradict ({})", *contradiction);
    else if (hostsInPlace)
      why = "the light check before it found every host in its group";
    else
      return false;
  }
  t.groups = baseline.groups;
  t.sharedLinks = baseline.sharedLinks;
  if (t.links) {
    t.links->uplinks = baseline.links->uplinks;
    t.links->uplinkLatencyUs = baseline.links->uplinkLatencyUs;
    if (t.hasMatrices()) {
      std::vector<char> measured(t.size() * t.size(), 0);
      for (const auto& [a, b] : t.measured)
        measured[static_cast<size_t>(a) * t.size() + static_cast<size_t>(b)] = 1;
      for (size_t a = 0; a < t.size(); ++a)
        for (size_t b = 0; b < t.size(); ++b)
          if (a != b && !measured[a * t.size() + b])
            t.bandwidthMbps.at(a, b) = t.pathMbps(static_cast<int>(a), static_cast<int>(b));
    }
  }
  note = fmt::format(
      "kept the groups of topology version {} ({} level(s), {} shared link(s)): this round ran "
      "under the job's traffic and {}",
      baseline.version, baseline.groups.size(), baseline.sharedLinks.size(), why);
  return true;
}

bool keepHostLinksUnderJobTraffic(Topology& t, const Topology& baseline,
                                  const std::set<std::string>& senders, std::string& note) {
  if (!t.links || !baseline.links || t.size() != baseline.size()) return false;
  if (t.links->hosts.size() != t.size() || baseline.links->hosts.size() != t.size()) return false;
  for (size_t i = 0; i < t.size(); ++i)
    if (t.hosts[i].name != baseline.hosts[i].name) return false;
  const size_t n = t.size();
  std::vector<char> keptOut(n, 0), keptIn(n, 0);
  std::vector<std::string> kept;
  for (size_t i = 0; i < n; ++i) {
    auto& now = t.links->hosts[i];
    const auto& before = baseline.links->hosts[i];
    if (!senders.count(t.hosts[i].name) && now.outMbps < before.outMbps) {
      kept.push_back(
          fmt::format("{} out {:.0f} (read {:.0f})", t.hosts[i].name, before.outMbps, now.outMbps));
      now.outMbps = before.outMbps;
      keptOut[i] = 1;
    }
    if (now.inMbps < before.inMbps) {
      kept.push_back(
          fmt::format("{} in {:.0f} (read {:.0f})", t.hosts[i].name, before.inMbps, now.inMbps));
      now.inMbps = before.inMbps;
      keptIn[i] = 1;
    }
  }
  if (kept.empty()) return false;
  if (t.hasMatrices()) {
    std::vector<char> measured(n * n, 0);
    std::vector<std::pair<int, int>> stay;
    for (const auto& [a, b] : t.measured)
      if (!keptOut[static_cast<size_t>(a)] && !keptIn[static_cast<size_t>(b)]) {
        stay.emplace_back(a, b);
        measured[static_cast<size_t>(a) * n + static_cast<size_t>(b)] = 1;
      }
    t.measured = std::move(stay);
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b)
        if (a != b && !measured[a * n + b] && t.bandwidthMbps.at(a, b))
          t.bandwidthMbps.at(a, b) = t.pathMbps(static_cast<int>(a), static_cast<int>(b));
  }
  note = fmt::format(
      "kept the host links of topology version {} where the job's traffic does not say they are "
      "slower (this round ran under it; slow senders: {}): {}",
      baseline.version, senders.empty() ? "none" : fmt::format("{}", fmt::join(senders, ", ")),
      fmt::join(kept, ", "));
  return true;
}

}  // namespace rankmap::probe
