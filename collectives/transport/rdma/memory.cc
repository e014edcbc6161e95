#include "collectives/transport/rdma/memory.h"

#include <unistd.h>

#include <cerrno>

#include "common/error.h"

namespace rankmap::coll::transport::rdma {

Registration::~Registration() {
  if (mr != nullptr) ibv_dereg_mr(mr);
}

std::shared_ptr<Registration> RegistrationCache::acquire(const void* addr, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  std::lock_guard<std::mutex> lock(mu_);
  if (enabled_) {
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      const Registration& r = **it;
      if (r.start <= a && a + bytes <= r.start + r.length) {
        lru_.splice(lru_.begin(), lru_, it);
        return lru_.front();
      }
    }
  }
  // Register whole pages: neighbouring buffers on the same pages then hit the cache.
  static const uintptr_t kPage = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t start = a & ~(kPage - 1);
  uintptr_t end = (a + bytes + kPage - 1) & ~(kPage - 1);
  auto reg = std::make_shared<Registration>();
  reg->mr = ibv_reg_mr(pd_, reinterpret_cast<void*>(start), end - start,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (reg->mr == nullptr) {
    int err = errno;
    throw SystemError(fmt::format("ibv_reg_mr of {} bytes (check ulimit -l)", end - start), err);
  }
  reg->start = start;
  reg->length = end - start;
  if (!enabled_) return reg;
  lru_.push_front(reg);
  // Evict idle regions (held only by the cache) from the least recently used end.
  for (auto it = lru_.end(); lru_.size() > kMaxCached && it != lru_.begin();) {
    --it;
    if (it->use_count() == 1) it = lru_.erase(it);
  }
  return reg;
}

}  // namespace rankmap::coll::transport::rdma
