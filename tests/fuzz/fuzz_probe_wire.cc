// Fuzz target for the probe wire protocol (probe/wire.h): ChannelState, the one implementation of
// frames and the handshake, driven as Channel and the fan-out multiplexer drive it, with the
// payload parsers the probe server and client apply to what a frame carries.
//
// The first byte picks who sends the rest:
//   0: a stranger without the key. The bytes are what a server reads from a new connection
//      (header, payload and MAC, frame after frame), and also what a client awaiting HelloAck
//      reads. Every failure must be an AuthError or PeerError; nothing may open.
//   1: a peer with the key whose Hello payload is the rest (MAC valid, content arbitrary). Bytes
//      18..25, the timestamp, are replaced by now + (their first two bytes as int16) * 10 ms so
//      that the replay window is reachable. acceptHello must accept or throw AuthError.
//   2: an established session (honest handshake) in which records
//      [type u8][flags u8][length u16 LE][payload] are sealed by the client (flags bit 0 clear)
//      or the server (bit 0 set), then optionally corrupted in one byte (bit 1; position from
//      the payload's first byte and flags) or dropped (bit 7), and delivered to the other side
//      as Channel::recv does, whose payload parser then runs (BandwidthOptions, BulkResult, a
//      Reply as a bandwidth reply with loaded round trips, and for a Request the agent's
//      ProbeService::handle, whose measurements a stand-in answers without the network; a
//      request to relay to other agents is left out: it makes network traffic). An intact frame
//      must open to what was sealed; a corrupted or out-of-order one must never open.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "agent/passive.h"
#include "agent/probe_service.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "probe/agent_fleet.h"
#include "probe/measure.h"
#include "probe/wire.h"

namespace {

using namespace rankmap;
using namespace rankmap::probe;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_probe_wire: %s\n", what);
  std::abort();
}

const ProbeKey& key() {
  static const ProbeKey k = [] {
    log::setLevel(log::Level::Off);
    return ProbeKey::fromBytes(std::string(64, 'k'));
  }();
  return k;
}

// Reads one frame from `in` as Channel::recv does; nullopt when the bytes end first (the peer
// closed the connection).
std::optional<Frame> readFrame(ChannelState& st, std::string_view& in, size_t maxPayload) {
  if (in.size() < kHeaderBytes) return std::nullopt;
  std::string_view h = in.substr(0, kHeaderBytes);
  FrameHeader fh = st.parseHeader(h, maxPayload);
  if (in.size() - kHeaderBytes < size_t{fh.length} + kMacBytes) return std::nullopt;
  std::string_view body = in.substr(kHeaderBytes, fh.length + kMacBytes);
  in.remove_prefix(kHeaderBytes + fh.length + kMacBytes);
  return st.open(fh, h, body);
}

// What the probe server does with an opened frame's payload (probe/server.cc serveChannel),
// without the I/O: the parsers must accept or throw InvalidInput.
void serverParses(const Frame& f) {
  try {
    switch (f.type) {
      case MsgType::kBulkSink:
      case MsgType::kBulkSource:
        BandwidthOptions::fromJson(parseJson(f.payload, "bulk request"), "bulk request");
        break;
      case MsgType::kRequest: {
        Json req = parseJson(f.payload, "request");
        if (req.is_object() && req.contains("relay")) break;
        // The measurements answered without the network (a stand-in for the peers the ops name):
        // the requests' fields, the loaded round trips' included, and the replies run as they do.
        agent::ProbeService::Measure stand;
        stand.latency = [](const Host&, const LatencyOptions&, Deadline) {
          return LatencyStats{20, 21, 25, 30};
        };
        stand.bulk = [](const Host&, const BandwidthOptions&, bool, const std::vector<Host>& pings,
                        std::vector<std::optional<double>>& us, Deadline) {
          BulkResult r;
          r.mbps = 940;
          r.bytes = r.totalBytes = 1 << 20;
          r.seconds = 0.01;
          for (size_t i = 0; i < pings.size(); ++i)
            if (i % 3) us[i] = 40.0 + static_cast<double>(i);
          return r;
        };
        static agent::PassiveLedger ledger("fuzz-agent");
        static agent::ProbeService service(
            key(), "fuzz-agent",
            {[] { return std::optional<int64_t>(7); }, [](const Topology&) { return true; },
             [](bool rebase, std::optional<agent::ProbeService::Hooks::ProbedAgo> probed) {
               using L = agent::PassiveLedger;
               const auto now = L::Clock::now();
               if (probed) ledger.probed(L::ago(now, probed->from), L::ago(now, probed->to));
               return ledger.summary(now, 0.25, std::chrono::seconds(20), rebase).toJson();
             }},
            nullptr, stand);
        service.handle(req, "fuzz-peer", Deadline::after(std::chrono::seconds(1)));
        break;
      }
      default:
        break;
    }
  } catch (const InvalidInput&) {
  }
}

