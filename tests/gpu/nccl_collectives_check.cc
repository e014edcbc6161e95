// gpu_nccl_collectives_check: one rank of a multi-process NCCL job that runs every collective the
// shim translates, checks each result against its closed form and writes every result buffer to
// --out, so that a run under librankmap_nccl.so can be compared byte for byte with a run without
// it (tests/gpu/nccl_shim_test.sh does both). Integer data only: results must be bit-exact.
//
//   gpu_nccl_collectives_check --rank R --nranks N --id-file PATH --out PATH [--count C]
//
// Rank 0 writes the unique id to --id-file (atomically); the others wait for it. Several ranks
// may share one GPU when each has its own NCCL_HOSTID (NCCL then treats them as hosts and talks
// over the socket transport: NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1). Exit 0 = all checks passed.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int gFailures = 0;

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "rank %d: %s: %s\n", gRank, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)
#define NCCL_OK(call)                                                                  \
  do {                                                                                 \
    ncclResult_t r_ = (call);                                                          \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                   \
      std::fprintf(stderr, "rank %d: %s: %s\n", gRank, #call, ncclGetErrorString(r_)); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

int gRank = -1;

int32_t pattern(int rank, size_t i) { return rank * 100000 + static_cast<int32_t>(i % 99991); }

struct Dev {
  int32_t* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    CUDA_OK(cudaMalloc(&p, (count ? count : 1) * sizeof(int32_t)));
    CUDA_OK(cudaMemset(p, 0xff, (count ? count : 1) * sizeof(int32_t)));
  }
  ~Dev() { cudaFree(p); }
  void set(const std::vector<int32_t>& v) {
    CUDA_OK(cudaMemcpy(p, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  std::vector<int32_t> get() const {
    std::vector<int32_t> v(n);
    CUDA_OK(cudaMemcpy(v.data(), p, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
    return v;
  }
};

std::ofstream gOut;

void record(const char* what, const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  gOut << what;
  for (int32_t v : got) gOut << ' ' << v;
  gOut << '\n';
  if (got != want) {
    ++gFailures;
    std::fprintf(stderr, "rank %d: %s: wrong result\n", gRank, what);
  }
}

void sync(cudaStream_t s) { CUDA_OK(cudaStreamSynchronize(s)); }

// Waits until a non-blocking communicator has no operation in progress.
void settle(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (state == ncclInProgress && std::chrono::steady_clock::now() < until)
    NCCL_OK(ncclCommGetAsyncError(comm, &state));
  if (state != ncclSuccess) {
    std::fprintf(stderr, "rank %d: async state %s\n", gRank, ncclGetErrorString(state));
    std::exit(2);
  }
}

void runAll(ncclComm_t comm, int r, int n, size_t c, cudaStream_t s, const char* tag) {
  std::string t = tag;
  std::vector<int32_t> mine(c), block(c * n), want;
  for (size_t i = 0; i < c; ++i) mine[i] = pattern(r, i);
  for (size_t i = 0; i < c * n; ++i) block[i] = pattern(r, i);

  int user = -1;
  NCCL_OK(ncclCommUserRank(comm, &user));
  record((t + " userrank").c_str(), {user}, {r});

  {  // AllGather, out of place and in place
    Dev in(c), out(c * n);
    in.set(mine);
    NCCL_OK(ncclAllGather(in.p, out.p, c, ncclInt32, comm, s));
    settle(comm);
    sync(s);
    want.clear();
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < c; ++i) want.push_back(pattern(q, i));
    record((t + " allgather").c_str(), out.get(), want);
    Dev inplace(c * n);
    std::vector<int32_t> init(c * n, -1);
    std::copy(mine.begin(), mine.end(), init.begin() + static_cast<long>(r * c));
    inplace.set(init);
    NCCL_OK(ncclAllGather(inplace.p + r * c, inplace.p, c, ncclInt32, comm, s));
    settle(comm);
    sync(s);
    record((t + " allgather-inplace").c_str(), inplace.get(), want);
  }
  {  // ReduceScatter
    Dev in(c * n), out(c);
    in.set(block);
    NCCL_OK(ncclReduceScatter(in.p, out.p, c, ncclInt32, ncclSum, comm, s));
    settle(comm);
    sync(s);
    want.assign(c, 0);
    for (size_t i = 0; i < c; ++i)
      for (int q = 0; q < n; ++q) want[i] += pattern(q, r * c + i);
    record((t + " reducescatter").c_str(), out.get(), want);
  }
  {  // AllReduce (not translated; must still agree)
    Dev in(c), out(c);
    in.set(mine);
    NCCL_OK(ncclAllReduce(in.p, out.p, c, ncclInt32, ncclSum, comm, s));
    settle(comm);
    sync(s);
    want.assign(c, 0);
    for (size_t i = 0; i < c; ++i)
      for (int q = 0; q < n; ++q) want[i] += pattern(q, i);
    record((t + " allreduce").c_str(), out.get(), want);
  }
  for (int root = 0; root < n; ++root) {  // Broadcast, Bcast, Reduce from every root
    std::string rs = " root" + std::to_string(root);
    Dev in(c), out(c);
    in.set(mine);
    NCCL_OK(ncclBroadcast(in.p, out.p, c, ncclInt32, root, comm, s));
    settle(comm);
    sync(s);
    want.clear();
    for (size_t i = 0; i < c; ++i) want.push_back(pattern(root, i));
    record((t + " broadcast" + rs).c_str(), out.get(), want);
    in.set(mine);
    NCCL_OK(ncclBcast(in.p, c, ncclInt32, root, comm, s));
    settle(comm);
    sync(s);
    record((t + " bcast" + rs).c_str(), in.get(), want);
    in.set(mine);
    Dev red(c);
    NCCL_OK(ncclReduce(in.p, red.p, c, ncclInt32, ncclSum, root, comm, s));
    settle(comm);
    sync(s);
    if (r == root) {
      want.assign(c, 0);
      for (size_t i = 0; i < c; ++i)
        for (int q = 0; q < n; ++q) want[i] += pattern(q, i);
      record((t + " reduce" + rs).c_str(), red.get(), want);
    }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    Dev gout(c * n);
    in.set(mine);
    NCCL_OK(ncclGather(in.p, gout.p, c, ncclInt32, root, comm, s));
    settle(comm);
    sync(s);
    if (r == root) {
      want.clear();
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < c; ++i) want.push_back(pattern(q, i));
      record((t + " gather" + rs).c_str(), gout.get(), want);
    }
    Dev sin(c * n), sout(c);
    sin.set(block);
    NCCL_OK(ncclScatter(sin.p, sout.p, c, ncclInt32, root, comm, s));
    settle(comm);
    sync(s);
    want.clear();
    for (size_t i = 0; i < c; ++i) want.push_back(pattern(root, r * c + i));
    record((t + " scatter" + rs).c_str(), sout.get(), want);
#endif
  }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  {  // AlltoAll
    Dev in(c * n), out(c * n);
    in.set(block);
    NCCL_OK(ncclAlltoAll(in.p, out.p, c, ncclInt32, comm, s));
    settle(comm);
    sync(s);
    want.clear();
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < c; ++i) want.push_back(pattern(q, r * c + i));
    record((t + " alltoall").c_str(), out.get(), want);
  }
#endif
  {  // Send/Recv around the app's ring, and a grouped AllGather + ReduceScatter
    Dev in(c), out(c);
    in.set(mine);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(in.p, c, ncclInt32, (r + 1) % n, comm, s));
    NCCL_OK(ncclRecv(out.p, c, ncclInt32, (r + n - 1) % n, comm, s));
    NCCL_OK(ncclGroupEnd());
    settle(comm);
    sync(s);
    want.clear();
    for (size_t i = 0; i < c; ++i) want.push_back(pattern((r + n - 1) % n, i));
    record((t + " sendrecv").c_str(), out.get(), want);

    Dev ag(c * n), rsIn(c * n), rsOut(c);
    rsIn.set(block);
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllGather(in.p, ag.p, c, ncclInt32, comm, s));
    NCCL_OK(ncclReduceScatter(rsIn.p, rsOut.p, c, ncclInt32, ncclSum, comm, s));
    NCCL_OK(ncclGroupEnd());
    settle(comm);
    sync(s);
    want.clear();
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < c; ++i) want.push_back(pattern(q, i));
    record((t + " grouped-allgather").c_str(), ag.get(), want);
    want.assign(c, 0);
    for (size_t i = 0; i < c; ++i)
      for (int q = 0; q < n; ++q) want[i] += pattern(q, r * c + i);
    record((t + " grouped-reducescatter").c_str(), rsOut.get(), want);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int n = -1;
  size_t count = 1000;
  std::string idFile, outFile;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--rank") gRank = std::atoi(argv[i + 1]);
    if (a == "--nranks") n = std::atoi(argv[i + 1]);
    if (a == "--id-file") idFile = argv[i + 1];
    if (a == "--out") outFile = argv[i + 1];
    if (a == "--count") count = std::strtoull(argv[i + 1], nullptr, 0);
  }
  if (gRank < 0 || n < 1 || idFile.empty() || outFile.empty()) {
    std::fprintf(stderr, "usage: %s --rank R --nranks N --id-file PATH --out PATH [--count C]\n",
                 argv[0]);
    return 2;
  }
  const int r = gRank;
  CUDA_OK(cudaSetDevice(0));
  gOut.open(outFile);

  // Two ids: the blocking communicator's and the non-blocking one's.
  ncclUniqueId ids[2];
  if (r == 0) {
    NCCL_OK(ncclGetUniqueId(&ids[0]));
    NCCL_OK(ncclGetUniqueId(&ids[1]));
    std::string tmp = idFile + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(ids), sizeof(ids));
    std::rename(tmp.c_str(), idFile.c_str());
  } else {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (;;) {
      std::ifstream f(idFile, std::ios::binary);
      if (f.read(reinterpret_cast<char*>(ids), sizeof(ids))) break;
      if (std::chrono::steady_clock::now() > until) {
        std::fprintf(stderr, "rank %d: no unique id in %s\n", r, idFile.c_str());
        return 2;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  ncclComm_t comm;
  NCCL_OK(ncclCommInitRank(&comm, n, ids[0], r));
  runAll(comm, r, n, count, s, "blocking");

  // ncclCommSplit with tied keys: children ordered by parent (app) rank.
  ncclComm_t child;
  NCCL_OK(ncclCommSplit(comm, r % 2, 0, &child, nullptr));
  int childRank = -1;
  NCCL_OK(ncclCommUserRank(child, &childRank));
  record("split userrank", {childRank}, {r / 2});
  NCCL_OK(ncclCommDestroy(child));

  // A non-blocking communicator from the second id: the shim permutes it too and waits for
  // ncclCommGetAsyncError before every fix-up copy.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t nb;
  NCCL_OK(ncclCommInitRankConfig(&nb, n, ids[1], r, &config));
  settle(nb);
  runAll(nb, r, n, count, s, "nonblocking");
  NCCL_OK(ncclCommDestroy(nb));

  NCCL_OK(ncclCommDestroy(comm));
  gOut.close();
  std::fprintf(stderr, "rank %d: %s\n", r, gFailures == 0 ? "all checks passed" : "FAILED");
  return gFailures == 0 ? 0 : 1;
}
