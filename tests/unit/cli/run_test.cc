// `rankmap run` end to end: the real binary, a stand-in `mpirun` (a shell script that prints its
// arguments and the hostfile it was given, then exits 7), and the plan sources.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <thread>

#include "common/files.h"
#include "common/job_profile.h"
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
                    "case \"$*\" in *'test -r'*) exit ${CHECK_STATUS:-0};; esac\n"
                    // rankmap run asks a launcher it cannot name by path which MPI it is.
                    "if [ \"$*\" = --version ]; then echo 'mpirun (Open MPI) 4.1.4'; exit 0; fi\n"
                    "echo \"argv: $*\"\n"
                    "while [ $# -gt 0 ]; do\n"
                    "  if [ \"$1\" = --hostfile ]; then echo hostfile:; cat \"$2\"; fi\n"
                    "  if [ \"$1\" = coll_tuned_dynamic_rules_filename ]; then\n"
                    "    echo rules:; grep -c . \"$2\"; fi\n"
                    "  shift\n"
                    "done\n"
                    "if [ -n \"$JOB_SECONDS\" ]; then : > \"$JOB_STARTED\"; sleep \"$JOB_SECONDS\"; fi\n"
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
    // The same plan with Open MPI's decision for its 4 ranks.
    p.openMpi["allreduce"] = {{0, 65536, 3, 0, 0, 100, 0},
                              {65536, AlgoRange::kUnbounded, 4, 0, 0, 9000, 0}};
    p.seal();
    p.save(dir_.file("rules-plan.json"));
  }

  Completed rankmap(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv{RANKMAP_CLI, "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    env["RANKMAP_RUN_DIR"] = dir_.file("run");
    env["RANKMAP_MPI_SHIM"] = "/opt/rankmap/librankmap_mpi.so";
    env["RANKMAP_CONF_FILE"] = "";  // no user file: only what the test sets
    return testing::runCommand(argv, env, Deadline::afterMs(kTimeoutMs),
                               {"RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "RANKMAP_AGENT", "RANKMAP_LOG",
                                "RANKMAP_PLAN_MAX_AGE"});
  }

  std::vector<std::string> seqJob() {
    return {"--",  fakeMpirun_, "--hostfile", dir_.file("hf"), "--mca",  "rmaps",
            "seq", "--np",      "4",          "./prog",        "--size", "8"};
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
  EXPECT_NE(out[0].find("argv: --hostfile " + dir_.file("run") + "/rankmap-run-"),
            std::string::npos)
      << out[0];
  EXPECT_NE(out[0].find("/hostfile --mca rmaps seq -np 4 ./prog --size 8"), std::string::npos)
      << out[0];
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
  auto args =
      std::vector<std::string>{"--dry-run", "--mode", "shim", "--plan", dir_.file("plan.json")};
  for (auto& w : seqJob()) args.push_back(w);
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_NE(
      c.out.find(fakeMpirun_ + " -x LD_PRELOAD=/opt/rankmap/librankmap_mpi.so -x RANKMAP_PLAN=" +
                 dir_.file("plan.json") + " --hostfile"),
      std::string::npos)
      << c.out;
  EXPECT_NE(c.err.find("shim mode"), std::string::npos) << c.err;
}

TEST_F(RunCli, UnknownOptionsRunTheOriginalCommand) {
  Completed c = rankmap({"--plan", dir_.file("plan.json"), "--", fakeMpirun_, "--frobnicate",
                         "--hostfile", dir_.file("hf"), "./prog"});
  EXPECT_EQ(c.status, 7);
  EXPECT_EQ(testing::lines(c.out)[0],
            "argv: --frobnicate --hostfile " + dir_.file("hf") + " ./prog");
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
  EXPECT_EQ(out[0],
            "argv: --hostfile " + dir_.file("hf") + " --mca rmaps seq --np 4 ./prog --size 8");
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

// While the job runs, the plan file it was launched from is replaced by a plan of a newer
// topology, predicted 1.5x faster than the job's order: one line on stderr (never stdout), a
// metric in the textfile directory while the job runs, nothing left after it.
TEST_F(RunCli, ARunningJobIsToldOnceThatItsPlanWentStale) {
  Plan p = Plan::load(dir_.file("plan.json"));
  p.epoch = 1;
  p.seal();
  const std::string live = dir_.file("live.json");
  p.save(live);
  std::filesystem::create_directories(dir_.file("metrics"));
  auto args = std::vector<std::string>{"--plan", live};
  for (auto& w : seqJob()) args.push_back(w);
  const std::string started = dir_.file("started");
  Completed c;
  std::thread job([&] {
    c = rankmap(args, {{"RANKMAP_RUN_STALE_CHECK", "100ms"},
                       {"RANKMAP_RUN_METRICS_DIR", dir_.file("metrics")},
                       {"JOB_SECONDS", "3"},
                       {"JOB_STARTED", started}});
  });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!std::filesystem::exists(started) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Plan newer = Plan::identity(p.order, 1);  // input order: the job's
  newer.order = {"vm0", "vm1", "vm2", "vm3"};
  newer.epoch = 2;
  newer.predicted.basis = "allreduce 16 MiB ring";
  newer.predicted.planUs = 100;
  newer.predicted.inputOrderUs = 150;
  newer.derivePermutation();
  newer.seal();
  newer.save(live);
  std::string metric;
  while (std::chrono::steady_clock::now() < until && metric.find("} 1\n") == std::string::npos) {
    for (const auto& e : std::filesystem::directory_iterator(dir_.file("metrics")))
      if (e.path().extension() == ".prom") metric = readFile(e.path().string());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  job.join();
  EXPECT_TRUE(std::filesystem::exists(started));
  EXPECT_NE(metric.find("rankmap_run_plan_stale{"), std::string::npos) << metric;
  EXPECT_NE(metric.find("current_plan=\"" + newer.hash.substr(0, 19) + "\"} 1\n"),
            std::string::npos)
      << metric;
  EXPECT_EQ(c.status, 7) << c.err;
  auto err = testing::lines(c.err);
  ASSERT_EQ(err.size(), 2u) << c.err;
  EXPECT_NE(err[0].find("launch mode: plan " + p.hash.substr(0, 19)), std::string::npos) << err[0];
  EXPECT_NE(err[1].find("the job's plan " + p.hash.substr(0, 19) + " is stale"), std::string::npos)
      << err[1];
  EXPECT_NE(err[1].find("predicted 1.50x faster"), std::string::npos) << err[1];
  EXPECT_EQ(c.out.find("stale"), std::string::npos) << c.out;
  EXPECT_TRUE(std::filesystem::is_empty(dir_.file("metrics")));
}

TEST_F(RunCli, UnwritableRunDirRunsTheOriginalCommand) {
  std::vector<std::string> argv{RANKMAP_CLI, "run", "--plan", dir_.file("plan.json")};
  for (auto& w : seqJob()) argv.push_back(w);
  Completed c = testing::runCommand(
      argv,
      {{"RANKMAP_RUN_DIR", dir_.file("absent/dir")}, {"RANKMAP_CONF_FILE", ""}},
      Deadline::afterMs(kTimeoutMs), {"RANKMAP_PLAN", "RANKMAP_LOG"});
  EXPECT_EQ(c.status, 7) << c.err;
  EXPECT_EQ(testing::lines(c.out)[0],
            "argv: --hostfile " + dir_.file("hf") + " --mca rmaps seq --np 4 ./prog --size 8");
  EXPECT_NE(c.err.find("unchanged: cannot prepare the job's files"), std::string::npos) << c.err;
}

TEST_F(RunCli, OpenMpiGetsThePlansRulesOnceEveryHostReadsThem) {
  auto args = std::vector<std::string>{"--plan", dir_.file("rules-plan.json")};
  for (auto& w : seqJob()) args.push_back(w);
  // The check (the stand-in exits CHECK_STATUS, 0 by default, for `test -r`) passes.
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 7) << c.out << c.err;
  auto out = testing::lines(c.out);
  ASSERT_GE(out.size(), 1u) << c.out;
  EXPECT_NE(out[0].find("argv: --mca coll_tuned_use_dynamic_rules 1 --mca "
                        "coll_tuned_dynamic_rules_filename " +
                        dir_.file("run") + "/rankmap-run-"),
            std::string::npos)
      << out[0];
  EXPECT_NE(c.out.find("rules:\n"), std::string::npos) << "the file existed during the job";
  auto err = testing::lines(c.err);
  ASSERT_EQ(err.size(), 1u) << c.err;
  EXPECT_NE(err[0].find("coll_tuned rules " + dir_.file("run")), std::string::npos) << err[0];
  EXPECT_TRUE(runDirEmpty());
  // A host that cannot read the file: the job runs in plan order without the rules.
  c = rankmap(args, {{"CHECK_STATUS", "1"}});
  EXPECT_EQ(c.status, 7) << c.out << c.err;
  out = testing::lines(c.out);
  ASSERT_GE(out.size(), 1u) << c.out;
  EXPECT_EQ(out[0].find("coll_tuned"), std::string::npos) << out[0];
  EXPECT_NE(out[0].find("/hostfile --mca rmaps seq -np 4 ./prog"), std::string::npos) << out[0];
  EXPECT_NE(c.err.find("Open MPI's coll_tuned rules not used: a host of the job cannot read"),
            std::string::npos)
      << c.err;
  EXPECT_TRUE(runDirEmpty());
  // RANKMAP_MPI_RULES=1: no check (CHECK_STATUS would fail it); 0: no rules.
  c = rankmap(args, {{"CHECK_STATUS", "1"}, {"RANKMAP_MPI_RULES", "1"}});
  EXPECT_NE(c.out.find("coll_tuned_dynamic_rules_filename"), std::string::npos) << c.out;
  c = rankmap(args, {{"RANKMAP_MPI_RULES", "0"}});
  EXPECT_EQ(c.out.find("coll_tuned"), std::string::npos) << c.out;
  EXPECT_EQ(testing::lines(c.err).size(), 1u) << c.err;
  c = rankmap(args, {{"RANKMAP_MPI_RULES", "sometimes"}});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("RANKMAP_MPI_RULES"), std::string::npos) << c.err;
  EXPECT_EQ(c.out.find("argv:"), std::string::npos) << "nothing ran";
}

TEST_F(RunCli, TheUsersCollTunedSettingsWin) {
  std::vector<std::string> job{
      "--",    fakeMpirun_,  "--mca",         "coll_tuned_allreduce_algorithm",
      "4",     "--hostfile", dir_.file("hf"), "--mca",
      "rmaps", "seq",        "./prog"};
  auto args = std::vector<std::string>{"--plan", dir_.file("rules-plan.json")};
  args.insert(args.end(), job.begin(), job.end());
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 7);
  EXPECT_EQ(c.out.find("coll_tuned_dynamic_rules_filename"), std::string::npos) << c.out;
  EXPECT_NE(c.err.find("your setting decides (--mca coll_tuned_allreduce_algorithm 4)"),
            std::string::npos)
      << c.err;
  // In the environment, which mpirun passes to every rank.
  args = {"--plan", dir_.file("rules-plan.json")};
  for (auto& w : seqJob()) args.push_back(w);
  c = rankmap(args, {{"OMPI_MCA_coll_tuned_bcast_algorithm", "6"}});
  EXPECT_EQ(c.out.find("coll_tuned_dynamic_rules_filename"), std::string::npos) << c.out;
  EXPECT_NE(c.err.find("OMPI_MCA_coll_tuned_bcast_algorithm=6 in the environment"),
            std::string::npos)
      << c.err;
}

