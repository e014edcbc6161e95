// Device of the RDMA backend: opens the verbs device and port, holds the protection domain and
// the registration cache, and connects contexts through the bootstrap (allgather of port and
// queue-pair numbers, then a barrier so that no rank sends before every queue pair is ready).
#include "collectives/transport/rdma/device.h"

#include "common/build_config.h"
#include "common/error.h"

#if RANKMAP_HAVE_RDMA
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/transport/rdma/context.h"
#include "collectives/transport/rdma/memory.h"
#include "common/log.h"
#endif

namespace rankmap::coll::transport::rdma {

#if !RANKMAP_HAVE_RDMA
std::shared_ptr<Device> makeRdmaDevice(const RdmaOptions&) {
  RANKMAP_THROW(NotSupported, "rdma transport: rankmap was built without libibverbs");
}
std::vector<std::string> rdmaDeviceNames() { return {}; }
#else
std::vector<std::string> rdmaDeviceNames() {
  std::vector<std::string> names;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return names;
  for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return names;
}

namespace {

class RdmaDevice final : public Device {
 public:
  explicit RdmaDevice(std::shared_ptr<DeviceState> state) : state_(std::move(state)) {}
  std::string backend() const override { return "rdma"; }

  std::unique_ptr<Context> connect(bootstrap::Bootstrap& bs, Deadline deadline) override {
    auto ctx = std::make_unique<RdmaContext>(state_, bs.rank(), bs.size());
    std::vector<std::string> infos = bs.allgather(ctx->localInfo(), deadline);
    ctx->connect(infos);
    bs.barrier(deadline);
    RANKMAP_DEBUG(Coll, "rank {}: rdma context of {} ranks connected on {} port {}", bs.rank(),
                  bs.size(), state_->name, state_->port);
    return ctx;
  }

 private:
  std::shared_ptr<DeviceState> state_;
};

std::shared_ptr<DeviceState> openDevice(const RdmaOptions& options) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    RANKMAP_THROW(NotSupported, "rdma transport: no RDMA verbs device on this machine");
  }
  ibv_device* chosen = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    std::string name = ibv_get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + name;
    if (chosen == nullptr && (options.device.empty() || options.device == name)) chosen = list[i];
  }
  auto state = std::make_shared<DeviceState>();
  if (chosen != nullptr) {
    state->name = ibv_get_device_name(chosen);
    state->context = ibv_open_device(chosen);
  }
  int openErr = errno;
  ibv_free_device_list(list);
  if (chosen == nullptr) {
    RANKMAP_THROW(NotSupported, "rdma transport: RANKMAP_IB_DEVICE={} not found (devices: {})",
                  options.device, names);
  }
  if (state->context == nullptr) {
    throw SystemError(fmt::format("ibv_open_device({})", state->name), openErr);
  }
  state->pd = ibv_alloc_pd(state->context);
  if (state->pd == nullptr) throw SystemError(fmt::format("ibv_alloc_pd({})", state->name), errno);
  state->port = options.port;
  ibv_port_attr port{};
  int rv = ibv_query_port(state->context, static_cast<uint8_t>(state->port), &port);
  if (rv != 0) {
    throw SystemError(fmt::format("ibv_query_port({} port {})", state->name, state->port), rv);
  }
  if (port.state != IBV_PORT_ACTIVE) {
    RANKMAP_THROW(NotSupported, "rdma transport: {} port {} is not active (state {})", state->name,
                  state->port, ibv_port_state_str(port.state));
  }
  PortInfo& info = state->portInfo;
  info.lid = port.lid;
  info.mtu = port.active_mtu;
  info.ethernet = port.link_layer == IBV_LINK_LAYER_ETHERNET ? 1 : 0;
  // RoCE has no LIDs: it must route by GID; InfiniBand uses the LID unless told otherwise.
  info.gidIndex = options.gidIndex >= 0 ? options.gidIndex : (info.ethernet ? 0 : -1);
  if (info.gidIndex >= 0) {
    ibv_gid gid{};
    rv = ibv_query_gid(state->context, static_cast<uint8_t>(state->port), info.gidIndex, &gid);
    if (rv != 0) {
      throw SystemError(fmt::format("ibv_query_gid({} port {} index {})", state->name,
                                    state->port, info.gidIndex),
                        rv);
    }
    std::memcpy(info.gid, gid.raw, sizeof(info.gid));
  }
  ::gethostname(info.host, sizeof(info.host) - 1);
  state->cache = std::make_unique<RegistrationCache>(state->pd, options.cacheRegistrations);
  return state;
}

}  // namespace

std::shared_ptr<Device> makeRdmaDevice(const RdmaOptions& options) {
  return std::make_shared<RdmaDevice>(openDevice(options));
}
#endif

}  // namespace rankmap::coll::transport::rdma

bool rankmap::coll::transport::rdmaAvailable() { return !rdma::rdmaDeviceNames().empty(); }
