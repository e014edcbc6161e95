#include "probe/measure.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <vector>

#include "common/log.h"
#include "probe/fanout.h"
#include "probe/stats.h"
#include "probe/tcp_info.h"

namespace rankmap::probe {
namespace {

constexpr size_t kBulkChunk = 256 * 1024;
constexpr int64_t kMaxBulkMs = 60000;
constexpr uint64_t kMaxBulkBytes = 4ull << 30;

using Clock = std::chrono::steady_clock;

double secondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// A page-aligned filler chunk shared by every sender; its content does not matter.
const char* fillerChunk() {
  static const std::vector<char> chunk = [] {
    std::vector<char> c(kBulkChunk);
    for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<char>(i * 131 + 7);
    return c;
  }();
  return chunk.data();
}

}  // namespace

Json BandwidthOptions::toJson() const {
  Json j = {{"max_ms", maxMs}, {"max_bytes", maxBytes}, {"warmup", warmupFraction}};
  if (startInMs > 0) j["start_in_ms"] = startInMs;
  if (trial > 0) {
    j["trial"] = trial;
    j["trial_flows"] = trialFlows;
  }
  return j;
}

std::chrono::milliseconds trialBarrier(size_t flows) {
  const auto f = static_cast<int64_t>(flows);
  return std::chrono::milliseconds(
      std::min<int64_t>({kBarrierMaxMs, kBarrierMs + f / kBarrierFlowsPerMs,
                         kBarrierFewMs + f * kBarrierFewMsPerFlow}));
}

Clock::time_point bulkEnd(Clock::time_point start, const BandwidthOptions& opts) {
  return start + std::chrono::milliseconds(2 * opts.maxMs + kBulkGraceMs);
}

BandwidthOptions BandwidthOptions::fromJson(const Json& j, std::string_view source) {
  JsonReader r(j, source);
  BandwidthOptions o;
  o.maxMs = r.at("max_ms", "milliseconds").integerIn(1, kMaxBulkMs);
  o.maxBytes = static_cast<uint64_t>(r.at("max_bytes", "bytes").integerIn(1, kMaxBulkBytes));
  auto w = r.at("warmup", "a fraction in [0, 0.9]");
  o.warmupFraction = w.nonNegative();
  if (o.warmupFraction > 0.9) w.fail("a fraction in [0, 0.9]");
  if (auto v = r.find("start_in_ms")) o.startInMs = v->integerIn(0, kMaxBulkStartMs);
  if (auto v = r.find("trial")) {
    o.trial = v->integerIn(1, std::numeric_limits<int64_t>::max());
    o.trialFlows = r.at("trial_flows", "the trial's flows").integerIn(1, 1 << 24);
  }
  return o;
}

Json BulkResult::toJson() const {
  return {{"bytes", bytes},
          {"seconds", seconds},
          {"mbps", mbps},
          {"total_bytes", totalBytes},
          {"cut", cut}};
}

BulkResult BulkResult::fromJson(const Json& j, std::string_view source) {
  JsonReader r(j, source);
  BulkResult b;
  b.bytes = r.at("bytes").unsignedInt();
  b.seconds = r.at("seconds").nonNegative();
  b.mbps = r.at("mbps").nonNegative();
  b.totalBytes = r.at("total_bytes").unsignedInt();
  if (auto c = r.find("cut")) b.cut = c->boolean();  // absent from agents before 0.x: false
  return b;
}

BulkResult receiveBulk(Socket& s, const BandwidthOptions& opts, Deadline d, Clock::time_point end) {
  // Bytes are counted where the kernel received them (TCP_INFO) when it can say: a receiver
  // that is descheduled for a moment on a busy machine then still sees the network's rate,
  // not the rate at which it happened to read. Reading goes on all the time, so the receive
  // window stays open.
  //
  // The rate is fitted (stats.h) to a count after every read: (time, kernel count) when the two
  // clock reads around the count are close, else none (the receiver was descheduled next to it
  // and the count's time is unknown); (time, bytes read) without kernel counts. The rate from
  // the two end points alone read up to 11% high on the busy 16-VM testbed.
  constexpr auto kTight = std::chrono::microseconds(200);
  struct Sample {
    Clock::time_point at;
    uint64_t bytes;
  };
  std::vector<char> buf(kBulkChunk);
  uint64_t total = 0;
  Clock::time_point first{}, warmAt{}, warmRecv{}, last{};
  uint64_t warmBytes = 0, kernelFirst = 0, kernelWarm = 0, kernelLast = 0;
  bool warm = false, kernel = true;
  auto window = std::chrono::milliseconds(opts.maxMs);
  auto warmup = std::chrono::duration_cast<Clock::duration>(window * opts.warmupFraction);
  std::vector<Sample> samples;
  samples.reserve(4096);
  auto kernelBytes = [&]() -> uint64_t {
    auto k = kernel ? tcpBytesReceived(s.fd()) : std::nullopt;
    if (!k && kernel) {
      kernel = false;
      samples.clear();  // from here on bytes read; never mix the two counts in one fit
    }
    return k.value_or(0);
  };
  // A kernel count and the time it was taken (the middle of the two clock reads around it) for
  // the marks: taken again (a few times at most) when the two reads are far apart.
  auto stamp = [&](uint64_t* bytes, int attempts) {
    Clock::time_point t0, t1;
    for (int attempt = 0; attempt < attempts; ++attempt) {
      t0 = Clock::now();
      *bytes = kernelBytes();
      t1 = Clock::now();
      if (t1 - t0 <= kTight) break;
    }
    auto at = t0 + (t1 - t0) / 2;
    if (kernel && t1 - t0 <= kTight) samples.push_back({at, *bytes});
    return at;
  };
  const Deadline bounded = d.min(Deadline::at(end));
  bool cut = false;
  for (;;) {
    size_t k = 0;
    try {
      k = s.recvSome(buf.data(), buf.size(), bounded, "bulk receive");
    } catch (const TimeoutError&) {
      if (d.expired()) throw;
      cut = true;  // starved past bulkEnd(): what arrived is the rate
      break;
    }
    if (k == 0 && total > 0) {
      cut = true;  // the sender stopped (its end, or its byte bound) before the window ended
      break;
    }
    auto now = Clock::now();
    if (k == 0)
      throw PeerError(
          fmt::format("bulk receive: peer {} closed after {} bytes", s.peerText(), total));
    total += k;
    last = now;
    uint64_t count = 0;
    if (total == k) {
      first = now = stamp(&kernelFirst, 5);
    } else if (!warm && now - first >= warmup) {
      warm = true;
      warmRecv = now;
      warmBytes = total;
      warmAt = now = stamp(&kernelWarm, 5);
    } else if (kernel) {
      stamp(&count, 1);
    }
    if (!kernel) samples.push_back({now, total});
    if (now - first >= window || total >= opts.maxBytes) break;
  }
  BulkResult r;
  r.totalBytes = total;
  r.cut = cut;
  if (cut) {
    // Every byte read over the time since the first, stalls included: a starved flow's few
    // bursts are all it had.
    if (total == 0) return r;
    r.bytes = total;
    r.seconds = std::max(secondsBetween(first, Clock::now()), 1e-6);
    r.mbps = static_cast<double>(r.bytes) / r.seconds * 8.0 / 1e6;
    return r;
  }
  // Only count from the warm mark when data arrived after it (not when the mark and the end of
  // the window fell on the same read): else the interval would be a few microseconds.
  const bool readAfterMark = warm && last > warmRecv;
  auto lastStamp = stamp(&kernelLast, 5);
  if (kernel) last = lastStamp;
  // Nor when the kernel's count did not move after the mark: every byte read since had arrived
  // before it (a path fast enough to fill the receive buffer by then, loopback), and the
  // interval would read 0; count from the first byte instead.
  const bool fromWarm = readAfterMark && !(kernel && kernelLast == kernelWarm);
  const Clock::time_point from = fromWarm ? warmAt : first;
  if (fromWarm) {
    r.bytes = kernel ? kernelLast - kernelWarm : total - warmBytes;
    r.seconds = secondsBetween(warmAt, last);
  } else {
    r.bytes = kernel ? kernelLast - kernelFirst : total;
    r.seconds = std::max(secondsBetween(first, last), 1e-6);
  }
  std::vector<RateSample> fit;
  fit.reserve(samples.size());
  for (const auto& x : samples)
    if (x.at >= from) fit.push_back({secondsBetween(from, x.at), static_cast<double>(x.bytes)});
  auto rate = fittedRate(fit);
  // A flat fit (0) with bytes counted is no rate: the count over the interval is.
  r.mbps = (rate && *rate > 0 ? *rate : static_cast<double>(r.bytes) / r.seconds) * 8.0 / 1e6;
  return r;
}

uint64_t streamBulk(Socket& s, uint64_t maxBytes, Deadline d, Clock::time_point stopAt) {
  const char* chunk = fillerChunk();
  uint64_t sent = 0;
  const Deadline bounded = d.min(Deadline::at(stopAt));
  // Stops at stopAt even while the socket stays writable: a result that must come back through
  // queues full of other flows' bytes arrives only once every sender has stopped.
  while (sent < maxBytes && Clock::now() < stopAt) {
    auto [readable, writable] = s.waitEither(bounded);
    if (!readable && !writable && !d.expired()) break;  // stopAt: the transfer is over
    if (!readable && !writable)
      throw TimeoutError(
          fmt::format("bulk send: peer {} stopped reading before the deadline", s.peerText()));
    if (readable) break;  // the receiver's result, or it closed: the window is over
    size_t want = static_cast<size_t>(std::min<uint64_t>(kBulkChunk, maxBytes - sent));
    try {
      sent += s.sendNow(chunk, want, "bulk send");
    } catch (const PeerError&) {
      break;  // receiver closed after its window
    }
  }
  return sent;
}

LatencyStats measureLatency(Channel& c, const LatencyOptions& opts, Deadline d) {
  if (opts.samples < 1) RANKMAP_THROW(InvalidInput, "latency: {} samples", opts.samples);
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(opts.samples));
  std::string payload(8, '\0');
  for (int i = 0; i < opts.warmup + opts.samples; ++i) {
    // The 8-byte sequence number (wire.h), little-endian; the server only echoes it. Shifted as
    // uint64_t: shifting the int by 32 or more was undefined (UBSan), and on x86 repeated the
    // low bytes.
    const auto seq = static_cast<uint64_t>(i);
    for (int b = 0; b < 8; ++b) payload[static_cast<size_t>(b)] = static_cast<char>(seq >> (8 * b));
    auto t0 = Clock::now();
    c.send(MsgType::kPing, payload, d);
    std::string pong = c.expect(MsgType::kPong, d, 8);
    auto t1 = Clock::now();
    if (pong != payload)
      throw PeerError(fmt::format("{}: Pong does not echo Ping {}", c.describe(), i));
    if (i >= opts.warmup) samples.push_back(secondsBetween(t0, t1) * 1e6);
  }
  return summarizeLatency(std::move(samples));
}

