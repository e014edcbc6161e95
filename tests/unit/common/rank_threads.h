// Ranks as threads of one process, for tests of multi-rank code.
#pragma once

#include <algorithm>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rankmap::testing {

// Runs fn(rank) on one thread per rank; rethrows the first failure (by time) after all threads
// ended. A failing rank then runs onFailure(rank), if given, on its own thread (the collectives
// harness closes the rank's context there so that its peers fail fast).
inline void runRanks(int n, const std::function<void(int)>& fn,
                     const std::function<void(int)>& onFailure = {}) {
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(std::max(n, 0)));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!first) first = std::current_exception();
        }
        if (onFailure) onFailure(r);
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace rankmap::testing
