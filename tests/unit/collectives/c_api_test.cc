// The C API: result codes, error strings, a whole group of communicators over TCP (threads of
// this process, root bootstrap on 127.0.0.1), failures reported as codes, never thrown, and the
// communicators counted for a job profile.
#include "rankmap/coll.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/bootstrap/root_bootstrap.h"
#include "common/crypto.h"
#include "common/json.h"

extern "C" int rankmapCHeaderCheck(void);  // c_api_header_check.c, compiled as C
extern "C" size_t rankmapProfileRecord(char* buf, size_t cap) noexcept;  // c_api.cc

namespace {

// The C API counts communicators for a job profile when RANKMAP_PROFILE_OUT is set at its first
// use (the MPI shim would write the profile): set before any test of this process.
class ProfileEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { setenv("RANKMAP_PROFILE_OUT", "/nonexistent/profile.json", 1); }
};
const auto* const kProfileEnv = ::testing::AddGlobalTestEnvironment(new ProfileEnvironment);

TEST(CApi, HeaderIsValidC) { EXPECT_EQ(rankmapCHeaderCheck(), 7 + 7 + 4); }

std::string freeAddress() {
  rankmap::coll::bootstrap::RootListener l("127.0.0.1:0");
  return l.address();  // closed on return; rank 0 binds it again
}

TEST(CApi, ErrorStringsAndNullArguments) {
  EXPECT_STREQ(rankmapGetErrorString(rankmapSuccess), "success");
  EXPECT_STREQ(rankmapGetErrorString(rankmapTimeout), "timeout");
  EXPECT_STREQ(rankmapGetErrorString(static_cast<rankmapResult_t>(1234)), "unknown result");
  int rank = -1;
  EXPECT_EQ(rankmapCommRank(nullptr, &rank), rankmapInvalidInput);
  EXPECT_NE(std::string(rankmapGetLastError()).find("null communicator"), std::string::npos);
  float x = 1;
  EXPECT_EQ(rankmapAllReduce(&x, &x, 1, rankmapFloat32, rankmapSum, nullptr), rankmapInvalidInput);
  EXPECT_EQ(rankmapCommInitRoot(nullptr, 0, 1, "127.0.0.1:1", nullptr), rankmapInvalidInput);
  rankmapComm_t c = nullptr;
  EXPECT_EQ(rankmapCommInitRoot(&c, 3, 2, "127.0.0.1:1", nullptr), rankmapInvalidInput);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(rankmapCommDestroy(nullptr), rankmapSuccess);
}

TEST(CApi, GroupOverTcp) {
  const int n = 3;
  const std::string root = freeAddress();
  std::vector<rankmapResult_t> results(n, rankmapInternalError);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      rankmapComm_t comm = nullptr;
      rankmapResult_t res = rankmapCommInitRoot(&comm, r, n, root.c_str(), nullptr);
      auto check = [&](rankmapResult_t x) {
        if (x != rankmapSuccess && res == rankmapSuccess) {
          res = x;
          errors[r] = rankmapGetLastError();
        }
      };
      if (res != rankmapSuccess) errors[r] = rankmapGetLastError();
      if (res == rankmapSuccess) {
        int rank = -1, size = -1;
        check(rankmapCommRank(comm, &rank));
        check(rankmapCommSize(comm, &size));
        EXPECT_EQ(rank, r);
        EXPECT_EQ(size, n);
        std::vector<int64_t> in(1000, r + 1), out(1000);
        check(rankmapAllReduce(in.data(), out.data(), in.size(), rankmapInt64, rankmapSum, comm));
        EXPECT_EQ(out, std::vector<int64_t>(1000, 6));
        std::vector<int32_t> mine(5, r), all(5 * n);
        check(rankmapAllGather(mine.data(), all.data(), 5, rankmapInt32, comm));
        for (int k = 0; k < n; ++k) EXPECT_EQ(all[static_cast<size_t>(k * 5)], k);
        std::vector<float> rs(3 * n, 1.0f), part(3);
        check(rankmapReduceScatter(rs.data(), part.data(), 3, rankmapFloat32, rankmapAvg, comm));
        EXPECT_EQ(part, std::vector<float>(3, 1.0f));
        std::vector<double> b(4, r == 1 ? 2.5 : 0.0);
        check(rankmapBroadcast(b.data(), b.data(), 4, rankmapFloat64, 1, comm));
        EXPECT_EQ(b, std::vector<double>(4, 2.5));
        std::vector<uint8_t> rin(7, static_cast<uint8_t>(10 * r)), rout(7);
        check(rankmapReduce(rin.data(), r == 2 ? rout.data() : nullptr, 7, rankmapUint8, rankmapMax, 2, comm));
        if (r == 2) {
          EXPECT_EQ(rout, std::vector<uint8_t>(7, 20));
        }
        check(rankmapBarrier(comm));
        // Bad arguments come back as codes, and the communicator still works.
        // Values that name no enumerator, as a C caller may pass them (UBSan checks that reading
        // them is defined: coll.h gives the argument enums a fixed underlying type in C++).
        EXPECT_EQ(rankmapAllReduce(in.data(), out.data(), 1, static_cast<rankmapDataType_t>(42),
                                   rankmapSum, comm),
                  rankmapInvalidInput);
        EXPECT_EQ(rankmapAllReduce(in.data(), out.data(), 1, rankmapInt64,
                                   static_cast<rankmapRedOp_t>(-1), comm),
                  rankmapInvalidInput);
        EXPECT_EQ(rankmapBroadcast(b.data(), b.data(), 4, rankmapFloat64, 9, comm), rankmapInvalidInput);
        check(rankmapBarrier(comm));
        uint64_t fb = 99;
        check(rankmapCommFallbacks(comm, &fb));
        EXPECT_EQ(fb, 0u);
        uint64_t switches = 99;
        check(rankmapCommPlanSwitches(comm, &switches));
        EXPECT_EQ(switches, 0u) << "no plan file: nothing to adopt";
        EXPECT_EQ(rankmapCommPlanSwitches(comm, nullptr), rankmapInvalidInput);
        check(rankmapCommDestroy(comm));
      }
      results[r] = res;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], rankmapSuccess) << "rank " << r << ": " << errors[r];
}

