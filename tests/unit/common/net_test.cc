#include "common/net.h"

// common/net.h: descriptors, host:port text, addresses, and the one Socket and Listener that
// the probe, the TCP transport, the bootstrap and the NCCL shim use (on loopback).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"

namespace rankmap {
namespace {

bool isOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

TEST(Fd, MovesOwnershipAndClosesOnce) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const int a = sv[0];
  const int b = sv[1];
  {
    Fd first(a);
    Fd moved(std::move(first));
    EXPECT_FALSE(first.valid());  // NOLINT(bugprone-use-after-move): the contract under test
    EXPECT_EQ(moved.fd(), a);
    Fd other(b);
    other = std::move(moved);  // closes b, takes a
    EXPECT_FALSE(isOpen(b));
    EXPECT_EQ(other.fd(), a);
    EXPECT_TRUE(isOpen(a));
  }
  EXPECT_FALSE(isOpen(a));
  Fd none;
  EXPECT_FALSE(none.valid());
  none.close();  // closing nothing is a no-op
}

TEST(PollFd, ReportsReadinessAndHonoursTheDeadline) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Fd a(sv[0]);
  Fd b(sv[1]);
  auto start = Deadline::Clock::now();
  EXPECT_EQ(pollFd(a.fd(), POLLIN, Deadline::afterMs(30)), 0);
  EXPECT_GE(Deadline::Clock::now() - start, std::chrono::milliseconds(30));
  ASSERT_EQ(::write(b.fd(), "x", 1), 1);
  EXPECT_NE(pollFd(a.fd(), POLLIN, Deadline::afterMs(1000)) & POLLIN, 0);
  EXPECT_NE(pollFd(a.fd(), POLLOUT, Deadline::afterMs(1000)) & POLLOUT, 0);
}

// Both rule sets in use: probe/ (port optional, 1..65535) and the TCP transport (port required,
// 0 = ephemeral).
const HostPortRules kOptional{.defaultPort = 7411, .allowPortZero = false};
const HostPortRules kRequired{.defaultPort = std::nullopt, .allowPortZero = true};

void expectParsed(std::string_view text, HostPortRules rules, const std::string& host,
                  uint16_t port) {
  HostPort hp = parseHostPort(text, "t", rules);
  EXPECT_EQ(hp.host, host) << text;
  EXPECT_EQ(hp.port, port) << text;
}

TEST(ParseHostPort, OptionalPort) {
  expectParsed("10.0.0.1", kOptional, "10.0.0.1", 7411);
  expectParsed("10.0.0.1:99", kOptional, "10.0.0.1", 99);
  expectParsed("[::1]:5", kOptional, "::1", 5);
  expectParsed("[::1]", kOptional, "::1", 7411);
  expectParsed("::1", kOptional, "::1", 7411);  // several ':' without brackets: an address
  expectParsed("name:65535", kOptional, "name", 65535);
  for (const char* bad : {"", "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:70000", "10.0.0.1:x", "[::1",
                          "[::1]5", "[::1]:", ":80", "[]"})
    EXPECT_THROW(parseHostPort(bad, "t", kOptional), InvalidInput) << bad;
}

TEST(ParseHostPort, RequiredPort) {
  expectParsed("10.0.0.4:4100", kRequired, "10.0.0.4", 4100);
  expectParsed("[::1]:80", kRequired, "::1", 80);
  expectParsed("127.0.0.1:0", kRequired, "127.0.0.1", 0);
  expectParsed("fe80::1:80", kRequired, "fe80::1", 80);  // the last ':' separates the port
  for (const char* bad : {"", "host", ":80", "host:", "host:65536", "host:8x", "[::1]80", "[::1]"})
    EXPECT_THROW(parseHostPort(bad, "t", kRequired), InvalidInput) << bad;
}

TEST(ParseHostPort, ErrorsNameSourceTextAndExpectation) {
  auto message = [](std::string_view text, HostPortRules rules) -> std::string {
    try {
      parseHostPort(text, "RANKMAP_ROOT", rules);
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message("host:8x", kRequired), "RANKMAP_ROOT: 'host:8x': expected a numeric port");
  EXPECT_EQ(message("host", kRequired),
            "RANKMAP_ROOT: 'host': expected ADDRESS:PORT or [IPV6]:PORT, got no port");
  EXPECT_EQ(message("h:0", kOptional), "RANKMAP_ROOT: 'h:0': port out of range 1..65535");
  EXPECT_EQ(message("h:65536", kRequired), "RANKMAP_ROOT: 'h:65536': port out of range 0..65535");
  EXPECT_EQ(message("", kOptional),
            "RANKMAP_ROOT: '': expected ADDRESS or ADDRESS:PORT, got an empty string");
}

TEST(HostPortText, BracketsIpv6) {
  EXPECT_EQ(hostPortText("10.0.0.1", 7411), "10.0.0.1:7411");
  EXPECT_EQ(hostPortText("fe80::1", 7411), "[fe80::1]:7411");
}

// A sockaddr for a numeric literal of either family.
sockaddr_storage sockaddrOf(const char* host, uint16_t port) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (::inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
  } else if (::inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
  }
  return ss;
}

