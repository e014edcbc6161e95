// Helpers shared by the NCCL shim tests: plans, thread "ranks", data patterns.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/plan.h"

namespace rankmap::testing {

// A plan over `hosts` hosts h0..h{hosts-1} with `ranksPerHost` ranks each, whose `order` lists
// host indices in the new order.
inline Plan makePlan(int hosts, int ranksPerHost, const std::vector<int>& order) {
  Plan p;
  for (int h = 0; h < hosts; ++h) p.hosts.push_back("h" + std::to_string(h));
  for (int h : order) p.order.push_back("h" + std::to_string(h));
  p.ranksPerHost = ranksPerHost;
  p.derivePermutation();
  p.confidence = 0.9;
  p.seal();
  return p;
}

// Runs fn(rank) on one thread per rank; rethrows the first failure after all threads ended.
inline void runRanks(int n, const std::function<void(int)>& fn) {
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// The value rank `rank` contributes at element `i` (distinct for every (rank, i), exact in int32
// sums over a few ranks).
inline int32_t pattern(int rank, size_t i) {
  return static_cast<int32_t>(rank * 100000 + static_cast<int>(i % 99991));
}

}  // namespace rankmap::testing