// Each communicator is one entry of this process's record, keyed by what every member shares
// (the root address, the size, and the how-many-th communicator there of each rank), with the
// traffic one member passed: three ranks (threads here) are one entry.
TEST(CApi, CommunicatorsAndTheirTrafficAreCountedForAProfile) {
  const int n = 3;
  const std::string root = freeAddress();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      rankmapComm_t comm = nullptr;
      ASSERT_EQ(rankmapCommInitRoot(&comm, r, n, root.c_str(), nullptr), rankmapSuccess)
          << rankmapGetLastError();
      std::vector<int64_t> in(1000, r), out(1000);
      for (int step = 0; step < 2; ++step)
        EXPECT_EQ(
            rankmapAllReduce(in.data(), out.data(), in.size(), rankmapInt64, rankmapSum, comm),
            rankmapSuccess);
      std::vector<int32_t> mine(5, r), all(5 * n);
      EXPECT_EQ(rankmapAllGather(mine.data(), all.data(), 5, rankmapInt32, comm), rankmapSuccess);
      // A failed call is not counted.
      EXPECT_EQ(rankmapAllReduce(in.data(), out.data(), 1, static_cast<rankmapDataType_t>(99),
                                 rankmapSum, comm),
                rankmapInvalidInput);
      EXPECT_EQ(rankmapCommDestroy(comm), rankmapSuccess);
    });
  for (auto& t : threads) t.join();
  std::string text(rankmapProfileRecord(nullptr, 0), '\0');
  ASSERT_EQ(rankmapProfileRecord(text.data(), text.size() + 1), text.size());
  rankmap::Json entries = rankmap::parseJson(text, "record");
  const std::string key = rankmap::sha256Hex(root + "/3/1").substr(0, 16);
  int found = 0;
  for (const auto& e : entries) {
    if (e["k"] != key) continue;
    ++found;
    EXPECT_EQ(e["m"], "rankmapCommInitRoot");
    EXPECT_EQ(e["t"].dump(), R"({"allgather":[1,60],"allreduce":[2,16000]})");
  }
  EXPECT_EQ(found, 1) << text;
}

TEST(CApi, UnreachableRootIsATimeoutCode) {
  const std::string root = freeAddress();
  setenv("RANKMAP_TIMEOUT", "700ms", 1);
  rankmapComm_t comm = nullptr;
  rankmapResult_t res = rankmapCommInitRoot(&comm, 1, 2, root.c_str(), nullptr);
  unsetenv("RANKMAP_TIMEOUT");
  EXPECT_EQ(res, rankmapTimeout);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(rankmapGetLastError()).find(root), std::string::npos) << rankmapGetLastError();
}

}  // namespace
