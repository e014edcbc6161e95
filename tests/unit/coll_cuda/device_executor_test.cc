// The device executor (collectives/cuda/device_executor.h) on CPU: every schedule the engine
// generates, run with "device" buffers through HostDeviceOps (lazy completion, garbage staging),
// must give exactly the bytes the host executor gives for the same schedule and inputs.
#include "collectives/cuda/device_executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/algorithms/algorithms.h"
#include "collectives/executor.h"
#include "collectives/reduce/reduction.h"
#include "tests/unit/coll_cuda/host_device_ops.h"
#include "tests/unit/collectives/harness.h"

namespace rankmap::coll {
namespace {

using testing::HostDeviceOps;

struct Case {
  Algorithm algo;
  Collective coll;
  int n;
  uint64_t count;
  DataType type;
  ReduceOp op;
  bool inPlace;
};

std::string name(const Case& c) {
  return std::string(algorithmName(c.algo)) + "_" + std::string(collectiveName(c.coll)) + "_n" +
         std::to_string(c.n) + "_c" + std::to_string(c.count) + "_" +
         std::string(dataTypeName(c.type)) + "_" + std::string(reduceOpName(c.op)) +
         (c.inPlace ? "_inplace" : "");
}

// Input and output of one rank, allocated for `o` with the aliasing it asks for.
struct Buffers {
  std::vector<std::byte> in, out;
  void* input = nullptr;
  void* output = nullptr;
  Buffers(const BuilderOptions& o, int rank, uint64_t seed) {
    out.assign(std::max<uint64_t>(o.outputBytes, 1), std::byte{0x5a});
    in.assign(std::max<uint64_t>(o.inputBytes, 1), std::byte{0});
    output = out.data();
    input = in.data();
    if (o.alias.kind == Alias::Kind::kInputInOutput) input = out.data() + o.alias.offset;
    if (o.alias.kind == Alias::Kind::kOutputInInput) output = in.data() + o.alias.offset;
    // Small integers in every byte pattern: sums and products stay finite for floats.
    std::mt19937 rng(static_cast<uint32_t>(seed * 7919 + static_cast<uint64_t>(rank)));
    auto* p = static_cast<unsigned char*>(input);
    for (uint64_t i = 0; i < o.inputBytes; ++i) p[i] = static_cast<unsigned char>(rng() % 3);
  }
};

class DeviceExecutor : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceExecutor, MatchesTheHostExecutorByteForByte) {
  const Case c = GetParam();
  std::vector<std::vector<std::byte>> hostOut(static_cast<size_t>(c.n)),
      devOut(static_cast<size_t>(c.n));
  std::vector<size_t> toHost(static_cast<size_t>(c.n));
  testing::spawn(c.n, testing::Backend::Loopback, [&](transport::Context& ctx) {
    AlgoParams p;
    p.collective = c.coll;
    p.rank = ctx.rank();
    p.worldSize = c.n;
    p.count = c.count;
    p.elementSize = elementSize(c.type);
    p.root = c.n - 1;
    p.inPlace = c.inPlace;
    p.segmentBytes = 64;  // many segments from small vectors
    p.numSlots = 3;
    if (c.algo == Algorithm::kHier)
      for (int g = 0; g < c.n / 2; ++g) p.groups.push_back({2 * g, 2 * g + 1});
    const BuilderOptions o = builderOptionsFor(p);
    const Schedule s = buildSchedule(c.algo, p);
    const Reduction red(c.type, c.op);
    const size_t r = static_cast<size_t>(ctx.rank());

    Buffers h(o, ctx.rank(), 1);
    std::vector<std::byte> hs(s.scratchBytes() + 1);
    execute(s, ctx, ExecBuffers{h.input, h.output, hs.data()}, &red, 1ull << 32,
            testing::testDeadline());
    hostOut[r].assign(static_cast<std::byte*>(h.output),
                      static_cast<std::byte*>(h.output) + o.outputBytes);

    Buffers d(o, ctx.rank(), 1);
    std::vector<std::byte> ds(s.scratchBytes() + 1, std::byte{0xee});
    HostDeviceOps ops;
    cuda::executeDevice(s, ctx, ExecBuffers{d.input, d.output, ds.data()}, c.type, c.op, 2ull << 32,
                        testing::testDeadline(), ops);
    devOut[r].assign(static_cast<std::byte*>(d.output),
                     static_cast<std::byte*>(d.output) + o.outputBytes);
    toHost[r] = ops.copiesToHost();
  });
  for (int r = 0; r < c.n; ++r) {
    if (c.coll == Collective::kReduce && r != c.n - 1) continue;  // output only at the root
    EXPECT_EQ(devOut[static_cast<size_t>(r)], hostOut[static_cast<size_t>(r)]) << "rank " << r;
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::vector<std::tuple<DataType, ReduceOp>> typeOps = {
      {DataType::kInt32, ReduceOp::kSum},    {DataType::kFloat32, ReduceOp::kAvg},
      {DataType::kUint8, ReduceOp::kMax},    {DataType::kBFloat16, ReduceOp::kSum},
      {DataType::kFloat64, ReduceOp::kProd}, {DataType::kInt64, ReduceOp::kMin}};
  size_t k = 0;
  auto add = [&](Algorithm a, Collective coll, std::vector<int> sizes, bool inPlaceToo) {
    for (int n : sizes)
      for (uint64_t count : {uint64_t{1}, uint64_t{37}})
        for (bool inPlace : {false, true}) {
          if (inPlace && !inPlaceToo) continue;
          auto [t, op] = typeOps[k++ % typeOps.size()];
          out.push_back({a, coll, n, count, t, op, inPlace});
        }
  };
  add(Algorithm::kRing, Collective::kAllreduce, {1, 2, 3, 5, 8}, true);
  add(Algorithm::kTree, Collective::kAllreduce, {2, 3, 7}, true);
  add(Algorithm::kRhd, Collective::kAllreduce, {4, 6}, false);
  add(Algorithm::kHier, Collective::kAllreduce, {4, 6}, false);
  add(Algorithm::kRing, Collective::kAllgather, {3, 5}, true);
  add(Algorithm::kRhd, Collective::kAllgather, {4}, false);
  add(Algorithm::kRing, Collective::kReduceScatter, {3, 5}, true);
  add(Algorithm::kRing, Collective::kBroadcast, {4}, false);
  add(Algorithm::kTree, Collective::kBroadcast, {5}, false);
  add(Algorithm::kRing, Collective::kReduce, {4}, false);
  add(Algorithm::kTree, Collective::kReduce, {5}, false);
  out.push_back({Algorithm::kDissemination, Collective::kBarrier, 5, 0, DataType::kInt8,
                 ReduceOp::kSum, false});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Schedules, DeviceExecutor, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

// The allgather half of a ring allreduce forwards what it just received: those sends go out
// from the host mirror without a device-to-host copy.
TEST(DeviceExecutorStaging, ForwardedSegmentsSkipTheDeviceToHostCopy) {
  const int n = 4;
  std::vector<size_t> toHost(n), sends(n);
  testing::spawn(n, testing::Backend::Loopback, [&](transport::Context& ctx) {
    AlgoParams p;
    p.collective = Collective::kAllreduce;
    p.rank = ctx.rank();
    p.worldSize = n;
    p.count = 64;
    p.elementSize = 4;
    p.segmentBytes = 1 << 20;
    const Schedule s = buildSchedule(Algorithm::kRing, p);
    std::vector<int32_t> buf(64, ctx.rank() + 1);
    std::vector<std::byte> scratch(s.scratchBytes() + 1);
    HostDeviceOps ops;
    cuda::executeDevice(s, ctx, ExecBuffers{buf.data(), buf.data(), scratch.data()},
                        DataType::kInt32, ReduceOp::kSum, 0, testing::testDeadline(), ops);
    for (int32_t v : buf) EXPECT_EQ(v, 1 + 2 + 3 + 4);
    toHost[static_cast<size_t>(ctx.rank())] = ops.copiesToHost();
    sends[static_cast<size_t>(ctx.rank())] = s.count(StepKind::kSend);
  });
  for (int r = 0; r < n; ++r) {
    // Ring allreduce: 2(n-1) sends; the reduce-scatter half's n-1 (and the first allgather
    // send, which carries a freshly reduced block) need a copy, the other n-2 are forwarded.
    EXPECT_EQ(sends[static_cast<size_t>(r)], 2u * (n - 1));
    EXPECT_EQ(toHost[static_cast<size_t>(r)], static_cast<size_t>(n)) << "rank " << r;
  }
}

}  // namespace
}  // namespace rankmap::coll
