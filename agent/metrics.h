// Prometheus metrics of the agent (GET /metrics, text exposition format 0.0.4).
//
// Series are few and bounded: per round kind and result, per failure reason, per tier
// ("intra"/"cross" group, or "all" before groups are known) and quantile; never per host pair,
// so a 4096-host cluster does not produce millions of series. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/topology.h"

namespace rankmap::agent {

class Metrics {
 public:
  // name{labels} += v. `labels` is the label text without braces, e.g. `kind="full"`.
  void add(const std::string& name, const std::string& labels, double v = 1);
  void set(const std::string& name, const std::string& labels, double v);
  // Histogram observation (buckets kDurationBuckets, in seconds).
  void observe(const std::string& name, const std::string& labels, double seconds);
  // Replaces the per-tier bandwidth/latency summaries with those of `t`.
  void setTopologySummary(const Topology& t);
  // Declares a metric's type and help text (printed once before its series).
  void describe(const std::string& name, const std::string& type, const std::string& help);

  // Text exposition format: # HELP / # TYPE lines, then the series of each metric.
  std::string render() const;

  static constexpr double kDurationBuckets[] = {0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300};

 private:
  struct Histogram {
    std::vector<double> counts = std::vector<double>(std::size(kDurationBuckets), 0);
    double sum = 0;
    double count = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, std::pair<std::string, std::string>> help_;  // name -> (type, help)
  std::map<std::string, std::map<std::string, double>> values_;
  std::map<std::string, std::map<std::string, Histogram>> histograms_;
};

// Escapes a Prometheus label value (backslash, quote, newline).
std::string escapeLabel(const std::string& v);

}  // namespace rankmap::agent