// What a probing client does with an answer (probe/measure.cc).
void clientParses(ChannelState& st, const Frame& f) {
  try {
    switch (f.type) {
      case MsgType::kBulkResult:
        BulkResult::fromJson(parseJson(st.take(f, MsgType::kBulkResult), "bulk result"),
                             "bulk result");
        break;
      default: {
        const std::string payload = st.take(f, MsgType::kReply);
        parseBandwidthReply(parseJson(payload, "reply"), payload.size() % 4);
      }
    }
  } catch (const InvalidInput&) {
  } catch (const RefusedError&) {
  } catch (const PeerError& e) {
    if (dynamic_cast<const AuthError*>(&e)) throw;  // take() never authenticates
  }
}

void stranger(std::string_view in) {
  ReplayGuard guard;
  ChannelState server = ChannelState::server(key(), "10.0.0.9:40000");
  try {
    std::string_view s = in;
    while (auto f = readFrame(
               server, s,
               server.established() ? kMaxDocumentPayload : ChannelState::kMaxHelloPayload)) {
      server.acceptHello(*f, guard);
      finding("a frame without the key opened on the server");
    }
  } catch (const PeerError&) {  // AuthError, OversizeFrame included
  }
  ChannelState client = ChannelState::client(key(), "10.0.0.9:7411");
  client.hello("fuzz");
  try {
    std::string_view s = in;
    if (readFrame(client, s, kNonceBytes + 8)) finding("a HelloAck without the key opened");
  } catch (const PeerError&) {
  }
}

void helloWithKey(std::string_view in) {
  std::string p(in);
  if (p.size() >= 26) {
    int16_t rel =
        static_cast<int16_t>((static_cast<uint8_t>(p[18]) << 8) | static_cast<uint8_t>(p[19]));
    uint64_t ts = static_cast<uint64_t>(wallClockMs() + int64_t{rel} * 10);
    for (int i = 0; i < 8; ++i) p[18 + i] = static_cast<char>(ts >> (56 - 8 * i));
  }
  ChannelState client = ChannelState::client(key(), "10.0.0.9:7411");
  std::string frame = client.seal(MsgType::kHello, p);  // phase-free: seals under the zero session
  ReplayGuard guard;
  ChannelState server = ChannelState::server(key(), "10.0.0.9:40000");
  try {
    std::string_view s = frame;
    auto f = readFrame(server, s, ChannelState::kMaxHelloPayload);
    if (!f) return;  // longer than a Hello may be: refused by its header
    server.acceptHello(*f, guard);
    if (!server.established()) finding("acceptHello returned without a session");
    if (server.peerName().size() > kMaxNameBytes) finding("peer name longer than the limit");
  } catch (const AuthError&) {
  }
}

void session(std::string_view in) {
  ReplayGuard guard;
  ChannelState client = ChannelState::client(key(), "10.0.0.9:7411");
  ChannelState server = ChannelState::server(key(), "10.0.0.9:40000");
  std::string hello = client.hello("fuzz-client");
  std::string_view hs = hello;
  std::string ack =
      server.acceptHello(*readFrame(server, hs, ChannelState::kMaxHelloPayload), guard);
  std::string_view as = ack;
  readFrame(client, as, kNonceBytes + 8);
  if (!client.established() || !server.established()) finding("honest handshake failed");

  bool broken[2] = {false, false};  // per receiver: a frame was lost or corrupted before
  while (in.size() >= 4) {
    auto type = static_cast<MsgType>(static_cast<uint8_t>(in[0]));
    uint8_t flags = static_cast<uint8_t>(in[1]);
    size_t len = static_cast<uint8_t>(in[2]) | (size_t{static_cast<uint8_t>(in[3])} << 8);
    in.remove_prefix(4);
    len = std::min(len, in.size());
    std::string payload(in.substr(0, len));
    in.remove_prefix(len);

    bool fromServer = flags & 1;
    ChannelState& tx = fromServer ? server : client;
    ChannelState& rx = fromServer ? client : server;
    bool& rxBroken = broken[fromServer ? 0 : 1];
    std::string frame = tx.seal(type, payload);
    if (flags & 0x80) {  // lost: the receiver's next frame is out of sequence
      rxBroken = true;
      continue;
    }
    bool corrupted = false;
    if (flags & 2) {
      size_t pos =
          ((flags >> 2) * 131u + (payload.empty() ? 0u : static_cast<uint8_t>(payload[0]))) %
          frame.size();
      char x = static_cast<char>(frame[pos] ^ (1 + ((flags >> 2) & 0x1f)));
      corrupted = x != frame[pos];
      frame[pos] = x;
    }
    std::string_view s = frame;
    try {
      auto f = readFrame(rx, s, fromServer ? kMaxControlPayload : kMaxDocumentPayload);
      if (!f) return;  // a corrupted length: the receiver waits for bytes that never come
      if (corrupted) finding("a corrupted frame opened");
      if (rxBroken) finding("a frame after a lost one opened");
      if (f->type != type || f->payload != payload) finding("a frame opened to other content");
      if (fromServer)
        clientParses(rx, *f);
      else
        serverParses(*f);
    } catch (const OversizeFrame&) {
      if (!corrupted) finding("an intact frame was refused as oversize");
      return;
    } catch (const AuthError&) {
      if (!corrupted && !rxBroken) finding("an intact frame failed to open");
      return;  // the receiver drops the connection
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  key();
  if (size == 0) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      stranger(in);
      break;
    case 1:
      helloWithKey(in);
      break;
    default:
      session(in);
  }
  return 0;
}
