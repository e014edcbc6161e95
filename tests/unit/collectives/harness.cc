#include "tests/unit/collectives/harness.h"

#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/bootstrap/root_bootstrap.h"
#include "collectives/transport/loopback/device.h"
#include "common/error.h"

namespace rankmap::coll::testing {

std::vector<std::unique_ptr<transport::Context>> makeGroup(int worldSize, Backend backend,
                                                           const SpawnOptions& options) {
  if (backend == Backend::Loopback) return transport::loopback::makeLoopbackGroup(worldSize);
  if (worldSize < 1) RANKMAP_THROW(InvalidInput, "group of {} ranks", worldSize);

  transport::DeviceOptions devOpts;
  devOpts.backend = backend;
  devOpts.tcp = options.tcp;
  if (devOpts.tcp.host.empty() && devOpts.tcp.ifname.empty()) devOpts.tcp.host = "127.0.0.1";
  std::shared_ptr<transport::Device> device = transport::makeDevice(devOpts);

  Deadline deadline = Deadline::after(options.connectTimeout);
  bootstrap::RootListener listener("127.0.0.1:0");
  std::string root = listener.address();

  std::vector<std::unique_ptr<transport::Context>> group(worldSize);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(worldSize);
  for (int r = 0; r < worldSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<bootstrap::Bootstrap> bs =
            r == 0 ? bootstrap::makeRootBootstrap(std::move(listener), worldSize, deadline)
                   : bootstrap::makeRootBootstrap(r, worldSize, root, deadline);
        group[r] = device->connect(*bs, deadline);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
  return group;
}

void spawn(int worldSize, Backend backend, const std::function<void(transport::Context&)>& fn,
           const SpawnOptions& options) {
  std::vector<std::unique_ptr<transport::Context>> group = makeGroup(worldSize, backend, options);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(worldSize);
  for (int r = 0; r < worldSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*group[r]);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        // Close at once so that peers waiting on this rank fail fast with PeerError.
        group[r].reset();
      }
    });
  }
  for (auto& t : threads) t.join();
  group.clear();
  if (first) std::rethrow_exception(first);
}

}  // namespace rankmap::coll::testing
