// Client side of the probes: latency round trips, bulk transfers, control requests.
//
// Latency: `warmup` round trips of a 8-byte Ping are discarded, then `samples` are kept
// (min/median/p90/p99). Bandwidth: a bulk transfer in one direction, bounded by time and bytes
// (whichever first); the receiver times it from its first byte and ignores the first
// `warmupFraction` of the window (TCP slow start), so the result is the steady rate it saw,
// fitted to a byte count after every read (stats.h: fittedRate).
//
// Start and end of a transfer (`startInMs`): the connection and its handshake come first, the
// bytes `startInMs` after the request (a trial's flows connect while the network is quiet, then
// all start together: a handshake behind another flow's bulk data in a shallow queue can wait
// seconds for TCP's retransmissions). Neither side goes on past bulkEnd(): the sender stops
// sending and the receiver ends its window there with what arrived (BulkResult::cut), so a flow
// starved by a congested uplink reads low instead of holding the whole trial to its deadline.
// Every function takes a Deadline and throws TimeoutError/PeerError/AuthError on a dead, slow,
// silent or unauthenticated peer; nothing blocks past the deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/topology.h"
#include "probe/wire.h"

namespace rankmap::probe {

struct LatencyOptions {
  int warmup = 10;
  int samples = 100;
};

struct BandwidthOptions {
  int64_t maxMs = 150;
  uint64_t maxBytes = 64ull << 20;
  double warmupFraction = 0.2;
  int64_t startInMs = 0;  // bytes begin this long after the request (at most kMaxBulkStartMs)
  // The coordinator's trial this flow is part of (0: none) and how many flows it has: flows of
  // one trial start together. Read only by logs and by a simulated network that prices a
  // trial's flows together (tests/sim/hollow_network.h); a real flow shares links by itself.
  int64_t trial = 0;
  int64_t trialFlows = 0;
  Json toJson() const;
  // Validates a request from a peer: bounded time and bytes. Throws InvalidInput.
  static BandwidthOptions fromJson(const Json& j, std::string_view source);
};

inline constexpr int64_t kMaxBulkStartMs = 10000;
// After its start, a transfer ends by two windows and this much (queues that a starting trial
// fills drain within it; a flow not done by then was starved).
inline constexpr int64_t kBulkGraceMs = 100;
// A bandwidth trial starts this long after its requests go out, plus 1 ms per
// kBarrierFlowsPerMs flows, at most kBarrierMaxMs: the requests' fan-out and every flow's
// connection and handshake fit in it. A trial of few flows starts sooner, after kBarrierFewMs
// plus kBarrierFewMsPerFlow per flow: set-up measured at the senders of the 2-core emulated
// cloud, where every VM shares the cores, took up to 21 ms at 16 flows, 39 at 32 and 90 at 64
// (2026-12-07). Starts after 50 ms + 1/8 ms per flow left flows 21-450 ms late in 4 of 202
// trials of ten 64-VM rounds (the first flows' bytes held the cores from the handshakes still
// to come).
inline constexpr int64_t kBarrierMs = 100;
inline constexpr int64_t kBarrierFlowsPerMs = 8;
inline constexpr int64_t kBarrierFewMs = 40;
inline constexpr int64_t kBarrierFewMsPerFlow = 1;
inline constexpr int64_t kBarrierMaxMs = 1000;
std::chrono::milliseconds trialBarrier(size_t flows);
// The end of a transfer that starts at `start`: start + 2 windows + kBulkGraceMs.
std::chrono::steady_clock::time_point bulkEnd(std::chrono::steady_clock::time_point start,
                                              const BandwidthOptions& opts);

// What a receiver measured: `bytes` over `seconds` after warm-up (the window's end points), the
// whole transfer, and `mbps`, the rate fitted to every count in that window (not bytes/seconds:
// see receiveBulk). `cut`: the window ended at bulkEnd() before it was full (the rate is then
// what arrived over the time it had; 0 when nothing did).
struct BulkResult {
  uint64_t bytes = 0;
  double seconds = 0;
  double mbps = 0;
  uint64_t totalBytes = 0;
  bool cut = false;
  Json toJson() const;
  static BulkResult fromJson(const Json& j, std::string_view source);
};

// Receives raw bulk bytes on `s` until the window ends or `end` (then cut; see the file
// comment).
BulkResult receiveBulk(Socket& s, const BandwidthOptions& opts, Deadline d,
                       std::chrono::steady_clock::time_point end =
                           std::chrono::steady_clock::time_point::max());
// Streams raw bytes on `s` until maxBytes are sent, the peer sends something or closes, or
// `stopAt`; returns the bytes sent. A peer that closes the connection ends the stream normally.
uint64_t streamBulk(Socket& s, uint64_t maxBytes, Deadline d,
                    std::chrono::steady_clock::time_point stopAt =
                        std::chrono::steady_clock::time_point::max());

// Loaded round trips (probe/fleet.h LoadedPings): round trips to `peers` while this host's own
// bulk flow runs. Every connection and handshake first (under `d`), then from `at` (once the
// flow has filled the queues it fills) kLoadedPingSamples rounds, each a Ping on every open
// connection at once and each Pong timed as it arrives; per peer the least of its samples in
// microseconds, nullopt for one that failed. Ends by `d`; a peer that fails costs only itself.
inline constexpr int kLoadedPingSamples = 3;
// At most this many peers in one request's loaded round trips.
inline constexpr size_t kMaxLoadedPings = 256;
std::vector<std::optional<double>> loadedRoundTrips(const std::vector<Endpoint>& peers,
                                                    const ProbeKey& key, std::string_view self,
                                                    std::chrono::steady_clock::time_point at,
                                                    Deadline d);
// When a sender's loaded round trips start: this share of the window after its bytes start
// (slow start over, the queues its flow fills are full).
inline constexpr double kLoadedPingAt = 0.4;

// Round trips on an established channel.
LatencyStats measureLatency(Channel& c, const LatencyOptions& opts, Deadline d);
// Latency to `peer` over a new connection.
LatencyStats measureLatency(const Endpoint& peer, const ProbeKey& key, std::string_view self,
                            const LatencyOptions& opts, Deadline d);
// This host sends to `peer`; the peer measures and reports (authenticated).
BulkResult measureSendTo(const Endpoint& peer, const ProbeKey& key, std::string_view self,
                         const BandwidthOptions& opts, Deadline d);
// `peer` sends to this host; this host measures.
BulkResult measureReceiveFrom(const Endpoint& peer, const ProbeKey& key, std::string_view self,
                              const BandwidthOptions& opts, Deadline d);
// One control request/reply: requestAll() (probe/fanout.h) of one request, whose failure is
// rethrown (TimeoutError, AuthError, RefusedError, PeerError). `maxReply` bounds the answer.
Json request(const Endpoint& peer, const ProbeKey& key, std::string_view self, const Json& req,
             Deadline d, size_t maxReply = kMaxControlPayload);

}  // namespace rankmap::probe
