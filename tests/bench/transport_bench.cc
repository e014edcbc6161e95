// Transport microbenchmarks (Google Benchmark): ping-pong and one-way streaming between two ranks
// of one process over the TCP transport on 127.0.0.1 (and loopback for reference).
//
//   transport_bench --benchmark_filter=tcp --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
//
// Arguments: bytes per message, TCP streams per peer, socket buffer in KiB (4096 is the default
// RANKMAP_SOCKET_BUFFER; 0 leaves the kernel's autotuning).
//
// PingPong: rank 0 sends `bytes`, rank 1 echoes them; bytes_per_second counts both directions
// (2 x bytes per round trip), so it compares with a bidirectional link. Stream: rank 0 keeps
// `window` sends of `bytes` in flight to rank 1, whose receives are pre-posted: the one-way
// bandwidth that iperf3 -c 127.0.0.1 measures.
#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include "collectives/transport/transport.h"
#include "tests/unit/collectives/harness.h"

namespace rankmap::coll::transport {
namespace {

using testing::Backend;

// Args: {bytes, streams, socket buffer KiB (0 = kernel autotuning; default option: 4096)}.
std::vector<std::unique_ptr<Context>> pairGroup(Backend backend, const benchmark::State& state) {
  testing::SpawnOptions o;
  o.tcp.streams = static_cast<int>(state.range(1));
  o.tcp.socketBuffer = static_cast<uint64_t>(state.range(2)) << 10;
  return testing::makeGroup(2, backend, o);
}

void pingPong(benchmark::State& state, Backend backend) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto ctxs = pairGroup(backend, state);
  std::vector<char> a(bytes, 1), b(bytes, 2);
  const int64_t iterations = state.max_iterations;
  std::thread echo([&] {
    Context& c = *ctxs[1];
    for (int64_t i = 0; i < iterations; ++i) {
      c.irecv(0, 1, b.data(), bytes)->wait(Deadline::afterMs(60000));
      c.isend(0, 2, b.data(), bytes)->wait(Deadline::afterMs(60000));
    }
  });
  Context& c = *ctxs[0];
  for (auto _ : state) {
    auto r = c.irecv(1, 2, a.data(), bytes);
    c.isend(1, 1, a.data(), bytes)->wait(Deadline::afterMs(60000));
    r->wait(Deadline::afterMs(60000));
  }
  echo.join();
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(2 * bytes));
}

void stream(benchmark::State& state, Backend backend) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  constexpr int kWindow = 4;
  auto ctxs = pairGroup(backend, state);
  std::vector<std::vector<char>> out(kWindow, std::vector<char>(bytes, 1));
  std::vector<std::vector<char>> in(kWindow, std::vector<char>(bytes, 2));
  const int64_t iterations = state.max_iterations;
  std::thread sink([&] {
    Context& c = *ctxs[1];
    std::vector<RequestPtr> window(kWindow);
    for (int64_t i = 0; i < iterations; ++i) {
      int slot = static_cast<int>(i % kWindow);
      if (window[slot]) window[slot]->wait(Deadline::afterMs(60000));
      window[slot] = c.irecv(0, 1, in[slot].data(), bytes);
    }
    for (auto& r : window) {
      if (r) r->wait(Deadline::afterMs(60000));
    }
    char done = 1;
    c.isend(0, 2, &done, 1)->wait(Deadline::afterMs(60000));
  });
  Context& c = *ctxs[0];
  std::vector<RequestPtr> window(kWindow);
  int64_t i = 0;
  for (auto _ : state) {
    int slot = static_cast<int>(i++ % kWindow);
    if (window[slot]) window[slot]->wait(Deadline::afterMs(60000));
    window[slot] = c.isend(1, 1, out[slot].data(), bytes);
  }
  // The clock stops when the last byte has been received, not just queued.
  char done = 0;
  c.irecv(1, 2, &done, 1)->wait(Deadline::afterMs(60000));
  sink.join();
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}

void tcpPingPong(benchmark::State& s) { pingPong(s, Backend::Tcp); }
void tcpStream(benchmark::State& s) { stream(s, Backend::Tcp); }
void loopbackPingPong(benchmark::State& s) { pingPong(s, Backend::Loopback); }

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t streams : {1, 2, 4}) {
    for (int64_t bytes : {8, 64 << 10, 1 << 20, 16 << 20, 64 << 20}) {
      if (streams > 1 && bytes < (1 << 20)) continue;
      b->Args({bytes, streams, 4096});
    }
  }
  // Kernel autotuning instead of fixed 4 MiB buffers, for comparison.
  b->Args({16 << 20, 1, 0})->Args({64 << 20, 1, 0});
  b->ArgNames({"bytes", "streams", "bufKiB"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(tcpPingPong)->Apply(sizes);
BENCHMARK(tcpStream)->Apply(sizes);
BENCHMARK(loopbackPingPong)
    ->Args({8, 1, 0})
    ->Args({1 << 20, 1, 0})
    ->Args({64 << 20, 1, 0})
    ->ArgNames({"bytes", "streams", "bufKiB"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rankmap::coll::transport

BENCHMARK_MAIN();
