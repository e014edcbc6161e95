#include "agent/passive.h"

#include <algorithm>
#include <map>
#include <optional>

#include "agent/store.h"
#include "common/error.h"

namespace rankmap::agent {
namespace {

constexpr size_t kMaxPeers = 100000;
constexpr size_t kMaxNameBytes = 255;
constexpr double kMaxWindowS = 86400;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <class Rates>
std::vector<double> mbpsOf(const Rates& rates) {
  std::vector<double> v;
  for (const auto& r : rates) v.push_back(r.mbps);
  return v;
}

}  // namespace

PassiveLedger::PassiveLedger(std::string self) : self_(std::move(self)) {}

uint64_t PassiveLedger::add(const Json& report, std::string_view source, Clock::time_point now) {
  JsonReader r(report, source);
  r.expectObject();
  const std::string reporter = r.at("reporter", "the reporting rank's id").nonEmptyStr();
  if (reporter.size() > kMaxNameBytes) r.at("reporter").fail("at most 255 bytes");
  const std::string host = r.at("host", "the reporting rank's host").nonEmptyStr();
  if (host != self_)
    r.at("host").fail(
        fmt::format("this agent's host '{}' (ranks report to their own host's "
                    "agent)",
                    self_));
  const std::string plan = r.at("plan", "the plan hash in use (\"\" = none)").str();
  if (plan.size() > kMaxNameBytes) r.at("plan").fail("at most 255 bytes");
  const double windowS = r.at("window_s", "the report's window in seconds").nonNegative();
  if (windowS > kMaxWindowS) r.at("window_s").fail("at most 86400 seconds");
  const Span span{ago(now, windowS), now};
  std::optional<double> inCollectives;
  if (auto c = r.find("collective_s")) inCollectives = c->nonNegative();
  JsonReader peers = r.at("peers", "[{host, sent_bytes, send_busy_s, recv_bytes, recv_busy_s}]");
  const size_t n = peers.arraySize();
  if (n > kMaxPeers) peers.fail("at most 100000 peers");
  struct Window {
    std::string peer;
    bool send;
    uint64_t bytes;
    double busy;
    double sendBusy;  // send windows: seconds with a send in flight
  };
  std::vector<Window> windows;
  for (size_t i = 0; i < n; ++i) {
    JsonReader p = peers.at(i);
    p.expectObject();
    std::string peer = p.at("host", "a host name").nonEmptyStr();
    if (peer.size() > kMaxNameBytes) p.at("host").fail("at most 255 bytes");
    const double sendBusy = p.at("send_busy_s", "seconds").nonNegative();
    const double recvBusy = p.at("recv_busy_s", "seconds").nonNegative();
    windows.push_back({peer, true, p.at("sent_bytes", "bytes").unsignedInt(),
                       inCollectives.value_or(sendBusy), sendBusy});
    windows.push_back({peer, false, p.at("recv_bytes", "bytes").unsignedInt(),
                       inCollectives.value_or(recvBusy), 0});
  }
  uint64_t added = 0;
  std::lock_guard<std::mutex> lock(mu_);
  ++reports_;
  lastReport_ = now;
  const bool probed =
      std::any_of(probes_.begin(), probes_.end(), [&](const Span& p) { return p.overlaps(span); });
  for (const Window& w : windows) {
    added += w.bytes;
    Key key{reporter, w.peer, w.send};
    auto it = series_.find(key);
    if (it == series_.end()) {
      if (series_.size() >= kMaxSeries) {
        auto oldest = std::min_element(series_.begin(), series_.end(), [](auto& a, auto& b) {
          return a.second.lastSeen < b.second.lastSeen;
        });
        series_.erase(oldest);
      }
      it = series_.emplace(key, Series{}).first;
    }
    Series& s = it->second;
    s.lastSeen = now;
    if (s.plan != plan) {
      s = Series{plan, {}, {}, {}, now};
    }
    if (w.bytes < kMinWindowBytes || !(w.busy > 0)) continue;
    if (probed) {
      ++probedWindows_;
      continue;
    }
    // Backlog needs the collective time (a report without it gives no fraction).
    if (w.send && inCollectives && *inCollectives > 0) {
      const double fraction = std::min(1.0, w.sendBusy / *inCollectives);
      const bool backlogged = fraction >= kBacklogFraction && w.sendBusy > 0;
      s.sends.push_back({span, fraction,
                         backlogged ? static_cast<double>(w.bytes) * 8 / *inCollectives / 1e6 : 0});
      while (s.sends.size() > kConfirmWindows) s.sends.pop_front();
    }
    const Rate rate{span, static_cast<double>(w.bytes) * 8 / w.busy / 1e6};
    if (s.base.size() < kBaselineWindows) {
      s.base.push_back(rate);
      continue;
    }
    s.recent.push_back(rate);
    while (s.recent.size() > kConfirmWindows) s.recent.pop_front();
  }
  bytes_ += added;
  return added;
}

PassiveLedger::Summary PassiveLedger::summary(Clock::time_point now, double threshold,
                                              std::chrono::milliseconds freshFor, bool rebase) {
  Summary out;
  std::vector<double> sendFractions;
  std::lock_guard<std::mutex> lock(mu_);
  out.fresh = lastReport_ && now - *lastReport_ <= freshFor;
  for (auto it = series_.begin(); it != series_.end();) {
    Series& s = it->second;
    if (now - s.lastSeen > kExpiry) {
      it = series_.erase(it);
      continue;
    }
    const auto& [reporter, peer, send] = it->first;
    ++it;
    if (now - s.lastSeen > freshFor) continue;
    out.fresh = true;
    ++out.series;
    if (send && !s.sends.empty()) sendFractions.push_back(s.sends.back().fraction);
    if (send)
      for (const Send& x : s.sends) out.sendBusyPeak = std::max(out.sendBusyPeak, x.fraction);
    if (send && s.sends.size() == kConfirmWindows &&
        std::all_of(s.sends.begin(), s.sends.end(), [](auto& x) { return x.mbps > 0; })) {
      std::vector<double> rates, fractions;
      for (const Send& x : s.sends) {
        fractions.push_back(x.fraction);
        rates.push_back(x.mbps);
      }
      out.backlogged.push_back({self_, peer, median(rates), median(fractions)});
    }
    if (s.base.size() < kBaselineWindows) continue;
    ++out.baselined;
    const double base = median(mbpsOf(s.base));
    // The run of windows at the end that differ from the baseline the same way.
    bool slower = true, faster = true;
    size_t k = 0;
    for (auto r = s.recent.rbegin(); r != s.recent.rend(); ++r, ++k) {
      slower = slower && r->mbps < base * (1 - threshold);
      faster = faster && r->mbps > base * (1 + threshold);
      if (!slower && !faster) break;
    }
    const auto last = s.recent.end() - static_cast<std::ptrdiff_t>(k);
    if (k < kConfirmWindows &&
        (k < kMinConfirmWindows || s.recent.back().span.to - last->span.from < kConfirmSpan))
      continue;
    Drift d;
    d.src = send ? self_ : peer;
    d.dst = send ? peer : self_;
    d.baselineMbps = base;
    std::vector<double> drifted;
    for (auto r = last; r != s.recent.end(); ++r) drifted.push_back(r->mbps);
    d.nowMbps = median(drifted);
    out.drifting.push_back(d);
    if (rebase) {
      s.base.assign(s.recent.begin(), s.recent.end());
      s.recent.clear();
    }
  }
  if (!sendFractions.empty()) out.sendBusy = median(sendFractions);
  return out;
}

uint64_t PassiveLedger::probed(Clock::time_point from, Clock::time_point to) {
  const Span p{from, to};
  std::lock_guard<std::mutex> lock(mu_);
  // The coordinator names its last round at every tick: the same span again widens nothing.
  const bool known = std::any_of(probes_.begin(), probes_.end(),
                                 [&](const Span& q) { return q.from <= p.from && p.to <= q.to; });
  if (!known) {
    probes_.push_back(p);
    while (probes_.size() > kProbeSpans) probes_.pop_front();
  }
  uint64_t dropped = 0;
  auto drop = [&](auto& windows) {
    const size_t n = windows.size();
    windows.erase(std::remove_if(windows.begin(), windows.end(),
                                 [&](const auto& w) { return w.span.overlaps(p); }),
                  windows.end());
    return n - windows.size();
  };
  for (auto& [key, s] : series_) {
    dropped += drop(s.base) + drop(s.recent);  // every window gave a rate; `sends` repeats some
    drop(s.sends);
  }
  probedWindows_ += dropped;
  return dropped;
}

PassiveLedger::Clock::time_point PassiveLedger::ago(Clock::time_point now, double seconds) {
  return now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

uint64_t PassiveLedger::probedWindows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return probedWindows_;
}

uint64_t PassiveLedger::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_;
}

