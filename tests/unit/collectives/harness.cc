#include "tests/unit/collectives/harness.h"

#include <string>

#include "collectives/bootstrap/root_bootstrap.h"
#include "collectives/transport/loopback/device.h"
#include "common/error.h"
#include "tests/unit/common/rank_threads.h"

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
  rankmap::testing::runRanks(worldSize, [&](int r) {
    std::unique_ptr<bootstrap::Bootstrap> bs =
        r == 0 ? bootstrap::makeRootBootstrap(std::move(listener), worldSize, deadline)
               : bootstrap::makeRootBootstrap(r, worldSize, root, deadline);
    group[r] = device->connect(*bs, deadline);
  });
  return group;
}

void spawn(int worldSize, Backend backend, const std::function<void(transport::Context&)>& fn,
           const SpawnOptions& options) {
  std::vector<std::unique_ptr<transport::Context>> group = makeGroup(worldSize, backend, options);
  // A failing rank closes its context at once: peers waiting on it fail fast with PeerError.
  rankmap::testing::runRanks(
      worldSize, [&](int r) { fn(*group[r]); }, [&](int r) { group[r].reset(); });
}

}  // namespace rankmap::coll::testing
