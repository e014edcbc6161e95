// One conformance suite for every transport (tensorpipe style): each backend joins with one
// INSTANTIATE_TEST_SUITE_P line at the bottom. Hardware backends skip with a reason.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/transport/transport.h"
#include "common/error.h"
#include "tests/unit/collectives/harness.h"

namespace rankmap::coll::transport {
namespace {

using testing::Backend;
using testing::spawn;
using testing::SpawnOptions;
using testing::testDeadline;

struct TransportParam {
  Backend backend;
  int streams = 1;
  std::string name;
};

// For gtest's and CTest's test listings.
void PrintTo(const TransportParam& p, std::ostream* os) { *os << p.name; }

std::string paramName(const ::testing::TestParamInfo<TransportParam>& info) {
  return info.param.name;
}

// A byte pattern with a closed form, different for every (src, dst, tag, index).
uint8_t patternByte(int src, int dst, uint64_t tag, size_t i) {
  uint64_t x = (static_cast<uint64_t>(src) * 1315423911u) ^ (static_cast<uint64_t>(dst) << 17) ^
               (tag * 2654435761u) ^ (i * 0x9E3779B97F4A7C15ull);
  return static_cast<uint8_t>(x ^ (x >> 29) ^ (x >> 41));
}

std::vector<uint8_t> pattern(int src, int dst, uint64_t tag, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = patternByte(src, dst, tag, i);
  return v;
}

// Index of the first wrong byte, or -1.
int64_t firstMismatch(const std::vector<uint8_t>& got, int src, int dst, uint64_t tag) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != patternByte(src, dst, tag, i)) return static_cast<int64_t>(i);
  }
  return -1;
}

class TransportConformance : public ::testing::TestWithParam<TransportParam> {
 protected:
  void SetUp() override {
    if (GetParam().backend == Backend::Rdma && !rdmaAvailable()) {
      GTEST_SKIP() << "no RDMA verbs device on this machine (ibv_get_device_list is empty)";
    }
  }
  SpawnOptions options() const {
    SpawnOptions o;
    o.tcp.streams = GetParam().streams;
    // Small stripes so that multi-stream striping happens with test-sized messages.
    o.tcp.stripeMin = 4096;
    return o;
  }
  void run(int worldSize, const std::function<void(Context&)>& fn) {
    spawn(worldSize, GetParam().backend, fn, options());
  }
  std::vector<std::unique_ptr<Context>> group(int worldSize) {
    return testing::makeGroup(worldSize, GetParam().backend, options());
  }
};

TEST_P(TransportConformance, PointToPointSizes) {
  const std::vector<size_t> sizes = {0, 1, 2, 3, 7, 13, 251, 4093, 65521, 65537, 1048573,
                                     (8u << 20) + 3};
  run(2, [&](Context& ctx) {
    int peer = 1 - ctx.rank();
    for (size_t k = 0; k < sizes.size(); ++k) {
      // Both directions at once, so that sends and receives overlap on every pair.
      std::vector<uint8_t> out = pattern(ctx.rank(), peer, k, sizes[k]);
      std::vector<uint8_t> in(sizes[k], 0xEE);
      std::vector<RequestPtr> reqs;
      reqs.push_back(ctx.irecv(peer, k, in.data(), in.size()));
      reqs.push_back(ctx.isend(peer, k, out.data(), out.size()));
      waitAll(reqs, testDeadline());
      ASSERT_EQ(firstMismatch(in, peer, ctx.rank(), k), -1) << "size " << sizes[k];
    }
  });
}

TEST_P(TransportConformance, SendToSelf) {
  run(3, [&](Context& ctx) {
    std::vector<uint8_t> out = pattern(ctx.rank(), ctx.rank(), 9, 100003);
    std::vector<uint8_t> in(out.size());
    auto r = ctx.irecv(ctx.rank(), 9, in.data(), in.size());
    auto s = ctx.isend(ctx.rank(), 9, out.data(), out.size());
    s->wait(testDeadline());
    r->wait(testDeadline());
    ASSERT_EQ(in, out);
  });
}

