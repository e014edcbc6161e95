// rdma::RdmaContext: one rank of an RDMA group: one RC queue pair per peer (rdma/pair.h), one
// completion queue with a completion channel, and a progress thread that sleeps on the channel,
// dispatches completions to pairs and sends heartbeats while requests are pending.
//
// Threads: one mutex guards all pairs; isend/irecv take it on the caller's thread, the progress
// thread takes it per batch of completions. Messages to itself go through a loopback pair.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collectives/transport/loopback/pair.h"
#include "collectives/transport/rdma/pair.h"
#include "collectives/transport/transport.h"

namespace rankmap::coll::transport::rdma {

class RegistrationCache;

// The verbs objects a context uses, owned by the device (kept alive by the shared_ptr).
struct DeviceState {
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  int port = 1;
  PortInfo portInfo{};
  std::string name;
  std::unique_ptr<RegistrationCache> cache;
  ~DeviceState();
};

class RdmaContext final : public Context {
 public:
  // Creates the completion queue and one unconnected pair per peer.
  RdmaContext(std::shared_ptr<DeviceState> device, int rank, int size);
  // Sends Bye to every peer (best effort, bounded), stops the progress thread, fails what is
  // pending with IoError and destroys the queue pairs.
  ~RdmaContext() override;

  // Allgather payload: this rank's port info and one QpInfo per rank.
  std::string localInfo() const;
  // Connects every pair from the allgathered infos and starts the progress thread.
  void connect(const std::vector<std::string>& infos);

  RequestPtr isend(int peer, uint64_t tag, const void* buf, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* buf, size_t bytes) override;
  std::string peerName(int peer) const override;
  std::string backend() const override { return "rdma"; }

 private:
  void progressLoop();
  // Polls the completion queue dry; with mu_ held.
  void pollLocked();

  std::shared_ptr<DeviceState> device_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  int wakeFd_ = -1;
  std::mutex mu_;
  std::vector<std::unique_ptr<Pair>> pairs_;
  std::unordered_map<uint32_t, Pair*> byQpn_;
  loopback::Pair self_;
  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace rankmap::coll::transport::rdma
