// Factories and options: backend names, options from the configuration, the loopback device
// connected through a bootstrap, and the RDMA backend's absence being reported, not hidden.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <map>
#include <thread>

#include "collectives/bootstrap/callback_bootstrap.h"
#include "collectives/transport/rdma/device.h"
#include "collectives/transport/transport.h"
#include "common/config.h"
#include "common/error.h"
#include "tests/unit/common/config_util.h"

namespace rankmap::coll::transport {
namespace {

using rankmap::testing::configFrom;

TEST(TransportFactory, BackendNamesRoundTrip) {
  for (Backend b : {Backend::Loopback, Backend::Tcp, Backend::Rdma}) {
    EXPECT_EQ(parseBackend(backendName(b)), b);
  }
  EXPECT_THROW(parseBackend("ucx"), InvalidInput);
}

TEST(TransportFactory, OptionsFromConfig) {
  DeviceOptions o = deviceOptionsFromConfig(configFrom({{"RANKMAP_TRANSPORT", "tcp"},
                                                        {"RANKMAP_TCP_STREAMS", "4"},
                                                        {"RANKMAP_SOCKET_BUFFER", "8M"},
                                                        {"RANKMAP_SOCKET_IFNAME", "lo"}}));
  EXPECT_EQ(o.backend, Backend::Tcp);
  EXPECT_EQ(o.tcp.streams, 4);
  EXPECT_EQ(o.tcp.socketBuffer, 8u << 20);
  EXPECT_EQ(o.tcp.ifname, "lo");
  // auto picks rdma only after its self-test passed here (TransportAuto below); no device: tcp.
  if (!rdmaAvailable()) {
    EXPECT_EQ(deviceOptionsFromConfig(configFrom({})).backend, Backend::Tcp);
  }
  EXPECT_THROW(deviceOptionsFromConfig(configFrom({{"RANKMAP_TRANSPORT", "carrier-pigeon"}})),
               InvalidInput);
  EXPECT_THROW(deviceOptionsFromConfig(configFrom({{"RANKMAP_TCP_STREAMS", "0"}})), InvalidInput);
}

// RANKMAP_TRANSPORT=auto never picks an RDMA path that has not passed its self-test on this
// host: a failing self-test (injected: this machine has no verbs device) gives tcp, counted,
// with the failure as the reason; a passing one gives rdma; no device is tcp, not counted.
TEST(TransportAuto, AFailingSelfTestFallsBackToTcp) {
  using Outcome = RdmaSelfTestResult::Outcome;
  uint64_t before = autoTransportFallbacks();
  RdmaOptions ro;
  ro.device = "mlx5_0";
  std::vector<std::string> tested;
  auto failing = [&](const RdmaOptions& r) {
    tested.push_back(r.device);
    return RdmaSelfTestResult{Outcome::kFailed, "ibv_create_qp: Cannot allocate memory"};
  };
  AutoTransport a = chooseAutoTransport(ro, failing);
  EXPECT_EQ(a.backend, Backend::Tcp);
  EXPECT_NE(a.reason.find("self-test failed: ibv_create_qp"), std::string::npos) << a.reason;
  EXPECT_EQ(tested, std::vector<std::string>{"mlx5_0"});
  EXPECT_EQ(autoTransportFallbacks(), before + 1);
  // Through the configuration, as a communicator gets its device options.
  auto cfg = configFrom({{"RANKMAP_TRANSPORT", "auto"}, {"RANKMAP_IB_DEVICE", "mlx5_0"}});
  EXPECT_EQ(deviceOptionsFromConfig(cfg, failing).backend, Backend::Tcp);
  EXPECT_EQ(autoTransportFallbacks(), before + 2);
  // An explicit choice is not second-guessed (and runs no self-test).
  tested.clear();
  EXPECT_EQ(deviceOptionsFromConfig(configFrom({{"RANKMAP_TRANSPORT", "rdma"}}), failing).backend,
            Backend::Rdma);
  EXPECT_TRUE(tested.empty());

  auto passing = [](const RdmaOptions&) { return RdmaSelfTestResult{Outcome::kPassed, "ok"}; };
  EXPECT_EQ(deviceOptionsFromConfig(cfg, passing).backend, Backend::Rdma);
  auto absent = [](const RdmaOptions&) {
    return RdmaSelfTestResult{Outcome::kNoDevice, "no verbs device on this host"};
  };
  EXPECT_EQ(deviceOptionsFromConfig(cfg, absent).backend, Backend::Tcp);
  EXPECT_EQ(autoTransportFallbacks(), before + 2);
}

// The real self-test answers within its timeout: here (no verbs device) at once with kNoDevice;
// on a host with a device it passes, or fails with the error, within the timeout.
TEST(TransportAuto, TheRealSelfTestAnswersWithinItsTimeout) {
  auto t0 = std::chrono::steady_clock::now();
  RdmaSelfTestResult r = rdmaSelfTest(RdmaOptions{}, std::chrono::seconds(3));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, std::chrono::seconds(5));
  if (!rdmaAvailable()) {
    EXPECT_EQ(r.outcome, RdmaSelfTestResult::Outcome::kNoDevice);
    EXPECT_FALSE(r.detail.empty());
  } else {
    EXPECT_NE(r.outcome, RdmaSelfTestResult::Outcome::kNoDevice) << r.detail;
  }
}

TEST(TransportFactory, TcpRejectsBadOptions) {
  DeviceOptions o;
  o.tcp.streams = 0;
  EXPECT_THROW(makeDevice(o), InvalidInput);
  o.tcp.streams = 1;
  o.tcp.ifname = "no-such-interface0";
  EXPECT_THROW(makeDevice(o), InvalidInput);
  o.tcp.ifname = "lo";
  EXPECT_EQ(makeDevice(o)->backend(), "tcp");
}

TEST(TransportFactory, RdmaIsOnlyMadeWithADevice) {
  DeviceOptions o;
  o.backend = Backend::Rdma;
  if (rdmaAvailable()) {
    EXPECT_EQ(makeDevice(o)->backend(), "rdma");
  } else {
    EXPECT_TRUE(rdma::rdmaDeviceNames().empty());
    EXPECT_THROW(makeDevice(o), NotSupported);
  }
}

TEST(LoopbackDevice, ConnectsRanksThroughABootstrap) {
  const int size = 3;
  auto device = makeDevice(DeviceOptions{Backend::Loopback, {}, {}});
  std::vector<std::string> slots(size);
  std::barrier<> sync(size);
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto bs = bootstrap::makeCallbackBootstrap(r, size, [&, r](const void* s, void* out, size_t n) {
          slots[r].assign(static_cast<const char*>(s), n);
          sync.arrive_and_wait();
          for (int p = 0; p < size; ++p) std::memcpy(static_cast<char*>(out) + p * n, slots[p].data(), n);
          sync.arrive_and_wait();
        });
        Deadline d = Deadline::afterMs(10000);
        auto ctx = device->connect(*bs, d);
        int got = -1;
        int prev = (r + size - 1) % size;
        std::vector<RequestPtr> reqs{ctx->irecv(prev, 1, &got, sizeof(got)),
                                     ctx->isend((r + 1) % size, 1, &r, sizeof(r))};
        waitAll(reqs, d);
        if (got != prev) throw std::runtime_error("wrong ring neighbour");
        bs->barrier(d);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace rankmap::coll::transport
