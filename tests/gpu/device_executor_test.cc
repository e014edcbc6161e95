// The device executor on a real GPU: CudaOps (streams, events, pinned mirrors) running engine
// schedules over the loopback and TCP transports, ranks as threads sharing the GPU; results
// compared byte for byte with the host executor on the same inputs. Label gpu.
#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/cuda/cuda_ops.h"
#include "collectives/cuda/device.h"
#include "collectives/cuda/device_executor.h"
#include "collectives/executor.h"
#include "collectives/reduce/reduction.h"
#include "tests/unit/collectives/harness.h"

namespace rankmap::coll {
namespace {

struct Case {
  Algorithm algo;
  Collective coll;
  int n;
  uint64_t count;
  DataType type;
  ReduceOp op;
  testing::Backend backend;
};

// The test's name says it all; without this gtest prints the struct's bytes, padding included,
// into CTest's test names.
void PrintTo(const Case&, std::ostream* os) { *os << "(see the name)"; }

class GpuDeviceExecutor : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (auto why = cuda::unavailableReason(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(GpuDeviceExecutor, MatchesTheHostExecutor) {
  const Case c = GetParam();
  testing::spawn(c.n, c.backend, [&](transport::Context& ctx) {
    AlgoParams p;
    p.collective = c.coll;
    p.rank = ctx.rank();
    p.worldSize = c.n;
    p.count = c.count;
    p.elementSize = elementSize(c.type);
    p.root = 1 % c.n;
    p.segmentBytes = 256 << 10;
    const BuilderOptions o = builderOptionsFor(p);
    const Schedule s = buildSchedule(c.algo, p);
    std::vector<unsigned char> in(o.inputBytes), hostOut(o.outputBytes), devOut(o.outputBytes);
    std::mt19937 rng(static_cast<uint32_t>(ctx.rank() + 1));
    for (auto& x : in) x = static_cast<unsigned char>(rng() % 4);
    std::vector<unsigned char> hs(s.scratchBytes() + 1);
    Reduction red(c.type, c.op);
    std::vector<unsigned char> hin = in;
    execute(s, ctx, ExecBuffers{hin.data(), hostOut.data(), hs.data()}, &red, 1ull << 32,
            testing::testDeadline());

    cuda::CudaOps ops;
    cuda::DeviceBuffer din(o.inputBytes), dout(o.outputBytes);
    din.upload(in.data(), in.size());
    cuda::executeDevice(s, ctx,
                        ExecBuffers{din.data(), dout.data(), ops.deviceScratch(s.scratchBytes())},
                        c.type, c.op, 2ull << 32, testing::testDeadline(), ops);
    dout.download(devOut.data(), devOut.size());
    if (c.coll != Collective::kReduce || ctx.rank() == p.root) {
      EXPECT_EQ(devOut, hostOut) << "rank " << ctx.rank();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, GpuDeviceExecutor,
    ::testing::Values(Case{Algorithm::kRing, Collective::kAllreduce, 3, 1000003, DataType::kFloat32,
                           ReduceOp::kSum, testing::Backend::Tcp},
                      Case{Algorithm::kRing, Collective::kAllreduce, 4, 777777, DataType::kBFloat16,
                           ReduceOp::kSum, testing::Backend::Loopback},
                      Case{Algorithm::kTree, Collective::kAllreduce, 5, 100000, DataType::kInt32,
                           ReduceOp::kMax, testing::Backend::Loopback},
                      Case{Algorithm::kRhd, Collective::kAllreduce, 4, 65536, DataType::kFloat16,
                           ReduceOp::kAvg, testing::Backend::Tcp},
                      Case{Algorithm::kRing, Collective::kAllgather, 3, 300001, DataType::kInt8,
                           ReduceOp::kSum, testing::Backend::Tcp},
                      Case{Algorithm::kRing, Collective::kReduceScatter, 3, 300001,
                           DataType::kFloat64, ReduceOp::kProd, testing::Backend::Loopback},
                      Case{Algorithm::kTree, Collective::kBroadcast, 4, 500000, DataType::kUint64,
                           ReduceOp::kSum, testing::Backend::Tcp},
                      Case{Algorithm::kRing, Collective::kReduce, 4, 123457, DataType::kInt64,
                           ReduceOp::kMin, testing::Backend::Loopback}),
    [](const auto& info) {
      const Case& c = info.param;
      return std::string(algorithmName(c.algo)) + "_" + std::string(collectiveName(c.coll)) + "_n" +
             std::to_string(c.n) + "_" + std::string(dataTypeName(c.type)) + "_" +
             std::string(reduceOpName(c.op)) + "_" +
             (c.backend == testing::Backend::Tcp ? "tcp" : "loopback");
    });

}  // namespace
}  // namespace rankmap::coll
