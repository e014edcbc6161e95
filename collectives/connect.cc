#include "collectives/connect.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "collectives/bootstrap/root_bootstrap.h"
#include "collectives/transport/transport.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll {
namespace {

std::optional<int> intFromEnv(const char* name) {
  const char* v = std::getenv(name);  // launcher variables, not RANKMAP_* settings
  if (v == nullptr || *v == '\0') return std::nullopt;
  std::string_view s(v);
  int x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || p != s.data() + s.size())
    RANKMAP_THROW(InvalidInput, "{}={:?}: expected an integer", name, std::string(s));
  return x;
}

}  // namespace

LaunchInfo launchInfoFromEnvironment(const Config& config) {
  LaunchInfo info;
  info.root = config.get(settings::kRoot);
  const int64_t rank = config.get(settings::kRank), size = config.get(settings::kWorldSize);
  if (rank >= 0 || size >= 0) {
    info.rank = static_cast<int>(rank);
    info.size = static_cast<int>(size);
    info.source = "RANKMAP_RANK";
  } else if (auto r = intFromEnv("OMPI_COMM_WORLD_RANK")) {
    info.rank = *r;
    info.size = intFromEnv("OMPI_COMM_WORLD_SIZE").value_or(-1);
    info.source = "Open MPI";
  } else if (auto pr = intFromEnv("PMI_RANK")) {
    info.rank = *pr;
    info.size = intFromEnv("PMI_SIZE").value_or(-1);
    info.source = "PMI";
  } else {
    RANKMAP_THROW(InvalidInput,
                  "no rank: set RANKMAP_RANK, RANKMAP_WORLD_SIZE and RANKMAP_ROOT, or run under "
                  "mpirun with RANKMAP_ROOT");
  }
  if (info.size < 1 || info.size > (1 << 20))
    RANKMAP_THROW(InvalidInput, "world size {} (from {}) out of range", info.size, info.source);
  if (info.rank < 0 || info.rank >= info.size)
    RANKMAP_THROW(InvalidInput, "rank {} (from {}) outside a world of {}", info.rank, info.source,
                  info.size);
  if (info.root.empty())
    RANKMAP_THROW(InvalidInput, "RANKMAP_ROOT is not set: give host:port where rank 0 listens");
  return info;
}

std::optional<Plan> loadPlanOrWarn(const std::string& path) {
  if (path.empty()) return std::nullopt;
  try {
    return Plan::load(path);
  } catch (const std::exception& e) {
    RANKMAP_WARN(Coll, "ignoring plan {}: {}; using the identity order", path, e.what());
    return std::nullopt;
  }
}

std::unique_ptr<Communicator> connectCommunicator(int rank, int size, const std::string& root,
                                                  const Config& config, CommOptions options,
                                                  std::optional<Plan> plan, Deadline deadline) {
  auto device = transport::makeDevice(transport::deviceOptionsFromConfig(config));
  auto bootstrap = bootstrap::makeRootBootstrap(rank, size, root, deadline);
  auto ctx = device->connect(*bootstrap, deadline);
  return std::make_unique<Communicator>(std::move(device), std::move(ctx), std::move(options),
                                        std::move(plan));
}

std::unique_ptr<Communicator> connectFromEnvironment(const Config& config) {
  LaunchInfo info = launchInfoFromEnvironment(config);
  CommOptions options = CommOptions::fromConfig(config);
  auto plan = loadPlanOrWarn(config.get(settings::kPlan));
  return connectCommunicator(info.rank, info.size, info.root, config, options, std::move(plan),
                             Deadline::after(options.timeout));
}

}  // namespace rankmap::coll
