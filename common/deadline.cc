#include "common/deadline.h"

#include <climits>

#include "common/error.h"

namespace rankmap {

int Deadline::pollTimeoutMs() const {
  auto ns = remaining().count();
  if (ns <= 0) return 0;
  int64_t ms = (ns + 999'999) / 1'000'000;
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

void Deadline::check(std::string_view what) const {
  if (expired()) throw TimeoutError(fmt::format("deadline passed while waiting for {}", what));
}

}  // namespace rankmap
