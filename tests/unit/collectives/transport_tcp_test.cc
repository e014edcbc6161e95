// TCP-specific transport tests: a peer process killed with SIGKILL, options that disagree across
// ranks, connecting through the callback bootstrap (the MPI path), and one pair reading headers
// it cannot trust.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/bootstrap/callback_bootstrap.h"
#include "collectives/bootstrap/root_bootstrap.h"
#include "collectives/transport/tcp/pair.h"
#include "collectives/transport/transport.h"
#include "common/error.h"
#include "tests/unit/collectives/harness.h"

namespace rankmap::coll::transport {
namespace {

using Clock = std::chrono::steady_clock;

// Kills and reaps a forked child when the test ends, also on failure.
class ChildGuard {
 public:
  explicit ChildGuard(pid_t pid) : pid_(pid) {}
  ~ChildGuard() { kill(); }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

TEST(TcpTransport, KilledPeerProcessFailsRequestsWithPeerError) {
  bootstrap::RootListener listener("127.0.0.1:0");
  std::string root = listener.address();
  DeviceOptions opts;
  opts.tcp.host = "127.0.0.1";
  opts.tcp.streams = 2;

  // Fork before this process starts any thread of its own: the child only connects, says it is
  // ready, and waits to be killed.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) {
    int code = 0;
    try {
      Deadline d = Deadline::afterMs(20000);
      auto bs = bootstrap::makeRootBootstrap(1, 2, root, d);
      auto ctx = makeDevice(opts)->connect(*bs, d);
      char ready = 'r';
      ctx->isend(0, 1, &ready, 1)->wait(d);
      for (;;) ::pause();
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  ChildGuard child(pid);
  Deadline d = Deadline::afterMs(20000);
  auto bs = bootstrap::makeRootBootstrap(std::move(listener), 2, d);
  auto ctx = makeDevice(opts)->connect(*bs, d);
  char ready = 0;
  ctx->irecv(1, 1, &ready, 1)->wait(d);
  ASSERT_EQ(ready, 'r');

  std::vector<char> in(1 << 20);
  auto pending = ctx->irecv(1, 2, in.data(), in.size());
  auto start = Clock::now();
  child.kill();
  try {
    pending->wait(Deadline::afterMs(20000));
    FAIL() << "a receive from a killed process must fail";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (127.0.0.1:"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  std::vector<char> out(1 << 20);
  EXPECT_THROW(ctx->isend(1, 3, out.data(), out.size())->wait(Deadline::afterMs(5000)), PeerError);
}

// Runs fn(rank) on `size` threads and rethrows nothing: returns the error texts.
template <typename Fn>
std::vector<std::string> runRanks(int size, Fn fn) {
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(TcpTransport, DifferentStreamCountsAreRejectedNamingTheRank) {
  bootstrap::RootListener listener("127.0.0.1:0");
  std::string root = listener.address();
  auto errors = runRanks(2, [&](int r) {
    Deadline d = Deadline::afterMs(10000);
    DeviceOptions opts;
    opts.tcp.host = "127.0.0.1";
    opts.tcp.streams = r == 0 ? 1 : 2;
    auto bs = r == 0 ? bootstrap::makeRootBootstrap(std::move(listener), 2, d)
                     : bootstrap::makeRootBootstrap(1, 2, root, d);
    try {
      makeDevice(opts)->connect(*bs, d);
    } catch (const PeerError&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("wrong error type: ") + e.what());
    }
  });
  EXPECT_NE(errors[0].find("rank 1 (127.0.0.1:"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("RANKMAP_TCP_STREAMS"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 (127.0.0.1:"), std::string::npos) << errors[1];
}

// Rank 2 takes part in the bootstrap but never opens its connections: ranks 0 and 1 give up at
// their deadline with TimeoutError naming it.
TEST(TcpTransport, PeerThatNeverConnectsTimesOutNamingIt) {
  bootstrap::RootListener listener("127.0.0.1:0");
  std::string root = listener.address();
  auto start = Clock::now();
  auto errors = runRanks(3, [&](int r) {
    Deadline d = Deadline::afterMs(10000);
    auto bs = r == 0 ? bootstrap::makeRootBootstrap(std::move(listener), 3, d)
                     : bootstrap::makeRootBootstrap(r, 3, root, d);
    if (r == 2) {
      bs->allgather("127.0.0.1:9 1 42", d);
      return;
    }
    DeviceOptions opts;
    opts.tcp.host = "127.0.0.1";
    try {
      makeDevice(opts)->connect(*bs, Deadline::afterMs(500));
    } catch (const TimeoutError&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("wrong error type: ") + e.what());
    }
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank 2 (127.0.0.1:9"), std::string::npos) << errors[r];
  }
  EXPECT_EQ(errors[2], "");
}

// The MPI shim's path: TCP contexts connected through a callback allgather.
TEST(TcpTransport, ConnectsThroughCallbackBootstrap) {
  const int size = 4;
  std::vector<std::string> slots(size);
  std::barrier<> sync(size);
  auto allgather = [&](int rank) {
    return [&, rank](const void* send, void* recv, size_t bytes) {
      slots[rank].assign(static_cast<const char*>(send), bytes);
      sync.arrive_and_wait();
      for (int r = 0; r < size; ++r) std::memcpy(static_cast<char*>(recv) + r * bytes, slots[r].data(), bytes);
      sync.arrive_and_wait();
    };
  };
  auto errors = runRanks(size, [&](int r) {
    Deadline d = Deadline::afterMs(20000);
    auto bs = bootstrap::makeCallbackBootstrap(r, size, allgather(r));
    DeviceOptions opts;
    opts.tcp.host = "127.0.0.1";
    auto ctx = makeDevice(opts)->connect(*bs, d);
    int next = (r + 1) % size, prev = (r + size - 1) % size;
    int got = -1;
    std::vector<RequestPtr> reqs{ctx->irecv(prev, 0, &got, sizeof(got)),
                                 ctx->isend(next, 0, &r, sizeof(r))};
    waitAll(reqs, d);
    if (got != prev) throw std::runtime_error("ring message from the wrong rank");
    // Every rank leaves only after everyone has received.
    bs->barrier(d);
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// One stream of a tcp::Pair on a socketpair, driven by the test in place of the progress thread;
// `peer` is the other end, written by hand.
struct PairOnSocketpair {
  int epollFd = ::epoll_create1(EPOLL_CLOEXEC);
  Socket peer;
  std::unique_ptr<tcp::Pair> pair;
  PairOnSocketpair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0)
      throw std::runtime_error("socketpair");
    peer = Socket(fds[1]);
    std::vector<Socket> mine;
    mine.emplace_back(fds[0]);
    pair = std::make_unique<tcp::Pair>(0, 1, "rank 1 (test)", std::move(mine), epollFd, 1);
  }
  ~PairOnSocketpair() {
    pair.reset();
    ::close(epollFd);
  }
  // Writes all of `bytes`, reading on the pair whenever the socket is full.
  void write(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(peer.fd(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n > 0) done += static_cast<size_t>(n);
      pair->onReadable(0);
    }
    pair->onReadable(0);
  }
};

std::string chunk(uint64_t tag, uint64_t total, uint64_t offset, const std::string& payload) {
  tcp::ChunkHeader h{tag, 0, total, offset, payload.size()};
  return std::string(reinterpret_cast<const char*>(&h), sizeof h) + payload;
}

// A header whose total no process can hold fails the pair with PeerError naming the peer; it
// used to be allocated at once, and std::bad_alloc on the progress thread ended the process.
TEST(TcpPair, MessageClaimingAPetabyteFailsThePairNotTheProcess) {
  PairOnSocketpair p;
  int buf = 0;
  RequestPtr waiting = p.pair->recv(0, &buf, sizeof buf);
  p.write(chunk(5, 1ull << 50, 0, "abcdef"));
  try {
    waiting->wait(Deadline::afterMs(2000));
    FAIL() << "the receive should fail with the pair";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (test) sent a message of 1125899906842624 bytes"),
              std::string::npos)
        << e.what();
  }
}

// An unexpected message above the heap's 1 MiB is mapped, its two chunks written out of order;
// it arrives intact in the receive posted afterwards.
TEST(TcpPair, LargeUnexpectedMessageArrivesIntact) {
  PairOnSocketpair p;
  const size_t total = 5u << 20;
  std::string data(total, '\0');
  for (size_t i = 0; i < total; ++i) data[i] = static_cast<char>(i * 131 % 251);
  const size_t half = total / 2;
  p.write(chunk(3, total, half, data.substr(half)) + chunk(3, total, 0, data.substr(0, half)));
  std::string got(total, 'x');
  RequestPtr r = p.pair->recv(3, got.data(), total);
  r->wait(Deadline::afterMs(2000));
  EXPECT_TRUE(got == data);
}

}  // namespace
}  // namespace rankmap::coll::transport
