// Child processes (launch/process.h): exit statuses, PATH lookup, capture with its bounds, waits
// that kill at the deadline, process groups, and signal forwarding in runAndWait().
#include "launch/process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "tests/unit/shim_mpi/subprocess.h"

namespace rankmap::launch {
namespace {

using namespace std::chrono_literals;
using Argv = std::vector<std::string>;

// True once `pid` is gone or a zombie (an orphan waits for an init that may not reap it).
bool gone(pid_t pid, Deadline d = Deadline::after(5s)) {
  for (;;) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pidText, comm, state;
    if (!(stat >> pidText >> comm >> state) || state == "Z") return true;
    if (d.expired()) return false;
    std::this_thread::sleep_for(10ms);
  }
}

// Sets PATH for one test and puts the old value back.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& value) {
    if (const char* p = std::getenv("PATH")) old_ = p;
    ::setenv("PATH", value.c_str(), 1);
  }
  ~ScopedPath() {
    if (old_)
      ::setenv("PATH", old_->c_str(), 1);
    else
      ::unsetenv("PATH");
  }

 private:
  std::optional<std::string> old_;
};

TEST(Process, ExitStatusesFollowTheShellsConvention) {
  EXPECT_EQ(spawn({"sh", "-c", "exit 0"}).wait().code(), 0);
  ExitStatus st = spawn({"sh", "-c", "exit 3"}).wait();
  EXPECT_EQ(st.code(), 3);
  EXPECT_FALSE(st.signaled());
  EXPECT_EQ(st.describe(), "exited with status 3");
  st = spawn({"sh", "-c", "kill -TERM $$"}).wait();
  EXPECT_TRUE(st.signaled());
  EXPECT_EQ(st.code(), 128 + SIGTERM);
  EXPECT_EQ(st.describe(), "was killed by signal 15");
}

TEST(Process, ANameNotOnPathCannotRun) {
  try {
    SpawnOptions opts;
    opts.what = "worker 3";
    spawn({"rankmap-no-such-program"}, opts);
    FAIL() << "spawned a program that does not exist";
  } catch (const SystemError& e) {
    EXPECT_EQ(e.err(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("cannot run rankmap-no-such-program for worker 3"),
              std::string::npos)
        << e.what();
  }
}

TEST(Process, FindOnPathTakesTheFirstExecutableRegularFile) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.file("a/tool"));  // a directory: skipped
  std::filesystem::create_directories(dir.file("b"));
  std::filesystem::create_directories(dir.file("c"));
  writeFileAtomic(dir.file("b/tool"), "#!/bin/sh\n", 0644);  // not executable: skipped
  writeFileAtomic(dir.file("c/tool"), "#!/bin/sh\necho c\n", 0755);
  ScopedPath path(dir.file("a") + ":" + dir.file("b") + ":" + dir.file("c"));
  EXPECT_EQ(findOnPath("tool"), dir.file("c/tool"));
  EXPECT_EQ(findOnPath("absent"), std::nullopt);
  EXPECT_EQ(findOnPath("./relative/tool"), "./relative/tool");  // a '/': taken as is
  EXPECT_EQ(findOnPath(""), std::nullopt);
  // spawn() starts what findOnPath() finds.
  EXPECT_EQ(captureStdout({"tool"}, Deadline::after(10s)), "c\n");
}

TEST(Process, CaptureReturnsStdoutOfASuccessfulRun) {
  EXPECT_EQ(captureStdout({"sh", "-c", "echo out; echo err >&2"}, Deadline::after(10s)), "out\n");
  EXPECT_EQ(captureStdout({"sh", "-c", "read x || echo eof"}, Deadline::after(10s)), "eof\n");
  EXPECT_EQ(captureStdout({"sh", "-c", "echo partial; exit 1"}, Deadline::after(10s)),
            std::nullopt);
  EXPECT_EQ(captureStdout({"rankmap-no-such-program"}, Deadline::after(10s)), std::nullopt);
  // More than the bound is a failure, not a truncation.
  EXPECT_EQ(captureStdout({"head", "-c", "2000", "/dev/zero"}, Deadline::after(10s), 1000),
            std::nullopt);
  EXPECT_EQ(captureStdout({"head", "-c", "1000", "/dev/zero"}, Deadline::after(10s), 1000)->size(),
            1000u);
}

TEST(Process, CaptureKillsAChildThatOutlivesTheDeadline) {
  for (const char* script : {"sleep 30", "exec >&-; sleep 30"}) {  // writing, or stdout closed
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(captureStdout({"sh", "-c", script}, Deadline::after(300ms)), std::nullopt) << script;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << script;
  }
}

TEST(Process, WaitWithADeadlineKillsAndReaps) {
  Child c = spawn({"sleep", "30"});
  pid_t pid = c.pid();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c.wait(Deadline::after(200ms)), std::nullopt);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_FALSE(c.running());
  EXPECT_TRUE(c.status()->signaled());
  EXPECT_EQ(::kill(pid, 0), -1);  // reaped: the pid is free
  // One that ends in time gives its status.
  Child quick = spawn({"sh", "-c", "exit 4"});
  EXPECT_EQ(quick.wait(Deadline::after(10s))->code(), 4);
}

TEST(Process, DestroyingARunningChildKillsAndReapsIt) {
  pid_t pid = 0;
  {
    Child c = spawn({"sleep", "30"});
    pid = c.pid();
    EXPECT_FALSE(c.poll().has_value());
  }
  EXPECT_EQ(::kill(pid, 0), -1);
}

TEST(Process, KillReachesTheWholeGroup) {
  // The shell starts a grandchild, prints its pid and waits.
  SpawnOptions opts;
  opts.out = Stdio::kPipe;
  opts.newProcessGroup = true;
  Child c = spawn({"sh", "-c", "sleep 30 & echo $!; wait"}, opts);
  std::string line;
  char ch = 0;
  while (::read(c.stdoutFd(), &ch, 1) == 1 && ch != '\n') line += ch;
  pid_t grandchild = static_cast<pid_t>(std::stol(line));
  c.kill(SIGKILL);
  EXPECT_TRUE(c.wait(Deadline::after(10s))->signaled());
  EXPECT_TRUE(gone(grandchild)) << grandchild;
}

TEST(Process, RunAndWaitReturnsTheExitCodeAndForwardsSignals) {
  EXPECT_EQ(runAndWait({"sh", "-c", "exit 7"}), 7);
  // The child signals us; we forward SIGINT to it, and it starts with SIGINT's default action.
  // `exec`: a shell waiting for a foreground command acts on SIGINT only after the command ends,
  // which made this test wait the whole 20 s; sleep itself dies of it at once.
  EXPECT_EQ(runAndWait({"sh", "-c", "sleep 0.2; kill -INT $PPID; exec sleep 20"}), 128 + SIGINT);
  EXPECT_THROW(runAndWait({"rankmap-no-such-program"}), SystemError);
}

}  // namespace
}  // namespace rankmap::launch
