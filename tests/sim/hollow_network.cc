#include "tests/sim/hollow_network.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <algorithm>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "probe/socket.h"
#include "probe/stats.h"

namespace rankmap::sim {
namespace {

using Clock = std::chrono::steady_clock;

// A time point of the steady clock as nanoseconds, which every process of the machine reads
// alike (CLOCK_MONOTONIC).
int64_t steadyNs(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
Clock::time_point fromSteadyNs(int64_t ns) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

// Messages between the network's server and its clients: a 4-byte length (network order), then
// that much JSON.
constexpr uint32_t kMaxMessage = 1 << 20;
void sendMessage(Socket& s, const Json& j, Deadline d) {
  const std::string body = j.dump();
  const uint32_t len = htonl(static_cast<uint32_t>(body.size()));
  s.sendAll(&len, sizeof len, d, "hollow network");
  s.sendAll(body.data(), body.size(), d, "hollow network");
}
Json recvMessage(Socket& s, Deadline d) {
  uint32_t len = 0;
  s.recvAll(&len, sizeof len, d, "hollow network");
  len = ntohl(len);
  if (len > kMaxMessage)
    throw IoError(
        fmt::format("hollow network: a message of {} bytes (at most {})", len, kMaxMessage));
  std::string body(len, '\0');
  s.recvAll(body.data(), len, d, "hollow network");
  return parseJson(body, "hollow network message");
}

// A call's reply may come this long after its deadline (the server answers a call that ran
// into it then).
constexpr std::chrono::seconds kReplySlack{5};

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
                                      const probe::BandwidthOptions& opts, bool send,
                                      const std::vector<Host>& pings,
                                      std::vector<std::optional<double>>& pingsUs,
                                      Clock::time_point start, Deadline d) {
  const int other = indexOf(peer);
  const std::pair<int, int> flow = send ? std::pair{from, other} : std::pair{other, from};
  std::vector<std::pair<int, int>> pairs;
  for (const auto& p : pings) pairs.emplace_back(from, indexOf(p));

  // Join the flow's trial, or open it (an untagged flow's, of one flow).
  std::shared_ptr<Trial> trial;
  std::unique_lock<std::mutex> lock(mu_);
  if (opts.trial > 0 && pricedTags_.count(opts.trial)) {  // its trial was priced: alone
    ++counts_.flows;
    ++counts_.late;
    const auto alone = dc_.measure({flow}).front();
    pingsUs = dc_.loadedRttUs({flow}, pairs);
    lock.unlock();
    if (!alone) refuse(peer);
    return finish(*alone, peer, opts, send, start, d);
  }
  if (opts.trial > 0)
    for (auto& t : open_)
      if (t->tag == opts.trial) trial = t;
  if (!trial) {
    trial = std::make_shared<Trial>();
    trial->tag = opts.trial;
    trial->expected = opts.trial > 0 ? static_cast<size_t>(opts.trialFlows) : 1;
    trial->start = start;
    open_.push_back(trial);
  }
  const size_t k = trial->flows.size();
  trial->flows.push_back(flow);
  trial->pingsFrom.push_back(trial->pings.size());
  trial->pings.insert(trial->pings.end(), pairs.begin(), pairs.end());
  if (trial->flows.size() >= trial->expected) complete_.notify_all();
  complete_.wait_until(lock, std::min(trial->start + kTrialGather, d.when()),
                       [&] { return trial->priced || trial->flows.size() >= trial->expected; });

  if (!trial->priced) {
    trial->mbps = dc_.measure(trial->flows);
    trial->pingsUs = dc_.loadedRttUs(trial->flows, trial->pings);
    trial->priced = true;
    if (trial->tag > 0) pricedTags_.insert(trial->tag);
    ++counts_.trials;
    open_.erase(std::remove(open_.begin(), open_.end(), trial), open_.end());
  }
  ++counts_.flows;
  const std::optional<double> mbps = trial->mbps[k];  // it joined before the pricing
  const auto first = trial->pingsUs.begin() + static_cast<std::ptrdiff_t>(trial->pingsFrom[k]);
  pingsUs.assign(first, first + static_cast<std::ptrdiff_t>(pairs.size()));
  lock.unlock();
  if (!mbps) refuse(peer);
  return finish(*mbps, peer, opts, send, start, d);
}

// What the receiver reads at `mbps`, returned when the flow's window has passed.
probe::BulkResult HollowNetwork::finish(double mbps, const Host& peer,
                                        const probe::BandwidthOptions& opts, bool send,
                                        Clock::time_point start, Deadline d) {
  probe::BulkResult r;
  r.mbps = mbps;
  const double bytesPerMs = std::max(mbps, 1e-9) * 1e6 / 8 / 1000;
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

HollowNetwork::Counts HollowNetwork::counts() {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

// ---- across processes --------------------------------------------------------------------

HollowNetworkServer::HollowNetworkServer(HollowNetwork& net)
    : net_(net), listener_(probe::listenOn({"127.0.0.1", 0})) {
  acceptor_ = std::thread([this] {
    for (;;) {
      auto s = listener_.accept(Deadline::after(std::chrono::seconds(1)));
      if (!s) {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_;
      std::thread([this, c = std::move(*s)]() mutable { serve(std::move(c)); }).detach();
    }
  });
}

HollowNetworkServer::~HollowNetworkServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  listener_.shutdown();
  acceptor_.join();
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return calls_ == 0; });
}

// A client's connection: calls one after the other (the request, the network's answer or its
// error, the reply) until the client closes it or the server stops.
void HollowNetworkServer::serve(Socket s) {
  try {
    for (;;) {
      if (!s.waitReadable(Deadline::after(std::chrono::milliseconds(500)))) {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) break;
        continue;
      }
      char probe;
      if (::recv(s.fd(), &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0) break;  // the client closed
      serveCall(s);
    }
  } catch (const std::exception&) {
    // The caller is gone or sent garbage: it sees its own error.
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (--calls_ == 0) idle_.notify_all();
}

void HollowNetworkServer::serveCall(Socket& s) {
  {
    const Json req = recvMessage(s, Deadline::after(std::chrono::seconds(10)));
    const Deadline d = Deadline::at(fromSteadyNs(req.at("deadline_ns").get<int64_t>()));
    const Host peer{req.at("peer").get<std::string>(), ""};
    const int from = req.at("from").get<int>();
    Json reply;
    try {
      if (req.at("op").get<std::string>() == "latency") {
        probe::LatencyOptions o;
        o.warmup = req.at("warmup").get<int>();
        o.samples = req.at("samples").get<int>();
        const LatencyStats l = net_.latency(from, peer, o, d);
        reply = {{"min", l.minUs}, {"median", l.medianUs}, {"p90", l.p90Us}, {"p99", l.p99Us}};
      } else {
        const auto o = probe::BandwidthOptions::fromJson(req.at("opts"), "hollow network");
        std::vector<Host> pings;
        for (const auto& name : req.at("pings")) pings.push_back({name.get<std::string>(), ""});
        std::vector<std::optional<double>> pingsUs;
        reply = net_.bulk(from, peer, o, req.at("send").get<bool>(), pings, pingsUs,
                          fromSteadyNs(req.at("start_ns").get<int64_t>()), d)
                    .toJson();
        Json us = Json::array();
        for (const auto& v : pingsUs) us.push_back(v ? Json(*v) : Json(nullptr));
        reply["pings_us"] = std::move(us);
      }
      reply = {{"ok", reply}};
    } catch (const TimeoutError& e) {
      reply = {{"error", "timeout"}, {"what", e.what()}};
    } catch (const SystemError& e) {
      // Without the errno text that SystemError adds: the client's SystemError adds it again.
      std::string what = e.what();
      const std::string added = fmt::format(": {} (errno {})", std::strerror(e.err()), e.err());
      if (what.size() >= added.size() &&
          what.compare(what.size() - added.size(), added.size(), added) == 0)
        what.resize(what.size() - added.size());
      reply = {{"error", "system"}, {"errno", e.err()}, {"what", what}};
    } catch (const std::exception& e) {
      reply = {{"error", "other"}, {"what", e.what()}};
    }
    sendMessage(s, reply, Deadline::after(std::chrono::seconds(10)));
  }
}

void HollowNetworkClient::connect(size_t n) {
  std::vector<Socket> opened;
  for (size_t i = 0; i < n; ++i)
    opened.push_back(
        probe::connectTo({"127.0.0.1", port_}, Deadline::after(std::chrono::seconds(10))));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : opened) idle_.push_back(std::move(s));
}

Json HollowNetworkClient::call(const Json& req, Deadline d) {
  const Deadline replyBy = Deadline::at(d.when() + kReplySlack);
  Socket s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      s = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!s.valid()) s = probe::connectTo({"127.0.0.1", port_}, replyBy);
  sendMessage(s, req, replyBy);
  Json reply = recvMessage(s, replyBy);
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(s));
  }
  if (reply.contains("ok")) return reply.at("ok");
  const std::string kind = reply.at("error").get<std::string>();
  const std::string what = reply.at("what").get<std::string>();
  if (kind == "timeout") throw TimeoutError(what);
  if (kind == "system") throw SystemError(what, reply.at("errno").get<int>());
  throw IoError(what);
}

