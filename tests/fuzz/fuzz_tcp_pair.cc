// Fuzz target for the TCP transport's frames (collectives/transport/tcp/pair.h): a rank's pair
// reads chunk headers and payloads from each of its streams and matches them to receives.
//
// The pair under test is the production tcp::Pair on socketpairs, driven by this harness in place
// of the context's progress thread (onReadable/onWritable on every stream in turn).
// Input: byte 0: bit 7 picks the mode, bits 0-1 the streams (1 + b % 3).
// - Raw (bit 7 clear): byte 1: receives posted before any byte arrives (b % 9), each [tag u8]
//   [bytes u16 LE] (tags 0-3); byte after them: receives posted after (b % 9), likewise; the
//   rest are [stream u8][length u16 LE][bytes] written to that stream's other end (at most
//   64 KiB per stream), which then closes.
// - Real sender (bit 7 set): byte 1 sets the sender's striping threshold (1 + 64 b bytes); then
//   up to 16 messages [flags u8][tag u8][bytes u16 LE] sent in order by a second, real
//   tcp::Pair. Flags bit 0 posts the receive before the traffic (else after it has arrived),
//   bit 1 posts it one byte too long.
//
// Findings: a crash or sanitizer report; an exception out of the pair; in raw mode, a receive
// still pending after every stream ended (a hang), or one failed with anything but PeerError or
// InvalidInput; with the real sender, a send or receive that does not finish, a receive whose
// bytes differ from what was sent, a receive of the right length that fails, or one of the wrong
// length that does not fail with InvalidInput.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/tcp/pair.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"

namespace {

using namespace rankmap;
using coll::transport::RequestPtr;
using coll::transport::tcp::Pair;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_tcp_pair: %s\n", what.c_str());
  std::abort();
}

constexpr size_t kMaxStreamBytes = 64u << 10;
constexpr size_t kMaxMessages = 16;

struct Reader {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  bool has(size_t n) const { return pos + n <= size; }
  uint8_t u8() { return has(1) ? data[pos++] : 0; }
  uint16_t u16() {
    uint16_t lo = u8();
    return static_cast<uint16_t>(lo | (u8() << 8));
  }
};

// `streams` socketpairs: ends[0] for the pair under test, ends[1] for the other side.
struct Wires {
  std::vector<Socket> mine, theirs;
  explicit Wires(int streams) {
    for (int s = 0; s < streams; ++s) {
      int fds[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0)
        finding("socketpair failed");
      mine.emplace_back(fds[0]);
      theirs.emplace_back(fds[1]);
    }
  }
};

struct Epoll {
  int fd = ::epoll_create1(EPOLL_CLOEXEC);
  ~Epoll() { ::close(fd); }
};

// Finished: true, or false while pending; `error` holds the failure's kind.
bool finished(const RequestPtr& r, std::string& error) {
  try {
    return r->test();
  } catch (const PeerError&) {
    error = "PeerError";
  } catch (const InvalidInput&) {
    error = "InvalidInput";
  } catch (const std::exception& e) {
    error = std::string("unexpected: ") + e.what();
  }
  return true;
}

struct Posted {
  RequestPtr req;
  std::unique_ptr<char[]> buf;
};

Posted post(Pair& pair, uint64_t tag, size_t bytes) {
  Posted p{nullptr, std::make_unique<char[]>(bytes + 1)};
  p.req = pair.recv(tag, p.buf.get(), bytes);
  return p;
}

void raw(Reader& in, int streams) {
  Epoll ep;
  Wires w(streams);
  Pair pair(0, 1, "fuzz peer", std::move(w.mine), ep.fd, 1);
  std::vector<Posted> posted;
  auto postSome = [&] {
    int n = in.u8() % 9;
    for (int i = 0; i < n && in.has(3); ++i) {
      uint64_t tag = in.u8() % 4;
      posted.push_back(post(pair, tag, in.u16()));
    }
  };
  postSome();
  std::vector<std::pair<int, uint16_t>> later;  // receives posted once the streams ended
  {
    int n = in.u8() % 9;
    for (int i = 0; i < n && in.has(3); ++i) {
      int tag = in.u8() % 4;
      later.emplace_back(tag, in.u16());
    }
  }
  std::vector<size_t> written(static_cast<size_t>(streams), 0);
  while (in.has(3)) {
    int s = in.u8() % streams;
    size_t len = in.u16();  // before reading pos: argument order is unspecified
    len = std::min(len, in.size - in.pos);
    const uint8_t* bytes = in.data + in.pos;
    in.pos += len;
    len = std::min(len, kMaxStreamBytes - written[static_cast<size_t>(s)]);
    if (len == 0) continue;
    ssize_t n = ::send(w.theirs[static_cast<size_t>(s)].fd(), bytes, len, MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(len)) finding("the harness could not queue a stream's bytes");
    written[static_cast<size_t>(s)] += len;
  }
  for (auto& t : w.theirs) t.close();
  for (int round = 0; round < 2; ++round)
    for (int s = 0; s < streams; ++s) pair.onReadable(s);
  for (const auto& [tag, bytes] : later) posted.push_back(post(pair, static_cast<uint64_t>(tag), bytes));
  for (const auto& p : posted) {
    std::string error;
    if (!finished(p.req, error)) finding("a receive is still pending after every stream ended");
    if (error.rfind("unexpected", 0) == 0) finding("a receive failed with " + error);
  }
}