TEST_F(RunCli, DryRunShowsTheRulesAndTheCheck) {
  auto args = std::vector<std::string>{"--dry-run", "--plan", dir_.file("rules-plan.json")};
  for (auto& w : seqJob()) args.push_back(w);
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("/coll_tuned_rules.conf (written for a real run):\n# Open MPI coll_tuned"),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("4 0 0 # >= 64 KiB: ring"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("the rules are used only if this exits 0 on every host:\n" + fakeMpirun_ +
                       " --hostfile "),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("/bin/sh -c 'test -r \"$0\"' "), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("argv:"), std::string::npos) << "nothing ran";
  EXPECT_TRUE(runDirEmpty());
  // --rules-out: written there, kept.
  std::string kept = dir_.file("kept-rules.conf");
  args = {"--plan", dir_.file("rules-plan.json"), "--rules-out", kept};
  for (auto& w : seqJob()) args.push_back(w);
  c = rankmap(args);
  EXPECT_NE(c.out.find("coll_tuned_dynamic_rules_filename " + kept), std::string::npos) << c.out;
  EXPECT_TRUE(std::filesystem::exists(kept));
  EXPECT_TRUE(runDirEmpty());
}

// --mesh dp=4,pp=2 over the 8-VM testbed's topology (racks {vm0 vm2 vm5 vm7}, {vm1 vm3 vm4 vm6}):
// the hostfile puts each data-parallel group (positions 0 2 4 6, and 1 3 5 7) in one rack.
TEST_F(RunCli, MeshPlacesEachDataParallelGroupInOneRack) {
  writeFileAtomic(dir_.file("hf8"), "vm0\nvm1\nvm2\nvm3\nvm4\nvm5\nvm6\nvm7\n");
  std::string topology = std::string(RANKMAP_TEST_DATA_DIR) + "/topologies/testbed_8vm_2rack.json";
  Completed c =
      rankmap({"--dry-run", "--topology", topology, "--mesh", "dp=4,pp=2", "--", fakeMpirun_,
               "--hostfile", dir_.file("hf8"), "--mca", "rmaps", "seq", "--np", "8", "./prog"});
  ASSERT_EQ(c.status, 0) << c.out << c.err;
  EXPECT_NE(c.err.find("predicted step 4.99x faster for mesh dp=4,pp=2 than the launcher's order "
                       "(4.81x than the world ring's plan)"),
            std::string::npos)
      << c.err;
  std::vector<std::string> order;
  for (const auto& line : testing::lines(c.out))
    if (line.rfind("vm", 0) == 0 && order.size() < 8) order.push_back(line);  // the hostfile
  ASSERT_EQ(order.size(), 8u) << c.out;
  auto rack = [](const std::string& h) {
    return h == "vm0" || h == "vm2" || h == "vm5" || h == "vm7" ? 0 : 1;
  };
  for (size_t p = 2; p < 8; ++p) EXPECT_EQ(rack(order[p]), rack(order[p % 2])) << c.out;

  // What cannot work is refused before anything runs, naming the option.
  c = rankmap({"--plan", dir_.file("plan.json"), "--mesh", "dp=4", "--", "mpirun"});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("--mesh: a plan file"), std::string::npos) << c.err;
  c = rankmap({"--topology", topology, "--traffic", "dp=allreduce:1M", "--", "mpirun"});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("--traffic: expected together with --mesh"), std::string::npos) << c.err;
  c = rankmap({"--topology", topology, "--mesh", "dp=4,dp=2", "--", "mpirun"});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("dimension 'dp' is named twice"), std::string::npos) << c.err;
  c = rankmap({"--dry-run", "--topology", topology, "--mesh", "dp=8,tp=2", "--", "torchrun",
               "--nproc-per-node", "gpu", "train.py"});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("--nproc-per-node \"gpu\" is not a count"), std::string::npos) << c.err;
}