uint64_t PassiveLedger::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

Json PassiveLedger::Summary::toJson() const {
  Json d = Json::array();
  for (const Drift& x : drifting)
    d.push_back({{"src", x.src},
                 {"dst", x.dst},
                 {"baseline_mbps", x.baselineMbps},
                 {"now_mbps", x.nowMbps}});
  Json b = Json::array();
  for (const Backlog& x : backlogged)
    b.push_back({{"src", x.src}, {"dst", x.dst}, {"mbps", x.mbps}, {"busy", x.busy}});
  return {
      {"fresh", fresh},  {"series", series},      {"baselined", baselined},        {"drifting", d},
      {"backlogged", b}, {"send_busy", sendBusy}, {"send_busy_peak", sendBusyPeak}};
}

PassiveLedger::Summary PassiveLedger::Summary::fromJson(const Json& j, std::string_view source) {
  JsonReader r(j, source);
  r.expectObject();
  Summary s;
  s.fresh = r.at("fresh", "true or false").boolean();
  s.series = static_cast<size_t>(r.at("series", "a count").unsignedInt());
  s.baselined = static_cast<size_t>(r.at("baselined", "a count").unsignedInt());
  JsonReader d = r.at("drifting", "[{src, dst, baseline_mbps, now_mbps}]");
  const size_t n = d.arraySize();
  if (n > kMaxPeers) d.fail("at most 100000 entries");
  for (size_t i = 0; i < n; ++i) {
    JsonReader x = d.at(i);
    x.expectObject();
    s.drifting.push_back({x.at("src", "a host").str(), x.at("dst", "a host").str(),
                          x.at("baseline_mbps", "Mbit/s").nonNegative(),
                          x.at("now_mbps", "Mbit/s").nonNegative()});
  }
  // Absent from agents older than backlog detection.
  if (auto b = r.find("send_busy")) s.sendBusy = b->nonNegative();
  if (auto b = r.find("send_busy_peak")) s.sendBusyPeak = b->nonNegative();  // since slowSenders
  if (auto b = r.find("backlogged")) {
    const size_t m = b->arraySize();
    if (m > kMaxPeers) b->fail("at most 100000 entries");
    for (size_t i = 0; i < m; ++i) {
      JsonReader x = b->at(i);
      x.expectObject();
      s.backlogged.push_back(
          {x.at("src", "a host").nonEmptyStr(), x.at("dst", "a host").nonEmptyStr(),
           x.at("mbps", "Mbit/s").nonNegative(), x.at("busy", "a fraction").nonNegative()});
    }
  }
  return s;
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

bool standsOut(const PassiveLedger::Backlog& b, const std::map<std::string, double>& sendBusy) {
  return b.mbps > 0 && busyStandsOut(b.src, b.busy, sendBusy);
}

std::set<std::string> slowSenders(const std::vector<PassiveLedger::Backlog>& backlogged,
                                  const std::map<std::string, double>& sendBusy,
                                  const std::map<std::string, double>& sendPeak) {
  std::set<std::string> out;
  for (const auto& b : backlogged)
    if (standsOut(b, sendBusy)) out.insert(b.src);
  for (const auto& [h, f] : sendPeak)
    if (f >= kSlowSenderBusy && busyStandsOut(h, f, sendPeak)) out.insert(h);
  return out;
}

std::optional<Topology> patchBacklogged(const Topology& t,
                                        const std::vector<PassiveLedger::Backlog>& backlogged,
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

}  // namespace rankmap::agent
