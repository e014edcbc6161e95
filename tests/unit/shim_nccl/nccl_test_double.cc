// TEST DOUBLE of NCCL, built as libnccl.so.2 (see nccl_test_double.h for what it reproduces).
// It is not NCCL: it exists so that librankmap_nccl.so's translations can be checked on a
// machine without GPUs. Every exported pncclX is the implementation; ncclX is a weak alias of it,
// as in real NCCL.
#include "tests/unit/shim_nccl/nccl_test_double.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>

#include "tests/unit/shim_nccl/nccl_api.h"

namespace abi = rankmap::shim_nccl::abi;
using abi::Result;

// From cuda_driver_test_double (libcuda.so.1), which this library links.
extern "C" int cuCtxGetCurrent(void** ctx);

namespace rankmap::testing::nccl_double {
namespace {

struct World;

struct Op {
  enum class Kind {
    AllReduce,
    Reduce,
    Broadcast,
    AllGather,
    ReduceScatter,
    AlltoAll,
    Gather,
    Scatter,
    Split,
    Shrink
  };
  Kind kind = Kind::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  int dt = 0;
  int op = 0;
  int root = 0;
  int color = 0;
  int key = 0;
  std::vector<int> exclude = {};
  ncclComm** out = nullptr;
};

struct Flag {
  bool done = false;
  Result result = abi::kSuccess;
};

struct P2p {
  const void* sendBuf = nullptr;
  void* recvBuf = nullptr;
  size_t bytes = 0;
  std::shared_ptr<Flag> flag;
};

struct Slot {
  std::vector<std::optional<Op>> ops;
  int arrived = 0;
  int needed = 0;
  int waited = 0;
  bool done = false;
  Result result = abi::kSuccess;
};

}  // namespace
}  // namespace rankmap::testing::nccl_double

namespace nd = rankmap::testing::nccl_double;

// The double's communicator (NCCL's is opaque; this one is ours).
struct ncclComm {
  std::shared_ptr<nd::World> world;
  int rank = -1;
  int n = 0;
  bool blocking = true;
  void* context = nullptr;
  std::atomic<int> async{abi::kSuccess};
  uint64_t seq = 0;
};

