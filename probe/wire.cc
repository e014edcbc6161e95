#include "probe/wire.h"

#include <openssl/rand.h>

#include <cctype>

#include "common/crypto.h"
#include "common/files.h"

namespace rankmap::probe {
namespace {

constexpr char kMagic[4] = {'R', 'M', 'P', '1'};
constexpr std::string_view kMacLabel = "rankmap-probe-v1";
constexpr size_t kMinKeyBytes = 32;

void putU16(std::string& s, uint16_t v) {
  s += static_cast<char>(v >> 8);
  s += static_cast<char>(v & 0xff);
}
void putU32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
void putU64(std::string& s, uint64_t v) {
  for (int i = 7; i >= 0; --i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t getBE(std::string_view s, size_t off, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(s[off + i]);
  return v;
}

std::string randomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1)
    RANKMAP_THROW(InternalError, "RAND_bytes failed");
  return out;
}

}  // namespace

std::string_view msgTypeName(MsgType t) {
  switch (t) {
    case MsgType::kHello:
      return "Hello";
    case MsgType::kHelloAck:
      return "HelloAck";
    case MsgType::kPing:
      return "Ping";
    case MsgType::kPong:
      return "Pong";
    case MsgType::kBulkSink:
      return "BulkSink";
    case MsgType::kBulkSource:
      return "BulkSource";
    case MsgType::kBulkResult:
      return "BulkResult";
    case MsgType::kRequest:
      return "Request";
    case MsgType::kReply:
      return "Reply";
    case MsgType::kError:
      return "Error";
  }
  return "Unknown";
}

std::string_view authFailureName(AuthFailure f) {
  switch (f) {
    case AuthFailure::kMalformed:
      return "malformed";
    case AuthFailure::kBadMac:
      return "bad_mac";
    case AuthFailure::kReplay:
      return "replay";
    case AuthFailure::kStale:
      return "stale_timestamp";
    case AuthFailure::kVersion:
      return "version";
  }
  return "unknown";
}

ProbeKey ProbeKey::fromBytes(std::string bytes) {
  if (bytes.size() < kMinKeyBytes)
    throw InvalidInput(
        fmt::format("probe key: expected at least {} bytes, got {}", kMinKeyBytes, bytes.size()));
  ProbeKey k;
  k.bytes_ = std::move(bytes);
  return k;
}

ProbeKey ProbeKey::load(const std::string& path) {
  checkPrivateFile(path, "probe key");
  std::string text = readFile(path, 4096);
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  text = text.substr(b, e - b);
  if (text.size() < kMinKeyBytes)
    throw InvalidInput(
        fmt::format("{}: probe key of {} characters; expected at least {} "
                    "(e.g. `openssl rand -hex 32 > {}`)",
                    path, text.size(), kMinKeyBytes, path));
  return fromBytes(std::move(text));
}

std::string ProbeKey::fingerprint() const { return sha256Hex(bytes_).substr(0, 12); }

int64_t wallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void ReplayGuard::admit(std::string_view nonce, int64_t timestampMs, int64_t nowMs) {
  int64_t w = window_.count();
  if (timestampMs < nowMs - w || timestampMs > nowMs + w)
    throw AuthError(AuthFailure::kStale,
                    fmt::format("handshake timestamp {} ms off this clock (window {} ms)",
                                timestampMs - nowMs, w));
  std::lock_guard<std::mutex> lock(mu_);
  while (!order_.empty() && order_.front().first < nowMs - 2 * w) {
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  std::string n(nonce);
  if (!seen_.insert(n).second)
    throw AuthError(AuthFailure::kReplay, "handshake nonce seen before (replayed Hello)");
  order_.emplace_back(nowMs, std::move(n));
}

ChannelState ChannelState::client(const ProbeKey& key, std::string peerAddress) {
  return ChannelState(key, std::move(peerAddress), 0, Phase::kClientStart);
}

ChannelState ChannelState::server(const ProbeKey& key, std::string peerAddress) {
  return ChannelState(key, std::move(peerAddress), 1, Phase::kAwaitHello);
}

std::string ChannelState::mac(uint8_t direction, std::string_view hdr,
                              std::string_view payload) const {
  std::string data;
  data.reserve(kMacLabel.size() + session_.size() + 1 + hdr.size() + payload.size());
  data.append(kMacLabel);
  data.append(session_);
  data += static_cast<char>(direction);
  data.append(hdr);
  data.append(payload);
  return hmacSha256(key_->bytes(), data);
}

std::string ChannelState::describe() const {
  if (peerName_.empty()) return fmt::format("peer {}", peerAddr_);
  return fmt::format("agent {} ({})", peerName_, peerAddr_);
}

std::string ChannelState::seal(MsgType type, std::string_view payload) {
  if (payload.size() > kMaxDocumentPayload)
    RANKMAP_THROW(InternalError, "{} frame of {} bytes exceeds {}", msgTypeName(type),
                  payload.size(), kMaxDocumentPayload);
  std::string frame;
  // The exact size, once: a document's frame is megabytes, and growing it by doubling left
  // freed blocks of other sizes that malloc kept (a push to 253 agents: 1.9 GiB resident).
  frame.reserve(kHeaderBytes + payload.size() + kMacBytes);
  frame.append(kMagic, 4);
  frame += static_cast<char>(type);
  frame.append(3, '\0');
  putU64(frame, sendSeq_);
  putU32(frame, static_cast<uint32_t>(payload.size()));
  std::string m = mac(sendDir_, frame, payload);
  frame.append(payload);
  frame.append(m);
  ++sendSeq_;
  return frame;
}

FrameHeader ChannelState::parseHeader(std::string_view h, size_t maxPayload) const {
  RANKMAP_ASSERT(h.size() == kHeaderBytes);
  FrameHeader fh;
  fh.type = static_cast<MsgType>(static_cast<unsigned char>(h[4]));
  fh.seq = getBE(h, 8, 8);
  uint64_t len = getBE(h, 16, 4);
  bool magic = h.substr(0, 4) == std::string_view(kMagic, 4);
  if (phase_ == Phase::kAwaitHelloAck) {
    // The one answer to Hello: its length is fixed, and anything else is refused unread.
    if (!magic || fh.type != MsgType::kHelloAck || len != kNonceBytes + 8 || fh.seq != 0)
      throw AuthError(AuthFailure::kMalformed,
                      fmt::format("{}: answered the handshake with something else than HelloAck "
                                  "(not a rankmap agent, or it closed the connection)",
                                  describe()));
  } else if (!magic) {
    throw AuthError(AuthFailure::kMalformed,
                    fmt::format("{}: not a rankmap probe frame", describe()));
  } else if (len > maxPayload) {
    throw OversizeFrame(fmt::format("{}: {} frame of {} bytes exceeds the {} byte limit",
                                    describe(), msgTypeName(fh.type), len, maxPayload));
  }
  fh.length = static_cast<uint32_t>(len);
  return fh;
}

Frame ChannelState::open(const FrameHeader& fh, std::string_view h, std::string_view body) {
  RANKMAP_ASSERT(h.size() == kHeaderBytes && body.size() == fh.length + kMacBytes);
  std::string_view payload = body.substr(0, fh.length);
  std::string_view got = body.substr(fh.length, kMacBytes);
  if (phase_ == Phase::kAwaitHelloAck) {
    // The answer is authenticated under the session id that includes the server's nonce, which
    // we only learn from its payload.
    session_ = clientNonce_ + std::string(payload.substr(0, kNonceBytes));
    if (!constantTimeEqual(got, mac(1, h, payload)))
      throw AuthError(
          AuthFailure::kBadMac,
          fmt::format("{}: handshake failed authentication (different probe key)", describe()));
    clientNonce_.clear();
    phase_ = Phase::kOpen;
  } else if (!constantTimeEqual(got, mac(static_cast<uint8_t>(1 - sendDir_), h, payload))) {
    throw AuthError(AuthFailure::kBadMac,
                    fmt::format("{}: {} frame failed authentication (wrong probe key?)", describe(),
                                msgTypeName(fh.type)));
  }
  if (fh.seq != recvSeq_)
    throw AuthError(AuthFailure::kReplay, fmt::format("{}: frame sequence {} where {} expected",
                                                      describe(), fh.seq, recvSeq_));
  ++recvSeq_;
  return Frame{fh.type, std::string(payload)};
}

std::string ChannelState::take(Frame f, MsgType type) const {
  if (f.type == MsgType::kError)
    throw RefusedError(fmt::format("{} refused: {}", describe(), f.payload.substr(0, 500)));
  if (f.type != type)
    throw PeerError(fmt::format("{}: expected a {} frame, got {}", describe(), msgTypeName(type),
                                msgTypeName(f.type)));
  return std::move(f.payload);
}

void ChannelState::throwClosed() const {
  if (phase_ == Phase::kAwaitHelloAck)
    throw AuthError(AuthFailure::kBadMac,
                    fmt::format("{}: closed the connection instead of answering the handshake "
                                "(a different probe key, or it is refusing connections)",
                                describe()));
  throw PeerError(fmt::format("{}: closed the connection", describe()));
}

std::string ChannelState::hello(std::string_view selfName) {
  RANKMAP_ASSERT(phase_ == Phase::kClientStart);
  clientNonce_ = randomBytes(kNonceBytes);
  std::string p;
  putU16(p, kProtocolVersion);
  p += clientNonce_;
  putU64(p, static_cast<uint64_t>(wallClockMs()));
  std::string name(selfName.substr(0, kMaxNameBytes));
  p += static_cast<char>(name.size());
  p += name;
  std::string frame = seal(MsgType::kHello, p);
  phase_ = Phase::kAwaitHelloAck;
  return frame;
}

std::string ChannelState::acceptHello(const Frame& hello, ReplayGuard& guard) {
  RANKMAP_ASSERT(phase_ == Phase::kAwaitHello);
  if (hello.type != MsgType::kHello)
    throw AuthError(AuthFailure::kMalformed, fmt::format("{}: first frame is {}, not Hello",
                                                         describe(), msgTypeName(hello.type)));
  const std::string& p = hello.payload;
  if (p.size() < 2 + kNonceBytes + 8 + 1)
    throw AuthError(AuthFailure::kMalformed, fmt::format("{}: short Hello", describe()));
  uint16_t version = static_cast<uint16_t>(getBE(p, 0, 2));
  if (version != kProtocolVersion)
    throw AuthError(AuthFailure::kVersion, fmt::format("{}: protocol version {}, we speak {}",
                                                       describe(), version, kProtocolVersion));
  std::string nonce = p.substr(2, kNonceBytes);
  auto ts = static_cast<int64_t>(getBE(p, 2 + kNonceBytes, 8));
  size_t nameLen = static_cast<unsigned char>(p[2 + kNonceBytes + 8]);
  if (p.size() != 2 + kNonceBytes + 8 + 1 + nameLen)
    throw AuthError(AuthFailure::kMalformed, fmt::format("{}: bad Hello length", describe()));
  guard.admit(nonce, ts, wallClockMs());
  peerName_ = p.substr(2 + kNonceBytes + 9);
  std::string serverNonce = randomBytes(kNonceBytes);
  session_ = nonce + serverNonce;
  std::string ack = serverNonce;
  putU64(ack, static_cast<uint64_t>(wallClockMs()));
  phase_ = Phase::kOpen;
  return seal(MsgType::kHelloAck, ack);
}

void Channel::send(MsgType type, std::string_view payload, Deadline d) {
  std::string frame = state_.seal(type, payload);
  socket_.sendAll(frame.data(), frame.size(), d, fmt::format("send {}", msgTypeName(type)));
}

Frame Channel::recv(Deadline d, size_t maxPayload) {
  char hdr[kHeaderBytes];
  // End-of-file before a frame means something only the protocol state can say.
  size_t got = socket_.recvSome(hdr, sizeof(hdr), d, "receive frame header");
  if (got == 0) state_.throwClosed();
  socket_.recvAll(hdr + got, sizeof(hdr) - got, d, "receive frame header");
  std::string_view h(hdr, sizeof(hdr));
  FrameHeader fh = state_.parseHeader(h, maxPayload);
  std::string body(fh.length + kMacBytes, '\0');
  socket_.recvAll(body.data(), body.size(), d,
                  fmt::format("receive {} frame", msgTypeName(fh.type)));
  return state_.open(fh, h, body);
}

std::string Channel::expect(MsgType type, Deadline d, size_t maxPayload) {
  return state_.take(recv(d, maxPayload), type);
}

Channel Channel::connect(const Endpoint& ep, const ProbeKey& key, std::string_view selfName,
                         Deadline d) {
  Channel c(connectTo(ep, d), ChannelState::client(key, ep.text()));
  std::string hello = c.state_.hello(selfName);
  c.socket_.sendAll(hello.data(), hello.size(), d, "send Hello");
  c.recv(d, kNonceBytes + 8);  // the HelloAck: opening it establishes the session
  return c;
}

Channel Channel::accept(Socket s, const ProbeKey& key, ReplayGuard& guard, Deadline d) {
  std::string peer = s.peerText();
  Channel c(std::move(s), ChannelState::server(key, std::move(peer)));
  Frame hello = c.recv(d, ChannelState::kMaxHelloPayload);
  std::string ack = c.state_.acceptHello(hello, guard);
  c.socket_.sendAll(ack.data(), ack.size(), d, "send HelloAck");
  return c;
}

}  // namespace rankmap::probe