// Messages with one tag between one pair are matched in posting order, whether the receive is
// posted before the message arrives or after (unexpected-message path).
TEST_P(TransportConformance, OrderingPerTag) {
  constexpr int kMessages = 64;
  run(2, [&](Context& ctx) {
    if (ctx.rank() == 0) {
      std::vector<std::vector<uint8_t>> out;
      std::vector<RequestPtr> reqs;
      for (int m = 0; m < kMessages; ++m) {
        // Alternate small and striped sizes; the content encodes the sequence number.
        size_t bytes = (m % 3 == 0) ? 200000 + m : 8 + m;
        out.push_back(pattern(0, 1, 1000 + m, bytes));
      }
      for (int m = 0; m < kMessages; ++m) {
        reqs.push_back(ctx.isend(1, 7, out[m].data(), out[m].size()));
        // Interleave another tag, which must not disturb tag 7's order.
        reqs.push_back(ctx.isend(1, 8, out[m].data(), out[m].size()));
      }
      waitAll(reqs, testDeadline());
    } else {
      std::vector<std::vector<uint8_t>> in7(kMessages), in8(kMessages);
      std::vector<RequestPtr> reqs;
      for (int m = 0; m < kMessages; ++m) {
        size_t bytes = (m % 3 == 0) ? 200000 + m : 8 + m;
        in7[m].resize(bytes);
        in8[m].resize(bytes);
      }
      // First half posted at once, the rest after a pause (arrives unexpected).
      for (int m = 0; m < kMessages / 2; ++m) {
        reqs.push_back(ctx.irecv(0, 7, in7[m].data(), in7[m].size()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (int m = kMessages / 2; m < kMessages; ++m) {
        reqs.push_back(ctx.irecv(0, 7, in7[m].data(), in7[m].size()));
      }
      for (int m = 0; m < kMessages; ++m) {
        reqs.push_back(ctx.irecv(0, 8, in8[m].data(), in8[m].size()));
      }
      waitAll(reqs, testDeadline());
      for (int m = 0; m < kMessages; ++m) {
        ASSERT_EQ(firstMismatch(in7[m], 0, 1, 1000 + m), -1) << "tag 7 message " << m;
        ASSERT_EQ(firstMismatch(in8[m], 0, 1, 1000 + m), -1) << "tag 8 message " << m;
      }
    }
  });
}

TEST_P(TransportConformance, ManyTags) {
  constexpr uint64_t kTags = 1000;
  run(2, [&](Context& ctx) {
    int peer = 1 - ctx.rank();
    std::vector<std::vector<uint8_t>> out(kTags), in(kTags);
    std::vector<RequestPtr> reqs;
    // Receives posted in reverse tag order, sends in forward order; tags span 64 bits.
    auto tagOf = [](uint64_t k) { return (k * 0x100000001b3ull) ^ (k << 40); };
    for (uint64_t k = kTags; k-- > 0;) {
      in[k].resize(1 + k % 97);
      reqs.push_back(ctx.irecv(peer, tagOf(k), in[k].data(), in[k].size()));
    }
    for (uint64_t k = 0; k < kTags; ++k) {
      out[k] = pattern(ctx.rank(), peer, tagOf(k), 1 + k % 97);
      reqs.push_back(ctx.isend(peer, tagOf(k), out[k].data(), out[k].size()));
    }
    waitAll(reqs, testDeadline());
    for (uint64_t k = 0; k < kTags; ++k) {
      ASSERT_EQ(firstMismatch(in[k], peer, ctx.rank(), tagOf(k)), -1) << "tag index " << k;
    }
  });
}

class TransportWorldSize
    : public ::testing::TestWithParam<std::tuple<TransportParam, int>> {};

// Every rank sends to every rank (itself included) at once; sizes differ per pair.
TEST_P(TransportWorldSize, AllToAll) {
  const auto& [param, worldSize] = GetParam();
  if (param.backend == Backend::Rdma && !rdmaAvailable()) {
    GTEST_SKIP() << "no RDMA verbs device on this machine (ibv_get_device_list is empty)";
  }
  SpawnOptions o;
  o.tcp.streams = param.streams;
  o.tcp.stripeMin = 4096;
  spawn(worldSize, param.backend, [&](Context& ctx) {
    int n = ctx.size();
    ASSERT_EQ(n, worldSize);
    auto bytesOf = [](int src, int dst) { return static_cast<size_t>(1 + 1009 * src + 7919 * dst); };
    std::vector<std::vector<uint8_t>> out(n), in(n);
    std::vector<RequestPtr> reqs;
    for (int p = 0; p < n; ++p) {
      in[p].resize(bytesOf(p, ctx.rank()));
      reqs.push_back(ctx.irecv(p, 3, in[p].data(), in[p].size()));
    }
    for (int p = 0; p < n; ++p) {
      out[p] = pattern(ctx.rank(), p, 3, bytesOf(ctx.rank(), p));
      reqs.push_back(ctx.isend(p, 3, out[p].data(), out[p].size()));
    }
    waitAll(reqs, testDeadline());
    for (int p = 0; p < n; ++p) ASSERT_EQ(firstMismatch(in[p], p, ctx.rank(), 3), -1) << "from " << p;
  }, o);
}

TEST_P(TransportConformance, LengthMismatchFailsReceiveAndPairStaysUsable) {
  run(2, [&](Context& ctx) {
    std::vector<uint8_t> big = pattern(0, 1, 4, 20);
    std::vector<uint8_t> next = pattern(0, 1, 4, 5);
    if (ctx.rank() == 0) {
      std::vector<RequestPtr> reqs{ctx.isend(1, 4, big.data(), big.size()),
                                   ctx.isend(1, 4, next.data(), next.size())};
      // The mismatch is the receiver's error; a send may complete or fail, never hang.
      for (auto& r : reqs) {
        try {
          r->wait(testDeadline());
        } catch (const InvalidInput&) {
        }
      }
    } else {
      std::vector<uint8_t> small(10);
      auto r = ctx.irecv(0, 4, small.data(), small.size());
      try {
        r->wait(testDeadline());
        ADD_FAILURE() << "a 20-byte message into a 10-byte receive must fail";
      } catch (const InvalidInput& e) {
        std::string what = e.what();
        EXPECT_NE(what.find("20"), std::string::npos) << what;
        EXPECT_NE(what.find("10"), std::string::npos) << what;
        EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      }
      std::vector<uint8_t> in(5);
      ctx.irecv(0, 4, in.data(), in.size())->wait(testDeadline());
      EXPECT_EQ(in, next);
    }
  });
}

TEST_P(TransportConformance, InvalidPeerIsRejected) {
  run(2, [&](Context& ctx) {
    char b = 0;
    EXPECT_THROW(ctx.isend(2, 0, &b, 1), InvalidInput);
    EXPECT_THROW(ctx.irecv(-1, 0, &b, 1), InvalidInput);
  });
}

// A peer that never sends: the wait ends with TimeoutError naming the peer and tag, on time.
TEST_P(TransportConformance, DeadlineOnSilentPeer) {
  run(2, [&](Context& ctx) {
    if (ctx.rank() != 1) return;
    std::vector<uint8_t> in(64);
    auto r = ctx.irecv(0, 77, in.data(), in.size());
    auto start = std::chrono::steady_clock::now();
    try {
      r->wait(Deadline::afterMs(200));
      ADD_FAILURE() << "wait must time out";
    } catch (const TimeoutError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("tag 77"), std::string::npos) << what;
    }
    auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_GE(elapsed, std::chrono::milliseconds(190));
    EXPECT_LT(elapsed, std::chrono::seconds(3));
    EXPECT_FALSE(r->test());
  });
}

// A peer that closes its context: pending and later requests that need it fail with PeerError
// naming it, well before the deadline; the other pairs keep working.
TEST_P(TransportConformance, ClosedPeerFailsItsRequests) {
  auto ctxs = group(3);
  std::vector<uint8_t> in(1000), out(1000, 1);
  auto pending = ctxs[0]->irecv(2, 5, in.data(), in.size());
  auto start = std::chrono::steady_clock::now();
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ctxs[2].reset();
  });
  try {
    pending->wait(Deadline::afterMs(20000));
    ADD_FAILURE() << "receive from a closed peer must fail";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  closer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // Later operations with the dead peer fail too (sends possibly only at wait time).
  EXPECT_THROW(ctxs[0]->irecv(2, 6, in.data(), in.size())->wait(testDeadline()), PeerError);
  std::vector<uint8_t> big(4u << 20, 7);
  EXPECT_THROW(ctxs[0]->isend(2, 6, big.data(), big.size())->wait(testDeadline()), PeerError);
  // Ranks 0 and 1 still talk.
  auto r = ctxs[1]->irecv(0, 9, in.data(), in.size());
  ctxs[0]->isend(0 + 1, 9, out.data(), out.size())->wait(testDeadline());
  r->wait(testDeadline());
  EXPECT_EQ(in, out);
}

// A peer that does not read does not stall the others: rank 0 sends a large message to rank 1,
// which posts its receive only after rank 0 and rank 2 have exchanged many messages.
TEST_P(TransportConformance, SlowReaderDoesNotBlockOthers) {
  std::atomic<bool> pingPongDone{false};
  run(3, [&](Context& ctx) {
    std::vector<uint8_t> big(32u << 20);
    if (ctx.rank() == 0) {
      for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<uint8_t>(i >> 12);
      auto s = ctx.isend(1, 1, big.data(), big.size());
      std::vector<uint8_t> buf(256);
      for (int i = 0; i < 200; ++i) {
        ctx.isend(2, 2, buf.data(), buf.size())->wait(testDeadline());
        ctx.irecv(2, 2, buf.data(), buf.size())->wait(testDeadline());
      }
      pingPongDone = true;
      s->wait(testDeadline());
    } else if (ctx.rank() == 2) {
      std::vector<uint8_t> buf(256);
      for (int i = 0; i < 200; ++i) {
        ctx.irecv(0, 2, buf.data(), buf.size())->wait(testDeadline());
        ctx.isend(0, 2, buf.data(), buf.size())->wait(testDeadline());
      }
    } else {
      Deadline d = testDeadline();
      while (!pingPongDone && !d.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ASSERT_TRUE(pingPongDone.load()) << "ranks 0 and 2 were blocked by the idle reader";
      ctx.irecv(0, 1, big.data(), big.size())->wait(testDeadline());
      for (size_t i = 0; i < big.size(); i += 4096) {
        ASSERT_EQ(big[i], static_cast<uint8_t>(i >> 12)) << "offset " << i;
      }
    }
  });
}

// keepUntilDestroyed: memory a receive that timed out may still write into is held by the
// context and freed only when the context goes (after the backend stopped), not leaked.
TEST_P(TransportConformance, KeptMemoryLivesUntilTheContextIsDestroyed) {
  auto ctxs = group(2);
  auto freed = std::make_shared<std::atomic<bool>>(false);
  auto* buf = new std::vector<uint8_t>(64);
  auto r = ctxs[1]->irecv(0, 3, buf->data(), buf->size());
  EXPECT_THROW(r->wait(Deadline::afterMs(50)), TimeoutError);
  ctxs[1]->keepUntilDestroyed(std::shared_ptr<void>(buf, [freed](void* p) {
    delete static_cast<std::vector<uint8_t>*>(p);
    *freed = true;
  }));
  r.reset();
  EXPECT_FALSE(freed->load());
  ctxs[1].reset();
  EXPECT_TRUE(freed->load());
}

TEST_P(TransportConformance, BackendName) {
  auto ctxs = group(1);
  EXPECT_EQ(ctxs[0]->backend(), std::string(backendName(GetParam().backend)));
  EXPECT_EQ(ctxs[0]->size(), 1);
  EXPECT_NE(ctxs[0]->peerName(0).find("rank 0"), std::string::npos);
}

[[maybe_unused]] const TransportParam kLoopback{Backend::Loopback, 1, "loopback"};
[[maybe_unused]] const TransportParam kTcp{Backend::Tcp, 1, "tcp"};
[[maybe_unused]] const TransportParam kTcpStreams{Backend::Tcp, 3, "tcp_3streams"};
[[maybe_unused]] const TransportParam kRdma{Backend::Rdma, 1, "rdma"};

// One line per backend. The RDMA lines are compiled into their own binary (label rdma), built
// from this file with RANKMAP_TEST_RDMA=1.
#if RANKMAP_TEST_RDMA
INSTANTIATE_TEST_SUITE_P(Rdma, TransportConformance, ::testing::Values(kRdma), paramName);
#define RANKMAP_WORLD_SIZE_BACKENDS kRdma
#else
INSTANTIATE_TEST_SUITE_P(Loopback, TransportConformance, ::testing::Values(kLoopback), paramName);
INSTANTIATE_TEST_SUITE_P(Tcp, TransportConformance, ::testing::Values(kTcp), paramName);
INSTANTIATE_TEST_SUITE_P(TcpStreams, TransportConformance, ::testing::Values(kTcpStreams), paramName);
#define RANKMAP_WORLD_SIZE_BACKENDS kLoopback, kTcp, kTcpStreams
#endif

INSTANTIATE_TEST_SUITE_P(
    Sizes, TransportWorldSize,
    ::testing::Combine(::testing::Values(RANKMAP_WORLD_SIZE_BACKENDS),
                       ::testing::Values(1, 2, 3, 5, 7, 8, 13, 16)),
    [](const ::testing::TestParamInfo<std::tuple<TransportParam, int>>& info) {
      return std::get<0>(info.param).name + "_" + std::to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace rankmap::coll::transport