namespace rankmap::testing::nccl_double {
namespace {

struct World {
  int n = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ncclComm*> members;
  int joined = 0;
  bool failed = false;
  std::string why;
  std::map<uint64_t, Slot> slots;
  std::map<std::pair<int, int>, std::deque<P2p>> sends;  // (src, dst) -> unmatched sends
  std::map<std::pair<int, int>, std::deque<P2p>> recvs;  // (src, dst) -> unmatched receives
};

std::mutex gMu;
std::vector<Call> gCalls;
std::map<uint64_t, std::shared_ptr<World>> gWorlds;  // by unique-id magic, until all joined
std::atomic<int> gLiveComms{0};
std::atomic<int> gHelpers{0};
std::atomic<int64_t> gAsyncDelayMs{30};
// Real NCCL embeds this string (VERSION_STRING); `rankmap doctor` reads the version from it.
[[maybe_unused]] __attribute__((used)) const char kVersionString[] = "NCCL version 2.28.9+double";

void record(Call c) {
  void* ctx = nullptr;
  cuCtxGetCurrent(&ctx);
  c.context = ctx;
  std::lock_guard<std::mutex> lock(gMu);
  gCalls.push_back(std::move(c));
}

Call callOf(const char* fn, const ncclComm* comm) {
  Call c;
  c.fn = fn;
  if (comm != nullptr) {
    c.rank = comm->rank;
    c.nranks = comm->n;
  }
  return c;
}

void failWorld(World& w, std::string why) {
  if (!w.failed) {
    w.failed = true;
    w.why = std::move(why);
    std::fprintf(stderr, "nccl_test_double: world failed: %s\n", w.why.c_str());
  }
  w.cv.notify_all();
}

std::chrono::steady_clock::time_point waitLimit() {
  return std::chrono::steady_clock::now() + kDoubleWait;
}

// --- reductions on host memory ------------------------------------------------------------------

// op(a, b), computed in the unsigned type for integers: it wraps around like the GPU, without
// signed-overflow UB.
template <typename T, typename Op>
T wrapping(T a, T b, Op op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(op(U(a), U(b)));
  } else {
    return op(a, b);
  }
}

template <typename T>
void reduceTyped(T* acc, const T* in, size_t count, int op) {
  for (size_t i = 0; i < count; ++i) {
    switch (op) {
      case abi::kSum:
      case abi::kAvg:
        acc[i] = wrapping(acc[i], in[i], std::plus<>{});
        break;
      case abi::kProd:
        acc[i] = wrapping(acc[i], in[i], std::multiplies<>{});
        break;
      case abi::kMax:
        acc[i] = std::max(acc[i], in[i]);
        break;
      case abi::kMin:
        acc[i] = std::min(acc[i], in[i]);
        break;
    }
  }
}

template <typename T>
void divideTyped(T* acc, size_t count, int n) {
  for (size_t i = 0; i < count; ++i) acc[i] = static_cast<T>(acc[i] / static_cast<T>(n));
}

// Calls f(T{}) with the element type of `dt` and returns true; returns false without calling for
// a type the double does not reduce (fp16, bf16, fp8, unknown).
template <typename F>
bool dispatch(int dt, F&& f) {
  switch (dt) {
    case abi::kInt8:
      f(int8_t{});
      return true;
    case abi::kUint8:
      f(uint8_t{});
      return true;
    case abi::kInt32:
      f(int32_t{});
      return true;
    case abi::kUint32:
      f(uint32_t{});
      return true;
    case abi::kInt64:
      f(int64_t{});
      return true;
    case abi::kUint64:
      f(uint64_t{});
      return true;
    case abi::kFloat32:
      f(float{});
      return true;
    case abi::kFloat64:
      f(double{});
      return true;
    default:
      return false;
  }
}

bool reducible(int dt, int op) {
  return op >= 0 && op < abi::kNumOps && dispatch(dt, [](auto) {});
}

// acc = reduction over `inputs` in rank order.
void reduceAll(std::vector<char>& acc, const std::vector<const char*>& inputs, size_t count, int dt,
               int op) {
  const size_t bytes = count * abi::dataTypeSize(dt);
  acc.assign(inputs[0], inputs[0] + bytes);
  for (size_t r = 1; r < inputs.size(); ++r)
    dispatch(dt, [&](auto zero) {
      using T = decltype(zero);
      reduceTyped(reinterpret_cast<T*>(acc.data()), reinterpret_cast<const T*>(inputs[r]), count,
                  op);
    });
  if (op == abi::kAvg)
    dispatch(dt, [&](auto zero) {
      using T = decltype(zero);
      divideTyped(reinterpret_cast<T*>(acc.data()), count, static_cast<int>(inputs.size()));
    });
}

// --- executing one collective (by the last rank to arrive, under the world's lock) --------------

std::shared_ptr<World> makeChildWorld(const std::vector<ncclComm*>& parents, bool blocking,
                                      const std::vector<ncclComm**>& outs) {
  auto w = std::make_shared<World>();
  w->n = static_cast<int>(parents.size());
  for (int i = 0; i < w->n; ++i) {
    auto* c = new ncclComm();
    c->world = w;
    c->rank = i;
    c->n = w->n;
    c->blocking = blocking;
    c->context = parents[static_cast<size_t>(i)]->context;
    gLiveComms.fetch_add(1);
    w->members.push_back(c);
    *outs[static_cast<size_t>(i)] = c;
  }
  w->joined = w->n;
  return w;
}

Result execute(World& w, Slot& s) {
  // Ranks that ncclCommShrink excludes do not call: the first present op describes the step.
  const Op& first =
      **std::find_if(s.ops.begin(), s.ops.end(), [](const auto& o) { return o.has_value(); });
  const int n = w.n;
  auto op = [&](int r) -> const Op& { return *s.ops[static_cast<size_t>(r)]; };
  const size_t esz = abi::dataTypeSize(first.dt);
  const size_t bytes = first.count * esz;
  using K = Op::Kind;
  switch (first.kind) {
    case K::AllReduce:
    case K::Reduce: {
      std::vector<const char*> in;
      for (int r = 0; r < n; ++r) in.push_back(static_cast<const char*>(op(r).send));
      std::vector<char> acc;
      reduceAll(acc, in, first.count, first.dt, first.op);
      for (int r = 0; r < n; ++r)
        if (first.kind == K::AllReduce || r == first.root)
          std::memcpy(op(r).recv, acc.data(), bytes);
      return abi::kSuccess;
    }
    case K::Broadcast: {
      std::vector<char> tmp(static_cast<const char*>(op(first.root).send),
                            static_cast<const char*>(op(first.root).send) + bytes);
      for (int r = 0; r < n; ++r) std::memcpy(op(r).recv, tmp.data(), bytes);
      return abi::kSuccess;
    }
    case K::AllGather:
    case K::Gather: {
      std::vector<char> tmp(bytes * static_cast<size_t>(n));
      for (int r = 0; r < n; ++r)
        std::memcpy(tmp.data() + static_cast<size_t>(r) * bytes, op(r).send, bytes);
      for (int r = 0; r < n; ++r)
        if (first.kind == K::AllGather || r == first.root)
          std::memcpy(op(r).recv, tmp.data(), tmp.size());
      return abi::kSuccess;
    }
    case K::ReduceScatter: {
      std::vector<std::vector<char>> results(static_cast<size_t>(n));
      for (int b = 0; b < n; ++b) {
        std::vector<const char*> in;
        for (int r = 0; r < n; ++r)
          in.push_back(static_cast<const char*>(op(r).send) + static_cast<size_t>(b) * bytes);
        reduceAll(results[static_cast<size_t>(b)], in, first.count, first.dt, first.op);
      }
      for (int r = 0; r < n; ++r)
        std::memcpy(op(r).recv, results[static_cast<size_t>(r)].data(), bytes);
      return abi::kSuccess;
    }
    case K::AlltoAll: {
      std::vector<std::vector<char>> tmp(static_cast<size_t>(n));
      for (int dst = 0; dst < n; ++dst) {
        tmp[static_cast<size_t>(dst)].resize(bytes * static_cast<size_t>(n));
        for (int src = 0; src < n; ++src)
          std::memcpy(tmp[static_cast<size_t>(dst)].data() + static_cast<size_t>(src) * bytes,
                      static_cast<const char*>(op(src).send) + static_cast<size_t>(dst) * bytes,
                      bytes);
      }
      for (int r = 0; r < n; ++r)
        std::memcpy(op(r).recv, tmp[static_cast<size_t>(r)].data(), bytes * static_cast<size_t>(n));
      return abi::kSuccess;
    }
    case K::Scatter: {
      std::vector<char> tmp(
          static_cast<const char*>(op(first.root).send),
          static_cast<const char*>(op(first.root).send) + bytes * static_cast<size_t>(n));
      for (int r = 0; r < n; ++r)
        std::memcpy(op(r).recv, tmp.data() + static_cast<size_t>(r) * bytes, bytes);
      return abi::kSuccess;
    }
    case K::Split: {
      std::map<int, std::vector<std::pair<int, int>>> byColor;  // color -> (key, parent rank)
      for (int r = 0; r < n; ++r) {
        if (op(r).color == abi::kSplitNoColor) {
          *op(r).out = nullptr;
          continue;
        }
        byColor[op(r).color].push_back({op(r).key, r});
      }
      for (auto& [color, members] : byColor) {
        std::sort(members.begin(), members.end());
        std::vector<ncclComm*> parents;
        std::vector<ncclComm**> outs;
        for (auto& [key, r] : members) {
          parents.push_back(w.members[static_cast<size_t>(r)]);
          outs.push_back(op(r).out);
        }
        makeChildWorld(parents, w.members[0]->blocking, outs);
      }
      return abi::kSuccess;
    }
    case K::Shrink: {
      std::vector<ncclComm*> parents;
      std::vector<ncclComm**> outs;
      for (int r = 0; r < n; ++r) {
        if (!s.ops[static_cast<size_t>(r)]) continue;  // excluded ranks do not call
        parents.push_back(w.members[static_cast<size_t>(r)]);
        outs.push_back(op(r).out);
      }
      makeChildWorld(parents, w.members[0]->blocking, outs);
      return abi::kSuccess;
    }
  }
  return abi::kInternalError;
}

// --- tickets: depositing work and waiting for it ------------------------------------------------

struct Ticket {
  std::shared_ptr<World> world;
  uint64_t seq = 0;
  std::shared_ptr<Flag> flag;  // p2p
};

bool sameShape(const Op& a, const Op& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == Op::Kind::Split || a.kind == Op::Kind::Shrink) return true;
  return a.count == b.count && a.dt == b.dt && a.op == b.op && a.root == b.root;
}

