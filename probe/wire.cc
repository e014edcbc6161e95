#include "probe/wire.h"

#include <openssl/rand.h>

#include <cctype>

#include "common/crypto.h"
#include "common/files.h"

namespace rankmap::probe {
namespace {

constexpr char kMagic[4] = {'R', 'M', 'P', '1'};
constexpr std::string_view kMacLabel = "rankmap-probe-v1";
constexpr size_t kMaxNameBytes = 255;
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

std::string Channel::header(MsgType type, uint64_t seq, uint32_t length) const {
  std::string h(kMagic, 4);
  h += static_cast<char>(type);
  h.append(3, '\0');
  putU64(h, seq);
  putU32(h, length);
  return h;
}

std::string Channel::mac(uint8_t direction, std::string_view hdr, std::string_view payload) const {
  std::string data;
  data.reserve(kMacLabel.size() + session_.size() + 1 + hdr.size() + payload.size());
  data.append(kMacLabel);
  data.append(session_);
  data += static_cast<char>(direction);
  data.append(hdr);
  data.append(payload);
  return hmacSha256(key_->bytes(), data);
}

std::string Channel::describe() const {
  if (peerName_.empty()) return fmt::format("peer {}", peerAddr_);
  return fmt::format("agent {} ({})", peerName_, peerAddr_);
}

void Channel::send(MsgType type, std::string_view payload, Deadline d) {
  if (payload.size() > kMaxDocumentPayload)
    RANKMAP_THROW(InternalError, "{} frame of {} bytes exceeds {}", msgTypeName(type),
                  payload.size(), kMaxDocumentPayload);
  std::string frame = header(type, sendSeq_, static_cast<uint32_t>(payload.size()));
  std::string m = mac(sendDir_, frame, payload);
  frame.append(payload);
  frame.append(m);
  ++sendSeq_;
  socket_.sendAll(frame.data(), frame.size(), d, fmt::format("send {}", msgTypeName(type)));
}

Frame Channel::recv(Deadline d, size_t maxPayload) {
  char hdr[kHeaderBytes];
  socket_.recvAll(hdr, sizeof(hdr), d, "receive frame header");
  std::string_view h(hdr, sizeof(hdr));
  if (h.substr(0, 4) != std::string_view(kMagic, 4))
    throw AuthError(AuthFailure::kMalformed,
                    fmt::format("{}: not a rankmap probe frame", describe()));
  auto type = static_cast<MsgType>(static_cast<unsigned char>(hdr[4]));
  uint64_t seq = getBE(h, 8, 8);
  uint64_t len = getBE(h, 16, 4);
  if (len > maxPayload)
    throw AuthError(AuthFailure::kMalformed,
                    fmt::format("{}: {} frame of {} bytes exceeds the {} byte limit", describe(),
                                msgTypeName(type), len, maxPayload));
  std::string rest(len + kMacBytes, '\0');
  socket_.recvAll(rest.data(), rest.size(), d, fmt::format("receive {} frame", msgTypeName(type)));
  std::string_view payload(rest.data(), len);
  std::string_view got(rest.data() + len, kMacBytes);
  if (!constantTimeEqual(got, mac(static_cast<uint8_t>(1 - sendDir_), h, payload)))
    throw AuthError(AuthFailure::kBadMac,
                    fmt::format("{}: {} frame failed authentication (wrong probe key?)", describe(),
                                msgTypeName(type)));
  if (seq != recvSeq_)
    throw AuthError(AuthFailure::kReplay, fmt::format("{}: frame sequence {} where {} expected",
                                                      describe(), seq, recvSeq_));
  ++recvSeq_;
  Frame f;
  f.type = type;
  f.payload.assign(payload);
  return f;
}

std::string Channel::expect(MsgType type, Deadline d, size_t maxPayload) {
  Frame f = recv(d, maxPayload);
  if (f.type == MsgType::kError)
    throw PeerError(fmt::format("{} refused: {}", describe(), f.payload.substr(0, 500)));
  if (f.type != type)
    throw PeerError(fmt::format("{}: expected a {} frame, got {}", describe(), msgTypeName(type),
                                msgTypeName(f.type)));
  return std::move(f.payload);
}

Channel Channel::connect(const Endpoint& ep, const ProbeKey& key, std::string_view selfName,
                         Deadline d) {
  Channel c(connectTo(ep, d), key);
  c.peerAddr_ = ep.text();
  c.sendDir_ = 0;
  std::string nonce = randomBytes(kNonceBytes);
  std::string hello;
  putU16(hello, kProtocolVersion);
  hello += nonce;
  putU64(hello, static_cast<uint64_t>(wallClockMs()));
  std::string name(selfName.substr(0, kMaxNameBytes));
  hello += static_cast<char>(name.size());
  hello += name;
  c.send(MsgType::kHello, hello, d);
  // The answer is authenticated under the session id that includes the server's nonce, which
  // we only learn from the payload: read it raw, then verify.
  char hdr[kHeaderBytes];
  c.socket_.recvAll(hdr, sizeof(hdr), d, "receive HelloAck");
  std::string_view h(hdr, sizeof(hdr));
  uint64_t len = getBE(h, 16, 4);
  if (h.substr(0, 4) != std::string_view(kMagic, 4) ||
      static_cast<MsgType>(static_cast<unsigned char>(hdr[4])) != MsgType::kHelloAck ||
      len != kNonceBytes + 8 || getBE(h, 8, 8) != 0)
    throw AuthError(AuthFailure::kMalformed,
                    fmt::format("{}: answered the handshake with something else than HelloAck "
                                "(not a rankmap agent, or it closed the connection)",
                                c.describe()));
  std::string rest(len + kMacBytes, '\0');
  c.socket_.recvAll(rest.data(), rest.size(), d, "receive HelloAck");
  c.session_ = nonce + rest.substr(0, kNonceBytes);
  std::string_view payload(rest.data(), len);
  if (!constantTimeEqual(std::string_view(rest.data() + len, kMacBytes), c.mac(1, h, payload)))
    throw AuthError(
        AuthFailure::kBadMac,
        fmt::format("{}: handshake failed authentication (different probe key)", c.describe()));
  c.recvSeq_ = 1;
  return c;
}

Channel Channel::accept(Socket s, const ProbeKey& key, ReplayGuard& guard, Deadline d) {
  Channel c(std::move(s), key);
  c.peerAddr_ = c.socket_.peerText();
  c.sendDir_ = 1;
  Frame hello = c.recv(d, 2 + kNonceBytes + 8 + 1 + kMaxNameBytes);
  if (hello.type != MsgType::kHello)
    throw AuthError(AuthFailure::kMalformed, fmt::format("{}: first frame is {}, not Hello",
                                                         c.describe(), msgTypeName(hello.type)));
  const std::string& p = hello.payload;
  if (p.size() < 2 + kNonceBytes + 8 + 1)
    throw AuthError(AuthFailure::kMalformed, fmt::format("{}: short Hello", c.describe()));
  uint16_t version = static_cast<uint16_t>(getBE(p, 0, 2));
  if (version != kProtocolVersion)
    throw AuthError(AuthFailure::kVersion, fmt::format("{}: protocol version {}, we speak {}",
                                                       c.describe(), version, kProtocolVersion));
  std::string nonce = p.substr(2, kNonceBytes);
  auto ts = static_cast<int64_t>(getBE(p, 2 + kNonceBytes, 8));
  size_t nameLen = static_cast<unsigned char>(p[2 + kNonceBytes + 8]);
  if (p.size() != 2 + kNonceBytes + 8 + 1 + nameLen)
    throw AuthError(AuthFailure::kMalformed, fmt::format("{}: bad Hello length", c.describe()));
  guard.admit(nonce, ts, wallClockMs());
  c.peerName_ = p.substr(2 + kNonceBytes + 9);
  std::string serverNonce = randomBytes(kNonceBytes);
  c.session_ = nonce + serverNonce;
  std::string ack = serverNonce;
  putU64(ack, static_cast<uint64_t>(wallClockMs()));
  c.send(MsgType::kHelloAck, ack, d);
  return c;
}

}  // namespace rankmap::probe
