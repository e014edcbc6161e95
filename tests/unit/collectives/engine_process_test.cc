// Multi-process failure tests over TCP: real processes (fork), a real root bootstrap on
// 127.0.0.1, and kill -9 of one rank in the middle of a stream of allreduces. Every other rank
// must exit with an error (not hang) within its deadline. Children never return into gtest:
// they _exit() with the error code they saw. The parent kills and reaps every child it made,
// also when an expectation fails.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/bootstrap/root_bootstrap.h"
#include "collectives/communicator.h"
#include "collectives/connect.h"
#include "collectives/transport/transport.h"
#include "common/config.h"
#include "common/error.h"

namespace rankmap::coll {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitUnexpected = 99;

// Reaps children on scope exit, killing those still running.
struct Children {
  std::vector<pid_t> pids;
  ~Children() {
    for (pid_t p : pids)
      if (p > 0) {
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
      }
  }
};

// Waits up to `limit` for `pid`; returns its wait status or -1 when it is still running.
int waitFor(pid_t pid, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

[[noreturn]] void childMain(int rank, int n, bootstrap::RootListener* listener,
                            const std::string& root, int readyFd) {
  int code = kExitUnexpected;
  try {
    const Deadline connect = Deadline::after(std::chrono::seconds(20));
    auto bs = rank == 0 ? bootstrap::makeRootBootstrap(std::move(*listener), n, connect)
                        : bootstrap::makeRootBootstrap(rank, n, root, connect);
    transport::DeviceOptions dev;
    dev.backend = transport::Backend::Tcp;
    dev.tcp.host = "127.0.0.1";
    auto device = transport::makeDevice(dev);
    auto ctx = device->connect(*bs, connect);
    CommOptions o;
    o.timeout = std::chrono::seconds(4);
    o.segmentBytes = 64 << 10;
    Communicator comm(device, std::move(ctx), o);
    std::vector<float> in(1 << 18, 1.0f), out(in.size());
    for (int i = 0; i < 100000; ++i) {
      comm.allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
      if (i == 0) {
        char c = 'r';
        if (write(readyFd, &c, 1) != 1) _exit(kExitUnexpected);
      }
    }
    code = kExitOk;  // finished without noticing: a failure of the test
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
  } catch (...) {
    code = kExitUnexpected;
  }
  _exit(code);
}

TEST(EngineProcess, KillNineMidCollectiveOverTcp) {
  const int n = 4, victim = 2;
  bootstrap::RootListener listener("127.0.0.1:0");
  const std::string root = listener.address();
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  Children children;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(pipeFds[0]);
      childMain(r, n, &listener, root, pipeFds[1]);
    }
    children.pids.push_back(pid);
  }
  close(pipeFds[1]);
  // Wait until every rank finished one allreduce (bounded).
  int ready = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ready < n && std::chrono::steady_clock::now() < until) {
    pollfd p{pipeFds[0], POLLIN, 0};
    if (poll(&p, 1, 200) > 0) {
      char buf[16];
      ssize_t got = read(pipeFds[0], buf, sizeof buf);
      if (got <= 0) break;
      ready += static_cast<int>(got);
    }
  }
  close(pipeFds[0]);
  ASSERT_EQ(ready, n) << "ranks did not start";
  auto killedAt = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(children.pids[victim], SIGKILL), 0);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    int status = waitFor(children.pids[static_cast<size_t>(r)], std::chrono::seconds(15));
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - killedAt).count();
    ASSERT_NE(status, -1) << "rank " << r << " still running 15 s after the kill (hang)";
    children.pids[static_cast<size_t>(r)] = -1;
    ASSERT_TRUE(WIFEXITED(status)) << "rank " << r << " died of signal " << WTERMSIG(status);
    int code = WEXITSTATUS(status);
    EXPECT_TRUE(code == static_cast<int>(ErrorCode::kPeer) || code == static_cast<int>(ErrorCode::kTimeout))
        << "rank " << r << " exited with " << code;
    EXPECT_LT(secs, 4.0 + 2.0) << "rank " << r << " took longer than its deadline";
  }
}

TEST(EngineProcess, UnreachableRootIsADeadlineErrorNamingIt) {
  // A port nobody listens on: bind one, note it, close it.
  std::string addr;
  {
    bootstrap::RootListener l("127.0.0.1:0");
    addr = l.address();
  }
  Config::LoadOptions lo;
  lo.env = std::map<std::string, std::string>{};
  lo.systemFile = "/nonexistent";
  lo.userFile = "/nonexistent";
  Config cfg = Config::load(lo);
  CommOptions o;
  o.timeout = std::chrono::milliseconds(800);
  auto t0 = std::chrono::steady_clock::now();
  try {
    connectCommunicator(1, 2, addr, cfg, o, LocalPlan{}, Deadline::after(o.timeout));
    FAIL() << "connected to nobody";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find(addr), std::string::npos) << e.what();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 3.0);
}

}  // namespace
}  // namespace rankmap::coll