std::vector<std::optional<double>> loadedRoundTrips(const std::vector<Endpoint>& peers,
                                                    const ProbeKey& key, std::string_view self,
                                                    Clock::time_point at, Deadline d) {
  std::vector<std::optional<double>> out(peers.size());
  std::vector<std::optional<Channel>> ch(peers.size());
  for (size_t i = 0; i < peers.size() && !d.expired(); ++i) {
    try {
      ch[i].emplace(Channel::connect(peers[i], key, self, d));
    } catch (const std::exception&) {
      // out[i] stays empty: this peer failed, the others go on
    }
  }
  std::this_thread::sleep_until(std::min(at, d.when()));
  std::string payload(8, '\0');
  for (int round = 0; round < kLoadedPingSamples && !d.expired(); ++round) {
    payload[0] = static_cast<char>(round);
    std::vector<Clock::time_point> sent(peers.size());
    std::vector<size_t> waiting;
    for (size_t i = 0; i < ch.size(); ++i) {
      if (!ch[i]) continue;
      try {
        sent[i] = Clock::now();
        ch[i]->send(MsgType::kPing, payload, d);
        waiting.push_back(i);
      } catch (const std::exception&) {
        ch[i].reset();
      }
    }
    // Each Pong timed as it arrives, not in the order they were sent.
    while (!waiting.empty() && !d.expired()) {
      std::vector<pollfd> fds;
      for (size_t i : waiting) fds.push_back({ch[i]->socket().fd(), POLLIN, 0});
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d.remaining()).count();
      if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms, 0))) <= 0) break;
      std::vector<size_t> still;
      for (size_t k = 0; k < fds.size(); ++k) {
        const size_t i = waiting[k];
        if (fds[k].revents == 0) {
          still.push_back(i);
          continue;
        }
        const auto arrived = Clock::now();
        try {
          if (ch[i]->expect(MsgType::kPong, d, 8) != payload)
            throw PeerError(fmt::format("{}: Pong does not echo Ping", ch[i]->describe()));
          const double us = secondsBetween(sent[i], arrived) * 1e6;
          out[i] = out[i] ? std::min(*out[i], us) : us;
        } catch (const std::exception&) {
          ch[i].reset();
        }
      }
      waiting = std::move(still);
    }
    for (size_t i : waiting) ch[i].reset();  // no Pong by the deadline
  }
  return out;
}

