#include "shim_nccl/agreement.h"

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <thread>

#include "common/error.h"
#include "common/net.h"
#include "tests/unit/shim_nccl/shim_test_util.h"

namespace rankmap::shim_nccl {
namespace {

abi::UniqueId ncclLikeId() {
  // As real NCCL 2.28 writes it: magic, sockaddr_in 127.0.0.1:62895, zeros.
  abi::UniqueId id{};
  const unsigned char head[] = {0xd6, 0x85, 0x1c, 0x18, 0x56, 0x00, 0x8c, 0x4b,
                                0x02, 0x00, 0xaf, 0xf5, 0x7f, 0x00, 0x00, 0x01};
  std::memcpy(id.internal, head, sizeof(head));
  return id;
}

TEST(IdTail, RoundTripAndOnlyIntoAFreeTail) {
  abi::UniqueId id = ncclLikeId();
  EXPECT_FALSE(decodeTail(id));
  EXPECT_EQ(ncclRootHost(id), "127.0.0.1");
  IdTail t{0x1122334455667788ull, 30000, "10.1.2.3", 4567};
  ASSERT_TRUE(encodeTail(id, t));
  EXPECT_EQ(decodeTail(id), t);
  // NCCL's part is untouched.
  EXPECT_EQ(0, std::memcmp(id.internal, ncclLikeId().internal, kTailOffset));
  // A used tail is never overwritten.
  EXPECT_FALSE(encodeTail(id, IdTail{1, 1, "127.0.0.1", 1}));
  EXPECT_EQ(decodeTail(id), t);
  abi::UniqueId v6 = ncclLikeId();
  ASSERT_TRUE(encodeTail(v6, IdTail{5, 10, "fd00::7", 80}));
  EXPECT_EQ(decodeTail(v6)->host, "fd00::7");
  abi::UniqueId junk{};
  junk.internal[8] = 9;
  EXPECT_FALSE(ncclRootHost(junk));
}

// A rank's vote as voteFor() makes it: a usable plan with this hash, or (hash empty) none.
PlanVote vote(int rank, int n, std::string hash = "sha256:a") {
  PlanVote v{rank, n, PlanStatus::kOk, std::move(hash), {}, {}, false};
  if (v.hash.empty()) {
    v.status = PlanStatus::kNone;
    v.reason = "RANKMAP_PLAN is not set";
  }
  return v;
}

// The rule itself (checkPlanVote, judgePlan) is tested in tests/unit/common/plan_agreement_test.cc;
// these tests run it through the vote server.
TEST(Agreement, ServerAnswersEveryRankTheSame) {
  for (bool agreeing : {true, false}) {
    IdTail tail = startAgreementServer("127.0.0.1", "sha256:a", std::chrono::seconds(20));
    const int n = 5;
    std::vector<PlanVerdict> got(n);
    testing::runRanks(n, [&](int r) {
      std::string hash = (!agreeing && r == 3) ? "sha256:other" : "sha256:a";
      got[static_cast<size_t>(r)] = agree(tail, vote(r, n, hash));
    });
    for (const auto& v : got)
      EXPECT_EQ(v.apply, agreeing) << v.reason;
  }
}

TEST(Agreement, ARankWithoutAUsablePlanMeansIdentityForAll) {
  IdTail tail = startAgreementServer("127.0.0.1", "sha256:a", std::chrono::seconds(20));
  const int n = 3;
  std::vector<PlanVerdict> got(n);
  testing::runRanks(n, [&](int r) {
    PlanVote v = vote(r, n);
    if (r == 1) {
      v.status = PlanStatus::kStale;
      v.hash.clear();
      v.reason = "plan sha256:a is stale";
    }
    got[static_cast<size_t>(r)] = agree(tail, v);
  });
  for (const auto& v : got) {
    EXPECT_FALSE(v.apply);
    EXPECT_NE(v.reason.find("no usable plan"), std::string::npos) << v.reason;
  }
}

TEST(Agreement, LateRankAfterIdentityStillGetsIdentity) {
  IdTail tail = startAgreementServer("127.0.0.1", "sha256:a", std::chrono::seconds(20));
  EXPECT_FALSE(agree(tail, vote(0, 2, "sha256:x")).apply);
  EXPECT_FALSE(agree(tail, vote(1, 2)).apply);
}

// A vote from outside 0..n-1 (here a rank of a larger job holding the id) makes the verdict
// identity, and every real rank that votes afterwards is told why. It used to count towards
// "every rank voted", so the server closed before the last real rank and that one read
// "closed without an answer" instead.
TEST(Agreement, VoteOutsideTheJobLeavesEveryRealRankTheSameIdentity) {
  IdTail tail = startAgreementServer("127.0.0.1", "sha256:a", std::chrono::seconds(20));
  const int n = 3;
  EXPECT_FALSE(agree(tail, vote(5, n)).apply);
  for (int r = 0; r < n; ++r) {
    PlanVerdict v = agree(tail, vote(r, n));
    EXPECT_FALSE(v.apply);
    EXPECT_EQ(v.reason, "rank 5 is outside 0..2") << "rank " << r;
  }
}

TEST(Agreement, MissingRankTimesOutToIdentityForThoseWhoVoted) {
  IdTail tail = startAgreementServer("127.0.0.1", "sha256:a", std::chrono::milliseconds(300));
  auto start = std::chrono::steady_clock::now();
  PlanVerdict v = agree(tail, vote(0, 2));  // rank 1 never comes
  EXPECT_FALSE(v.apply);
  EXPECT_NE(v.reason.find("only 1 of 2"), std::string::npos) << v.reason;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(Agreement, UnreachableServerMeansIdentity) {
  // A port nobody listens on (the server of a finished agreement closed it).
  IdTail tail = startAgreementServer("127.0.0.1", "sha256:a", std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  tail.timeoutMs = 1;  // keeps the connect attempts short
  PlanVerdict v = agree(tail, vote(0, 2));
  EXPECT_FALSE(v.apply);
}

TEST(Agreement, AnotherProgramOnTheServersPortMeansIdentity) {
  // The server ended and another program took its port: the rank must not take its bytes for
  // an answer, nor fail the init; its vote never reached the server, so identity is safe.
  Listener other = Listener::bind(resolve("127.0.0.1", 0, Lookup::kNumericOnly));
  IdTail tail;
  tail.host = "127.0.0.1";
  tail.port = other.port();
  tail.nonce = 7;
  tail.timeoutMs = 2000;
  std::thread server([&] {
    std::optional<Socket> s = other.accept(Deadline::afterMs(5000));
    ASSERT_TRUE(s);
    const std::string answer = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    s->sendAll(answer.data(), answer.size(), Deadline::afterMs(5000), "test");
  });
  PlanVerdict v = agree(tail, vote(0, 2));
  server.join();
  EXPECT_FALSE(v.apply);
  EXPECT_NE(v.reason.find("not a plan verdict"), std::string::npos) << v.reason;
}

TEST(Agreement, ForeignNonceIsRejected) {
  IdTail tail = startAgreementServer("127.0.0.1", "sha256:a", std::chrono::seconds(5));
  IdTail wrong = tail;
  wrong.nonce ^= 1;
  PlanVerdict v = agree(wrong, vote(0, 1));
  EXPECT_FALSE(v.apply);
  // The real vote still works afterwards.
  EXPECT_TRUE(agree(tail, vote(0, 1)).apply);
}

}  // namespace
}  // namespace rankmap::shim_nccl
