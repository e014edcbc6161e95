#include "tests/sim/datacenter.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace rankmap::sim {

Datacenter::Datacenter(DatacenterSpec spec) : spec_(std::move(spec)), rng_(spec_.seed) {
  const DatacenterSpec& s = spec_;
  if (s.pods < 1) RANKMAP_THROW(InvalidInput, "datacenter spec: pods {} (expected >= 1)", s.pods);
  if (s.racksPerPod < 1)
    RANKMAP_THROW(InvalidInput, "datacenter spec: racksPerPod {} (expected >= 1)", s.racksPerPod);
  if (s.hostsPerRack.empty() ||
      std::any_of(s.hostsPerRack.begin(), s.hostsPerRack.end(), [](int k) { return k < 1; }))
    RANKMAP_THROW(InvalidInput, "datacenter spec: hostsPerRack (expected one or more sizes >= 1)");
  if (!(s.hostMbps > 0) || !(s.rackOversubscription >= 1) || !(s.podOversubscription >= 1))
    RANKMAP_THROW(InvalidInput,
                  "datacenter spec: hostMbps {} (expected > 0), oversubscription {} / {} "
                  "(expected >= 1)",
                  s.hostMbps, s.rackOversubscription, s.podOversubscription);
  if (!(s.noise >= 0 && s.noise < 1))
    RANKMAP_THROW(InvalidInput, "datacenter spec: noise {} (expected 0 <= noise < 1)", s.noise);
  if (!(s.stalledHostFraction >= 0 && s.stalledHostFraction <= 1))
    RANKMAP_THROW(InvalidInput, "datacenter spec: stalledHostFraction {} (expected 0 .. 1)",
                  s.stalledHostFraction);
  if (s.rackUplinkMbps < 0)
    RANKMAP_THROW(InvalidInput, "datacenter spec: rackUplinkMbps {} (expected >= 0)",
                  s.rackUplinkMbps);
  if (!(s.hostJitterUs >= 0) || !(s.sampleJitterUs >= 0))
    RANKMAP_THROW(InvalidInput, "datacenter spec: jitter {} / {} us (expected >= 0)",
                  s.hostJitterUs, s.sampleJitterUs);
  if (!(s.queueBytes >= 0))
    RANKMAP_THROW(InvalidInput, "datacenter spec: queueBytes {} (expected >= 0)", s.queueBytes);
  if (!(s.uplinkDownFactor > 0 && s.uplinkDownFactor <= 1))
    RANKMAP_THROW(InvalidInput, "datacenter spec: uplinkDownFactor {} (expected in (0, 1])",
                  s.uplinkDownFactor);
  if (s.rackPod.empty()) {
    pods_ = s.pods;
    for (int r = 0; r < s.pods * s.racksPerPod; ++r) rackPod_.push_back(r / s.racksPerPod);
  } else {
    pods_ = *std::max_element(s.rackPod.begin(), s.rackPod.end()) + 1;
    std::vector<char> used(static_cast<size_t>(std::max(pods_, 0)), 0);
    for (int p : s.rackPod) {
      if (p < 0)
        RANKMAP_THROW(InvalidInput, "datacenter spec: rackPod has pod {} (expected >= 0)", p);
      used[static_cast<size_t>(p)] = 1;
    }
    if (std::find(used.begin(), used.end(), 0) != used.end())
      RANKMAP_THROW(InvalidInput, "datacenter spec: rackPod leaves a pod empty");
    rackPod_ = s.rackPod;
  }
  const int racks = static_cast<int>(rackPod_.size());
  std::vector<int> rackSize(static_cast<size_t>(racks));
  if (s.rackOfHost.empty()) {
    for (int r = 0; r < racks; ++r) {
      rackSize[static_cast<size_t>(r)] =
          s.hostsPerRack[static_cast<size_t>(r) % s.hostsPerRack.size()];
      for (int k = 0; k < rackSize[static_cast<size_t>(r)]; ++k) rackOf_.push_back(r);
    }
  } else {
    for (int r : s.rackOfHost) {
      if (r < 0 || r >= racks)
        RANKMAP_THROW(InvalidInput, "datacenter spec: rackOfHost has rack {} (expected 0..{})", r,
                      racks - 1);
      ++rackSize[static_cast<size_t>(r)];
      rackOf_.push_back(r);
    }
    for (int r = 0; r < racks; ++r)
      if (rackSize[static_cast<size_t>(r)] == 0)
        RANKMAP_THROW(InvalidInput, "datacenter spec: rackOfHost leaves rack {} empty", r);
  }
  const size_t n = rackOf_.size();
  alive_.assign(n, 1);
  for (int h : s.deadHosts) {
    if (h < 0 || static_cast<size_t>(h) >= n)
      RANKMAP_THROW(InvalidInput, "datacenter spec: deadHosts has {} (expected 0..{})", h, n - 1);
    alive_[static_cast<size_t>(h)] = 0;
  }
  linkMbps_.assign(2 * (n + static_cast<size_t>(racks) + static_cast<size_t>(pods_)), 0);
  std::vector<double> hostRate(n, s.hostMbps);
  for (auto [h, f] : s.slowHosts) {
    if (h < 0 || static_cast<size_t>(h) >= n || !(f > 0 && f <= 1))
      RANKMAP_THROW(InvalidInput,
                    "datacenter spec: slowHosts has ({}, {}) (expected a host 0..{} and a factor "
                    "in (0, 1])",
                    h, f, n - 1);
    hostRate[static_cast<size_t>(h)] = s.hostMbps * f;
  }
  for (size_t h = 0; h < n; ++h) linkMbps_[2 * h] = linkMbps_[2 * h + 1] = hostRate[h];
  // Pods are sized from their racks' designed uplinks; a thinned uplink is a fault of its rack.
  std::vector<double> podSum(static_cast<size_t>(pods_), 0);
  for (int r = 0; r < racks; ++r) {
    double up = s.rackUplinkMbps > 0
                    ? s.rackUplinkMbps
                    : rackSize[static_cast<size_t>(r)] * s.hostMbps / s.rackOversubscription;
    linkMbps_[rackUp(r)] = up;
    linkMbps_[rackUp(r) + 1] = up * s.uplinkDownFactor;
    podSum[static_cast<size_t>(rackPod_[static_cast<size_t>(r)])] += up;
  }
  for (int p = 0; p < pods_; ++p) {
    linkMbps_[podUp(p)] = podSum[static_cast<size_t>(p)] / s.podOversubscription;
    linkMbps_[podUp(p) + 1] = linkMbps_[podUp(p)] * s.uplinkDownFactor;
  }
  for (auto [r, f] : s.thinRacks) {
    if (r < 0 || r >= racks || !(f > 0 && f <= 1))
      RANKMAP_THROW(InvalidInput,
                    "datacenter spec: thinRacks has ({}, {}) (expected a rack 0..{} and a factor "
                    "in (0, 1])",
                    r, f, racks - 1);
    linkMbps_[rackUp(r)] *= f;
    linkMbps_[rackUp(r) + 1] *= f;
  }
  // A generator of its own, so that jitter leaves the other readings of a seed as they were.
  std::mt19937_64 jitter(s.seed ^ 0x6a09e667f3bcc909ull);
  std::uniform_real_distribution<double> delay(0, s.hostJitterUs);
  hostDelayUs_.assign(n, 0);
  if (s.hostJitterUs > 0)
    for (double& d : hostDelayUs_) d = delay(jitter);
  jitterRng_.seed(jitter());
  std::vector<int> live;
  for (size_t h = 0; h < n; ++h)
    if (alive_[h]) live.push_back(static_cast<int>(h));
  if (s.backgroundFlows > 0 && live.size() >= 2) {
    std::uniform_int_distribution<size_t> pick(0, live.size() - 1);
    for (int i = 0; i < s.backgroundFlows; ++i) {
      int a = live[pick(rng_)], b = live[pick(rng_)];
      if (a == b)
        b = live[(static_cast<size_t>(std::find(live.begin(), live.end(), a) - live.begin()) + 1) %
                 live.size()];
      background_.push_back({a, b});
    }
  }
}

