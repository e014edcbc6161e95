// The product's path for device buffers: Communicator (what `rankmap bench --device cuda`, the C
// API and every engine user call) given cudaMalloc'd buffers routes them to the device executor.
// Each collective runs twice on the same inputs, on host buffers and on device buffers, with
// the same plan; the results must be equal byte for byte. Ranks are threads sharing GPU 0.
// Label gpu: skipped with the reason where no GPU is visible.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/cuda/device.h"
#include "common/error.h"
#include "tests/unit/collectives/harness.h"

namespace rankmap::coll {
namespace {

class GpuCommunicator : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = cuda::unavailableReason(); !why.empty()) GTEST_SKIP() << why;
  }
};

CommOptions options() {
  CommOptions o;
  o.timeout = std::chrono::seconds(120);
  o.segmentBytes = 256 << 10;
  return o;
}

// Every collective of the API, on host and on device buffers, in one communicator.
TEST_F(GpuCommunicator, DeviceBuffersGiveTheHostResults) {
  const int n = 4;
  const uint64_t count = 300001;
  testing::spawn(n, testing::Backend::Tcp, [&](transport::Context& ctx) {
    Communicator comm(ctx, options());
    const int me = ctx.rank();
    std::mt19937 rng(static_cast<uint32_t>(me + 1));
    std::vector<float> in(count * n);
    for (auto& x : in) x = static_cast<float>(rng() % 1000) / 8.0f;  // exact sums in float
    const size_t bytes = count * sizeof(float);
    cuda::DeviceBuffer din(bytes * n), dout(bytes * n);
    din.upload(in.data(), bytes * n);
    std::vector<float> host(count * n), fromDevice(count * n);

    auto check = [&](const char* what, size_t outBytes) {
      dout.download(fromDevice.data(), outBytes);
      EXPECT_EQ(0, std::memcmp(host.data(), fromDevice.data(), outBytes))
          << what << " on rank " << me;
    };
    comm.allreduce(in.data(), host.data(), count, DataType::kFloat32, ReduceOp::kSum);
    comm.allreduce(din.data(), dout.data(), count, DataType::kFloat32, ReduceOp::kSum);
    check("allreduce", bytes);
    comm.allgather(in.data(), host.data(), count, DataType::kFloat32);
    comm.allgather(din.data(), dout.data(), count, DataType::kFloat32);
    check("allgather", bytes * n);
    comm.reduceScatter(in.data(), host.data(), count, DataType::kFloat32, ReduceOp::kMax);
    comm.reduceScatter(din.data(), dout.data(), count, DataType::kFloat32, ReduceOp::kMax);
    check("reduce_scatter", bytes);
    comm.broadcast(in.data(), host.data(), count, DataType::kFloat32, 2);
    comm.broadcast(din.data(), dout.data(), count, DataType::kFloat32, 2);
    check("broadcast", bytes);
    // A call mixing host and device buffers is refused on every rank alike.
    EXPECT_THROW(comm.allreduce(in.data(), dout.data(), count, DataType::kFloat32, ReduceOp::kSum),
                 rankmap::InvalidInput);
    EXPECT_FALSE(comm.broken());
  });
}

}  // namespace
}  // namespace rankmap::coll
