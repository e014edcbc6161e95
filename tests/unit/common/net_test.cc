#include "common/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

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

}  // namespace
}  // namespace rankmap