void realSender(Reader& in, int streams) {
  Epoll epRecv, epSend;
  Wires w(streams);
  const uint64_t stripeMin = 1 + 64 * uint64_t{in.u8()};
  Pair receiver(0, 1, "fuzz sender", std::move(w.mine), epRecv.fd, stripeMin);
  Pair sender(1, 0, "fuzz receiver", std::move(w.theirs), epSend.fd, stripeMin);
  struct Message {
    uint64_t tag;
    size_t bytes;
    bool early, tooLong;
    std::string data;
    RequestPtr send;
    Posted recv;
  };
  std::vector<Message> msgs;
  while (in.has(4) && msgs.size() < kMaxMessages) {
    uint8_t flags = in.u8();
    Message m{in.u8() % 4u, in.u16(), (flags & 1) != 0, (flags & 2) != 0, {}, nullptr, {}};
    m.data.resize(m.bytes);
    for (size_t j = 0; j < m.bytes; ++j)
      m.data[j] = static_cast<char>((msgs.size() * 131 + j * 7 + m.tag) & 0xff);
    msgs.push_back(std::move(m));
  }
  // Receives of one tag must be posted in send order: the early ones first, in order, then
  // the late ones, in order, is that only when no late one precedes an early one of its tag.
  std::vector<bool> lateSeen(4, false);
  for (auto& m : msgs) {
    if (lateSeen[m.tag]) m.early = false;
    if (!m.early) lateSeen[m.tag] = true;
  }
  for (auto& m : msgs)
    if (m.early) m.recv = post(receiver, m.tag, m.bytes + (m.tooLong ? 1 : 0));
  for (auto& m : msgs) m.send = sender.send(m.tag, m.data.data(), m.bytes);
  auto progress = [&](auto&& done) {
    for (int round = 0; round < 100000; ++round) {
      if (done()) return;
      for (int s = 0; s < streams; ++s) {
        sender.onWritable(s);
        receiver.onReadable(s);
      }
    }
    finding("no progress after 100000 rounds");
  };
  std::string error;
  progress([&] {
    for (auto& m : msgs)
      if (!finished(m.send, error) || (m.early && !finished(m.recv.req, error))) return false;
    return true;
  });
  for (auto& m : msgs)
    if (!m.early) m.recv = post(receiver, m.tag, m.bytes + (m.tooLong ? 1 : 0));
  progress([&] {
    for (auto& m : msgs)
      if (!finished(m.recv.req, error)) return false;
    return true;
  });
  for (size_t i = 0; i < msgs.size(); ++i) {
    auto& m = msgs[i];
    std::string sendError, recvError;
    finished(m.send, sendError);
    finished(m.recv.req, recvError);
    const std::string what = "message " + std::to_string(i) + " (tag " + std::to_string(m.tag) +
                             ", " + std::to_string(m.bytes) + " bytes)";
    if (!sendError.empty()) finding(what + ": the send failed: " + sendError);
    if (m.tooLong) {
      if (recvError != "InvalidInput") finding(what + ": a receive one byte too long: " + recvError);
    } else if (!recvError.empty()) {
      finding(what + ": the receive failed: " + recvError);
    } else if (m.bytes > 0 && std::memcmp(m.recv.buf.get(), m.data.data(), m.bytes) != 0) {
      finding(what + ": received bytes differ from those sent");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (log::setLevel(log::Level::Off), true);
  (void)quiet;
  if (size == 0) return 0;
  Reader in{data, size, 1};
  const int streams = 1 + (data[0] & 3) % 3;
  if (data[0] & 0x80)
    realSender(in, streams);
  else
    raw(in, streams);
  return 0;
}