// A profile recorded from the job (here written as the MPI shim writes one for a dp=4 x pp=2
// step: two MPI_Comm_split sets, 4 steps of 256 MiB allreduce and 8 MiB each way) plans it like
// the hand-written --mesh dp=4,pp=2 with the default traffic; a profile of another job, or with
// --mesh, is refused before anything runs.
TEST_F(RunCli, ProfilePlansLikeTheHandWrittenMeshAndOnlyItsOwnJob) {
  writeFileAtomic(dir_.file("hf8"), "vm0\nvm1\nvm2\nvm3\nvm4\nvm5\nvm6\nvm7\n");
  std::string topology = std::string(RANKMAP_TEST_DATA_DIR) + "/topologies/testbed_8vm_2rack.json";
  JobProfile prof;
  prof.program = "prog";
  prof.worldSize = 8;
  prof.recorded = "2026-12-04T05:00:00Z";
  prof.sets = {
      {"MPI_COMM_WORLD", 0, {{0, 1, 2, 3, 4, 5, 6, 7}}, {{"allreduce", 5, 40}}},
      {"MPI_Comm_split", 1, {{0, 2, 4, 6}, {1, 3, 5, 7}}, {{"allreduce", 4, 4 * (256ull << 20)}}},
      {"MPI_Comm_split", 2, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, {{"sendrecv", 8, 8 * (8ull << 20)}}}};
  writeFileAtomic(dir_.file("profile.json"), prof.dump());
  auto job = [&](const std::string& program, const std::string& np) {
    return std::vector<std::string>{"--",    fakeMpirun_, "--hostfile", dir_.file("hf8"),
                                    "--mca", "rmaps",     "seq",        "--np",
                                    np,      program};
  };
  auto hostfile = [](const std::string& out) {
    std::vector<std::string> order;
    for (const auto& line : testing::lines(out))
      if (line.rfind("vm", 0) == 0 && order.size() < 8) order.push_back(line);
    return order;
  };
  std::vector<std::string> args{"--dry-run", "--topology", topology, "--mesh", "dp=4,pp=2"};
  for (auto& w : job("./prog", "8")) args.push_back(w);
  Completed hand = rankmap(args);
  ASSERT_EQ(hand.status, 0) << hand.err;
  args = {"--dry-run", "--topology", topology, "--profile", dir_.file("profile.json")};
  for (auto& w : job("/work/bin/prog", "8")) args.push_back(w);
  Completed fromProfile = rankmap(args);
  ASSERT_EQ(fromProfile.status, 0) << fromProfile.err;
  EXPECT_EQ(hostfile(fromProfile.out), hostfile(hand.out)) << hand.out << fromProfile.out;
  EXPECT_EQ(hostfile(hand.out).size(), 8u) << hand.out;
  EXPECT_NE(fromProfile.err.find("predicted step 4.99x faster for mesh split1=4,split2=2"),
            std::string::npos)
      << fromProfile.err;

  // Another program, another world size, --mesh besides: refused, naming what differs.
  args = {"--topology", topology, "--profile", dir_.file("profile.json")};
  for (auto& w : job("./other", "8")) args.push_back(w);
  Completed c = rankmap(args);
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("recorded from program 'prog' with 8 ranks (fields program, world_size); "
                       "this job runs 'other' with 8 ranks: a profile plans only the job it was "
                       "recorded from"),
            std::string::npos)
      << c.err;
  EXPECT_EQ(c.out.find("argv:"), std::string::npos) << "nothing ran";
  args = {"--topology", topology,    "--profile",  dir_.file("profile.json"),
          "--",         fakeMpirun_, "--hostfile", dir_.file("hf"),
          "--mca",      "rmaps",     "seq",        "--np",
          "4",          "./prog"};
  c = rankmap(args);
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("this job runs 'prog' with 4 ranks"), std::string::npos) << c.err;
  c = rankmap({"--topology", topology, "--profile", dir_.file("profile.json"), "--mesh", "dp=8",
               "--", "mpirun"});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("--profile: expected instead of --mesh"), std::string::npos) << c.err;
  writeFileAtomic(dir_.file("bad-profile.json"), "{\"schema\": \"rankmap.plan\"}");
  c = rankmap({"--topology", topology, "--profile", dir_.file("bad-profile.json"), "--", "mpirun"});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("bad-profile.json: at /schema: expected \"rankmap.profile\""),
            std::string::npos)
      << c.err;

  // --record-profile: every rank preloads the shim with the file to write (absolute).
  args = {"--dry-run", "--topology", topology, "--record-profile", "next.json"};
  for (auto& w : job("./prog", "8")) args.push_back(w);
  c = rankmap(args);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("-x LD_PRELOAD=/opt/rankmap/librankmap_mpi.so -x RANKMAP_PLAN="),
            std::string::npos)
      << c.out;
  EXPECT_NE(c.out.find("/next.json"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("-x RANKMAP_PROFILE_OUT=/"), std::string::npos) << c.out;
  EXPECT_NE(c.err.find("recording the job's profile"), std::string::npos) << c.err;
  c = rankmap({"--mode", "launch", "--record-profile", "next.json", "--", "mpirun"});
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("--record-profile: expected --mode shim or auto"), std::string::npos)
      << c.err;

  // torchrun: the workers load the Python hook (this build's launch/python first on PYTHONPATH),
  // whose rank 0 writes every rank's record for rankmap run to merge; the settings are on the
  // command line (env), --mode does not apply.
  c = rankmap({"--dry-run", "--mode", "launch", "--record-profile", "next.json", "--", "torchrun",
               "--nnodes", "1", "--nproc-per-node", "4", "train.py"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.out.rfind("env PYTHONPATH=/", 0), 0u) << c.out;
  EXPECT_NE(c.out.find("/launch/python"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find(" RANKMAP_PROFILE_RECORDS=/"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("ms torchrun --nnodes 1 --nproc-per-node 4"), std::string::npos) << c.out;
  EXPECT_NE(c.err.find("recording the job's profile"), std::string::npos) << c.err;
  // A torchrun profile plans only its own script and world size.
  prof.program = "train.py";
  writeFileAtomic(dir_.file("torch-profile.json"), prof.dump());
  auto torchJob = [&](const std::string& script, const std::string& nodes) {
    return rankmap({"--dry-run", "--topology", topology, "--profile",
                    dir_.file("torch-profile.json"), "--", "torchrun", "--nnodes", nodes,
                    "--nproc-per-node", "1", script});
  };
  c = torchJob("train.py", "8");
  EXPECT_EQ(c.status, 0) << c.err;
  c = torchJob("other.py", "8");
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("this job runs 'other.py' with 8 ranks"), std::string::npos) << c.err;
  c = torchJob("train.py", "4");
  EXPECT_EQ(c.status, 2) << c.err;
  EXPECT_NE(c.err.find("this job runs 'train.py' with 4 ranks"), std::string::npos) << c.err;
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