LatencyStats measureLatency(const Endpoint& peer, const ProbeKey& key, std::string_view self,
                            const LatencyOptions& opts, Deadline d) {
  Channel c = Channel::connect(peer, key, self, d);
  return measureLatency(c, opts, d);
}

namespace {

// The instant a transfer asked for at `asked` starts, and the options to send the peer (the
// start relative to now, once this side is connected).
BandwidthOptions startingAt(const BandwidthOptions& opts, Clock::time_point start) {
  BandwidthOptions o = opts;
  o.startInMs = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(start - Clock::now()).count());
  return o;
}

void waitUntil(Clock::time_point t, Deadline d) {
  auto until = std::min(t, d.when());
  if (until > Clock::now()) std::this_thread::sleep_until(until);
}

}  // namespace

BulkResult measureSendTo(const Endpoint& peer, const ProbeKey& key, std::string_view self,
                         const BandwidthOptions& opts, Deadline d) {
  const auto start = Clock::now() + std::chrono::milliseconds(opts.startInMs);
  Channel c = Channel::connect(peer, key, self, d);
  c.send(MsgType::kBulkSink, startingAt(opts, start).toJson().dump(), d);
  waitUntil(start, d);
  streamBulk(c.socket(), opts.maxBytes, d, bulkEnd(start, opts));
  std::string result = c.expect(MsgType::kBulkResult, d);
  abortConnection(c.socket());  // drop what is still queued: the window is over
  return BulkResult::fromJson(parseJson(result, "BulkResult"), "BulkResult");
}

BulkResult measureReceiveFrom(const Endpoint& peer, const ProbeKey& key, std::string_view self,
                              const BandwidthOptions& opts, Deadline d) {
  const auto start = Clock::now() + std::chrono::milliseconds(opts.startInMs);
  Channel c = Channel::connect(peer, key, self, d);
  c.send(MsgType::kBulkSource, startingAt(opts, start).toJson().dump(), d);
  BulkResult r = receiveBulk(c.socket(), opts, d, bulkEnd(start, opts));
  // A reset is how the sender learns the window is over; it also drops its queued bytes.
  abortConnection(c.socket());
  return r;
}

Json request(const Endpoint& peer, const ProbeKey& key, std::string_view self, const Json& req,
             Deadline d, size_t maxReply) {
  PendingRequest r;
  r.agent = peer;
  r.body = req;
  r.deadline = d;
  r.maxReply = maxReply;
  RequestOutcome o = std::move(requestAll({r}, key, self).front());
  if (!o.reply) std::rethrow_exception(o.exception);
  return std::move(*o.reply);
}

}  // namespace rankmap::probe
