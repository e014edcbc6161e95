// `rankmap bench`: an nccl-tests style benchmark of the collective engine.
//
// One process per rank, launched like nccl-tests: `mpirun -np N rankmap bench` (Open MPI's
// library, loaded at run time, carries rank 0's address), `torchrun --no_python rankmap bench`
// (MASTER_ADDR:MASTER_PORT+1), or RANKMAP_RANK / RANKMAP_WORLD_SIZE / RANKMAP_ROOT, which
// override both (collectives/connect.h has the precedence). `--loopback N` instead runs N ranks
// as threads of this process over the loopback transport (no network; for the engine's own CPU
// cost).
//
// Output (rank 0 only, on stdout) follows nccl-tests: a header, one line per size with size,
// count, type, redop, root, time (us, the slowest rank's mean per iteration), algbw and busbw
// (GB/s), #wrong (with --check) and the algorithm that ran, then "# Avg bus bandwidth". busbw
// scales algbw by the factor that makes it comparable to link speed: 2(n-1)/n for allreduce,
// (n-1)/n for allgather and reducescatter (whose size is the whole gathered buffer), 1 for
// broadcast and reduce. The summary adds the CPU seconds all ranks spent per GB of payload.
// --json prints one JSON object per line instead. Exit status 1 when --check found wrong elements.
// --duration SECONDS repeats one size (-b) and prints a row per second with the plan in use, so
// a person or a script sees the engine adopt a replaced plan (benchDuration below). --plan's file
// is watched like RANKMAP_PLAN's (collectives/live_plan.h).
// --device cuda puts every rank's buffers in GPU memory (nccl-tests' habit; CUDA builds): the
// Communicator then runs each collective on the device executor, staged through pinned host
// memory, and --check uploads the pattern and downloads the result around the checked call.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"
#include "collectives/communicator.h"
#include "collectives/connect.h"
#include "collectives/reference_values.h"
#include "collectives/transport/loopback/device.h"
#if RANKMAP_HAVE_CUDA
#include "collectives/cuda/device.h"
#endif
#include "common/build_config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/plan.h"
#include "common/plan_agreement.h"

namespace rankmap::cli {
namespace {

using coll::Collective;
using coll::DataType;
using coll::ReduceOp;

struct BenchArgs {
  std::string minBytes = "8";
  std::string maxBytes = "32M";
  int factor = 2;
  std::string op = "sum";
  std::string dtype = "float";
  std::string algo = "auto";
  std::string plan;
  std::string collective = "allreduce";
  int iters = 20;
  int warmup = 5;
  int root = 0;
  bool check = false;
  bool json = false;
  bool inPlace = false;
  int loopback = 0;
  double duration = 0;  // seconds; > 0 = repeat one size, a row per second
  std::string device = "host";  // where the buffers live: host or cuda
  bool maxBytesGiven = false;
};

struct Resolved {
  Collective collective;
  DataType type;
  ReduceOp op;
  std::vector<uint64_t> sizes;  // bytes, nccl-tests convention
  coll::CommOptions options;
  std::optional<Plan> plan;  // an explicit --plan
  std::string planPath;      // else RANKMAP_PLAN, loaded by each rank (loadLocalPlan)
  bool cuda = false;         // --device cuda
};

// The collective's buffers: host vectors, or with --device cuda GPU memory of the same sizes,
// the host vectors then holding what --check writes and reads (upload/download around it).
class BenchBuffers {
 public:
  BenchBuffers(size_t bytes, bool cuda) : hostIn(bytes), hostOut(bytes) {
#if RANKMAP_HAVE_CUDA
    if (cuda) {
      devIn_.emplace(bytes);
      devOut_.emplace(bytes);
    }
#else
    if (cuda) RANKMAP_THROW(InvalidInput, "--device cuda: this rankmap was built without CUDA");
#endif
  }
  std::byte* in() { return dev(devIn_, hostIn); }
  std::byte* out() { return dev(devOut_, hostOut); }
  // Copies the host vectors to the device buffers (toDevice) or back; nothing on host buffers.
  void sync([[maybe_unused]] bool toDevice) {
#if RANKMAP_HAVE_CUDA
    if (!devIn_) return;
    for (auto [dev, host] : {std::pair{&*devIn_, &hostIn}, std::pair{&*devOut_, &hostOut}}) {
      if (toDevice)
        dev->upload(host->data(), host->size());
      else
        dev->download(host->data(), host->size());
    }
#endif
  }
  std::vector<std::byte> hostIn, hostOut;

