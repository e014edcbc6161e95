// `rankmap run` end to end: the real binary, a stand-in `mpirun` (a shell script that prints its
// arguments and the hostfile it was given, then exits 7), and the plan sources.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "common/files.h"
#include "common/plan.h"
#include "tests/unit/shim_mpi/subprocess.h"

namespace rankmap::cli {
namespace {

using testing::Completed;

constexpr int kTimeoutMs = 30000;

class RunCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.file("bin"));
    std::filesystem::create_directories(dir_.file("run"));
    fakeMpirun_ = dir_.file("bin/mpirun");
    writeFileAtomic(fakeMpirun_,
                    "#!/bin/sh\n"
                    "echo \"argv: $*\"\n"
                    "while [ $# -gt 0 ]; do\n"
                    "  if [ \"$1\" = --hostfile ]; then echo hostfile:; cat \"$2\"; fi\n"
                    "  shift\n"
                    "done\n"
                    "exit 7\n",
                    0755);
    writeFileAtomic(dir_.file("hf"), "vm0\nvm1\nvm2\nvm3\n");
    Plan p = Plan::identity({"vm0", "vm1", "vm2", "vm3"}, 1);
    p.order = {"vm2", "vm0", "vm3", "vm1"};
    p.predicted.basis = "allreduce 16 MiB ring";
    p.predicted.speedup = 2.9;
    p.derivePermutation();
    p.seal();
    p.save(dir_.file("plan.json"));
    hash_ = p.hash;
  }

  Completed rankmap(std::vector<std::string> args,
                    std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv{RANKMAP_CLI, "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    env["RANKMAP_RUN_DIR"] = dir_.file("run");
    env["RANKMAP_MPI_SHIM"] = "/opt/rankmap/librankmap_mpi.so";
    env["RANKMAP_CONF_FILE"] = dir_.file("none.conf");
    return testing::runCommand(argv, env, Deadline::afterMs(kTimeoutMs),
                               {"RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "RANKMAP_AGENT", "RANKMAP_LOG",
                                "RANKMAP_PLAN_MAX_AGE"});
  }

  std::vector<std::string> seqJob() {
    return {"--", fakeMpirun_, "--hostfile", dir_.file("hf"), "--mca", "rmaps", "seq", "--np", "4",
            "./prog", "--size", "8"};
  }

  bool runDirEmpty() { return std::filesystem::is_empty(dir_.file("run")); }

  testing::TempDir dir_;
  std::string fakeMpirun_;
  std::string hash_;
};

TEST_F(RunCli, LaunchModeRunsTheRewrittenCommandAndCleansUp) {
  auto args = std::vector<std::string>{"--plan", dir_.file("plan.json")};
  for (auto& w : seqJob()) args.push_back(w);
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 7) << c.out << c.err;  // the job's exit status
  auto out = testing::lines(c.out);
  ASSERT_GE(out.size(), 6u) << c.out;
  EXPECT_NE(out[0].find("argv: --hostfile " + dir_.file("run") + "/rankmap-run-"), std::string::npos) << out[0];
  EXPECT_NE(out[0].find("/hostfile --mca rmaps seq -np 4 ./prog --size 8"), std::string::npos) << out[0];
  EXPECT_EQ(std::vector<std::string>(out.begin() + 2, out.begin() + 6),
            (std::vector<std::string>{"vm2", "vm0", "vm3", "vm1"}));
  auto err = testing::lines(c.err);
  ASSERT_EQ(err.size(), 1u) << c.err;
  EXPECT_NE(err[0].find("launch mode: plan " + hash_.substr(0, 19)), std::string::npos) << err[0];
  EXPECT_NE(err[0].find("predicted 2.90x"), std::string::npos) << err[0];
  EXPECT_TRUE(runDirEmpty());
}

TEST_F(RunCli, DryRunPrintsTheCommandAndRunsNothing) {
  auto args = std::vector<std::string>{"--dry-run", "--plan", dir_.file("plan.json")};
  for (auto& w : seqJob()) args.push_back(w);
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 0) << c.out << c.err;
  auto out = testing::lines(c.out);
  ASSERT_GE(out.size(), 1u);
  EXPECT_EQ(out[0].rfind(fakeMpirun_ + " --hostfile ", 0), 0u) << out[0];
  EXPECT_EQ(c.out.find("argv:"), std::string::npos) << c.out;  // the stand-in did not run
  EXPECT_NE(c.out.find("vm2\nvm0\nvm3\nvm1\n"), std::string::npos) << c.out;
  EXPECT_TRUE(runDirEmpty());
}

TEST_F(RunCli, ShimModeAddsThePreload) {
  auto args = std::vector<std::string>{"--dry-run", "--mode", "shim", "--plan", dir_.file("plan.json")};
  for (auto& w : seqJob()) args.push_back(w);
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find(fakeMpirun_ + " -x LD_PRELOAD=/opt/rankmap/librankmap_mpi.so -x RANKMAP_PLAN=" +
                       dir_.file("plan.json") + " --hostfile"),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.err.find("shim mode"), std::string::npos) << c.err;
}

