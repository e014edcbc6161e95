#include "collectives/transport/loopback/device.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "collectives/bootstrap/bootstrap.h"
#include "collectives/transport/loopback/context.h"
#include "common/error.h"

namespace rankmap::coll::transport::loopback {

namespace {

// Groups being joined are kept by an id that rank 0 draws and allgathers; the last rank to
// join removes the entry (the contexts keep the fabric alive).
class LoopbackDevice final : public Device {
 public:
  std::string backend() const override { return "loopback"; }

  std::unique_ptr<Context> connect(bootstrap::Bootstrap& bs, Deadline deadline) override {
    std::string mine;
    if (bs.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      mine = std::to_string(nextId_++);
    }
    std::vector<std::string> all = bs.allgather(mine, deadline);
    uint64_t id = std::stoull(all.at(0));
    std::shared_ptr<Fabric> fabric;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Joining& j = joining_[id];
      if (!j.fabric) j.fabric = std::make_shared<Fabric>(bs.size());
      fabric = j.fabric;
      if (++j.joined == bs.size()) joining_.erase(id);
    }
    RANKMAP_ENFORCE_EQ(fabric->size(), bs.size(), "loopback group size vs this rank's world size");
    return std::make_unique<LoopbackContext>(std::move(fabric), bs.rank());
  }

 private:
  struct Joining {
    std::shared_ptr<Fabric> fabric;
    int joined = 0;
  };
  std::mutex mu_;
  uint64_t nextId_ = 1;
  std::map<uint64_t, Joining> joining_;
};

}  // namespace

std::vector<std::unique_ptr<Context>> makeLoopbackGroup(int size) {
  if (size < 1) RANKMAP_THROW(InvalidInput, "loopback group of {} ranks: need at least 1", size);
  auto fabric = std::make_shared<Fabric>(size);
  std::vector<std::unique_ptr<Context>> group;
  group.reserve(size);
  for (int r = 0; r < size; ++r) group.push_back(std::make_unique<LoopbackContext>(fabric, r));
  return group;
}

std::shared_ptr<Device> makeLoopbackDevice() { return std::make_shared<LoopbackDevice>(); }

}  // namespace rankmap::coll::transport::loopback
