// The probe wire protocol: authenticated frames over TCP between agents (default port 7411).
//
// Frame: header (20 bytes: magic "RMP1", type u8, 3 zero bytes, seq u64, length u32, big-endian),
// payload, then a 32-byte HMAC-SHA256 under the job's shared key over
//   "rankmap-probe-v1" | session id (32 bytes) | direction (1 byte) | header | payload.
//
// Handshake: the client sends Hello {version, client nonce, timestamp, name} under an all-zero
// session id; the server checks the MAC, that the timestamp is within the replay window of its
// clock and that the nonce was not seen in that window (ReplayGuard), then answers HelloAck
// {server nonce, timestamp}. The session id is client nonce | server nonce, so every later frame
// is bound to a fresh server nonce: a recorded conversation cannot be replayed and a frame cannot
// be moved between connections or directions; per-direction sequence numbers (which must
// increase by one) stop reordering and replays inside a connection. Someone on the same network
// without the key can neither inject a request nor fake a result.
//
// Bulk bytes of a bandwidth probe are not framed (their content carries no information): the
// number that comes out of the measurement travels in an authenticated frame, and bulk data only
// flows after a handshake, to a peer that proved it holds the key.
//
// A server that rejects a Hello closes the connection without an answer (it tells nothing to a
// peer without the key); a client takes that close for a rejected handshake (AuthError).
//
// Contract: ChannelState is the protocol without I/O (pure frame building and checking); every
// call that does I/O takes a Deadline; a Channel is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/error.h"
#include "probe/socket.h"

namespace rankmap::probe {

inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHeaderBytes = 20;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMaxNameBytes = 255;  // of an agent's name in Hello
// Largest payload of an ordinary control frame; a pushed topology may use kMaxDocumentPayload.
inline constexpr size_t kMaxControlPayload = 1 << 20;
inline constexpr size_t kMaxDocumentPayload = 64u << 20;

enum class MsgType : uint8_t {
  kHello = 1,
  kHelloAck = 2,
  kPing = 3,        // client -> server: 8-byte sequence number
  kPong = 4,        // server -> client: the same 8 bytes
  kBulkSink = 5,    // client -> server: "measure the bytes I stream" (BulkParams JSON)
  kBulkSource = 6,  // client -> server: "stream bytes to me" (BulkParams JSON)
  kBulkResult = 7,  // server -> client: what the sink measured (JSON)
  kRequest = 8,     // client -> server: control request (JSON)
  kReply = 9,       // server -> client: control reply (JSON)
  kError = 10,      // server -> client: the request was refused (text)
};
std::string_view msgTypeName(MsgType t);

// The job's shared key. Loaded from a file holding at least 32 characters (e.g. the output of
// `openssl rand -hex 32`); surrounding whitespace is ignored.
class ProbeKey {
 public:
  ProbeKey() = default;
  static ProbeKey fromBytes(std::string bytes);
  // Refuses a file other users may read (checkPrivateFile: mode 0600/0400).
  static ProbeKey load(const std::string& path);
  bool empty() const { return bytes_.empty(); }
  const std::string& bytes() const { return bytes_; }
  // First 12 hex digits of SHA-256(key): names a key in logs without revealing it.
  std::string fingerprint() const;

 private:
  std::string bytes_;
};

// Why a peer was not authenticated; each reason is counted by the server.
enum class AuthFailure { kMalformed, kBadMac, kReplay, kStale, kVersion };
std::string_view authFailureName(AuthFailure f);
inline constexpr AuthFailure kAllAuthFailures[] = {AuthFailure::kMalformed, AuthFailure::kBadMac,
                                                   AuthFailure::kReplay, AuthFailure::kStale,
                                                   AuthFailure::kVersion};

class AuthError : public PeerError {
 public:
  AuthError(AuthFailure reason, const std::string& msg) : PeerError(msg), reason_(reason) {}
  AuthFailure reason() const { return reason_; }

 private:
  AuthFailure reason_;
};

// Remembers client nonces for the replay window. Thread-safe; memory is bounded by the rate of
// handshakes times the window (entries older than the window are dropped).
class ReplayGuard {
 public:
  explicit ReplayGuard(std::chrono::milliseconds window = std::chrono::seconds(60))
      : window_(window) {}
  // Throws AuthError(kStale) if |timestamp - now| > window, AuthError(kReplay) if seen.
  void admit(std::string_view nonce, int64_t timestampMs, int64_t nowMs);
  std::chrono::milliseconds window() const { return window_; }