 private:
#if RANKMAP_HAVE_CUDA
  using Device = std::optional<coll::cuda::DeviceBuffer>;
  static std::byte* dev(Device& d, std::vector<std::byte>& host) {
    return d ? static_cast<std::byte*>(d->data()) : host.data();
  }
  Device devIn_, devOut_;
#else
  struct Device {};
  static std::byte* dev(Device&, std::vector<std::byte>& host) { return host.data(); }
  Device devIn_, devOut_;
#endif
};

double busFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllreduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllgather:
    case Collective::kReduceScatter:
      return static_cast<double>(n - 1) / n;
    default:
      return 1.0;
  }
}

// Blocks of `count` elements in a call's whole buffer: n for allgather/reducescatter, else 1.
uint64_t blocksPerCall(Collective c, int n) {
  return c == Collective::kAllgather || c == Collective::kReduceScatter ? static_cast<uint64_t>(n)
                                                                        : 1;
}

// Elements per rank for a size: the whole vector, or per-rank block for allgather/reducescatter.
uint64_t countFor(Collective c, uint64_t bytes, size_t es, int n) {
  return bytes / es / blocksPerCall(c, n);
}

double cpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// "7@sha256:0123456789ab": the plan in use as the epoch it was made from and its hash; "identity".
std::string planLabel(const coll::Communicator& comm) {
  if (!comm.plan()) return "identity";
  return fmt::format("{}@{}", comm.plan()->epoch, shortPlanHash(comm.plan()->hash));
}