Ticket depositCollective(ncclComm* comm, Op op) {
  World& w = *comm->world;
  std::lock_guard<std::mutex> lock(w.mu);
  Ticket t{comm->world, comm->seq++, nullptr};
  Slot& s = w.slots[t.seq];
  if (s.ops.empty()) {
    s.ops.resize(static_cast<size_t>(w.n));
    s.needed = op.kind == Op::Kind::Shrink ? w.n - static_cast<int>(op.exclude.size()) : w.n;
  }
  if (s.ops[static_cast<size_t>(comm->rank)]) {
    failWorld(w, "rank " + std::to_string(comm->rank) + " deposited twice");
    return t;
  }
  for (const auto& other : s.ops)
    if (other && !sameShape(*other, op)) {
      failWorld(w, "ranks called different collectives (or counts/roots) at the same step");
      return t;
    }
  s.ops[static_cast<size_t>(comm->rank)] = std::move(op);
  if (++s.arrived == s.needed) {
    s.result = execute(w, s);
    s.done = true;
    w.cv.notify_all();
  }
  return t;
}

Ticket depositP2p(ncclComm* comm, bool isSend, const void* sendBuf, void* recvBuf, size_t bytes,
                  int peer) {
  World& w = *comm->world;
  std::lock_guard<std::mutex> lock(w.mu);
  auto flag = std::make_shared<Flag>();
  P2p mine{sendBuf, recvBuf, bytes, flag};
  auto key = isSend ? std::make_pair(comm->rank, peer) : std::make_pair(peer, comm->rank);
  auto& other = isSend ? w.recvs[key] : w.sends[key];
  if (other.empty()) {
    (isSend ? w.sends[key] : w.recvs[key]).push_back(mine);
  } else {
    P2p match = other.front();
    other.pop_front();
    const P2p& s = isSend ? mine : match;
    const P2p& r = isSend ? match : mine;
    if (s.bytes != r.bytes) {
      failWorld(w, "send/recv size mismatch");
    } else {
      std::memcpy(r.recvBuf, s.sendBuf, s.bytes);
    }
    s.flag->done = true;
    r.flag->done = true;
    w.cv.notify_all();
  }
  return Ticket{comm->world, 0, flag};
}

