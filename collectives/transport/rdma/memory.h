// rdma::RegistrationCache: memory regions registered with the protection domain, reused across
// operations on the same buffers (registration pins pages and costs tens of microseconds).
//
// Contract: acquire() returns a region covering [addr, addr + bytes) with local write and
// remote write access; the region stays registered while a Registration is held. Up to
// kMaxCached idle regions are kept, least recently used evicted first. Thread-safe.
//
// Caveat, as in every registration cache without memory hooks: if a cached buffer is freed and
// the same addresses are mapped again to other pages, the cached region still names the old
// pages. Callers that free and reallocate buffers between collectives should make the device
// with RdmaOptions::cacheRegistrations = false, which registers per use.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>

namespace rankmap::coll::transport::rdma {

struct Registration {
  ibv_mr* mr = nullptr;
  uintptr_t start = 0;
  size_t length = 0;
  ~Registration();
};

class RegistrationCache {
 public:
  static constexpr size_t kMaxCached = 256;

  RegistrationCache(ibv_pd* pd, bool enabled) : pd_(pd), enabled_(enabled) {}
  // Throws SystemError naming ibv_reg_mr (often the locked-memory limit, ulimit -l).
  std::shared_ptr<Registration> acquire(const void* addr, size_t bytes);

 private:
  ibv_pd* pd_;
  bool enabled_;
  std::mutex mu_;
  std::list<std::shared_ptr<Registration>> lru_;  // front = most recently used
};

}  // namespace rankmap::coll::transport::rdma