// --duration: repeats the one size (-b) and prints a row about once per second: elapsed
// seconds, iterations and time per iteration in the row, algbw, busbw, #wrong (with --check: one
// checked call at the end of each row), the algorithm and the plan in use (epoch@hash, which
// changes when the engine adopts a replaced plan: collectives/live_plan.h). The ranks stay in
// step without comparing clocks: after every chunk of iterations rank 0 broadcasts whether the
// row and the run are over and how many iterations the next chunk has (about 50 ms of work), so
// a row's time includes those 24-byte broadcasts. Rank 0's clock decides when a row ends; the
// row's time is the slowest rank's from a barrier at its start, as in the fixed-iteration mode.
// Without the barrier a rank that spent longer on the previous row's check would start late and
// time only its own part of a collective the others had begun (a 16 MiB ring with one rank's
// link half taken read 135 Mbit/s where its links allowed 98; docs/performance.md).
template <typename RunOnce, typename CheckOnce>
int64_t benchDuration(coll::Communicator& comm, const BenchArgs& a, const Resolved& res,
                      RunOnce& runOnce, CheckOnce& checkOnce) {
  using Clock = std::chrono::steady_clock;
  const int n = comm.size(), me = comm.rank();
  const size_t es = coll::elementSize(res.type);
  const Collective c = res.collective;
  const uint64_t count = countFor(c, res.sizes.front(), es, n);
  const uint64_t perRank = blocksPerCall(c, n);
  const uint64_t size = count * es * perRank;
  const bool print = me == 0;
  if (print && !a.json) {
    fmt::print("# {} B ({} elements of {}) for {} s, a row per second\n", size, count * perRank,
               coll::dataTypeName(res.type), a.duration);
    fmt::print("# {:>8} {:>8} {:>10} {:>8} {:>8} {:>7}  {:<6} {}\n", "time", "iters", "time",
               "algbw", "busbw", "#wrong", "algo", "plan");
    fmt::print("# {:>8} {:>8} {:>10} {:>8} {:>8} {:>7}  {:<6} {}\n", "(s)", "", "(us)", "(GB/s)",
               "(GB/s)", "", "", "(epoch@hash)");
    std::fflush(stdout);
  }
  for (int i = 0; i < a.warmup; ++i) runOnce(count);
  comm.barrier();
  constexpr double kChunkSeconds = 0.05;
  const auto start = Clock::now();
  auto rowStart = start;
  int64_t totalWrong = 0;
  int64_t chunk = 1, rowIters = 0;
  for (bool stop = false; !stop;) {
    for (int64_t i = 0; i < chunk; ++i) runOnce(count);
    rowIters += chunk;
    // Rank 0 decides: {row over, run over, next chunk}.
    int64_t control[3] = {0, 0, 1};
    const auto now = Clock::now();
    const double rowSecs = std::chrono::duration<double>(now - rowStart).count();
    if (me == 0) {
      const double perIter = rowSecs / static_cast<double>(rowIters);
      const double elapsed = std::chrono::duration<double>(now - start).count();
      control[0] = rowSecs >= 1.0 || elapsed >= a.duration;
      control[1] = elapsed >= a.duration;
      control[2] = std::clamp<int64_t>(
          static_cast<int64_t>(kChunkSeconds / std::max(perIter, 1e-9)), 1, 1 << 20);
    }
    comm.broadcast(control, control, 3, DataType::kInt64, 0);
    chunk = control[2];
    stop = control[1] != 0;
    if (control[0] == 0) continue;
    double slowestSecs = 0;
    comm.allreduce(&rowSecs, &slowestSecs, 1, DataType::kFloat64, ReduceOp::kMax);
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const std::string algo(coll::algorithmName(comm.lastSelection().algorithm));
    int64_t wrong = -1;
    if (a.check) {
      wrong = checkOnce(count);
      totalWrong += wrong;
    }
    const double us = slowestSecs / static_cast<double>(rowIters) * 1e6;
    const double algbw = us > 0 ? static_cast<double>(size) / (us * 1e-6) / 1e9 : 0;
    const double busbw = algbw * busFactor(c, n);
    if (print) {
      if (a.json)
        fmt::print(
            "{{\"elapsed_s\":{:.3f},\"collective\":\"{}\",\"ranks\":{},\"size\":{},"
            "\"iters\":{},\"time_us\":{:.3f},\"algbw_gbps\":{:.6f},\"busbw_gbps\":{:.6f},"
            "\"wrong\":{},\"algo\":\"{}\",\"plan_hash\":\"{}\",\"plan_epoch\":{},"
            "\"plan_switches\":{}}}\n",
            elapsed, coll::collectiveName(c), n, size, rowIters, us, algbw, busbw, wrong, algo,
            comm.plan() ? comm.plan()->hash : std::string(),
            comm.plan() ? comm.plan()->epoch : -1, comm.stats().planSwitches);
      else
        fmt::print("  {:>8.1f} {:>8} {:>10.2f} {:>8.3f} {:>8.3f} {:>7}  {:<6} {}\n", elapsed,
                   rowIters, us, algbw, busbw,
                   wrong < 0 ? std::string("N/A") : std::to_string(wrong), algo, planLabel(comm));
      std::fflush(stdout);
    }
    rowIters = 0;
    comm.barrier();
    rowStart = Clock::now();
  }
  if (print) {
    const auto& st = comm.stats();
    // This rank's passive measurement (collectives/passive.h) and its agent link.
    uint64_t sent = 0;
    if (const auto* m = comm.passive())
      for (const auto& t : m->totals()) sent += t.sentBytes;
    const auto link = comm.agentLink() ? comm.agentLink()->counters() : coll::AgentLink::Counters{};
    if (a.json)
      fmt::print(
          "{{\"summary\":true,\"wrong\":{},\"plan_switches\":{},\"plan_votes\":{},"
          "\"plan_votes_disagreed\":{},\"plan_switches_declined\":{},"
          "\"plan_files_rejected\":{},\"plan_vote_s\":{:.6f},\"live_settings_disagreed\":{},"
          "\"fallbacks\":{},\"passive\":{},\"passive_sent_bytes\":{},"
          "\"agent_reports_sent\":{},\"agent_reports_failed\":{},\"agent_plans_fetched\":{}}}\n",
          a.check ? totalWrong : -1, st.planSwitches, st.planVotes, st.planVotesDisagreed,
          st.planSwitchesDeclined, st.planFilesRejected, static_cast<double>(st.planVoteNs) * 1e-9,
          st.liveSettingsDisagreed, comm.fallbacks(), comm.passive() != nullptr, sent,
          link.reportsSent, link.reportsFailed, link.plansFetched);
    else {
      fmt::print("# Out of bounds values : {} {}\n", a.check ? totalWrong : 0,
                 !a.check          ? "(not checked)"
                 : totalWrong == 0 ? "OK"
                                   : "FAILED");
      fmt::print(
          "# Plan switches        : {} (votes {}: {} disagreed, {} declined by the margin; "
          "{} plan files rejected; {:.3f} ms in votes)\n",
          st.planSwitches, st.planVotes, st.planVotesDisagreed, st.planSwitchesDeclined,
          st.planFilesRejected, static_cast<double>(st.planVoteNs) * 1e-6);
      fmt::print("# Fallbacks            : {}\n#\n", comm.fallbacks());
    }
    std::fflush(stdout);
  }
  return totalWrong;
}

