#include "common/deadline.h"

#include <climits>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"

namespace rankmap {
namespace {

TEST(Deadline, ExpiresAndReportsRemaining) {
  auto d = Deadline::afterMs(30);
  EXPECT_FALSE(d.expired());
  EXPECT_GT(d.pollTimeoutMs(), 0);
  EXPECT_LE(d.pollTimeoutMs(), 30);
  EXPECT_NO_THROW(d.check("nothing"));
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.pollTimeoutMs(), 0);
  EXPECT_EQ(d.remaining().count(), 0);
  try {
    d.check("peer 3");
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("peer 3"), std::string::npos);
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
}

TEST(Deadline, MinTakesTheEarlier) {
  auto a = Deadline::afterMs(10);
  auto b = Deadline::afterMs(10'000);
  EXPECT_EQ(a.min(b).when(), a.when());
  EXPECT_EQ(b.min(a).when(), a.when());
}

TEST(Deadline, PollTimeoutRoundsUpAndSaturates) {
  auto d = Deadline::after(std::chrono::microseconds(100));
  int ms = d.pollTimeoutMs();
  EXPECT_TRUE(ms == 0 || ms == 1);
  auto far = Deadline::after(std::chrono::hours(24 * 365 * 100));
  EXPECT_EQ(far.pollTimeoutMs(), INT_MAX);
}

}  // namespace
}  // namespace rankmap