LatencyStats HollowNetworkClient::latency(int from, const Host& peer,
                                          const probe::LatencyOptions& opts, Deadline d) {
  const Json r = call({{"op", "latency"},
                       {"from", from},
                       {"peer", peer.name},
                       {"warmup", opts.warmup},
                       {"samples", opts.samples},
                       {"deadline_ns", steadyNs(d.when())}},
                      d);
  return {r.at("min").get<double>(), r.at("median").get<double>(), r.at("p90").get<double>(),
          r.at("p99").get<double>()};
}

probe::BulkResult HollowNetworkClient::bulk(int from, const Host& peer,
                                            const probe::BandwidthOptions& opts, bool send,
                                            const std::vector<Host>& pings,
                                            std::vector<std::optional<double>>& pingsUs,
                                            Deadline d) {
  const auto start = Clock::now() + std::chrono::milliseconds(opts.startInMs);
  Json names = Json::array();
  for (const auto& p : pings) names.push_back(p.name);
  const Json r = call({{"op", "bulk"},
                       {"from", from},
                       {"peer", peer.name},
                       {"opts", opts.toJson()},
                       {"send", send},
                       {"pings", std::move(names)},
                       {"start_ns", steadyNs(start)},
                       {"deadline_ns", steadyNs(d.when())}},
                      d);
  pingsUs.assign(pings.size(), std::nullopt);
  const Json& us = r.at("pings_us");
  for (size_t i = 0; i < pings.size() && i < us.size(); ++i)
    if (!us[i].is_null()) pingsUs[i] = us[i].get<double>();
  return probe::BulkResult::fromJson(r, "hollow network");
}

}  // namespace rankmap::sim