TEST(Sockaddr, HostAndPortOfBothFamilies) {
  EXPECT_EQ(sockaddrHost(sockaddrOf("10.0.0.4", 4100)), "10.0.0.4");
  EXPECT_EQ(sockaddrPort(sockaddrOf("10.0.0.4", 4100)), 4100);
  EXPECT_EQ(sockaddrHost(sockaddrOf("fe80::1", 80)), "fe80::1");
  EXPECT_EQ(sockaddrPort(sockaddrOf("fe80::1", 80)), 80);
  sockaddr_storage other{};
  other.ss_family = AF_UNIX;
  EXPECT_EQ(sockaddrHost(other), "?");
  EXPECT_EQ(sockaddrPort(other), 0);
}

TEST(HostPort, TextAndEquality) {
  EXPECT_EQ((HostPort{"fe80::1", 7411}).text(), "[fe80::1]:7411");
  EXPECT_EQ((HostPort{"10.0.0.1", 1}), (HostPort{"10.0.0.1", 1}));
  EXPECT_NE((HostPort{"10.0.0.1", 1}), (HostPort{"10.0.0.1", 2}));
}

TEST(Resolve, NumericOnlyTakesLiteralsAndRefusesNames) {
  SockAddr v4 = resolve("10.0.0.4", 4100, Lookup::kNumericOnly);
  EXPECT_EQ(v4.str(), "10.0.0.4:4100");
  EXPECT_EQ(v4.len, sizeof(sockaddr_in));
  SockAddr v6 = resolve("fe80::1", 80, Lookup::kNumericOnly);
  EXPECT_EQ(v6.str(), "[fe80::1]:80");
  EXPECT_EQ(v6.len, sizeof(sockaddr_in6));
  // No resolver call: these would need one (or, "1.2.3", inet_aton's shorthand).
  for (const char* bad : {"localhost", "example.com", "1.2.3", ""})
    EXPECT_THROW(resolve(bad, 1, Lookup::kNumericOnly), InvalidInput) << bad;
}

TEST(Resolve, NamesGoThroughTheResolver) {
  SockAddr a = resolve("localhost", 99, Lookup::kNames);
  EXPECT_TRUE(a.host() == "127.0.0.1" || a.host() == "::1") << a.str();
  EXPECT_EQ(a.port(), 99);
  EXPECT_EQ(resolve("127.0.0.1", 0, Lookup::kNames).str(), "127.0.0.1:0");
  EXPECT_THROW(resolve("no-such-host.invalid", 1, Lookup::kNames), InvalidInput);
}

TEST(Resolve, Ipv4NamesOnly) {
  EXPECT_EQ(resolve("localhost", 80, Lookup::kNamesIpv4).host(), "127.0.0.1");
  EXPECT_EQ(resolve("10.0.0.7", 80, Lookup::kNamesIpv4).host(), "10.0.0.7");
  EXPECT_THROW(resolve("::1", 80, Lookup::kNamesIpv4), InvalidInput);
}

TEST(InterfaceAddresses, ListsLoopbackAndRoutesBackToIt) {
  auto all = interfaceAddresses();
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const InterfaceAddress& a) {
    return a.interface == "lo" && a.address == "127.0.0.1";
  }));
  EXPECT_EQ(sourceAddressFor("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(sourceAddressFor("vm0"), std::nullopt);  // numeric IPv4 only
  EXPECT_EQ(sourceAddressFor("::1"), std::nullopt);
}

TEST(InterfaceAddress, LoopbackAndAMissingInterface) {
  EXPECT_EQ(interfaceAddress("lo", "RANKMAP_SOCKET_IFNAME"), "127.0.0.1");
  try {
    interfaceAddress("no-such-interface0", "RANKMAP_SOCKET_IFNAME");
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("RANKMAP_SOCKET_IFNAME=no-such-interface0"),
              std::string::npos)
        << e.what();
  }
}

using namespace std::chrono_literals;

SockAddr loopback(uint16_t port) { return resolve("127.0.0.1", port, Lookup::kNumericOnly); }

int intOption(int fd, int level, int name) {
  int v = 0;
  socklen_t len = sizeof(v);
  EXPECT_EQ(::getsockopt(fd, level, name, &v, &len), 0);
  return v;
}

