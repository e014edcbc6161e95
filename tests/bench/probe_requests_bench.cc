// Control requests at scale: N "hello" requests against in-process probe servers, sent by
// probe::requestAll (one thread multiplexing every request) and, for reference, the way the
// coordinator sent them before (a thread per request, in batches of 256, each a blocking
// Channel exchange).
//
//   probe_requests_bench [--servers S] [--repeat R] [--sleep-ms MS] N...   (default: 2000 5000)
//
// The servers run in a child process (forked before any thread exists), so that the threads and
// CPU time counted here are the client's alone; the servers' peak thread count is read from
// /proc/<child>/status. A sampler thread (counted in the client's peak) reads /proc/self/status
// every 2 ms; CPU seconds are the client's (getrusage) and the servers' (/proc/<child>/stat).
// --sleep-ms makes each request take that long on the server (default 0).
// Prints one line per (N, method) with the median, min and max wall time over R runs.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "probe/fanout.h"
#include "probe/server.h"
#include "probe/wire.h"

namespace rankmap::probe {
namespace {

using Clock = std::chrono::steady_clock;

ProbeKey benchKey() { return ProbeKey::fromBytes(std::string(32, 'k')); }

int threadsOf(const std::string& statusPath) {
  std::ifstream in(statusPath);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return -1;
}

// The child: `servers` probe servers on loopback; writes their ports to `out`, then serves
// until `in` closes.
[[noreturn]] void serveChild(int servers, int sleepMs, int in, int out) {
  std::vector<std::unique_ptr<ProbeServer>> s;
  for (int i = 0; i < servers; ++i) {
    ProbeServer::Options o;
    o.listen = {"127.0.0.1", 0};
    o.name = "bench" + std::to_string(i);
    o.maxConnections = 100000;
    s.push_back(std::make_unique<ProbeServer>(
        o, benchKey(), [sleepMs](const Json&, const std::string&, Deadline) {
          if (sleepMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
          return Json{{"name", "bench"}};
        }));
    s.back()->start();
    uint16_t port = s.back()->port();
    if (::write(out, &port, sizeof(port)) != sizeof(port)) std::_Exit(1);
  }
  char c;
  while (::read(in, &c, 1) > 0) {
  }
  for (auto& x : s) x->stop();
  std::_Exit(0);
}

// The coordinator's former runTasks: a thread per request, 256 at a time.
size_t threadBatches(const std::vector<PendingRequest>& reqs, const ProbeKey& key) {
  constexpr size_t kMaxThreads = 256;
  std::atomic<size_t> ok{0};
  auto one = [&](const PendingRequest& r) {
    try {
      Channel c = Channel::connect(r.agent, key, "bench", r.deadline);
      c.send(MsgType::kRequest, r.body.dump(), r.deadline);
      parseJson(c.expect(MsgType::kReply, r.deadline, r.maxReply), "reply");
      ++ok;
    } catch (const std::exception&) {
    }
  };
  for (size_t start = 0; start < reqs.size(); start += kMaxThreads) {
    size_t end = std::min(reqs.size(), start + kMaxThreads);
    std::vector<std::thread> threads;
    for (size_t i = start + 1; i < end; ++i) threads.emplace_back(one, std::cref(reqs[i]));
    one(reqs[start]);
    for (auto& th : threads) th.join();
  }
  return ok.load();
}

size_t fanout(const std::vector<PendingRequest>& reqs, const ProbeKey& key) {
  size_t ok = 0;
  for (const auto& o : requestAll(reqs, key, "bench"))
    if (o.reply) ++ok;
  return ok;
}

// utime + stime of process `pid` (/proc/PID/stat fields 14 and 15).
double cpuSecondsOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t p = text.rfind(')');  // the command name may hold spaces
  if (p == std::string::npos) return 0;
  std::istringstream fields(text.substr(p + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i)
    if (i >= 14) ticks += std::atof(f.c_str());
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double cpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Run {
  double seconds = 0;
  double cpu = 0;
  double serverCpu = 0;
  size_t ok = 0;
  int clientThreads = 0;
  int serverThreads = 0;
};

int run(int argc, char** argv) {
  int servers = 5, repeat = 3, sleepMs = 0;
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--servers" && i + 1 < argc)
      servers = std::atoi(argv[++i]);
    else if (a == "--repeat" && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else if (a == "--sleep-ms" && i + 1 < argc)
      sleepMs = std::atoi(argv[++i]);
    else
      sizes.push_back(static_cast<size_t>(std::atol(a.c_str())));
  }
  if (sizes.empty()) sizes = {2000, 5000};

  int down[2], up[2];
  if (::pipe(down) != 0 || ::pipe(up) != 0) return 1;
  pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    ::close(down[1]);
    ::close(up[0]);
    serveChild(servers, sleepMs, down[0], up[1]);
  }
  ::close(down[0]);
  ::close(up[1]);
  std::vector<Endpoint> eps;
  for (int i = 0; i < servers; ++i) {
    uint16_t port = 0;
    if (::read(up[0], &port, sizeof(port)) != sizeof(port)) return 1;
    eps.push_back({"127.0.0.1", port});
  }
  std::string childStatus = "/proc/" + std::to_string(child) + "/status";
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  std::printf("# %d servers in pid %d, RLIMIT_NOFILE %llu/%llu, %u cores, server sleep %d ms\n",
              servers, static_cast<int>(child), static_cast<unsigned long long>(rl.rlim_cur),
              static_cast<unsigned long long>(rl.rlim_max), std::thread::hardware_concurrency(),
              sleepMs);
  std::printf("%-6s %-14s %9s %9s %9s %8s %8s %9s %8s %8s\n", "N", "method", "median_ms", "min_ms",
              "max_ms", "cli_cpu", "srv_cpu", "ok", "cli_thr", "srv_thr");
  const ProbeKey key = benchKey();
  for (size_t n : sizes) {
    for (const char* method : {"thread-batches", "requestAll"}) {
      std::vector<Run> runs;
      for (int r = 0; r < repeat; ++r) {
        std::vector<PendingRequest> reqs(n);
        for (size_t i = 0; i < n; ++i) {
          reqs[i].agent = eps[i % eps.size()];
          reqs[i].body = Json{{"op", "hello"}};
          reqs[i].deadline = Deadline::after(std::chrono::seconds(120));
        }
        std::atomic<bool> stop{false};
        std::atomic<int> clientPeak{0}, serverPeak{0};
        std::thread sampler([&] {
          while (!stop.load()) {
            clientPeak = std::max(clientPeak.load(), threadsOf("/proc/self/status"));
            serverPeak = std::max(serverPeak.load(), threadsOf(childStatus));
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
        });
        Run run;
        double cpu0 = cpuSeconds();
        double serverCpu0 = cpuSecondsOf(child);
        auto t0 = Clock::now();
        run.ok = std::string(method) == "requestAll" ? fanout(reqs, key) : threadBatches(reqs, key);
        run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        stop = true;
        sampler.join();
        run.cpu = cpuSeconds() - cpu0;
        run.serverCpu = cpuSecondsOf(child) - serverCpu0;
        run.clientThreads = clientPeak.load();
        run.serverThreads = serverPeak.load();
        runs.push_back(run);
        // Let the servers' connection threads finish before the next run.
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
      std::sort(runs.begin(), runs.end(),
                [](const Run& a, const Run& b) { return a.seconds < b.seconds; });
      const Run& med = runs[runs.size() / 2];
      int cliPeak = 0, srvPeak = 0;
      size_t minOk = n;
      for (const Run& r : runs) {
        cliPeak = std::max(cliPeak, r.clientThreads);
        srvPeak = std::max(srvPeak, r.serverThreads);
        minOk = std::min(minOk, r.ok);
      }
      std::printf("%-6zu %-14s %9.1f %9.1f %9.1f %8.2f %8.2f %4zu/%-4zu %8d %8d\n", n, method,
                  med.seconds * 1e3, runs.front().seconds * 1e3, runs.back().seconds * 1e3, med.cpu,
                  med.serverCpu, minOk, n, cliPeak, srvPeak);
      std::fflush(stdout);
    }
  }
  ::close(down[1]);  // the child stops its servers and exits
  int status = 0;
  ::waitpid(child, &status, 0);
  return 0;
}

}  // namespace
}  // namespace rankmap::probe

int main(int argc, char** argv) { return rankmap::probe::run(argc, argv); }