struct SizeResult {
  uint64_t bytes = 0, count = 0;
  double us = 0, algbw = 0, busbw = 0;
  int64_t wrong = -1;
  std::string algo;
};

// One rank's whole benchmark; returns the number of wrong elements found (all ranks, all sizes).
// `cpuShared`: all ranks are threads of this process (loopback), so rank 0's process CPU time
// already covers every rank.
int64_t benchRank(coll::Communicator& comm, const BenchArgs& a, const Resolved& res, bool cpuShared,
                  std::string_view launch) {
  const int n = comm.size(), me = comm.rank();
  const size_t es = coll::elementSize(res.type);
  const Collective c = res.collective;
  const uint64_t maxCount = countFor(c, res.sizes.back(), es, n);
  const uint64_t perRank = blocksPerCall(c, n);
  BenchBuffers buf(maxCount * perRank * es + es, res.cuda);
  std::vector<std::byte>& in = buf.hostIn;
  std::vector<std::byte>& out = buf.hostOut;
  const bool print = me == 0;
  if (print && !a.json) {
    fmt::print("# rankmap bench: {} over {} ranks ({} transport, {}, {} buffers), algo {}, plan {}\n",
               coll::collectiveName(c), n, comm.backend(), launch, a.device, a.algo,
               comm.plan() ? comm.plan()->hash
                           : std::string(comm.stats().planRejected ? "refused (identity order)"
                                                                   : "none (identity order)"));
    fmt::print("# rank order: {}\n#\n", fmt::join(comm.order(), " "));
  }
  if (print && !a.json && a.duration <= 0) {
    fmt::print("# {:>12} {:>12} {:>9} {:>6} {:>5} {:>10} {:>8} {:>8} {:>7}  {}\n", "size", "count",
               "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "algo");
    fmt::print("# {:>12} {:>12} {:>9} {:>6} {:>5} {:>10} {:>8} {:>8} {:>7}\n", "(B)", "(elements)",
               "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }
  auto runOnce = [&](uint64_t count) {
    std::byte* ip = buf.in();
    std::byte* op = buf.out();
    const uint64_t block = count * es;
    switch (c) {
      case Collective::kAllreduce:
        comm.allreduce(ip, a.inPlace ? ip : op, count, res.type, res.op);
        break;
      case Collective::kAllgather:
        comm.allgather(a.inPlace ? op + block * static_cast<uint64_t>(me) : ip, op, count,
                       res.type);
        break;
      case Collective::kReduceScatter:
        comm.reduceScatter(ip, a.inPlace ? ip + block * static_cast<uint64_t>(me) : op, count,
                           res.type, res.op);
        break;
      case Collective::kBroadcast:
        comm.broadcast(ip, a.inPlace ? ip : op, count, res.type, a.root);
        break;
      case Collective::kReduce:
        comm.reduce(ip, a.inPlace ? ip : op, count, res.type, res.op, a.root);
        break;
      case Collective::kBarrier:
        comm.barrier();
        break;
    }
  };
  // Fills the inputs with the pattern, runs once, compares with the closed form: the wrong
  // elements of all ranks (collective: every rank learns the total).
  auto checkOnce = [&](uint64_t count) -> int64_t {
    // Fill with the pattern, run once, compare with the closed form; count wrong elements.
    const uint64_t inCount =
        c == Collective::kReduceScatter ? count * static_cast<uint64_t>(n) : count;
    const int src = c == Collective::kBroadcast ? a.root : me;
    for (uint64_t i = 0; i < inCount; ++i)
      coll::referenceInput(res.type, res.op, src, i, in.data() + i * es);
    if (a.inPlace && c == Collective::kAllgather)
      std::memcpy(out.data() + count * es * static_cast<uint64_t>(me), in.data(), count * es);
    buf.sync(/*toDevice=*/true);
    runOnce(count);
    buf.sync(/*toDevice=*/false);
    int64_t wrong = 0;
    std::vector<std::byte> want(es);
    auto cmp = [&](const std::byte* got) {
      if (std::memcmp(got, want.data(), es) != 0) ++wrong;
    };
    switch (c) {
      case Collective::kAllreduce:
      case Collective::kReduce: {
        if (c == Collective::kReduce && me != a.root) break;
        const std::byte* res0 = a.inPlace ? in.data() : out.data();
        for (uint64_t i = 0; i < count; ++i) {
          coll::referenceResult(res.type, res.op, n, i, want.data());
          cmp(res0 + i * es);
        }
        break;
      }
      case Collective::kReduceScatter: {
        const std::byte* res0 =
            a.inPlace ? in.data() + count * es * static_cast<uint64_t>(me) : out.data();
        for (uint64_t i = 0; i < count; ++i) {
          coll::referenceResult(res.type, res.op, n, static_cast<uint64_t>(me) * count + i,
                                want.data());
          cmp(res0 + i * es);
        }
        break;
      }
      case Collective::kAllgather:
        for (int rr = 0; rr < n; ++rr)
          for (uint64_t i = 0; i < count; ++i) {
            coll::referenceInput(res.type, res.op, rr, i, want.data());
            cmp(out.data() + (static_cast<uint64_t>(rr) * count + i) * es);
          }
        break;
      case Collective::kBroadcast: {
        const std::byte* res0 = a.inPlace ? in.data() : out.data();
        for (uint64_t i = 0; i < count; ++i) {
          coll::referenceInput(res.type, res.op, a.root, i, want.data());
          cmp(res0 + i * es);
        }
        break;
      }
      case Collective::kBarrier:
        break;
    }
    int64_t all = 0;
    comm.allreduce(&wrong, &all, 1, DataType::kInt64, ReduceOp::kSum);
    return all;
  };
  if (a.duration > 0) return benchDuration(comm, a, res, runOnce, checkOnce);
  double sumBusbw = 0, totalCpu = 0, totalGB = 0;
  int lines = 0;
  int64_t totalWrong = 0;
  for (uint64_t bytes : res.sizes) {
    const uint64_t count = countFor(c, bytes, es, n);
    const uint64_t size = count * es * perRank;  // bytes actually moved, as nccl-tests prints
    SizeResult r;
    r.bytes = size;
    r.count = count * perRank;
    for (int i = 0; i < a.warmup; ++i) runOnce(count);
    comm.barrier();
    double cpu0 = cpuSeconds();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.iters; ++i) runOnce(count);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.algo = std::string(coll::algorithmName(comm.lastSelection().algorithm));
    comm.barrier();
    double cpu = cpuSeconds() - cpu0;
    // The slowest rank's time and the CPU of all ranks.
    double stats[2] = {secs, cpuShared && me != 0 ? 0.0 : cpu};
    double maxSecs = 0, sumCpu = 0;
    comm.allreduce(&stats[0], &maxSecs, 1, DataType::kFloat64, ReduceOp::kMax);
    comm.allreduce(&stats[1], &sumCpu, 1, DataType::kFloat64, ReduceOp::kSum);
    r.us = maxSecs / a.iters * 1e6;
    r.algbw = r.us > 0 ? static_cast<double>(size) / (r.us * 1e-6) / 1e9 : 0;
    r.busbw = r.algbw * busFactor(c, n);
    totalCpu += sumCpu;
    totalGB += static_cast<double>(size) * a.iters / 1e9;
    if (a.check) {
      r.wrong = checkOnce(count);
      totalWrong += r.wrong;
    }
    sumBusbw += r.busbw;
    ++lines;
    if (!print) continue;
    const bool rooted = c == Collective::kBroadcast || c == Collective::kReduce;
    const bool reducing =
        c == Collective::kAllreduce || c == Collective::kReduceScatter || c == Collective::kReduce;
    if (a.json) {
      fmt::print(
          "{{\"collective\":\"{}\",\"ranks\":{},\"size\":{},\"count\":{},\"type\":\"{}\",\"redop\":"
          "\"{}\","
          "\"root\":{},\"time_us\":{:.3f},\"algbw_gbps\":{:.6f},\"busbw_gbps\":{:.6f},\"wrong\":{},"
          "\"algo\":\"{}\",\"cpu_s\":{:.6f}}}\n",
          coll::collectiveName(c), n, r.bytes, r.count, coll::dataTypeName(res.type),
          reducing ? coll::reduceOpName(res.op) : "none", rooted ? a.root : -1, r.us, r.algbw,
          r.busbw, r.wrong, r.algo, sumCpu);
    } else {
      fmt::print("  {:>12} {:>12} {:>9} {:>6} {:>5} {:>10.2f} {:>8.3f} {:>8.3f} {:>7}  {}\n",
                 r.bytes, r.count, coll::dataTypeName(res.type),
                 reducing ? coll::reduceOpName(res.op) : "none", rooted ? a.root : -1, r.us,
                 r.algbw, r.busbw, r.wrong < 0 ? std::string("N/A") : std::to_string(r.wrong),
                 r.algo);
    }
    std::fflush(stdout);
  }
  if (!print) return totalWrong;
  const double avg = lines ? sumBusbw / lines : 0;
  const double cpuPerGB = totalGB > 0 ? totalCpu / totalGB : 0;
  if (a.json) {
    fmt::print(
        "{{\"summary\":true,\"avg_busbw_gbps\":{:.6f},\"wrong\":{},\"cpu_s\":{:.6f},\"payload_gb\":"
        "{:.6f},"
        "\"cpu_s_per_gb\":{:.6f},\"fallbacks\":{}}}\n",
        avg, a.check ? totalWrong : -1, totalCpu, totalGB, cpuPerGB, comm.fallbacks());
  } else {
    fmt::print("# Out of bounds values : {} {}\n", a.check ? totalWrong : 0,
               !a.check          ? "(not checked)"
               : totalWrong == 0 ? "OK"
                                 : "FAILED");
    fmt::print("# CPU time (all ranks) : {:.3f} s for {:.3f} GB of payload: {:.3f} s/GB\n",
               totalCpu, totalGB, cpuPerGB);
    fmt::print("# Fallbacks            : {}\n", comm.fallbacks());
    fmt::print("# Avg bus bandwidth    : {:.4f}\n#\n", avg);
  }
  std::fflush(stdout);
  return totalWrong;
}

Resolved resolve(const BenchArgs& a, const Config& cfg) {
  Resolved r;
  auto coll = coll::parseCollective(a.collective);
  if (!coll || *coll == Collective::kBarrier)
    RANKMAP_THROW(InvalidInput,
                  "--collective {:?}: expected allreduce, allgather, reducescatter, broadcast or "
                  "reduce{}",
                  a.collective,
                  a.collective == "0" || a.collective == "1"
                      ? " (nccl-tests' -c 0/1 is --check here; -c is the collective)"
                      : "");
  r.collective = *coll;
  auto t = coll::parseDataType(a.dtype);
  if (!t)
    RANKMAP_THROW(InvalidInput,
                  "--dtype {:?}: expected int8, uint8, int32, uint32, int64, uint64, half, "
                  "bfloat16, float or double",
                  a.dtype);
  r.type = *t;
  auto op = coll::parseReduceOp(a.op);
  if (!op) RANKMAP_THROW(InvalidInput, "--op {:?}: expected sum, prod, min, max or avg", a.op);
  r.op = *op;
  auto lo = parseSize(a.minBytes), hi = parseSize(a.maxBytes);
  if (!lo) RANKMAP_THROW(InvalidInput, "-b {:?}: expected a size such as 8, 64K or 1M", a.minBytes);
  if (!hi) RANKMAP_THROW(InvalidInput, "-e {:?}: expected a size such as 32M or 1G", a.maxBytes);
  if (*hi < *lo) RANKMAP_THROW(InvalidInput, "-e {} is below -b {}", *hi, *lo);
  if (a.factor < 2) RANKMAP_THROW(InvalidInput, "-f {}: expected a factor of at least 2", a.factor);
  if (a.iters < 1 || a.warmup < 0)
    RANKMAP_THROW(InvalidInput, "--iters must be >= 1 and --warmup >= 0");
  for (uint64_t s = std::max<uint64_t>(*lo, 1); s <= *hi; s *= static_cast<uint64_t>(a.factor)) {
    r.sizes.push_back(s);
    if (s > UINT64_MAX / static_cast<uint64_t>(a.factor)) break;
  }
  if (*lo == 0) r.sizes.insert(r.sizes.begin(), 0);
  if (a.duration < 0 || !std::isfinite(a.duration))
    RANKMAP_THROW(InvalidInput, "--duration {}: expected seconds > 0", a.duration);
  if (a.duration > 0) {
    if (a.maxBytesGiven && *hi != *lo)
      RANKMAP_THROW(InvalidInput,
                    "--duration repeats one size: -b {} and -e {} differ (give -b only, or the "
                    "same size to both)",
                    a.minBytes, a.maxBytes);
    r.sizes = {std::max<uint64_t>(*lo, 1)};
  }
  r.options = coll::CommOptions::fromConfig(cfg);
  if (a.algo != "auto" || r.options.algorithm)
    r.options.algorithm = coll::parseAlgorithmOverride(
        a.algo == "auto" ? cfg.get(settings::kAlgo) : a.algo, "--algo");
  if (!a.plan.empty()) {
    r.plan = Plan::load(a.plan);  // an explicit --plan must be readable
    r.options.live.planFile = a.plan;  // and is watched like RANKMAP_PLAN (live re-planning)
  }
  else if (const std::string& path = cfg.get(settings::kPlan); !path.empty())
    r.planPath = path;  // RANKMAP_PLAN: a broken one means identity order, agreed by all ranks
  if (a.device != "host" && a.device != "cuda")
    RANKMAP_THROW(InvalidInput, "--device {:?}: expected host or cuda", a.device);
  r.cuda = a.device == "cuda";
#if RANKMAP_HAVE_CUDA
  if (r.cuda)
    if (std::string why = coll::cuda::unavailableReason(); !why.empty())
      RANKMAP_THROW(InvalidInput, "--device cuda: {}", why);
#else
  if (r.cuda) RANKMAP_THROW(InvalidInput, "--device cuda: this rankmap was built without CUDA");
#endif
  return r;
}

int runBench(const BenchArgs& a, const Config& cfg) {
  Resolved res = resolve(a, cfg);
  if (a.loopback > 0) {
    // Threads of one process share one plan: no agreement to make, but the same local checks.
    coll::LocalPlan local = res.plan ? coll::localPlanFrom(res.plan, 0, a.loopback, cfg)
                                     : coll::loadLocalPlan(res.planPath, 0, a.loopback, cfg);
    if (!local.plan && local.vote.status != PlanStatus::kNone)
      RANKMAP_WARN(Cli, "bench: identity order: {}", local.vote.reason);
    auto group = coll::transport::loopback::makeLoopbackGroup(a.loopback);
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(group.size());
    std::atomic<int64_t> wrong{0};
    for (size_t r = 0; r < group.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          coll::Communicator comm(*group[r], res.options, local.plan);
          int64_t w = benchRank(comm, a, res, /*cpuShared=*/true, "threads of one process");
          if (r == 0) wrong = w;
        } catch (...) {
          errors[r] = std::current_exception();
          group[r].reset();  // peers fail fast instead of waiting for their deadline
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    return wrong.load() == 0 ? 0 : 1;
  }
  coll::Rendezvous how = coll::rendezvousFromEnvironment(cfg);
  coll::LocalPlan local = res.plan ? coll::localPlanFrom(res.plan, how.rank, how.size, cfg)
                                   : coll::loadLocalPlan(res.planPath, how.rank, how.size, cfg);
  // Holds MPI (when the rendezvous loaded it) until the communicator is closed, also on errors.
  coll::Connection conn = coll::connectByRendezvous(how, cfg, res.options, std::move(local),
                                                    Deadline::after(res.options.timeout));
  const coll::Rendezvous& used = conn.rendezvous;
  int64_t wrong = benchRank(
      *conn.comm, a, res, /*cpuShared=*/false,
      used.kind == coll::RendezvousKind::kMpi
          ? fmt::format("rank from Open MPI, root {} by MPI_Bcast", used.root)
          : fmt::format("rank from {}, root {} from {}", used.source, used.root, used.rootSource));
  // Every rank learns the total through the check's allreduce: all exit alike.
  return wrong == 0 ? 0 : 1;
}

}  // namespace

void registerBenchCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  auto* cmd = app.add_subcommand(
      "bench",
      "Benchmark the collective engine like nccl-tests (one process per rank, or --loopback N)");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("-b,--minbytes", a->minBytes, "Smallest size (bytes; K/M/G suffixes)")
      ->capture_default_str();
  auto* maxOpt =
      cmd->add_option("-e,--maxbytes", a->maxBytes, "Largest size")->capture_default_str();
  cmd->add_option("-f,--stepfactor", a->factor, "Multiply the size by this between steps")
      ->capture_default_str();
  // Short options mean one thing in every subcommand (-o an output file, -c the collective), so
  // nccl-tests' -o (operation) and -c (check) are --op and --check here.
  cmd->add_option("--op", a->op, "Reduction: sum, prod, min, max, avg (nccl-tests' -o)")
      ->capture_default_str();
  cmd->add_option("-d,--dtype", a->dtype,
                  "Type: int8, uint8, int32, uint32, int64, uint64, half, bfloat16, float, double")
      ->capture_default_str();
  cmd->add_option("--algo", a->algo,
                  "Algorithm: auto, ring, tree, hier, rhd, trees (auto = plan, then defaults)")
      ->capture_default_str();
  cmd->add_option("--plan", a->plan,
                  "plan.json for rank order and algorithms (default: RANKMAP_PLAN)");
  cmd->add_option("-c,--collective", a->collective,
                  "allreduce, allgather, reducescatter, broadcast or reduce")
      ->capture_default_str();
  cmd->add_option("-n,--iters", a->iters, "Timed iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup", a->warmup, "Untimed iterations per size")->capture_default_str();
  cmd->add_option("-r,--root", a->root, "Root of broadcast and reduce")->capture_default_str();
  cmd->add_flag("--check", a->check,
                "Verify every element once per size (#wrong column; nccl-tests' -c)");
  cmd->add_flag("--inplace", a->inPlace, "Run in place (output == input)");
  cmd->add_flag("--json", a->json, "One JSON object per line instead of the table");
  cmd->add_option("--loopback", a->loopback, "Run N ranks as threads of this process over loopback")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--device", a->device,
                  "Where the buffers live: host, or cuda (GPU memory of the current device; "
                  "CUDA builds)")
      ->capture_default_str();
  cmd->add_option("--duration", a->duration,
                  "Repeat the one size -b for this many seconds, a row per second with the plan "
                  "in use (shows live re-planning)");
  cmd->callback([&ctx, &run, a, maxOpt] {
    a->maxBytesGiven = maxOpt->count() > 0;
    run = [&ctx, a] { return runBench(*a, ctx.config); };
  });
}

}  // namespace rankmap::cli