void Datacenter::addPath(FlowLinks& paths, int src, int dst) const {
  paths.push(static_cast<uint32_t>(hostUp(src)));
  const int rs = rackOf(src), rd = rackOf(dst);
  if (rs != rd) {
    paths.push(static_cast<uint32_t>(rackUp(rs)));
    paths.push(static_cast<uint32_t>(rackUp(rd) + 1));
    const int ps = podOf(src), pd = podOf(dst);
    if (ps != pd) {
      paths.push(static_cast<uint32_t>(podUp(ps)));
      paths.push(static_cast<uint32_t>(podUp(pd) + 1));
    }
  }
  paths.push(static_cast<uint32_t>(hostUp(dst) + 1));
  paths.endFlow();
}

std::vector<double> Datacenter::fill(const std::vector<std::pair<int, int>>& flows,
                                     std::vector<double>* load) const {
  FlowLinks paths;
  for (auto [a, b] : flows) {
    if (a == b) {
      paths.endFlow();  // a host to itself crosses no link
      continue;
    }
    addPath(paths, a, b);
  }
  for (auto [a, b] : background_) addPath(paths, a, b);
  std::vector<double> rate = maxMinFill(linkMbps_, paths);
  if (load) {
    load->assign(linkMbps_.size(), 0);
    for (size_t f = 0; f < paths.flows(); ++f)
      for (uint32_t l : paths.of(f)) (*load)[l] += rate[f];
  }
  rate.resize(flows.size());
  return rate;
}

double Datacenter::noisy(double v) {
  if (spec_.noise == 0) return v;
  std::uniform_real_distribution<double> u(1 - spec_.noise, 1 + spec_.noise);
  return v * u(rng_);
}

