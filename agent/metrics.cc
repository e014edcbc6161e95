#include "agent/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace rankmap::agent {
namespace {

std::string series(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : fmt::format("{}{{{}}}", name, labels);
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

// `v` sorted.
double quantileOf(const std::vector<double>& v, double q) {
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[rank == 0 ? 0 : rank - 1];
}

}  // namespace

std::string escapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void Metrics::add(const std::string& name, const std::string& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[name][labels] += v;
}

void Metrics::set(const std::string& name, const std::string& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[name][labels] = v;
}

void Metrics::observe(const std::string& name, const std::string& labels, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& h = histograms_[name][labels];
  for (size_t i = 0; i < std::size(kDurationBuckets); ++i)
    if (seconds <= kDurationBuckets[i]) h.counts[i] += 1;
  h.sum += seconds;
  h.count += 1;
}

void Metrics::describe(const std::string& name, const std::string& type, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  help_[name] = {type, help};
}

void Metrics::setTopologySummary(const Topology& t) {
  // Tier of a pair: inside one shared-link group or across groups; "all" without groups.
  std::vector<int> group(t.size(), -1);
  for (size_t g = 0; g < t.sharedLinks.size(); ++g)
    for (const auto& name : t.sharedLinks[g].hosts) {
      int i = t.indexOf(name);
      if (i >= 0) group[static_cast<size_t>(i)] = static_cast<int>(g);
    }
  bool grouped = !t.sharedLinks.empty();
  std::map<std::string, std::vector<double>> bw, lat;
  // Without matrices (a sparse probe's link model, beyond kDenseMaxHosts hosts) the bandwidth is
  // the link model's, over every step-th host (at most ~128^2 pairs, not N^2: every agent does
  // this for every pushed version, and 512^2 pairs took 70 ms of each agent's CPU at 1024
  // hosts; the quantiles of a tier hardly move with the sample); the latency series are left
  // out: the link model holds one-way latencies per tier, not the round-trip medians these
  // series are.
  constexpr size_t kSampledHosts = 128;
  bool dense = t.hasMatrices();
  size_t step = dense ? 1 : (t.size() + kSampledHosts - 1) / kSampledHosts;
  for (size_t i = 0; i < t.size(); i += step)
    for (size_t j = 0; j < t.size(); j += step) {
      if (i == j) continue;
      std::string tier = !grouped                                  ? "all"
                         : (group[i] >= 0 && group[i] == group[j]) ? "intra"
                                                                   : "cross";
      if (!dense) {
        if (auto b = t.pathMbps(static_cast<int>(i), static_cast<int>(j))) bw[tier].push_back(*b);
        continue;
      }
      if (auto b = t.bandwidthMbps.at(i, j)) bw[tier].push_back(*b);
      if (auto l = t.latencyUs.at(i, j)) lat[tier].push_back(l->medianUs);
    }
  // Prometheus' base units (bytes per second, seconds); the label is not `quantile`, which
  // Prometheus reserves for a summary's observations over time: these are over host pairs.
  std::lock_guard<std::mutex> lock(mu_);
  constexpr const char* kBandwidth = "rankmap_topology_bandwidth_bytes_per_second";
  constexpr const char* kLatency = "rankmap_topology_latency_seconds";
  values_.erase(kBandwidth);
  values_.erase(kLatency);
  for (auto* src : {&bw, &lat}) {
    const char* name = src == &bw ? kBandwidth : kLatency;
    const double unit = src == &bw ? 1e6 / 8 : 1e-6;  // from Mbit/s, from µs
    for (auto& [tier, v] : *src) {
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      for (double q : {0.0, 0.1, 0.5, 0.9, 1.0})
        values_[name][fmt::format("tier=\"{}\",pair_quantile=\"{}\"", tier, q)] =
            quantileOf(v, q) * unit;
    }
  }
  values_["rankmap_topology_hosts"][""] = static_cast<double>(t.size());
  values_["rankmap_topology_version"][""] = static_cast<double>(t.version);
  values_["rankmap_topology_shared_links"][""] = static_cast<double>(t.sharedLinks.size());
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  std::map<std::string, bool> names;
  for (const auto& [n, _] : values_) names[n] = false;
  for (const auto& [n, _] : histograms_) names[n] = true;
  for (const auto& [name, isHistogram] : names) {
    if (auto h = help_.find(name); h != help_.end()) {
      out += fmt::format("# HELP {} {}\n", name, h->second.second);
      out += fmt::format("# TYPE {} {}\n", name, h->second.first);
    }
    if (!isHistogram) {
      for (const auto& [labels, v] : values_.at(name))
        out += series(name, labels) + " " + number(v) + "\n";
      continue;
    }
    for (const auto& [labels, h] : histograms_.at(name)) {
      std::string sep = labels.empty() ? "" : ",";
      for (size_t i = 0; i < std::size(kDurationBuckets); ++i)
        out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep,
                           number(kDurationBuckets[i]), number(h.counts[i]));
      out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n", name, labels, sep, number(h.count));
      out += series(name + "_sum", labels) + " " + number(h.sum) + "\n";
      out += series(name + "_count", labels) + " " + number(h.count) + "\n";
    }
  }
  return out;
}

}  // namespace rankmap::agent
