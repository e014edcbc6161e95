// Bootstrap tests: the root bootstrap over 127.0.0.1 (allgather, unreachable root, world-size
// mismatch, missing and dying ranks, configuration) and the callback bootstrap.
#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/bootstrap/callback_bootstrap.h"
#include "collectives/bootstrap/root_bootstrap.h"
#include "common/config.h"
#include "common/error.h"
#include "common/net.h"
#include "tests/unit/common/config_util.h"

namespace rankmap::coll::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;

// Runs fn(rank) on `size` threads, rank 0 with the listener; returns each rank's error text
// ("" for success) and its error type name.
struct Outcome {
  std::string error;
  std::string type;
};

template <typename Fn>
std::vector<Outcome> runRanks(int size, Fn fn) {
  std::vector<Outcome> out(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const TimeoutError& e) {
        out[r] = {e.what(), "timeout"};
      } catch (const PeerError& e) {
        out[r] = {e.what(), "peer"};
      } catch (const std::exception& e) {
        out[r] = {e.what(), "other"};
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::string blobOf(int rank, int round) {
  return std::string(static_cast<size_t>((rank * 7919 + round * 104729) % 100000), 'a' + rank % 26) +
         std::to_string(rank);
}

class RootAllgather : public ::testing::TestWithParam<int> {};

TEST_P(RootAllgather, EveryRankGetsEveryBlob) {
  const int size = GetParam();
  RootListener listener("127.0.0.1:0");
  std::string root = listener.address();
  auto outcomes = runRanks(size, [&](int r) {
    Deadline d = Deadline::afterMs(20000);
    auto bs = r == 0 ? makeRootBootstrap(std::move(listener), size, d)
                     : makeRootBootstrap(r, size, root, d);
    ASSERT_EQ(bs->rank(), r);
    ASSERT_EQ(bs->size(), size);
    EXPECT_EQ(bs->localHost(), "127.0.0.1");
    for (int round = 0; round < 3; ++round) {
      auto all = bs->allgather(round == 1 ? std::string() : blobOf(r, round), d);
      ASSERT_EQ(all.size(), static_cast<size_t>(size));
      for (int p = 0; p < size; ++p) {
        ASSERT_EQ(all[p], round == 1 ? std::string() : blobOf(p, round)) << "round " << round;
      }
    }
    bs->barrier(d);
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(outcomes[r].error, "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, RootAllgather, ::testing::Values(1, 2, 5, 16));

// A port nobody listens on: bind an ephemeral port, then close it.
std::string closedPort() {
  RootListener l("127.0.0.1:0");
  return l.address();
}

TEST(RootBootstrap, UnreachableRootTimesOutNamingIt) {
  std::string root = closedPort();
  auto start = Clock::now();
  try {
    makeRootBootstrap(1, 2, root, Deadline::afterMs(400));
    FAIL() << "connecting to a closed port must fail";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find(root), std::string::npos) << e.what();
  }
  auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, std::chrono::milliseconds(300));
  EXPECT_LT(elapsed, std::chrono::seconds(3));
}

TEST(RootBootstrap, RootThatStartsLateIsWaitedFor) {
  std::string root = closedPort();
  auto outcomes = runRanks(2, [&](int r) {
    Deadline d = Deadline::afterMs(20000);
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto bs = makeRootBootstrap(r, 2, root, d);
    auto all = bs->allgather(std::to_string(r), d);
    ASSERT_EQ(all, (std::vector<std::string>{"0", "1"}));
  });
  EXPECT_EQ(outcomes[0].error, "");
  EXPECT_EQ(outcomes[1].error, "");
}

TEST(RootBootstrap, WorldSizeMismatchNamesThePeer) {
  RootListener listener("127.0.0.1:0");
  std::string root = listener.address();
  auto outcomes = runRanks(2, [&](int r) {
    Deadline d = Deadline::afterMs(5000);
    if (r == 0) {
      makeRootBootstrap(std::move(listener), 3, d);
    } else {
      makeRootBootstrap(1, 4, root, d);
    }
  });
  EXPECT_EQ(outcomes[0].type, "peer") << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("rank 1 (127.0.0.1:"), std::string::npos) << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("world size 4"), std::string::npos) << outcomes[0].error;
  EXPECT_EQ(outcomes[1].type, "peer") << outcomes[1].error;
  EXPECT_NE(outcomes[1].error.find("world size"), std::string::npos) << outcomes[1].error;
}

TEST(RootBootstrap, MissingRankTimesOutNamingIt) {
  RootListener listener("127.0.0.1:0");
  std::string root = listener.address();
  auto start = Clock::now();
  auto outcomes = runRanks(2, [&](int r) {
    Deadline d = Deadline::afterMs(500);
    if (r == 0) {
      makeRootBootstrap(std::move(listener), 3, d);
    } else {
      makeRootBootstrap(1, 3, root, Deadline::afterMs(5000));
    }
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(4));
  EXPECT_EQ(outcomes[0].type, "timeout") << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("ranks 2 "), std::string::npos) << outcomes[0].error;
  // Rank 1 is told by the root instead of waiting for its own deadline.
  EXPECT_EQ(outcomes[1].type, "peer") << outcomes[1].error;
  EXPECT_NE(outcomes[1].error.find("ranks 2"), std::string::npos) << outcomes[1].error;
}

TEST(RootBootstrap, RankLeavingBeforeAllgatherFailsEveryone) {
  RootListener listener("127.0.0.1:0");
  std::string root = listener.address();
  auto start = Clock::now();
  auto outcomes = runRanks(3, [&](int r) {
    Deadline d = Deadline::afterMs(10000);
    auto bs = r == 0 ? makeRootBootstrap(std::move(listener), 3, d)
                     : makeRootBootstrap(r, 3, root, d);
    if (r == 2) return;  // leaves: its connection closes
    bs->allgather("x", d);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(outcomes[2].error, "");
  EXPECT_EQ(outcomes[0].type, "peer") << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("rank 2"), std::string::npos) << outcomes[0].error;
  EXPECT_EQ(outcomes[1].type, "peer") << outcomes[1].error;
  EXPECT_NE(outcomes[1].error.find("rank 2"), std::string::npos) << outcomes[1].error;
}

// Frames as root_bootstrap.cc writes them: {u32 magic "RMBS", u32 type, u64 length}.
std::string frameHeader(uint32_t type, uint64_t length) {
  struct {
    uint32_t magic = 0x524d4253;
    uint32_t type;
    uint64_t length;
  } h;
  h.type = type;
  h.length = length;
  return std::string(reinterpret_cast<const char*>(&h), sizeof h);
}

// A stranger whose hello claims 1 GiB and then sends nothing more is dropped at once: the root
// neither allocates the gigabyte nor waits its 10 s for the hello's bytes.
TEST(RootBootstrap, HelloClaimingAGigabyteIsDroppedAtOnce) {
  RootListener listener("127.0.0.1:0");
  std::string root = listener.address();
  HostPort hp = parseHostPort(root, "root", {.defaultPort = std::nullopt});
  Socket stranger = Socket::connect(resolve(hp.host, hp.port, Lookup::kNumericOnly),
                                    Deadline::afterMs(2000), "root");
  std::string header = frameHeader(1, 1ull << 30);
  stranger.sendAll(header.data(), header.size(), Deadline::afterMs(2000), "root");
  auto start = Clock::now();
  auto outcomes = runRanks(2, [&](int r) {
    Deadline d = Deadline::afterMs(8000);
    auto bs = r == 0 ? makeRootBootstrap(std::move(listener), 2, d)
                     : makeRootBootstrap(r, 2, root, d);
    bs->allgather("x", d);
  });
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(outcomes[0].error, "");
  EXPECT_EQ(outcomes[1].error, "");
}

// A root that returns another blob in a rank's own place is refused by that rank.
TEST(RootBootstrap, RootReturningAnotherOwnBlobIsRefused) {
  Listener fake = Listener::bind(resolve("127.0.0.1", 0, Lookup::kNumericOnly));
  std::string root = fake.localAddr().str();
  std::thread server([&] {
    std::optional<Socket> s = fake.accept(Deadline::afterMs(5000));
    ASSERT_TRUE(s);
    std::string gathered;
    for (std::string blob : {"root", "not mine"}) {
      uint64_t n = blob.size();
      gathered.append(reinterpret_cast<const char*>(&n), sizeof n);
      gathered += blob;
    }
    std::string answer = frameHeader(2, 0) + frameHeader(5, gathered.size()) + gathered;
    s->sendAll(answer.data(), answer.size(), Deadline::afterMs(5000), "rank");
    char sink[256];
    while (s->recvSome(sink, sizeof sink, Deadline::afterMs(5000), "rank") > 0) {
    }
  });
  auto outcomes = runRanks(1, [&](int) {
    Deadline d = Deadline::afterMs(5000);
    auto bs = makeRootBootstrap(1, 2, root, d);
    bs->allgather("mine", d);
  });
  server.join();
  EXPECT_EQ(outcomes[0].type, "peer") << outcomes[0].error;
  EXPECT_NE(outcomes[0].error.find("another blob for rank 1"), std::string::npos)
      << outcomes[0].error;
}

TEST(RootBootstrap, FromConfigValidatesSettings) {
  using rankmap::testing::configFrom;
  Deadline d = Deadline::afterMs(1000);
  auto expectInvalid = [&](const Config& c, const std::string& name) {
    try {
      makeRootBootstrapFromConfig(c, d);
      ADD_FAILURE() << "expected InvalidInput naming " << name;
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  expectInvalid(configFrom({}), "RANKMAP_WORLD_SIZE");
  expectInvalid(configFrom({{"RANKMAP_WORLD_SIZE", "4"}}), "RANKMAP_RANK");
  expectInvalid(configFrom({{"RANKMAP_WORLD_SIZE", "4"}, {"RANKMAP_RANK", "4"}}), "RANKMAP_RANK");
  expectInvalid(configFrom({{"RANKMAP_WORLD_SIZE", "4"}, {"RANKMAP_RANK", "1"}}), "RANKMAP_ROOT");
  expectInvalid(
      configFrom(
          {{"RANKMAP_WORLD_SIZE", "2"}, {"RANKMAP_RANK", "1"}, {"RANKMAP_ROOT", "127.0.0.1"}}),
      "RANKMAP_ROOT");
  // A complete configuration of a one-rank world works.
  auto bs = makeRootBootstrapFromConfig(
      configFrom(
          {{"RANKMAP_WORLD_SIZE", "1"}, {"RANKMAP_RANK", "0"}, {"RANKMAP_ROOT", "127.0.0.1:0"}}),
      d);
  EXPECT_EQ(bs->allgather("solo", d), std::vector<std::string>{"solo"});
}

// An in-process stand-in for MPI_Allgather: `size` threads meet at a barrier.
class ThreadAllgather {
 public:
  explicit ThreadAllgather(int size) : size_(size), slots_(size), barrier_(size) {}
  AllgatherFn fnFor(int rank) {
    return [this, rank](const void* send, void* recv, size_t bytes) {
      slots_[rank].assign(static_cast<const char*>(send), bytes);
      barrier_.arrive_and_wait();
      for (int r = 0; r < size_; ++r) {
        std::memcpy(static_cast<char*>(recv) + r * bytes, slots_[r].data(), bytes);
      }
      barrier_.arrive_and_wait();
    };
  }

 private:
  int size_;
  std::vector<std::string> slots_;
  std::barrier<> barrier_;
};

TEST(CallbackBootstrap, AllgatherOfVariableLengthBlobs) {
  const int size = 5;
  ThreadAllgather ag(size);
  auto outcomes = runRanks(size, [&](int r) {
    auto bs = makeCallbackBootstrap(r, size, ag.fnFor(r));
    Deadline d = Deadline::afterMs(10000);
    for (int round = 0; round < 3; ++round) {
      auto all = bs->allgather(round == 1 ? std::string() : blobOf(r, round), d);
      ASSERT_EQ(all.size(), static_cast<size_t>(size));
      for (int p = 0; p < size; ++p) {
        ASSERT_EQ(all[p], round == 1 ? std::string() : blobOf(p, round));
      }
    }
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(outcomes[r].error, "") << "rank " << r;
}

TEST(CallbackBootstrap, WorldSizeMismatchNamesTheRank) {
  const int size = 3;
  ThreadAllgather ag(size);
  auto outcomes = runRanks(size, [&](int r) {
    // Rank 2 believes in a world of 4 (its own view of the communicator is wrong).
    auto bs = makeCallbackBootstrap(r, r == 2 ? 4 : size, ag.fnFor(r));
    bs->allgather("x", Deadline::afterMs(10000));
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].type, "peer") << outcomes[r].error;
    EXPECT_NE(outcomes[r].error.find("rank 2 has world size 4"), std::string::npos)
        << outcomes[r].error;
  }
  EXPECT_EQ(outcomes[2].type, "peer") << outcomes[2].error;
}

}  // namespace
}  // namespace rankmap::coll::bootstrap