TEST_F(RunCli, UnknownOptionsRunTheOriginalCommand) {
  Completed c = rankmap({"--plan", dir_.file("plan.json"), "--", fakeMpirun_, "--frobnicate",
                         "--hostfile", dir_.file("hf"), "./prog"});
  EXPECT_EQ(c.status, 7);
  EXPECT_EQ(testing::lines(c.out)[0], "argv: --frobnicate --hostfile " + dir_.file("hf") + " ./prog");
  EXPECT_NE(c.err.find("running the original command unchanged"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("--frobnicate"), std::string::npos) << c.err;
}

TEST_F(RunCli, StalePlanRunsTheOriginalCommand) {
  Plan old = Plan::load(dir_.file("plan.json"));
  old.topologyTime = "2020-01-01T00:00:00Z";
  old.seal();
  old.save(dir_.file("old.json"));
  auto args = std::vector<std::string>{"--plan", dir_.file("old.json")};
  for (auto& w : seqJob()) args.push_back(w);
  // No age limit (the default): the old plan is applied.
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 7) << c.out << c.err;
  EXPECT_NE(c.out.find("vm2\nvm0\nvm3\nvm1\n"), std::string::npos) << c.out;
  // RANKMAP_PLAN_MAX_AGE=1h: stale, so the job runs unchanged and says why.
  c = rankmap(args, {{"RANKMAP_PLAN_MAX_AGE", "1h"}});
  EXPECT_EQ(c.status, 7) << c.out << c.err;
  auto out = testing::lines(c.out);
  ASSERT_GE(out.size(), 1u) << c.out;
  EXPECT_EQ(out[0], "argv: --hostfile " + dir_.file("hf") + " --mca rmaps seq --np 4 ./prog --size 8");
  EXPECT_NE(c.err.find("is stale"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("running the original command unchanged"), std::string::npos) << c.err;
  EXPECT_TRUE(runDirEmpty());
}

TEST_F(RunCli, BadPlansRunTheOriginalCommand) {
  writeFileAtomic(dir_.file("garbage.json"), "not json");
  Plan other = Plan::identity({"x0", "x1"}, 1);
  other.order = {"x1", "x0"};
  other.derivePermutation();
  other.seal();
  other.save(dir_.file("other.json"));
  for (const auto& [plan, why] : std::vector<std::pair<std::string, std::string>>{
           {dir_.file("absent.json"), "absent.json"},
           {dir_.file("garbage.json"), "not valid JSON"},
           {dir_.file("other.json"), "does not cover the job"}}) {
    auto args = std::vector<std::string>{"--plan", plan};
    for (auto& w : seqJob()) args.push_back(w);
    Completed c = rankmap(args);
    EXPECT_EQ(c.status, 7) << why;
    EXPECT_EQ(testing::lines(c.out)[0],
              "argv: --hostfile " + dir_.file("hf") + " --mca rmaps seq --np 4 ./prog --size 8")
        << why;
    EXPECT_NE(c.err.find("unchanged"), std::string::npos) << c.err;
    EXPECT_NE(c.err.find(why), std::string::npos) << c.err;
    EXPECT_TRUE(runDirEmpty());
  }
}

TEST_F(RunCli, DownAgentRunsTheOriginalCommandQuickly) {
  // Port 9 (discard) on loopback: nothing listens, the connection is refused.
  auto args = std::vector<std::string>{"--agent", "http://127.0.0.1:9"};
  for (auto& w : seqJob()) args.push_back(w);
  auto t0 = std::chrono::steady_clock::now();
  Completed c = rankmap(args);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(c.status, 7);
  EXPECT_NE(c.err.find("no plan from agent http://127.0.0.1:9"), std::string::npos) << c.err;
}

TEST_F(RunCli, UnwritableRunDirRunsTheOriginalCommand) {
  std::vector<std::string> argv{RANKMAP_CLI, "run", "--plan", dir_.file("plan.json")};
  for (auto& w : seqJob()) argv.push_back(w);
  Completed c = testing::runCommand(argv,
                                    {{"RANKMAP_RUN_DIR", dir_.file("absent/dir")},
                                     {"RANKMAP_CONF_FILE", dir_.file("none.conf")}},
                                    Deadline::afterMs(kTimeoutMs), {"RANKMAP_PLAN", "RANKMAP_LOG"});
  EXPECT_EQ(c.status, 7) << c.err;
  EXPECT_EQ(testing::lines(c.out)[0],
            "argv: --hostfile " + dir_.file("hf") + " --mca rmaps seq --np 4 ./prog --size 8");
  EXPECT_NE(c.err.find("unchanged: cannot prepare the job's files"), std::string::npos) << c.err;
}

TEST_F(RunCli, UsageErrors) {
  Completed c = rankmap({"--agent", "http://127.0.0.1:9", "--plan", "p", "--", "mpirun"});
  EXPECT_EQ(c.status, 2) << c.err;
  c = rankmap({"--mode", "fast", "--", "mpirun"});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("--mode"), std::string::npos) << c.err;
}

}  // namespace
}  // namespace rankmap::cli
