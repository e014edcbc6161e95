// CPU time of the calling process, for the benchmarks that report it (hollow_agents: the
// coordinator's; loaded_rtt_bench: the coordinator side's per trial).
#pragma once

#include <sys/resource.h>

namespace rankmap::bench {

// User plus system CPU seconds of every thread of this process so far.
inline double processCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace rankmap::bench