std::vector<std::optional<double>> Datacenter::measure(
    const std::vector<std::pair<int, int>>& flows) {
  const auto n = static_cast<int>(hosts());
  std::vector<std::pair<int, int>> live;
  std::vector<size_t> at;
  for (size_t i = 0; i < flows.size(); ++i) {
    auto [a, b] = flows[i];
    if (a < 0 || a >= n || b < 0 || b >= n)
      RANKMAP_THROW(InvalidInput, "simulated flow {} -> {}: expected hosts 0..{}", a, b, n - 1);
    if (alive(a) && alive(b)) {
      live.push_back(flows[i]);
      at.push_back(i);
    }
  }
  std::vector<double> rate = fill(live);
  std::vector<std::optional<double>> out(flows.size());
  for (size_t k = 0; k < live.size(); ++k) out[at[k]] = noisy(rate[k]);
  return out;
}

double Datacenter::oneWayUs(int a, int b) const {
  double oneWay = 2 * spec_.hostLatencyUs;
  if (rackOf(a) != rackOf(b)) oneWay += 2 * spec_.rackLatencyUs;
  if (podOf(a) != podOf(b)) oneWay += 2 * spec_.podLatencyUs;
  return oneWay;
}

std::vector<std::optional<double>> Datacenter::loadedRttUs(
    const std::vector<std::pair<int, int>>& flows, const std::vector<std::pair<int, int>>& pings) {
  const auto n = static_cast<int>(hosts());
  std::vector<std::pair<int, int>> live;
  for (auto [a, b] : flows) {
    if (a < 0 || a >= n || b < 0 || b >= n)
      RANKMAP_THROW(InvalidInput, "simulated flow {} -> {}: expected hosts 0..{}", a, b, n - 1);
    if (alive(a) && alive(b)) live.emplace_back(a, b);
  }
  std::vector<double> load;
  fill(live, &load);
  std::uniform_real_distribution<double> sawtooth(0.5, 1);
  std::vector<std::optional<double>> out(pings.size());
  FlowLinks path;
  for (size_t k = 0; k < pings.size(); ++k) {
    auto [a, b] = pings[k];
    if (a < 0 || a >= n || b < 0 || b >= n)
      RANKMAP_THROW(InvalidInput, "simulated ping {} -> {}: expected hosts 0..{}", a, b, n - 1);
    auto rtt = rttUs(a, b);
    if (!rtt || a == b) {
      out[k] = rtt;
      continue;
    }
    path.clear();
    addPath(path, a, b);
    addPath(path, b, a);
    for (size_t f = 0; f < 2; ++f)
      for (uint32_t l : path.of(f)) {
        const double cap = linkMbps_[l];
        if (cap > 0 && load[l] >= cap * (1 - 1e-9))
          *rtt += spec_.queueBytes * 8 / cap * sawtooth(jitterRng_);  // bits / (bits/us)
      }
    out[k] = rtt;
  }
  return out;
}

std::optional<double> Datacenter::rttUs(int a, int b) {
  if (!alive(a) || !alive(b)) return std::nullopt;
  double rtt = noisy(2 * oneWayUs(a, b));
  rtt += hostDelayUs_[static_cast<size_t>(a)] + hostDelayUs_[static_cast<size_t>(b)];
  if (spec_.sampleJitterUs > 0)
    rtt += std::uniform_real_distribution<double>(0, spec_.sampleJitterUs)(jitterRng_);
  return rtt;
}

std::vector<double> Datacenter::pingStalls() {
  std::vector<double> f(hosts(), 1.0);
  if (spec_.stalledHostFraction == 0) return f;
  std::uniform_real_distribution<double> u(0, 1), factor(std::log(2.0), std::log(40.0));
  for (double& x : f)
    if (u(rng_) < spec_.stalledHostFraction) x = std::exp(factor(rng_));
  return f;
}

double Datacenter::aloneMbps(int src, int dst) const { return fill({{src, dst}})[0]; }

void Datacenter::setRackUplinkMbps(int rack, double mbps) {
  if (rack < 0 || rack >= racks() || !(mbps > 0))
    RANKMAP_THROW(InvalidInput, "simulated rack uplink {}: {} Mbit/s (expected 0..{}, > 0)", rack,
                  mbps, racks() - 1);
  linkMbps_[rackUp(rack)] = linkMbps_[rackUp(rack) + 1] = mbps;
}

void Datacenter::setAlive(int host, bool alive) {
  if (host < 0 || static_cast<size_t>(host) >= hosts())
    RANKMAP_THROW(InvalidInput, "simulated host {} (expected 0..{})", host, hosts() - 1);
  alive_[static_cast<size_t>(host)] = alive ? 1 : 0;
}

void Datacenter::moveHost(int host, int rack) {
  if (host < 0 || static_cast<size_t>(host) >= hosts() || rack < 0 || rack >= racks())
    RANKMAP_THROW(InvalidInput, "simulated move of host {} to rack {} (expected 0..{}, 0..{})",
                  host, rack, hosts() - 1, racks() - 1);
  rackOf_[static_cast<size_t>(host)] = rack;
}

}  // namespace rankmap::sim