Result wait(const Ticket& t) {
  World& w = *t.world;
  std::unique_lock<std::mutex> lock(w.mu);
  if (t.flag) {
    if (!w.cv.wait_until(lock, waitLimit(), [&] { return t.flag->done || w.failed; })) {
      failWorld(w, "send/recv not matched in time");
    }
    return w.failed ? abi::kInvalidUsage : abi::kSuccess;
  }
  auto it = w.slots.find(t.seq);
  if (it == w.slots.end()) return w.failed ? abi::kInvalidUsage : abi::kInternalError;
  Slot& s = it->second;
  if (!w.cv.wait_until(lock, waitLimit(), [&] { return s.done || w.failed; })) {
    failWorld(w, "collective step " + std::to_string(t.seq) + " incomplete after the deadline");
    return abi::kSystemError;
  }
  if (w.failed) return abi::kInvalidUsage;
  Result r = s.result;
  if (++s.waited == s.needed) w.slots.erase(it);
  return r;
}

// --- joining worlds -----------------------------------------------------------------------------

uint64_t idKey(const abi::UniqueId& id) {
  uint64_t k = 0;
  std::memcpy(&k, id.internal, sizeof(k));
  return k;
}

Result join(ncclComm* comm, uint64_t key, int n, int rank) {
  std::shared_ptr<World> w;
  {
    std::lock_guard<std::mutex> lock(gMu);
    auto& slot = gWorlds[key];
    if (!slot) {
      slot = std::make_shared<World>();
      slot->n = n;
      slot->members.assign(static_cast<size_t>(n), nullptr);
    }
    w = slot;
  }
  comm->world = w;
  std::lock_guard<std::mutex> lock(w->mu);
  if (w->n != n) {
    failWorld(*w, "ranks disagree on the world size");
    return abi::kInvalidUsage;
  }
  if (w->members[static_cast<size_t>(rank)] != nullptr) {
    failWorld(*w, "rank " + std::to_string(rank) + " joined twice");
    return abi::kInvalidUsage;
  }
  w->members[static_cast<size_t>(rank)] = comm;
  if (++w->joined == n) {
    std::lock_guard<std::mutex> glock(gMu);
    gWorlds.erase(key);
    w->cv.notify_all();
  }
  return abi::kSuccess;
}

Result waitJoined(ncclComm* comm) {
  World& w = *comm->world;
  std::unique_lock<std::mutex> lock(w.mu);
  if (!w.cv.wait_until(lock, waitLimit(), [&] { return w.joined == w.n || w.failed; })) {
    failWorld(w, "not every rank joined before the deadline");
    return abi::kSystemError;
  }
  return w.failed ? abi::kInvalidUsage : abi::kSuccess;
}

// --- groups and non-blocking work ---------------------------------------------------------------

struct Work {
  ncclComm* comm = nullptr;
  bool p2p = false;
  bool isSend = false;
  const void* sendBuf = nullptr;
  void* recvBuf = nullptr;
  size_t bytes = 0;
  int peer = 0;
  Op op = {};
};

struct InitWork {
  ncclComm* comm = nullptr;
  uint64_t key = 0;
  int n = 0;
  int rank = 0;
};

struct GroupState {
  int depth = 0;
  std::vector<Work> work;
  std::vector<InitWork> inits;
};

GroupState& group() {
  thread_local GroupState g;
  return g;
}

Result runWork(const std::vector<Work>& work) {
  std::vector<Ticket> tickets;
  for (const auto& wk : work)
    tickets.push_back(
        wk.p2p ? depositP2p(wk.comm, wk.isSend, wk.sendBuf, wk.recvBuf, wk.bytes, wk.peer)
               : depositCollective(wk.comm, wk.op));
  Result r = abi::kSuccess;
  for (const auto& t : tickets) {
    Result x = wait(t);
    if (r == abi::kSuccess) r = x;
  }
  return r;
}

Result runInits(const std::vector<InitWork>& inits) {
  Result r = abi::kSuccess;
  for (const auto& i : inits) {
    Result x = join(i.comm, i.key, i.n, i.rank);
    if (r == abi::kSuccess) r = x;
  }
  if (r != abi::kSuccess) return r;
  for (const auto& i : inits) {
    Result x = waitJoined(i.comm);
    if (r == abi::kSuccess) r = x;
  }
  return r;
}

// Runs `fn` on a helper thread after the async delay, with every comm in `comms` reporting
// ncclInProgress until it is done. Fails with ncclInvalidUsage if one is still in progress.
template <typename Fn>
Result launchAsync(const std::vector<ncclComm*>& comms, Fn fn) {
  for (auto* c : comms)
    if (c->async.load() == abi::kInProgress) {
      std::fprintf(stderr,
                   "nccl_test_double: call on a non-blocking communicator still in progress\n");
      return abi::kInvalidUsage;
    }
  for (auto* c : comms) c->async.store(abi::kInProgress);
  gHelpers.fetch_add(1);
  std::thread([comms, fn = std::move(fn)] {
    std::this_thread::sleep_for(std::chrono::milliseconds(gAsyncDelayMs.load()));
    Result r = fn();
    for (auto* c : comms) c->async.store(r);
    gHelpers.fetch_sub(1);
  }).detach();
  return abi::kInProgress;
}

