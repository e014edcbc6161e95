// The probe protocol on loopback: handshake, framing, authentication, deadlines, the server.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "probe/measure.h"
#include "probe/server.h"
#include "probe/wire.h"
#include "tests/unit/probe/probe_test_util.h"

namespace rankmap::probe {
namespace {

using namespace std::chrono_literals;

using test::keyA;
using test::keyB;

using test::loopback;

// A probe server on an ephemeral loopback port whose control requests echo back.
struct TestServer {
  explicit TestServer(ProbeKey key = keyA(), ProbeServer::Options o = {}) {
    o.listen = loopback(0);
    o.name = "server";
    o.handshakeTimeout = 500ms;
    o.idleTimeout = 2s;
    server = std::make_unique<ProbeServer>(
        o, std::move(key), [this](const Json& req, const std::string& peer, Deadline) {
          ++requests;
          if (req.value("op", "") == "fail") throw InvalidInput("asked to fail");
          return Json{{"echo", req}, {"peer", peer}};
        });
    server->start();
  }
  Endpoint ep() const { return loopback(server->port()); }
  std::unique_ptr<ProbeServer> server;
  std::atomic<int> requests{0};
};

// Waits (bounded) until `pred` holds: server threads count failures asynchronously.
template <typename P>
bool eventually(P pred) {
  auto until = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

// Splitting and port rules are common/net.h's (tests/unit/common/net_test.cc); here what probe
// adds: the default port, numeric addresses only, "localhost", and no port 0.
TEST(Endpoint, ParsesAddressesAndRejectsNames) {
  EXPECT_EQ(parseEndpoint("10.0.0.1", 7411, "t"), (Endpoint{"10.0.0.1", 7411}));
  EXPECT_EQ(parseEndpoint("[::1]:5", 7411, "t"), (Endpoint{"::1", 5}));
  EXPECT_EQ(parseEndpoint("::1", 7411, "t"), (Endpoint{"::1", 7411}));
  EXPECT_EQ(parseEndpoint("localhost:8", 1, "t"), (Endpoint{"127.0.0.1", 8}));
  EXPECT_EQ((Endpoint{"fe80::1", 7411}).text(), "[fe80::1]:7411");
  for (const char* bad : {"example.com", "10.0.0.1:0", "1.2.3"})
    EXPECT_THROW(parseEndpoint(bad, 7411, "t"), InvalidInput) << bad;
}

// The socket itself (deadlines, peer errors) is common/net.h's (tests/unit/common/net_test.cc);
// here the extras the probe adds.
TEST(ProbeSocket, ShutdownWriteEndsTheStreamAndAbortResets) {
  Listener l = listenOn(loopback(0));
  Socket c = connectTo(loopback(l.port()), Deadline::after(1s));
  auto peer = l.accept(Deadline::after(1s));
  ASSERT_TRUE(peer);
  c.sendAll("ab", 2, Deadline::after(1s), "test");
  shutdownWrite(c);
  char buf[4];
  peer->recvAll(buf, 2, Deadline::after(1s), "test");
  EXPECT_EQ(peer->recvSome(buf, sizeof(buf), Deadline::after(1s), "test"), 0u);  // end-of-file

  // A plain close would also read as end-of-file; an abort is a reset.
  Socket c2 = connectTo(loopback(l.port()), Deadline::after(1s));
  auto peer2 = l.accept(Deadline::after(1s));
  ASSERT_TRUE(peer2);
  abortConnection(c2);
  EXPECT_FALSE(c2.valid());
  EXPECT_THROW(peer2->recvSome(buf, sizeof(buf), Deadline::after(1s), "test"), PeerError);
}

TEST(ProbeKey, NeedsEnoughBytes) {
  EXPECT_THROW(ProbeKey::fromBytes("short"), InvalidInput);
  EXPECT_EQ(keyA().fingerprint().size(), 12u);
  EXPECT_NE(keyA().fingerprint(), keyB().fingerprint());
}

TEST(ReplayGuard, RejectsReplayedNonceAndStaleTimestamp) {
  ReplayGuard g(1000ms);
  g.admit("nonce-1", 10'000, 10'000);
  try {
    g.admit("nonce-1", 10'000, 10'100);
    FAIL() << "replay accepted";
  } catch (const AuthError& e) {
    EXPECT_EQ(e.reason(), AuthFailure::kReplay);
  }
  try {
    g.admit("nonce-2", 5'000, 10'000);
    FAIL() << "stale timestamp accepted";
  } catch (const AuthError& e) {
    EXPECT_EQ(e.reason(), AuthFailure::kStale);
  }
  EXPECT_THROW(g.admit("nonce-3", 20'000, 10'000), AuthError);  // from the future
  g.admit("nonce-4", 10'500, 10'000);
}

// The protocol without sockets: two ChannelStates hand each other bytes.
struct StatePair {
  explicit StatePair(const ProbeKey& serverKey)
      : client(ChannelState::client(ka, "server:1")),
        server(ChannelState::server(serverKey, "client:2")) {}
  // Splits sealed bytes into a header and a body and opens them on `to`.
  static Frame deliver(ChannelState& to, const std::string& bytes, size_t max = 1 << 20) {
    std::string_view h(bytes.data(), kHeaderBytes);
    FrameHeader fh = to.parseHeader(h, max);
    return to.open(fh, h, std::string_view(bytes).substr(kHeaderBytes));
  }
  ProbeKey ka = keyA();
  ReplayGuard guard;
  ChannelState client;
  ChannelState server;
};

TEST(ChannelState, HandshakeRequestAndReplyWithoutSockets) {
  ProbeKey k = keyA();
  StatePair p(k);
  Frame hello = StatePair::deliver(p.server, p.client.hello("vm1"), ChannelState::kMaxHelloPayload);
  std::string ack = p.server.acceptHello(hello, p.guard);
  EXPECT_EQ(p.server.peerName(), "vm1");
  EXPECT_EQ(p.server.describe(), "agent vm1 (client:2)");
  EXPECT_FALSE(p.client.established());
  StatePair::deliver(p.client, ack);
  EXPECT_TRUE(p.client.established());
  Frame req = StatePair::deliver(p.server, p.client.seal(MsgType::kRequest, "{}"));
  EXPECT_EQ(p.server.take(req, MsgType::kRequest), "{}");
  std::string reply = p.server.seal(MsgType::kReply, "ok");
  // A frame replayed in the other direction does not verify.
  EXPECT_THROW(StatePair::deliver(p.server, reply), AuthError);
  EXPECT_EQ(p.client.take(StatePair::deliver(p.client, reply), MsgType::kReply), "ok");
  // Refusals, unexpected types and oversize frames.
  EXPECT_THROW(p.client.take(StatePair::deliver(p.client, p.server.seal(MsgType::kError, "no")),
                             MsgType::kReply),
               RefusedError);
  EXPECT_THROW(p.client.take(StatePair::deliver(p.client, p.server.seal(MsgType::kPong, "x")),
                             MsgType::kReply),
               PeerError);
  EXPECT_THROW(StatePair::deliver(p.client, p.server.seal(MsgType::kReply, "12345"), 4),
               OversizeFrame);
  EXPECT_THROW(p.client.throwClosed(), PeerError);
}

TEST(ChannelState, AClientWhoseHelloIsRejectedTakesTheCloseForAnAuthFailure) {
  ProbeKey kb = keyB();
  StatePair p(kb);
  std::string hello = p.client.hello("vm1");
  EXPECT_THROW(StatePair::deliver(p.server, hello, ChannelState::kMaxHelloPayload), AuthError);
  try {
    p.client.throwClosed();
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find("probe key"), std::string::npos) << e.what();
  }
}

TEST(Channel, ControlRequestRoundTrip) {
  TestServer s;
  Json reply =
      request(s.ep(), keyA(), "client-1", Json{{"op", "x"}, {"n", 7}}, Deadline::after(2s));
  EXPECT_EQ(reply["echo"]["n"], 7);
  EXPECT_EQ(reply["peer"], "client-1");
  EXPECT_EQ(s.requests.load(), 1);
}

TEST(Channel, HandlerErrorsBecomePeerErrorsWithTheMessage) {
  TestServer s;
  try {
    request(s.ep(), keyA(), "c", Json{{"op", "fail"}}, Deadline::after(2s));
    FAIL() << "no error";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("asked to fail"), std::string::npos) << e.what();
  }
}

TEST(Channel, WrongKeyIsRejectedAndCounted) {
  TestServer s;
  EXPECT_THROW(request(s.ep(), keyB(), "intruder", Json{{"op", "x"}}, Deadline::after(2s)),
               PeerError);
  EXPECT_TRUE(eventually([&] { return s.server->authFailures(AuthFailure::kBadMac) == 1; }));
  EXPECT_EQ(s.requests.load(), 0);
}

TEST(Channel, ServerWithAnotherKeyRefusesTheHandshake) {
  TestServer s(keyB());
  EXPECT_THROW(Channel::connect(s.ep(), keyA(), "c", Deadline::after(2s)), PeerError);
  EXPECT_TRUE(eventually([&] { return s.server->authFailures(AuthFailure::kBadMac) == 1; }));
}

TEST(Channel, ClientRejectsAForgedHelloAck) {
  // A fake agent without the key answers Hello with a HelloAck it cannot authenticate.
  Listener l = listenOn(loopback(0));
  std::thread fake([&] {
    auto c = l.accept(Deadline::after(2s));
    if (!c) return;
    char hello[80];  // Hello for the one-character name "c"
    try {
      c->recvAll(hello, sizeof(hello), Deadline::after(2s), "fake");
      std::string ack = "RMP1";
      ack += static_cast<char>(MsgType::kHelloAck);
      ack.append(3, '\0');
      ack.append(8, '\0');
      ack += std::string("\x00\x00\x00\x18", 4);
      ack.append(24 + 32, 'z');
      c->sendAll(ack.data(), ack.size(), Deadline::after(2s), "fake");
      c->recvSome(hello, sizeof(hello), Deadline::after(2s), "fake");
    } catch (const Error&) {
    }
  });
  try {
    Channel::connect(loopback(l.port()), keyA(), "c", Deadline::after(2s));
    ADD_FAILURE() << "accepted a forged HelloAck";
  } catch (const AuthError& e) {
    EXPECT_EQ(e.reason(), AuthFailure::kBadMac);
  }
  fake.join();
}

// A raw client: sends bytes, returns what the server does (bytes back or close).
std::string rawExchange(const Endpoint& ep, const std::string& bytes) {
  Socket s = connectTo(ep, Deadline::after(1s));
  s.sendAll(bytes.data(), bytes.size(), Deadline::after(1s), "raw send");
  std::string got;
  char buf[256];
  try {
    while (size_t k = s.recvSome(buf, sizeof(buf), Deadline::after(1s), "raw recv"))
      got.append(buf, k);
  } catch (const Error&) {
  }
  return got;
}

TEST(Framing, GarbageAndOversizeFramesAreRejectedWithoutAllocation) {
  TestServer s;
  EXPECT_EQ(rawExchange(s.ep(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "");
  // A well-formed header announcing 100 MB: refused from the header alone.
  std::string hdr = "RMP1";
  hdr += static_cast<char>(MsgType::kHello);
  hdr.append(3, '\0');
  hdr.append(8, '\0');
  hdr += std::string("\x06\x00\x00\x00", 4);
  EXPECT_EQ(rawExchange(s.ep(), hdr), "");
  EXPECT_TRUE(eventually([&] { return s.server->authFailures(AuthFailure::kMalformed) == 2; }));
}

// A man in the middle on loopback that flips one byte at `flipAt` of the client's stream.
class FlippingProxy {
 public:
  FlippingProxy(Endpoint target, size_t flipAt) : listener_(listenOn(loopback(0))) {
    thread_ = std::thread([this, target, flipAt] {
      auto c = listener_.accept(Deadline::after(3s));
      if (!c) return;
      Socket up = connectTo(target, Deadline::after(1s));
      size_t seen = 0;
      char buf[4096];
      auto until = Deadline::after(3s);
      for (;;) {
        auto [r1, w1] = c->waitEither(until);
        (void)w1;
        if (until.expired()) return;
        try {
          if (auto k = c->recvNow(buf, sizeof(buf), "proxy")) {
            if (*k == 0) return;
            if (flipAt >= seen && flipAt < seen + *k) buf[flipAt - seen] ^= 0x01;
            seen += *k;
            up.sendAll(buf, *k, until, "proxy up");
          }
          if (auto k = up.recvNow(buf, sizeof(buf), "proxy")) {
            if (*k == 0) return;
            c->sendAll(buf, *k, until, "proxy down");
          }
        } catch (const Error&) {
          return;
        }
        std::this_thread::sleep_for(1ms);
      }
    });
  }
  ~FlippingProxy() {
    listener_.shutdown();
    thread_.join();
  }
  Endpoint ep() const { return loopback(listener_.port()); }

 private:
  Listener listener_;
  std::thread thread_;
};

TEST(Framing, ATamperedFrameFailsAuthentication) {
  TestServer s;
  // Hello is 20 + (2 + 16 + 8 + 1 + 1) + 32 = 80 bytes for the name "c"; byte 90 is inside the
  // payload of the first request frame that follows.
  FlippingProxy proxy(s.ep(), 90);
  EXPECT_THROW(
      request(proxy.ep(), keyA(), "c", Json{{"op", "tamper-me-please"}}, Deadline::after(2s)),
      Error);
  EXPECT_TRUE(eventually([&] { return s.server->authFailures(AuthFailure::kBadMac) == 1; }));
  EXPECT_EQ(s.requests.load(), 0);
}

TEST(Deadlines, ConnectToASilentPeerTimesOut) {
  // Accepts (the kernel completes the TCP handshake) but never answers Hello.
  Listener silent = listenOn(loopback(0));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(Channel::connect(loopback(silent.port()), keyA(), "c", Deadline::after(200ms)),
               TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
}

TEST(Deadlines, BulkSendToAReceiverThatStallsTimesOut) {
  Listener l = listenOn(loopback(0));
  Socket c = connectTo(loopback(l.port()), Deadline::after(1s));
  auto peer = l.accept(Deadline::after(1s));
  ASSERT_TRUE(peer);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(streamBulk(c, 1ull << 32, Deadline::after(300ms)), TimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

// A flow that stalls past the whole window (a TCP timeout on a busy testbed): the warm-up mark
// and the end of the window fall on the same read. The rate must come from the whole transfer,
// not from the few microseconds between two clock reads (that once gave 150 Gbit/s).
TEST(Bulk, StallPastTheWindowGivesASaneRate) {
  Listener l = listenOn(loopback(0));
  Socket c = connectTo(loopback(l.port()), Deadline::after(1s));
  auto peer = l.accept(Deadline::after(1s));
  ASSERT_TRUE(peer);
  std::thread sender([&] {
    std::string chunk(64 << 10, 'x');
    c.sendAll(chunk.data(), chunk.size(), Deadline::after(1s), "test");
    std::this_thread::sleep_for(150ms);  // past the 100 ms window
    c.sendAll(chunk.data(), chunk.size(), Deadline::after(1s), "test");
  });
  BandwidthOptions o;
  o.maxMs = 100;
  BulkResult r = receiveBulk(*peer, o, Deadline::after(2s));
  sender.join();
  EXPECT_GE(r.seconds, 0.1);
  // At most both chunks over the stall: a few Mbit/s, nowhere near the loopback's speed.
  EXPECT_LT(r.mbps, 2.0 * (128 << 10) * 8 / 0.1 / 1e6);
}

// A sender stops at its end even while the socket stays writable (a receiver that reads
// everything): a result that must come back through full queues needs every sender stopped.
TEST(Bulk, SenderStopsAtItsEndWhileWritable) {
  Listener l = listenOn(loopback(0));
  Socket c = connectTo(loopback(l.port()), Deadline::after(1s));
  auto peer = l.accept(Deadline::after(1s));
  ASSERT_TRUE(peer);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    std::vector<char> buf(1 << 20);
    try {
      while (!done && peer->recvSome(buf.data(), buf.size(), Deadline::after(2s), "test") > 0) {
      }
    } catch (const std::exception&) {
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  uint64_t sent = streamBulk(c, 1ull << 40, Deadline::after(5s), t0 + 200ms);
  auto took = std::chrono::steady_clock::now() - t0;
  done = true;
  c.close();
  reader.join();
  EXPECT_GT(sent, 0u);
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 1s);
}

// A starved flow: the window ends at the transfer's end with what arrived (cut), not at the
// deadline with an error.
TEST(Bulk, ReceiverCutsAStarvedFlowAtItsEnd) {
  Listener l = listenOn(loopback(0));
  Socket c = connectTo(loopback(l.port()), Deadline::after(1s));
  auto peer = l.accept(Deadline::after(1s));
  ASSERT_TRUE(peer);
  BandwidthOptions o;
  o.maxMs = 100;
  auto t0 = std::chrono::steady_clock::now();
  BulkResult none = receiveBulk(*peer, o, Deadline::after(5s), t0 + 150ms);
  EXPECT_TRUE(none.cut);
  EXPECT_EQ(none.totalBytes, 0u);
  EXPECT_EQ(none.mbps, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);

  std::string chunk(64 << 10, 'x');
  c.sendAll(chunk.data(), chunk.size(), Deadline::after(1s), "test");  // then silence
  t0 = std::chrono::steady_clock::now();
  BulkResult some = receiveBulk(*peer, o, Deadline::after(5s), t0 + 200ms);
  EXPECT_TRUE(some.cut);
  EXPECT_EQ(some.totalBytes, chunk.size());
  // 64 KiB over the ~200 ms the flow had: ~2.6 Mbit/s, not the loopback's burst rate.
  EXPECT_GT(some.mbps, 0);
  EXPECT_LT(some.mbps, 10);
  // The deadline still wins over a later end.
  EXPECT_THROW(receiveBulk(*peer, o, Deadline::after(100ms), t0 + 10s), TimeoutError);
}

// start_in_ms: the bytes begin that long after the request, the rate is the link's.
TEST(Measure, BandwidthStartsAtItsStart) {
  TestServer s;
  BandwidthOptions bo;
  bo.maxMs = 60;
  bo.startInMs = 300;
  auto t0 = std::chrono::steady_clock::now();
  BulkResult to = measureSendTo(s.ep(), keyA(), "c", bo, Deadline::after(5s));
  BulkResult from = measureReceiveFrom(s.ep(), keyA(), "c", bo, Deadline::after(5s));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 600ms);
  EXPECT_LT(took, 3s);
  for (const auto& r : {to, from}) {
    EXPECT_FALSE(r.cut);
    EXPECT_GT(r.mbps, 10);
    EXPECT_LT(r.seconds, 0.2);
  }
  BandwidthOptions back = BandwidthOptions::fromJson(bo.toJson(), "test");
  EXPECT_EQ(back.startInMs, 300);
  Json bad = bo.toJson();
  bad["start_in_ms"] = kMaxBulkStartMs + 1;
  EXPECT_THROW(BandwidthOptions::fromJson(bad, "test"), InvalidInput);
}

// A trial's tag travels with its flows; a tag without its count, or a count out of range, is
// refused naming the field.
TEST(Measure, BandwidthOptionsCarryTheirTrial) {
  BandwidthOptions bo;
  EXPECT_FALSE(bo.toJson().contains("trial"));
  bo.trial = 1234567;
  bo.trialFlows = 4093;
  BandwidthOptions back = BandwidthOptions::fromJson(bo.toJson(), "test");
  EXPECT_EQ(back.trial, 1234567);
  EXPECT_EQ(back.trialFlows, 4093);
  Json noCount = bo.toJson();
  noCount.erase("trial_flows");
  try {
    BandwidthOptions::fromJson(noCount, "bulk request");
    ADD_FAILURE() << "a trial without trial_flows was accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("trial_flows"), std::string::npos) << e.what();
  }
  Json zero = bo.toJson();
  zero["trial_flows"] = 0;
  EXPECT_THROW(BandwidthOptions::fromJson(zero, "test"), InvalidInput);
}

TEST(Measure, LatencyStatisticsAreOrderedAndCountSamples) {
  TestServer s;
  LatencyStats st = measureLatency(s.ep(), keyA(), "c", LatencyOptions{3, 50}, Deadline::after(5s));
  EXPECT_GT(st.minUs, 0);
  EXPECT_LE(st.minUs, st.medianUs);
  EXPECT_LE(st.medianUs, st.p90Us);
  EXPECT_LE(st.p90Us, st.p99Us);
  EXPECT_LT(st.medianUs, 100000);
}

TEST(Measure, BandwidthBothDirectionsBoundedByTime) {
  TestServer s;
  BandwidthOptions bo;
  bo.maxMs = 60;
  bo.maxBytes = 1ull << 30;
  auto t0 = std::chrono::steady_clock::now();
  BulkResult to = measureSendTo(s.ep(), keyA(), "c", bo, Deadline::after(5s));
  BulkResult from = measureReceiveFrom(s.ep(), keyA(), "c", bo, Deadline::after(5s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  for (const auto& r : {to, from}) {
    EXPECT_GT(r.mbps, 10);  // loopback moves far more than 10 Mbit/s
    EXPECT_GT(r.totalBytes, 0u);
    EXPECT_GT(r.seconds, 0.02);
    EXPECT_LT(r.seconds, 0.2);
  }
}

TEST(Measure, BandwidthBoundedByBytes) {
  TestServer s;
  BandwidthOptions bo;
  bo.maxMs = 10000;
  bo.maxBytes = 2u << 20;
  auto t0 = std::chrono::steady_clock::now();
  BulkResult r = measureSendTo(s.ep(), keyA(), "c", bo, Deadline::after(5s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_GE(r.totalBytes, bo.maxBytes);
}

TEST(Server, RefusesBulkRequestsBeyondItsLimits) {
  ProbeServer::Options o;
  o.maxBulkMs = 100;
  TestServer s(keyA(), o);
  BandwidthOptions bo;
  bo.maxMs = 5000;
  try {
    measureSendTo(s.ep(), keyA(), "c", bo, Deadline::after(2s));
    FAIL() << "accepted";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds"), std::string::npos) << e.what();
  }
}

// Beyond maxConnections a connection is closed unanswered at once and counted as busy; the
// cap frees when the silent ones reach their handshake timeout.
TEST(Server, ConnectionsBeyondTheCapAreClosedAndCounted) {
  ProbeServer::Options o;
  o.maxConnections = 2;
  TestServer s(keyA(), o);
  Socket idle1 = connectTo(s.ep(), Deadline::after(1s));  // never send a Hello
  Socket idle2 = connectTo(s.ep(), Deadline::after(1s));
  ASSERT_TRUE(eventually([&] { return s.server->connectionsAccepted() == 2; }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(request(s.ep(), keyA(), "c", Json{{"op", "x"}}, Deadline::after(2s)), PeerError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 400ms);  // not after a handshake timeout
  EXPECT_EQ(s.server->connectionsRefused(ProbeServer::Refusal::kBusy), 1u);
  EXPECT_EQ(s.server->connectionsRefused(ProbeServer::Refusal::kNoDescriptors), 0u);
  EXPECT_EQ(s.requests.load(), 0);
  // The two silent ones end at the 500 ms handshake timeout; then a request is answered.
  Json reply;
  EXPECT_TRUE(eventually([&] {
    try {
      reply = request(s.ep(), keyA(), "c", Json{{"op", "x"}}, Deadline::after(1s));
      return true;
    } catch (const PeerError&) {
      return false;
    }
  }));
  EXPECT_EQ(reply["echo"]["op"], "x");
}

TEST(Server, StopsPromptlyWithIdleAndHalfOpenConnections) {
  auto s = std::make_unique<TestServer>();
  Socket idle = connectTo(s->ep(), Deadline::after(1s));                       // never sends Hello
  Channel open = Channel::connect(s->ep(), keyA(), "c", Deadline::after(1s));  // then silent
  auto t0 = std::chrono::steady_clock::now();
  s->server->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

}  // namespace
}  // namespace rankmap::probe
