// RDMA verbs backend (rdma-core): one RC queue pair per peer, receiver-driven rendezvous with
// RDMA WRITE WITH IMMEDIATE, and a registration cache. Built only when libibverbs is present
// (RANKMAP_HAVE_RDMA) and usable only when a verbs device exists; see rdma/pair.h.
#pragma once

#include <memory>

#include "collectives/transport/transport.h"

namespace rankmap::coll::transport::rdma {

// Throws NotSupported when built without verbs or when no (matching) device exists.
std::shared_ptr<Device> makeRdmaDevice(const RdmaOptions& options);

// Names of the verbs devices present (empty without verbs support or hardware).
std::vector<std::string> rdmaDeviceNames();

}  // namespace rankmap::coll::transport::rdma
