#include "agent/passive.h"

#include <algorithm>
#include <map>
#include <optional>

#include "agent/store.h"
#include "common/error.h"
#include "probe/stats.h"

namespace rankmap::agent {
namespace {

constexpr size_t kMaxPeers = 100000;
constexpr size_t kMaxNameBytes = 255;
constexpr double kMaxWindowS = 86400;

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
  for (const probe::Backlog& x : backlogged)
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

}  // namespace rankmap::agent