// A listener and one connection to it, both ends.
struct Connected {
  Connected() : listener(Listener::bind(loopback(0))) {
    client = Socket::connect(loopback(listener.port()), Deadline::after(1s), "test listener");
    auto s = listener.accept(Deadline::after(1s));
    EXPECT_TRUE(s);
    if (s) server = std::move(*s);
  }
  Listener listener;
  Socket client;
  Socket server;
};

TEST(Socket, ConnectsAcceptsAndMovesBytesBothWays) {
  Connected c;
  ASSERT_TRUE(c.server.valid());
  EXPECT_EQ(c.listener.localAddr().port(), c.listener.port());
  EXPECT_EQ(c.client.peerAddr().port(), c.listener.port());
  EXPECT_EQ(c.server.peerText(), c.client.localAddr().str());
  // Both ends are non-blocking, close-on-exec and without Nagle.
  for (const Socket* s : {&c.client, &c.server}) {
    EXPECT_NE(::fcntl(s->fd(), F_GETFL) & O_NONBLOCK, 0);
    EXPECT_NE(::fcntl(s->fd(), F_GETFD) & FD_CLOEXEC, 0);
    EXPECT_NE(intOption(s->fd(), IPPROTO_TCP, TCP_NODELAY), 0);
  }
  std::string big(4u << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>(i);
  std::thread sender([&] { c.client.sendAll(big.data(), big.size(), Deadline::after(5s), "t"); });
  std::string got(big.size(), '\0');
  c.server.recvAll(got.data(), got.size(), Deadline::after(5s), "t");
  sender.join();
  EXPECT_EQ(got, big);
  c.server.sendAll("ok", 2, Deadline::after(1s), "t");
  char two[2];
  c.client.recvAll(two, sizeof(two), Deadline::after(1s), "t");
  EXPECT_EQ(std::string(two, 2), "ok");
  c.server.close();
  EXPECT_EQ(c.client.recvSome(two, sizeof(two), Deadline::after(1s), "t"), 0u);  // end-of-file
}

TEST(Socket, NonWaitingCallsAndWaits) {
  Connected c;
  char buf[8];
  EXPECT_FALSE(c.server.recvNow(buf, sizeof(buf), "t"));  // nothing there yet
  EXPECT_FALSE(c.server.waitReadable(Deadline::afterMs(20)));
  EXPECT_TRUE(c.server.waitWritable(Deadline::afterMs(1000)));
  EXPECT_EQ(c.client.sendNow("abc", 3, "t"), 3u);
  EXPECT_TRUE(c.server.waitReadable(Deadline::afterMs(1000)));
  auto [readable, writable] = c.server.waitEither(Deadline::afterMs(1000));
  EXPECT_TRUE(readable);
  EXPECT_TRUE(writable);
  EXPECT_EQ(c.server.recvNow(buf, sizeof(buf), "t"), 3u);
  c.client.close();
  EXPECT_TRUE(c.server.waitReadable(Deadline::afterMs(1000)));
  EXPECT_EQ(c.server.recvNow(buf, sizeof(buf), "t"), 0u);  // end-of-file
}

TEST(Socket, BuffersAreSetBeforeTheHandshake) {
  Listener l = Listener::bind(loopback(0), {.bufferBytes = 256 << 10});
  Socket c =
      Socket::connect(loopback(l.port()), Deadline::after(1s), "t", {.bufferBytes = 256 << 10});
  auto s = l.accept(Deadline::after(1s));
  ASSERT_TRUE(s);
  // Linux doubles the value for bookkeeping; the point is that it is not the default.
  EXPECT_GE(intOption(c.fd(), SOL_SOCKET, SO_RCVBUF), 256 << 10);
  EXPECT_GE(intOption(s->fd(), SOL_SOCKET, SO_RCVBUF), 256 << 10);
}

// A port that nothing listens on (bound once, then closed).
uint16_t deadPort() {
  Listener l = Listener::bind(loopback(0));
  return l.port();
}

TEST(Socket, RefusedIsAPeerErrorAtOnceWithoutRetry) {
  uint16_t port = deadPort();
  auto t0 = std::chrono::steady_clock::now();
  try {
    Socket::connect(loopback(port), Deadline::after(2s), "agent 127.0.0.1");
    FAIL() << "connected to a dead port";
  } catch (const PeerError& e) {
    // agent/ counts failures whose text says "connect to" as connection failures.
    EXPECT_EQ(std::string(e.what()).rfind("connect to agent 127.0.0.1: ", 0), 0u) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
}

TEST(Socket, RetryRefusedWaitsForALateListener) {
  uint16_t port = deadPort();
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    Listener l = Listener::bind(loopback(port));
    auto s = l.accept(Deadline::after(2s));
    if (s) s->sendAll("!", 1, Deadline::after(1s), "t");
  });
  Socket c = Socket::connect(loopback(port), Deadline::after(3s), "late", {.retryRefused = true});
  char b = 0;
  c.recvAll(&b, 1, Deadline::after(2s), "late");
  EXPECT_EQ(b, '!');
  late.join();
}