std::vector<ncclComm*> nonBlockingComms(const std::vector<Work>& work,
                                        const std::vector<InitWork>& inits) {
  std::vector<ncclComm*> out;
  for (const auto& w : work)
    if (!w.comm->blocking && std::find(out.begin(), out.end(), w.comm) == out.end())
      out.push_back(w.comm);
  for (const auto& i : inits)
    if (!i.comm->blocking && std::find(out.begin(), out.end(), i.comm) == out.end())
      out.push_back(i.comm);
  return out;
}

// Ungrouped work runs now (blocking comm) or on a helper (non-blocking); grouped work waits.
Result submit(Work w) {
  GroupState& g = group();
  if (g.depth > 0) {
    g.work.push_back(std::move(w));
    return abi::kSuccess;
  }
  if (!w.comm->blocking) {
    std::vector<Work> one{w};
    return launchAsync({w.comm}, [one] { return runWork(one); });
  }
  return runWork({w});
}

// Process mode (nccl_test_double.h), read once.
bool processMode() {
  static const bool on = [] {
    const char* v = std::getenv("RANKMAP_NCCL_DOUBLE_PROCESS");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

Result checkComm(ncclComm* comm) {
  if (comm == nullptr) return abi::kInvalidArgument;
  if (processMode() && comm->world == nullptr) {
    std::fprintf(stderr, "nccl_test_double: process mode moves no data between processes\n");
    return abi::kInvalidUsage;
  }
  if (!comm->blocking && comm->async.load() == abi::kInProgress) {
    std::fprintf(stderr, "nccl_test_double: call on a non-blocking communicator in progress\n");
    return abi::kInvalidUsage;
  }
  return abi::kSuccess;
}

// Records a data-moving call: `root` is the root or peer as received (-1 if none).
void recordData(const char* fn, const ncclComm* comm, int root, size_t count, const void* send,
                void* recv) {
  Call c = callOf(fn, comm);
  c.root = root;
  c.count = count;
  c.send = send;
  c.recv = recv;
  record(c);
}

// Every data collective (not split/shrink), recorded as `fn`: record, check the arguments as
// NCCL does, submit. Unrooted collectives leave op.root at 0, which is always in range.
Result collective(const char* fn, Op::Kind kind, ncclComm* comm, Op op) {
  if (Result r = checkComm(comm); r != abi::kSuccess) return r;
  op.kind = kind;
  recordData(fn, comm, op.root, op.count, op.send, op.recv);
  if (abi::dataTypeSize(op.dt) == 0) return abi::kInvalidArgument;
  if (op.root < 0 || op.root >= comm->n) return abi::kInvalidArgument;
  if ((op.kind == Op::Kind::AllReduce || op.kind == Op::Kind::Reduce ||
       op.kind == Op::Kind::ReduceScatter) &&
      !reducible(op.dt, op.op))
    return abi::kInvalidArgument;
  return submit(Work{.comm = comm, .op = std::move(op)});
}

Result p2p(const char* fn, ncclComm* comm, bool isSend, const void* sendBuf, void* recvBuf,
           size_t count, int dt, int peer) {
  if (Result r = checkComm(comm); r != abi::kSuccess) return r;
  recordData(fn, comm, peer, count, sendBuf, recvBuf);
  if (peer < 0 || peer >= comm->n || abi::dataTypeSize(dt) == 0) return abi::kInvalidArgument;
  return submit(Work{.comm = comm,
                     .p2p = true,
                     .isSend = isSend,
                     .sendBuf = sendBuf,
                     .recvBuf = recvBuf,
                     .bytes = count * abi::dataTypeSize(dt),
                     .peer = peer});
}

// Process mode's init: the other ranks are other processes; returns when all n have arrived.
Result processBarrier(uint64_t key, int n, int rank) {
  const char* dir = std::getenv("RANKMAP_NCCL_DOUBLE_DIR");
  if (dir == nullptr || *dir == '\0') {
    std::fprintf(stderr, "nccl_test_double: process mode needs RANKMAP_NCCL_DOUBLE_DIR\n");
    return abi::kInvalidUsage;
  }
  auto file = [&](int r) {
    return std::string(dir) + "/init-" + std::to_string(key) + "-" + std::to_string(r);
  };
  if (std::FILE* f = std::fopen(file(rank).c_str(), "w"); f != nullptr) {
    std::fclose(f);
  } else {
    std::fprintf(stderr, "nccl_test_double: cannot write %s\n", file(rank).c_str());
    return abi::kSystemError;
  }
  const auto limit = waitLimit();
  for (int r = 0; r < n;) {
    if (std::FILE* f = std::fopen(file(r).c_str(), "r"); f != nullptr) {
      std::fclose(f);
      ++r;
      continue;
    }
    if (std::chrono::steady_clock::now() > limit) {
      std::fprintf(stderr, "nccl_test_double: rank %d never called init\n", r);
      return abi::kSystemError;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return abi::kSuccess;
}

Result initRank(const char* fn, ncclComm** out, int n, const abi::UniqueId& id, int rank,
                const void* config) {
  Call c;
  c.fn = fn;
  c.rank = rank;
  c.nranks = n;
  record(c);
  if (out == nullptr || n < 1 || rank < 0 || rank >= n) return abi::kInvalidArgument;
  auto* comm = new ncclComm();
  gLiveComms.fetch_add(1);
  comm->rank = rank;
  comm->n = n;
  cuCtxGetCurrent(&comm->context);
  if (config != nullptr) {
    const auto* prefix = static_cast<const abi::ConfigPrefix*>(config);
    if (prefix->magic != abi::kConfigMagic) return abi::kInvalidArgument;
    comm->blocking = prefix->blocking != 0;
  }
  *out = comm;
  if (processMode()) return processBarrier(idKey(id), n, rank);
  InitWork iw{comm, idKey(id), n, rank};
  GroupState& g = group();
  if (g.depth > 0) {
    g.inits.push_back(iw);
    return abi::kSuccess;
  }
  if (!comm->blocking) return launchAsync({comm}, [iw] { return runInits({iw}); });
  return runInits({iw});
}

}  // namespace

std::vector<Call> calls() {
  std::lock_guard<std::mutex> lock(gMu);
  return gCalls;
}

void resetCalls() {
  std::lock_guard<std::mutex> lock(gMu);
  gCalls.clear();
}

void setAsyncDelay(std::chrono::milliseconds delay) { gAsyncDelayMs.store(delay.count()); }

int liveComms() { return gLiveComms.load(); }

int liveHelpers() { return gHelpers.load(); }

}  // namespace rankmap::testing::nccl_double

// --- the exported C ABI -------------------------------------------------------------------------

using nd::Op;
using K = nd::Op::Kind;
using nccl_api::Comm;
using nccl_api::DataType;
using nccl_api::RedOp;
using nccl_api::Stream;
using nccl_api::UniqueId;

#define RANKMAP_DOUBLE_EXPORT extern "C" __attribute__((visibility("default")))

RANKMAP_DOUBLE_EXPORT Result pncclGetVersion(int* version) {
  *version = 22809;
  return abi::kSuccess;
}

RANKMAP_DOUBLE_EXPORT Result pncclGetUniqueId(UniqueId* id) {
  static std::atomic<uint64_t> counter{1};
  static const uint64_t salt = std::random_device{}();
  std::memset(id->internal, 0, sizeof(id->internal));
  uint64_t key = (salt << 20) ^ counter.fetch_add(1);
  std::memcpy(id->internal, &key, sizeof(key));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(1);
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const char* root = std::getenv("RANKMAP_NCCL_DOUBLE_ROOT");
  if (root != nullptr && nd::processMode())
    if (inet_pton(AF_INET, root, &sin.sin_addr) != 1) return abi::kInvalidArgument;
  std::memcpy(id->internal + 8, &sin, sizeof(sin));
  nd::Call c;
  c.fn = "ncclGetUniqueId";
  nd::record(c);
  return abi::kSuccess;
}

RANKMAP_DOUBLE_EXPORT Result pncclCommInitRank(Comm* comm, int nranks, UniqueId id, int rank) {
  return nd::initRank("ncclCommInitRank", comm, nranks, id, rank, nullptr);
}

RANKMAP_DOUBLE_EXPORT Result pncclCommInitRankConfig(Comm* comm, int nranks, UniqueId id, int rank,
                                                     void* config) {
  return nd::initRank("ncclCommInitRankConfig", comm, nranks, id, rank, config);
}

RANKMAP_DOUBLE_EXPORT Result pncclCommInitRankScalable(Comm* comm, int nranks, int rank, int nIds,
                                                       UniqueId* ids, void* config) {
  if (nIds < 1 || ids == nullptr) return abi::kInvalidArgument;
  return nd::initRank("ncclCommInitRankScalable", comm, nranks, ids[0], rank, config);
}

RANKMAP_DOUBLE_EXPORT Result pncclCommInitAll(Comm* comms, int ndev, const int*) {
  UniqueId id;
  // Through the global symbol, as NCCL does: a preloaded shim sees this nested call.
  if (Result r = ncclGetUniqueId(&id); r != abi::kSuccess) return r;
  if (Result r = pncclGroupStart(); r != abi::kSuccess) return r;
  for (int i = 0; i < ndev; ++i) pncclCommInitRank(comms + i, ndev, id, i);
  return pncclGroupEnd();
}

RANKMAP_DOUBLE_EXPORT Result pncclCommSplit(Comm comm, int color, int key, Comm* newcomm, void*) {
  if (Result r = nd::checkComm(comm); r != abi::kSuccess) return r;
  nd::Call c = nd::callOf("ncclCommSplit", comm);
  c.color = color;
  c.key = key;
  nd::record(c);
  return nd::submit(
      {.comm = comm, .op = {.kind = K::Split, .color = color, .key = key, .out = newcomm}});
}

RANKMAP_DOUBLE_EXPORT Result pncclCommShrink(Comm comm, int* exclude, int excludeCount,
                                             Comm* newcomm, void*, int) {
  if (Result r = nd::checkComm(comm); r != abi::kSuccess) return r;
  nd::Call c = nd::callOf("ncclCommShrink", comm);
  c.count = static_cast<size_t>(excludeCount);
  nd::record(c);
  Op op{.kind = K::Shrink, .exclude = {exclude, exclude + excludeCount}, .out = newcomm};
  for (int x : op.exclude)
    if (x == comm->rank) return abi::kInvalidUsage;  // excluded ranks do not call
  return nd::submit({.comm = comm, .op = std::move(op)});
}

namespace {
Result destroy(const char* fn, Comm comm) {
  if (comm == nullptr) return abi::kInvalidArgument;
  nd::record(nd::callOf(fn, comm));
  // Bounded wait for this comm's helper thread, which still uses it.
  auto limit = nd::waitLimit();
  while (comm->async.load() == abi::kInProgress && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (comm->async.load() == abi::kInProgress) return abi::kInvalidUsage;
  delete comm;
  nd::gLiveComms.fetch_sub(1);
  return abi::kSuccess;
}
}  // namespace

RANKMAP_DOUBLE_EXPORT Result pncclCommDestroy(Comm comm) {
  return destroy("ncclCommDestroy", comm);
}

RANKMAP_DOUBLE_EXPORT Result pncclCommAbort(Comm comm) { return destroy("ncclCommAbort", comm); }

RANKMAP_DOUBLE_EXPORT Result pncclCommUserRank(Comm comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return abi::kInvalidArgument;
  *rank = comm->rank;
  return abi::kSuccess;
}

RANKMAP_DOUBLE_EXPORT Result pncclCommCount(Comm comm, int* count) {
  if (comm == nullptr || count == nullptr) return abi::kInvalidArgument;
  *count = comm->n;
  return abi::kSuccess;
}

RANKMAP_DOUBLE_EXPORT Result pncclCommGetAsyncError(Comm comm, Result* state) {
  if (comm == nullptr || state == nullptr) return abi::kInvalidArgument;
  *state = static_cast<Result>(comm->async.load());
  return abi::kSuccess;
}

RANKMAP_DOUBLE_EXPORT Result pncclGroupStart() {
  ++nd::group().depth;
  return abi::kSuccess;
}

RANKMAP_DOUBLE_EXPORT Result pncclGroupEnd() {
  nd::GroupState& g = nd::group();
  if (g.depth == 0) return abi::kInvalidUsage;
  if (--g.depth > 0) return abi::kSuccess;
  std::vector<nd::Work> work = std::move(g.work);
  std::vector<nd::InitWork> inits = std::move(g.inits);
  g.work.clear();
  g.inits.clear();
  nd::record(nd::callOf("ncclGroupEnd", nullptr));
  auto async = nd::nonBlockingComms(work, inits);
  if (!async.empty()) {
    return nd::launchAsync(async, [work, inits] {
      Result r = nd::runInits(inits);
      return r != abi::kSuccess ? r : nd::runWork(work);
    });
  }
  Result r = nd::runInits(inits);
  return r != abi::kSuccess ? r : nd::runWork(work);
}

RANKMAP_DOUBLE_EXPORT Result pncclGroupSimulateEnd(void*) {
  nd::GroupState& g = nd::group();
  if (g.depth == 0) return abi::kInvalidUsage;
  if (--g.depth == 0) {
    g.work.clear();
    g.inits.clear();
  }
  return abi::kSuccess;
}

// The collectives: one Op each, checked and run by nd::collective().
RANKMAP_DOUBLE_EXPORT Result pncclAllReduce(const void* send, void* recv, size_t count, DataType dt,
                                            RedOp op, Comm comm, Stream) {
  return nd::collective("ncclAllReduce", K::AllReduce, comm,
                        {.send = send, .recv = recv, .count = count, .dt = dt, .op = op});
}

RANKMAP_DOUBLE_EXPORT Result pncclReduce(const void* send, void* recv, size_t count, DataType dt,
                                         RedOp op, int root, Comm comm, Stream) {
  return nd::collective(
      "ncclReduce", K::Reduce, comm,
      {.send = send, .recv = recv, .count = count, .dt = dt, .op = op, .root = root});
}

RANKMAP_DOUBLE_EXPORT Result pncclBroadcast(const void* send, void* recv, size_t count, DataType dt,
                                            int root, Comm comm, Stream) {
  return nd::collective("ncclBroadcast", K::Broadcast, comm,
                        {.send = send, .recv = recv, .count = count, .dt = dt, .root = root});
}

RANKMAP_DOUBLE_EXPORT Result pncclBcast(void* buf, size_t count, DataType dt, int root, Comm comm,
                                        Stream stream) {
  nd::recordData("ncclBcast", comm, root, count, nullptr, nullptr);
  // Real NCCL implements ncclBcast by calling ncclBroadcast through its global symbol.
  return ncclBroadcast(buf, buf, count, dt, root, comm, stream);
}

RANKMAP_DOUBLE_EXPORT Result pncclReduceScatter(const void* send, void* recv, size_t recvCount,
                                                DataType dt, RedOp op, Comm comm, Stream) {
  return nd::collective("ncclReduceScatter", K::ReduceScatter, comm,
                        {.send = send, .recv = recv, .count = recvCount, .dt = dt, .op = op});
}

RANKMAP_DOUBLE_EXPORT Result pncclAllGather(const void* send, void* recv, size_t sendCount,
                                            DataType dt, Comm comm, Stream) {
  return nd::collective("ncclAllGather", K::AllGather, comm,
                        {.send = send, .recv = recv, .count = sendCount, .dt = dt});
}

RANKMAP_DOUBLE_EXPORT Result pncclAlltoAll(const void* send, void* recv, size_t count, DataType dt,
                                           Comm comm, Stream) {
  return nd::collective("ncclAlltoAll", K::AlltoAll, comm,
                        {.send = send, .recv = recv, .count = count, .dt = dt});
}

RANKMAP_DOUBLE_EXPORT Result pncclGather(const void* send, void* recv, size_t count, DataType dt,
                                         int root, Comm comm, Stream) {
  return nd::collective("ncclGather", K::Gather, comm,
                        {.send = send, .recv = recv, .count = count, .dt = dt, .root = root});
}

RANKMAP_DOUBLE_EXPORT Result pncclScatter(const void* send, void* recv, size_t count, DataType dt,
                                          int root, Comm comm, Stream) {
  return nd::collective("ncclScatter", K::Scatter, comm,
                        {.send = send, .recv = recv, .count = count, .dt = dt, .root = root});
}

RANKMAP_DOUBLE_EXPORT Result pncclSend(const void* buf, size_t count, DataType dt, int peer,
                                       Comm comm, Stream) {
  return nd::p2p("ncclSend", comm, true, buf, nullptr, count, dt, peer);
}

RANKMAP_DOUBLE_EXPORT Result pncclRecv(void* buf, size_t count, DataType dt, int peer, Comm comm,
                                       Stream) {
  return nd::p2p("ncclRecv", comm, false, nullptr, buf, count, dt, peer);
}

// ncclX: weak aliases of pncclX, as real NCCL exports them.
#define RANKMAP_DOUBLE_ALIAS(name, ...) \
  RANKMAP_DOUBLE_EXPORT Result nccl##name(__VA_ARGS__) __attribute__((weak, alias("pnccl" #name)))

RANKMAP_DOUBLE_ALIAS(GetVersion, int*);
RANKMAP_DOUBLE_ALIAS(GetUniqueId, UniqueId*);
RANKMAP_DOUBLE_ALIAS(CommInitRank, Comm*, int, UniqueId, int);
RANKMAP_DOUBLE_ALIAS(CommInitRankConfig, Comm*, int, UniqueId, int, void*);
RANKMAP_DOUBLE_ALIAS(CommInitRankScalable, Comm*, int, int, int, UniqueId*, void*);
RANKMAP_DOUBLE_ALIAS(CommInitAll, Comm*, int, const int*);
RANKMAP_DOUBLE_ALIAS(CommSplit, Comm, int, int, Comm*, void*);
RANKMAP_DOUBLE_ALIAS(CommShrink, Comm, int*, int, Comm*, void*, int);
RANKMAP_DOUBLE_ALIAS(CommDestroy, Comm);
RANKMAP_DOUBLE_ALIAS(CommAbort, Comm);
RANKMAP_DOUBLE_ALIAS(CommUserRank, Comm, int*);
RANKMAP_DOUBLE_ALIAS(CommCount, Comm, int*);
RANKMAP_DOUBLE_ALIAS(CommGetAsyncError, Comm, Result*);
RANKMAP_DOUBLE_ALIAS(GroupStart);
RANKMAP_DOUBLE_ALIAS(GroupEnd);
RANKMAP_DOUBLE_ALIAS(GroupSimulateEnd, void*);
RANKMAP_DOUBLE_ALIAS(Reduce, const void*, void*, size_t, DataType, RedOp, int, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(Bcast, void*, size_t, DataType, int, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(Broadcast, const void*, void*, size_t, DataType, int, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(AllReduce, const void*, void*, size_t, DataType, RedOp, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(ReduceScatter, const void*, void*, size_t, DataType, RedOp, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(AllGather, const void*, void*, size_t, DataType, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(AlltoAll, const void*, void*, size_t, DataType, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(Gather, const void*, void*, size_t, DataType, int, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(Scatter, const void*, void*, size_t, DataType, int, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(Send, const void*, size_t, DataType, int, Comm, Stream);
RANKMAP_DOUBLE_ALIAS(Recv, void*, size_t, DataType, int, Comm, Stream);
