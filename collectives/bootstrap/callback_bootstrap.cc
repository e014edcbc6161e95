#include "collectives/bootstrap/callback_bootstrap.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"

namespace rankmap::coll::bootstrap {

namespace {

class CallbackBootstrap final : public Bootstrap {
 public:
  CallbackBootstrap(int rank, int size, AllgatherFn fn) : Bootstrap(rank, size), fn_(std::move(fn)) {
    if (!fn_) RANKMAP_THROW(InvalidInput, "callback bootstrap: no allgather function given");
  }

  std::vector<std::string> allgather(const std::string& mine, Deadline deadline) override {
    deadline.check("callback bootstrap allgather");
    struct Header {
      int64_t size;
      uint64_t length;
    };
    Header h{size(), mine.size()};
    std::vector<Header> headers(size());
    fn_(&h, headers.data(), sizeof(Header));
    uint64_t longest = 0;
    for (int r = 0; r < size(); ++r) {
      if (headers[r].size != size()) {
        RANKMAP_THROW(PeerError,
                      "callback bootstrap: rank {} has world size {} but rank {} has {}", r,
                      headers[r].size, rank(), size());
      }
      longest = std::max(longest, headers[r].length);
    }
    std::vector<std::string> all(size());
    if (longest > 0) {
      deadline.check("callback bootstrap allgather");
      std::string padded(longest, '\0');
      std::memcpy(padded.data(), mine.data(), mine.size());
      std::string gathered(longest * size(), '\0');
      fn_(padded.data(), gathered.data(), longest);
      for (int r = 0; r < size(); ++r) all[r] = gathered.substr(r * longest, headers[r].length);
    }
    return all;
  }

 private:
  AllgatherFn fn_;
};

}  // namespace

std::unique_ptr<Bootstrap> makeCallbackBootstrap(int rank, int size, AllgatherFn allgather) {
  return std::make_unique<CallbackBootstrap>(rank, size, std::move(allgather));
}

}  // namespace rankmap::coll::bootstrap
