#include "tests/sim/hollow_network.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <thread>

#include "common/error.h"
#include "probe/stats.h"

namespace rankmap::sim {
namespace {

[[noreturn]] void refuse(const Host& peer) {
  throw SystemError(
      fmt::format("connect to {}: refused (simulated: the host is dead)", peer.address),
      ECONNREFUSED);
}

}  // namespace

HollowNetwork::HollowNetwork(Datacenter& dc, const std::vector<Host>& hosts) : dc_(dc) {
  if (hosts.size() != dc.hosts())
    throw InvalidInput(fmt::format("hollow network: {} hosts for a datacenter of {}",
                                   hosts.size(), dc.hosts()));
  for (size_t h = 0; h < hosts.size(); ++h) index_[hosts[h].name] = static_cast<int>(h);
}

int HollowNetwork::indexOf(const Host& peer) const {
  auto it = index_.find(peer.name);
  if (it == index_.end())
    throw InvalidInput(fmt::format("hollow network: no simulated host named '{}'", peer.name));
  return it->second;
}

LatencyStats HollowNetwork::latency(int from, const Host& peer, const probe::LatencyOptions& opts,
                                    Deadline d) {
  const int to = indexOf(peer);
  std::vector<double> samples;
  double spentUs = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < opts.warmup + opts.samples; ++i) {
      auto rtt = dc_.rttUs(from, to);
      if (!rtt) break;
      spentUs += *rtt;
      if (i >= opts.warmup) samples.push_back(*rtt);
    }
  }
  if (samples.empty()) refuse(peer);
  const auto took = std::chrono::microseconds(static_cast<int64_t>(spentUs));
  if (d.remaining() < took) {
    std::this_thread::sleep_for(d.remaining());
    throw TimeoutError(fmt::format("latency to {}: deadline passed", peer.name));
  }
  std::this_thread::sleep_for(took);
  return probe::summarizeLatency(std::move(samples));
}

probe::BulkResult HollowNetwork::bulk(int from, const Host& peer,
                                      const probe::BandwidthOptions& opts, bool send, Deadline d) {
  const int other = indexOf(peer);
  const std::pair<int, int> flow = send ? std::pair{from, other} : std::pair{other, from};
  const auto start = Clock::now() + std::chrono::milliseconds(opts.startInMs);

  // Join the trial that starts with this flow, or open one.
  std::shared_ptr<Trial> trial;
  size_t k = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : open_)
      if (t->start - kTrialSlack <= start && start <= t->start + kTrialSlack) trial = t;
    if (!trial) {
      trial = std::make_shared<Trial>();
      trial->start = start;
      open_.push_back(trial);
    }
    k = trial->flows.size();
    trial->flows.push_back(flow);
  }
  const auto priceAt = start + std::chrono::milliseconds(opts.maxMs / 2);
  if (Clock::now() < priceAt) std::this_thread::sleep_until(std::min(priceAt, d.when()));

  std::optional<double> mbps;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!trial->priced) {
      trial->mbps = dc_.measure(trial->flows);
      trial->priced = true;
      open_.erase(std::remove(open_.begin(), open_.end(), trial), open_.end());
    }
    if (k < trial->mbps.size()) {
      mbps = trial->mbps[k];
    } else {  // joined after the trial was priced: alone
      mbps = dc_.measure({flow}).front();
    }
  }
  if (!mbps) refuse(peer);

  probe::BulkResult r;
  r.mbps = *mbps;
  const double bytesPerMs = std::max(*mbps, 1e-9) * 1e6 / 8 / 1000;
  const double windowMs = std::min(static_cast<double>(opts.maxMs),
                                   static_cast<double>(opts.maxBytes) / bytesPerMs);
  r.totalBytes = static_cast<uint64_t>(bytesPerMs * windowMs);
  r.seconds = windowMs * (1 - opts.warmupFraction) / 1000;
  r.bytes = static_cast<uint64_t>(bytesPerMs * windowMs * (1 - opts.warmupFraction));
  const auto end = start + std::chrono::microseconds(static_cast<int64_t>(windowMs * 1000));
  if (end > d.when()) {
    std::this_thread::sleep_until(d.when());
    throw TimeoutError(fmt::format("bulk {} {}: deadline passed", send ? "to" : "from", peer.name));
  }
  std::this_thread::sleep_until(end);
  return r;
}

}  // namespace rankmap::sim