 private:
  std::chrono::milliseconds window_;
  std::mutex mu_;
  std::deque<std::pair<int64_t, std::string>> order_;  // (time seen, nonce)
  std::unordered_set<std::string> seen_;
};

// Wall clock in milliseconds since the epoch (handshake timestamps).
int64_t wallClockMs();

struct Frame {
  MsgType type = MsgType::kError;
  std::string payload;
};

// A frame's header, read before its payload (ChannelState::parseHeader).
struct FrameHeader {
  MsgType type = MsgType::kError;
  uint64_t seq = 0;
  uint32_t length = 0;  // payload bytes; kMacBytes of MAC follow them
};

// A frame longer than the receiver's limit, refused from its header before anything is
// allocated. Malformed input like any other (servers count it as kMalformed); a client that asked
// an authenticated agent takes it for that agent's fault (probe/fanout.h's "peer").
class OversizeFrame : public AuthError {
 public:
  explicit OversizeFrame(const std::string& msg) : AuthError(AuthFailure::kMalformed, msg) {}
};

// The peer answered with an Error frame: it refused the request. The message is
// "<peer> refused: <its text>".
class RefusedError : public PeerError {
 public:
  explicit RefusedError(const std::string& msg) : PeerError(msg) {}
};

// The protocol state of one connection, without I/O: builds and verifies frames, runs the two
// handshake messages, keeps the session id and the sequence numbers. Channel drives it over a
// blocking Socket; the multiplexer of probe/fanout.h drives thousands of them over non-blocking
// sockets. This is the one implementation of the protocol; neither adds to it.
//
// Use: a client calls hello() and sends its bytes, then reads frames; the first must be the
// HelloAck, and opening it establishes the session. A server reads the Hello frame, passes it to
// acceptHello() and sends the HelloAck it returns. To read a frame, pass its kHeaderBytes to
// parseHeader(), then the payload and MAC that follow (header.length + kMacBytes) to open().
// Every failure is an exception naming the peer: AuthError for what does not verify, PeerError
// for what verifies but is not what the protocol expects. Not thread-safe; `key` must outlive it.
class ChannelState {
 public:
  // Largest Hello payload: version, nonce, timestamp, name length, name.
  static constexpr size_t kMaxHelloPayload = 2 + kNonceBytes + 8 + 1 + kMaxNameBytes;

  // `peerAddress` ("10.0.0.4:7411") names the peer in messages until it tells its name.
  static ChannelState client(const ProbeKey& key, std::string peerAddress);
  static ChannelState server(const ProbeKey& key, std::string peerAddress);

  // Client, once: the sealed Hello frame announcing `selfName` (truncated to kMaxNameBytes).
  std::string hello(std::string_view selfName);
  // Server, once: checks an opened Hello frame (type, version, length, timestamp and nonce
  // through `guard`), learns the client's name, and returns the sealed HelloAck. AuthError on a
  // bad Hello.
  std::string acceptHello(const Frame& hello, ReplayGuard& guard);

  // The header, MAC and payload of the next frame we send.
  std::string seal(MsgType type, std::string_view payload);
  // Checks a received header (kHeaderBytes): magic, and length against `maxPayload`
  // (OversizeFrame), or while a client awaits the HelloAck, that it is one (AuthError).
  FrameHeader parseHeader(std::string_view header, size_t maxPayload) const;
  // Verifies the MAC and the sequence number of a received frame: `header` as given to
  // parseHeader, `body` its payload and MAC. A client's first frame establishes the session.
  Frame open(const FrameHeader& h, std::string_view header, std::string_view body);
  // The payload of `f` if it has `type`; RefusedError for an Error frame, PeerError for another
  // type.
  std::string take(Frame f, MsgType type) const;
  // What it means that the peer closed the connection before the next frame: a client waiting
  // for the HelloAck was not accepted (AuthError: most likely a different probe key); otherwise
  // a PeerError ("... closed the connection").
  [[noreturn]] void throwClosed() const;

  // Whether the handshake is over (frames other than Hello/HelloAck may flow).
  bool established() const { return phase_ == Phase::kOpen; }
  const std::string& peerName() const { return peerName_; }
  // "agent vm3 (10.0.0.4:7411)", or "peer 10.0.0.4:7411" before the peer told its name.
  std::string describe() const;

 private:
  enum class Phase { kClientStart, kAwaitHelloAck, kAwaitHello, kOpen };
  ChannelState(const ProbeKey& key, std::string peerAddress, uint8_t sendDir, Phase phase)
      : key_(&key), peerAddr_(std::move(peerAddress)), sendDir_(sendDir), phase_(phase) {}
  std::string mac(uint8_t direction, std::string_view header, std::string_view payload) const;

  const ProbeKey* key_;
  std::string peerAddr_;
  std::string peerName_;
  std::string session_ = std::string(32, '\0');
  std::string clientNonce_;  // a client's, until the HelloAck completes the session id
  uint8_t sendDir_ = 0;      // 0 = client -> server, 1 = server -> client
  Phase phase_;
  uint64_t sendSeq_ = 0;
  uint64_t recvSeq_ = 0;
};

// A connection over a blocking Socket: ChannelState's frames, sent and received with deadlines.
class Channel {
 public:
  // Connects and runs the client handshake. PeerError/TimeoutError if the peer is unreachable,
  // AuthError if its answer does not verify or it closes the connection instead of answering
  // (wrong key).
  static Channel connect(const Endpoint& ep, const ProbeKey& key, std::string_view selfName,
                         Deadline d);
  // Runs the server handshake on an accepted socket. AuthError on a bad Hello.
  static Channel accept(Socket s, const ProbeKey& key, ReplayGuard& guard, Deadline d);

  void send(MsgType type, std::string_view payload, Deadline d);
  // Receives one frame; AuthError if its MAC or sequence number is wrong, InvalidInput-free:
  // oversize lengths are an OversizeFrame (kMalformed) before anything is allocated.
  Frame recv(Deadline d, size_t maxPayload = kMaxControlPayload);
  // recv() that requires `type`; a kError frame becomes a RefusedError carrying its text.
  std::string expect(MsgType type, Deadline d, size_t maxPayload = kMaxControlPayload);

  Socket& socket() { return socket_; }
  const std::string& peerName() const { return state_.peerName(); }
  // "agent vm3 (10.0.0.4:7411)"
  std::string describe() const { return state_.describe(); }

 private:
  Channel(Socket s, ChannelState state) : socket_(std::move(s)), state_(std::move(state)) {}

  Socket socket_;
  ChannelState state_;
};

}  // namespace rankmap::probe
