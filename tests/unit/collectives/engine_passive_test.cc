// Passive measurement in the engine (collectives/passive.h): every message step is metered per
// peer, and what one rank sent to another is what that one received. The report body the agent
// link posts (collectives/agent_link.h) sums peers per host and leaves out the rank's own host.
#include <gtest/gtest.h>

#include <mutex>

#include "collectives/agent_link.h"
#include "collectives/communicator.h"
#include "common/json.h"
#include "tests/unit/collectives/engine_values.h"
#include "tests/unit/collectives/harness.h"

namespace rankmap::coll {
namespace {

using testing::Backend;
using testing::spawn;

TEST(PassiveMeter, BusyTimeIsTheUnionOfInFlightIntervals) {
  PassiveMeter m(3);
  m.started(1, true, 100);
  m.started(1, true, 150);  // overlaps the first
  m.finished(1, true, 10, 200);
  m.finished(1, true, 20, 300);
  m.started(1, true, 1000);
  m.finished(1, true, 5, 1100);
  m.started(2, false, 0);
  m.abandon(50);  // a failure: the interval ends, its bytes do not count
  const auto& t = m.totals();
  EXPECT_EQ(t[1].sentBytes, 30u + 5u);
  EXPECT_EQ(t[1].sendBusyNs, 200u + 100u);
  EXPECT_EQ(t[2].recvBytes, 0u);
  EXPECT_EQ(t[2].recvBusyNs, 50u);
  EXPECT_EQ(t[0], PeerTraffic{});
}

// Every algorithm's bytes, counted on both ends, agree; busy time is there whenever bytes are.
TEST(PassiveMeter, EachPairsSentBytesAreThePeersReceivedBytes) {
  constexpr int kRanks = 5;
  constexpr uint64_t kCount = 100003;
  for (Algorithm algo : {Algorithm::kRing, Algorithm::kTree, Algorithm::kRhd}) {
    std::vector<std::vector<PeerTraffic>> totals(kRanks);
    std::mutex mu;
    spawn(kRanks, Backend::Loopback, [&](transport::Context& ctx) {
      CommOptions o;
      o.timeout = std::chrono::seconds(20);
      o.algorithm = algo;
      Communicator comm(ctx, o);
      const int r = ctx.rank();
      auto in = testing::inputBuffer(DataType::kInt32, ReduceOp::kSum, r, kCount);
      std::vector<std::byte> out(in.size());
      for (int i = 0; i < 3; ++i)
        comm.allreduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
      ASSERT_NE(comm.passive(), nullptr);
      EXPECT_GT(comm.passive()->collectiveNs(), 0u);
      std::lock_guard<std::mutex> lock(mu);
      totals[static_cast<size_t>(r)] = comm.passive()->totals();
    });
    uint64_t sum = 0;
    for (int a = 0; a < kRanks; ++a) {
      EXPECT_EQ(totals[a][a], PeerTraffic{}) << algorithmName(algo);
      for (int b = 0; b < kRanks; ++b) {
        const PeerTraffic& ab = totals[a][b];
        EXPECT_EQ(ab.sentBytes, totals[b][a].recvBytes)
            << algorithmName(algo) << " " << a << "->" << b;
        if (ab.sentBytes > 0) {
          EXPECT_GT(ab.sendBusyNs, 0u);
        }
        sum += ab.sentBytes;
      }
    }
    // Every rank's input crosses the network at least once.
    EXPECT_GE(sum, 3 * (kRanks - 1) * kCount * 4) << algorithmName(algo);
  }
}

TEST(PassiveMeter, OffMeansNoMeter) {
  spawn(2, Backend::Loopback, [&](transport::Context& ctx) {
    CommOptions o;
    o.agent.reports = false;
    Communicator comm(ctx, o);
    EXPECT_EQ(comm.passive(), nullptr);
    int x = 1, y = 0;
    comm.allreduce(&x, &y, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(y, 2);
  });
}

TEST(AgentLink, ReportSumsPeersPerHostWithoutTheOwnHost) {
  // Ranks 0,1 on host a; 2,3 on b; 4 on c. Rank 1 reports.
  const std::vector<std::string> rankHost = {"a", "a", "b", "b", "c"};
  std::vector<PeerTraffic> before(5), now(5);
  now[0] = {100, 10, 100, 10};         // same host: left out
  now[2] = {3 << 20, 1000000000, 0, 0};
  now[3] = {1 << 20, 500000000, 7, 1};
  before[3] = {1 << 10, 0, 0, 0};
  now[4] = {0, 0, 0, 0};               // nothing moved: no entry
  Json j = parseJson(AgentLink::reportBody("id-1", rankHost, 1, "sha256:ab", 7, 5.0, 2.5, before, now),
                     "report");
  EXPECT_EQ(j["host"], "a");
  EXPECT_EQ(j["rank"], 1);
  EXPECT_EQ(j["plan"], "sha256:ab");
  EXPECT_EQ(j["epoch"], 7);
  EXPECT_DOUBLE_EQ(j["collective_s"].get<double>(), 2.5);
  ASSERT_EQ(j["peers"].size(), 1u);
  const Json& b = j["peers"][0];
  EXPECT_EQ(b["host"], "b");
  EXPECT_EQ(b["sent_bytes"], (3u << 20) + (1u << 20) - (1u << 10));
  EXPECT_DOUBLE_EQ(b["send_busy_s"].get<double>(), 1.5);
  EXPECT_EQ(b["recv_bytes"], 7u);
}

TEST(AgentLink, NoLinkWithoutATokenFileOrAPlanThatNamesTheHosts) {
  AgentLinkOptions o;
  o.agentUrl = "http://127.0.0.1:9";
  Plan p = Plan::identity({"a", "b"});
  EXPECT_EQ(AgentLink::make(o, 0, 2, p), nullptr);  // no token file
  o.tokenFile = "/nonexistent/token";
  EXPECT_EQ(AgentLink::make(o, 0, 2, p), nullptr);  // unreadable: a warning, no link
  EXPECT_EQ(AgentLink::make(o, 0, 3, p), nullptr);  // plan for another size
}

}  // namespace
}  // namespace rankmap::coll