TEST(Socket, RetryRefusedEndsWithATimeoutNamingTheLastError) {
  uint16_t port = deadPort();
  auto t0 = std::chrono::steady_clock::now();
  try {
    Socket::connect(loopback(port), Deadline::after(200ms), "rank 1 (127.0.0.1)",
                    {.retryRefused = true});
    FAIL() << "connected to a dead port";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("connect to rank 1 (127.0.0.1)"), std::string::npos) << what;
    EXPECT_NE(what.find("refused"), std::string::npos) << what;
  }
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 100ms);
  EXPECT_LT(took, 1500ms);
}

// The non-waiting halves of connect(), for multiplexers: the caller waits for writability.
TEST(Socket, StartAndFinishConnectWithoutWaiting) {
  Listener l = Listener::bind(loopback(0));
  int err = -1;
  Socket c = Socket::startConnect(loopback(l.port()), err);
  ASSERT_EQ(err, 0);
  ASSERT_TRUE(c.waitWritable(Deadline::after(1s)));
  EXPECT_EQ(c.finishConnect(), 0);
  EXPECT_NE(intOption(c.fd(), IPPROTO_TCP, TCP_NODELAY), 0);
  EXPECT_TRUE(l.accept(Deadline::after(1s)));

  // A refusal shows either at once (the socket is then closed) or after the handshake.
  Socket r = Socket::startConnect(loopback(deadPort()), err);
  if (err == 0) {
    ASSERT_TRUE(r.waitWritable(Deadline::after(1s)));
    err = r.finishConnect();
  } else {
    EXPECT_FALSE(r.valid());
  }
  EXPECT_EQ(err, ECONNREFUSED);
}

TEST(Socket, SendToAPeerThatStopsReadingTimesOut) {
  Connected c;  // accepted, never read
  std::string big(64u << 20, 'x');
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(c.client.sendAll(big.data(), big.size(), Deadline::after(300ms), "test"),
               TimeoutError);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 2s);
}

TEST(Socket, ReceiveFromASilentPeerTimesOutNamingIt) {
  Connected c;
  char buf[4];
  try {
    c.client.recvAll(buf, sizeof(buf), Deadline::after(50ms), "rank 2 (x)");
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("rank 2 (x): peer 127.0.0.1:", 0), 0u) << what;
    EXPECT_NE(what.find("sent nothing"), std::string::npos) << what;
  }
}

TEST(Socket, PeerClosingMidMessageIsAPeerError) {
  Connected c;
  c.server.sendAll("RMP", 3, Deadline::after(1s), "test");
  c.server.close();
  char buf[20];
  try {
    c.client.recvAll(buf, sizeof(buf), Deadline::after(1s), "rank 4 (y)");
    FAIL() << "no error";
  } catch (const PeerError& e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("rank 4 (y): ", 0), 0u) << what;
    EXPECT_NE(what.find("closed the connection"), std::string::npos) << what;
  }
}

TEST(Socket, SendToAResetConnectionIsAPeerError) {
  Connected c;
  linger l{1, 0};  // close with a reset
  ASSERT_EQ(::setsockopt(c.server.fd(), SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
  c.server.close();
  std::string chunk(1 << 20, 'x');
  auto sendUntilFailure = [&] {
    for (int i = 0; i < 64; ++i)
      c.client.sendAll(chunk.data(), chunk.size(), Deadline::after(1s), "t");
  };
  EXPECT_THROW(sendUntilFailure(), PeerError);
}

TEST(Listener, AcceptTimesOutAndShutdownWakesIt) {
  Listener l = Listener::bind(loopback(0));
  EXPECT_TRUE(l.valid());
  EXPECT_NE(l.port(), 0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(l.accept(Deadline::afterMs(50)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);

  std::thread stopper([&] {
    std::this_thread::sleep_for(50ms);
    l.shutdown();
  });
  t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(l.accept(Deadline::after(10s)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  stopper.join();
  EXPECT_FALSE(l.accept(Deadline::after(10s)));  // and stays shut
  EXPECT_FALSE(Listener().valid());
}

TEST(Listener, BindingAPortInUseNamesTheAddress) {
  Listener l = Listener::bind(loopback(0));
  try {
    Listener::bind(loopback(l.port()));
    FAIL() << "bound twice";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(loopback(l.port()).str()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rankmap
