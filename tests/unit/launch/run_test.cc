// `rankmap run`'s decision for mpirun (launch/launch.h): plan coverage by names and
// addresses, ranks per host, launch and shim modes, and every reason to run the command
// unchanged; the pieces launcher modules share (sequential hostfiles, long options, the
// environment). No processes, no network.
#include "launch/launch.h"
#include "launch/launchers.h"

#include <stdlib.h>

#include <gtest/gtest.h>

#include "common/error.h"
#include "launch/mpirun.h"
#include "tests/unit/common/plan_util.h"

namespace rankmap::launch {
namespace {

using Argv = std::vector<std::string>;

Plan makePlan(std::vector<std::string> hosts, std::vector<std::string> order, int k = 1) {
  return testing::orderedPlan(std::move(hosts), std::move(order), k, 0.8, 3.4);
}

std::unique_ptr<MpirunCommand> cmd(const Argv& argv, const std::string& hostfile = "") {
  return MpirunCommand::parse(
      argv, [hostfile](const std::string&) { return hostfile; },
      [](const std::string&) -> std::optional<std::string> { return std::nullopt; });
}

RunOptions opts(Mode mode = Mode::kAuto) {
  RunOptions o;
  o.mode = mode;
  o.dir = "/run/rm";
  o.shimLib = "/lib/librankmap_mpi.so";
  o.planPath = "/plans/plan.json";
  return o;
}

PlanSource fileSource() { return {"/plans/plan.json", false}; }

const Argv kSeqArgv{"mpirun", "--hostfile", "/hf", "--mca", "rmaps", "seq", "--np", "4", "./prog"};

TEST(MatchHosts, ByNameAndByAddress) {
  std::vector<JobHost> job{{"vm1", 1}, {"10.0.0.3", 1}, {"root@vm0", 1}};
  std::vector<Host> known{{"vm0", "10.0.0.1"}, {"vm1", "10.0.0.2:7411"}, {"vm2", "10.0.0.3:7411"}};
  EXPECT_EQ(matchHosts(job, {"vm0", "vm1", "vm2"}, known), (Argv{"vm1", "vm2", "vm0"}));
}

TEST(MatchHosts, RefusesWhatDoesNotCover) {
  std::vector<Host> known{{"vm0", "10.0.0.1"}, {"vm1", "10.0.0.2"}};
  auto why = [&](std::vector<JobHost> job, Argv plan) -> std::string {
    try {
      matchHosts(job, plan, known);
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(why({{"vm0", 1}, {"vm7", 1}}, {"vm0", "vm1"}).find("job host vm7 is not in the plan"),
            std::string::npos);
  EXPECT_NE(why({{"vm0", 1}}, {"vm0", "vm1"}).find("plan host vm1 is not a host of the job"),
            std::string::npos);
  EXPECT_NE(why({{"vm0", 1}, {"10.0.0.1", 1}}, {"vm0", "vm1"}).find("both plan host vm0"),
            std::string::npos);
  // An address without a topology cannot be matched.
  EXPECT_NE(why({{"10.0.0.9", 1}}, {"vm0"}).find("10.0.0.9"), std::string::npos);
}

TEST(PrepareRun, LaunchModeWritesTheHostfileInPlanOrder) {
  auto c = cmd(kSeqArgv, "vm0\nvm1\nvm2\nvm3\n");
  Plan p = makePlan({"vm0", "vm1", "vm2", "vm3"}, {"vm0", "vm2", "vm1", "vm3"});
  RunDecision d = prepareRun(*c, p, "", fileSource(), {}, opts());
  ASSERT_TRUE(d.applied) << d.message;
  EXPECT_EQ(d.command.argv, (Argv{"mpirun", "--hostfile", "/run/rm/hostfile", "--mca", "rmaps",
                                  "seq", "-np", "4", "./prog"}));
  ASSERT_EQ(d.command.files.size(), 1u);
  EXPECT_EQ(d.command.files[0].second, "vm0\nvm2\nvm1\nvm3\n");
  EXPECT_NE(d.message.find("launch mode"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find(p.hash.substr(0, 19)), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("predicted 3.40x faster for allreduce 16 MiB ring than the launcher's order"),
            std::string::npos)
      << d.message;
  EXPECT_EQ(d.message.find('\n'), std::string::npos);
}

TEST(PrepareRun, SlotsStayContiguousPerHost) {
  auto c = cmd({"mpirun", "--hostfile", "/hf", "./prog"}, "a slots=2\nb slots=2\nc slots=2\n");
  Plan p = makePlan({"a", "b", "c"}, {"c", "a", "b"}, 2);
  RunDecision d = prepareRun(*c, p, "", fileSource(), {}, opts(Mode::kLaunch));
  ASSERT_TRUE(d.applied) << d.message;
  EXPECT_EQ(d.command.files[0].second, "c\nc\na\na\nb\nb\n");
  EXPECT_EQ(d.command.argv[7], "6");
}

TEST(PrepareRun, UnevenSlotsUseTheHostOrder) {
  auto c = cmd({"mpirun", "--hostfile", "/hf", "./prog"}, "a slots=1\nb slots=3\nc slots=2\n");
  Plan p = makePlan({"a", "b", "c"}, {"b", "c", "a"});
  RunDecision d = prepareRun(*c, p, "", fileSource(), {}, opts());
  ASSERT_TRUE(d.applied) << d.message;
  EXPECT_EQ(d.command.files[0].second, "b\nb\nb\nc\nc\na\n");
  // The shim needs the same count everywhere.
  RunDecision s = prepareRun(*c, p, "", fileSource(), {}, opts(Mode::kShim));
  EXPECT_FALSE(s.applied);
  EXPECT_EQ(s.command.argv, c->argv());
  EXPECT_NE(s.message.find("same number of ranks"), std::string::npos) << s.message;
}

TEST(PrepareRun, AddressesMatchThroughTheTopology) {
  auto c = cmd({"mpirun", "-H", "10.0.0.1,10.0.0.2,10.0.0.3", "./prog"});
  Plan p = makePlan({"vm0", "vm1", "vm2"}, {"vm2", "vm0", "vm1"});
  std::vector<Host> known{{"vm0", "10.0.0.1"}, {"vm1", "10.0.0.2"}, {"vm2", "10.0.0.3"}};
  RunDecision d = prepareRun(*c, p, "", fileSource(), known, opts());
  ASSERT_TRUE(d.applied) << d.message;
  // The hostfile keeps the job's own spelling.
  EXPECT_EQ(d.command.files[0].second, "10.0.0.3\n10.0.0.1\n10.0.0.2\n");
  // Without addresses, the job is not covered.
  RunDecision u = prepareRun(*c, p, "", fileSource(), {}, opts());
  EXPECT_FALSE(u.applied);
  EXPECT_NE(u.message.find("does not cover"), std::string::npos) << u.message;
}

TEST(PrepareRun, OriginalCommandUnchangedWhenThePlanDoesNotFit) {
  auto c = cmd(kSeqArgv, "vm0\nvm1\nvm2\nvm3\n");
  struct Case {
    std::optional<Plan> plan;
    const char* why;
  } cases[] = {
      {std::nullopt, "no plan from /plans/plan.json: cannot read"},
      {makePlan({"vm0", "vm1", "vm2", "vm4"}, {"vm4", "vm0", "vm1", "vm2"}), "vm3 is not in the plan"},
      {makePlan({"vm0", "vm1", "vm2", "vm3", "vm4"}, {"vm4", "vm0", "vm1", "vm2", "vm3"}),
       "plan host vm4 is not a host of the job"},
      {makePlan({"vm0", "vm1", "vm2", "vm3"}, {"vm1", "vm0", "vm2", "vm3"}, 2),
       "is for 2 rank(s) per host (8 ranks); the job runs 1 per host (4 ranks)"},
      {makePlan({"vm0", "vm1", "vm2", "vm3"}, {"vm0", "vm1", "vm2", "vm3"}),
       "keeps the launcher's host order"},
  };
  for (const auto& k : cases) {
    RunDecision d = prepareRun(*c, k.plan, "cannot read", fileSource(), {}, opts());
    EXPECT_FALSE(d.applied) << k.why;
    EXPECT_EQ(d.command.argv, kSeqArgv) << k.why;
    EXPECT_TRUE(d.command.files.empty()) << k.why;
    EXPECT_NE(d.message.find("running the original command unchanged"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find(k.why), std::string::npos) << d.message;
  }
}

TEST(PrepareRun, PlanMadeForTheJobAdaptsRanksPerHost) {
  auto c = cmd({"mpirun", "-H", "a:2,b:2", "./prog"});
  Plan p = makePlan({"a", "b"}, {"b", "a"}, 1);
  PlanSource agent{"agent http://127.0.0.1:7410", true};
  RunDecision d = prepareRun(*c, p, "", agent, {}, opts(Mode::kShim));
  ASSERT_TRUE(d.applied) << d.message;
  ASSERT_TRUE(d.plan);
  EXPECT_EQ(d.plan->ranksPerHost, 2);
  EXPECT_EQ(d.plan->permutation, (std::vector<int>{2, 3, 0, 1}));
  EXPECT_NE(d.message.find("adapted to 2 rank(s) per host"), std::string::npos) << d.message;
}

TEST(PrepareRun, ShimModePreloadsWithThePlanFile) {
  auto c = cmd(kSeqArgv, "vm0\nvm1\nvm2\nvm3\n");
  Plan p = makePlan({"vm0", "vm1", "vm2", "vm3"}, {"vm0", "vm2", "vm1", "vm3"});
  RunDecision d = prepareRun(*c, p, "", fileSource(), {}, opts(Mode::kShim));
  ASSERT_TRUE(d.applied) << d.message;
  EXPECT_EQ(d.command.argv, (Argv{"mpirun", "-x", "LD_PRELOAD=/lib/librankmap_mpi.so", "-x",
                                  "RANKMAP_PLAN=/plans/plan.json", "--hostfile", "/hf", "--mca",
                                  "rmaps", "seq", "--np", "4", "./prog"}));
  EXPECT_TRUE(d.command.files.empty());
  EXPECT_NE(d.message.find("shim mode"), std::string::npos) << d.message;
}

TEST(PrepareRun, ShimModeAdaptsThePlanToTheLauncherOrder) {
  // The plan lists the hosts in another input order than the job's hostfile.
  auto c = cmd(kSeqArgv, "vm3\nvm2\nvm1\nvm0\n");
  Plan p = makePlan({"vm0", "vm1", "vm2", "vm3"}, {"vm0", "vm2", "vm1", "vm3"});
  RunDecision d = prepareRun(*c, p, "", fileSource(), {}, opts(Mode::kShim));
  ASSERT_TRUE(d.applied) << d.message;
  ASSERT_TRUE(d.plan);
  EXPECT_EQ(d.plan->hosts, (Argv{"vm3", "vm2", "vm1", "vm0"}));
  EXPECT_EQ(d.plan->order, p.order);
  // Launcher rank 0 runs on vm3, the plan's last position.
  EXPECT_EQ(d.plan->permutation, (std::vector<int>{3, 1, 2, 0}));
  ASSERT_EQ(d.command.files.size(), 1u);
  EXPECT_EQ(d.command.files[0].first, "/run/rm/plan.json");
  EXPECT_EQ(Plan::parse(d.command.files[0].second, "written"), *d.plan);
  EXPECT_EQ(d.command.argv[4], "RANKMAP_PLAN=/run/rm/plan.json");
  EXPECT_NE(d.message.find("adapted to the launcher's host order"), std::string::npos) << d.message;
}

TEST(PrepareRun, ShimModeWithoutTheLibraryRunsUnchanged) {
  auto c = cmd(kSeqArgv, "vm0\nvm1\nvm2\nvm3\n");
  Plan p = makePlan({"vm0", "vm1", "vm2", "vm3"}, {"vm0", "vm2", "vm1", "vm3"});
  RunOptions o = opts(Mode::kShim);
  o.shimLib.clear();
  RunDecision d = prepareRun(*c, p, "", fileSource(), {}, o);
  EXPECT_FALSE(d.applied);
  EXPECT_NE(d.message.find("librankmap_mpi.so not found"), std::string::npos) << d.message;
}

TEST(ParseLaunchCommand, UnknownLaunchersAndOptionsPassThrough) {
  std::string why;
  EXPECT_EQ(parseLaunchCommand({"prun", "-n", "2", "./prog"}, why), nullptr);
  EXPECT_NE(why.find("not a launcher rankmap run knows"), std::string::npos) << why;
  EXPECT_EQ(parseLaunchCommand({"mpirun", "--wat", "-H", "a", "./prog"}, why), nullptr);
  EXPECT_NE(why.find("--wat"), std::string::npos) << why;
  RunDecision d = unchanged({"mpirun", "--wat"}, why);
  EXPECT_EQ(d.command.argv, (Argv{"mpirun", "--wat"}));
  EXPECT_FALSE(d.applied);
}

TEST(ShellJoin, QuotesWhatTheShellWouldSplit) {
  EXPECT_EQ(shellJoin({"mpirun", "-x", "A=b c", "it's", "--mca", "btl", "tcp,self", ""}),
            "mpirun -x 'A=b c' 'it'\\''s' --mca btl tcp,self ''");
}

TEST(SequentialHostfile, OneLinePerRankInTheGivenOrder) {
  EXPECT_EQ(sequentialHostfile({{"b", 2}, {"a", 1}, {"c", 0}, {"u@d", 1}}, 4, "ranks"),
            "b\nb\na\nu@d\n");
  EXPECT_EQ(sequentialHostfile({}, 0, "ranks"), "");
  try {
    sequentialHostfile({{"a", 2}, {"b", 2}}, 6, "ranks in the hostfile vs the job");
    FAIL() << "no throw";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("ranks in the hostfile vs the job: 4 vs 6"),
              std::string::npos)
        << e.what();
  }
}

TEST(SplitLongOption, NameAndAttachedValue) {
  LongOption o = splitLongOption("--nnodes");
  EXPECT_EQ(o.name, "nnodes");
  EXPECT_FALSE(o.value);
  o = splitLongOption("--export=A=1,B");
  EXPECT_EQ(o.name, "export");
  EXPECT_EQ(o.value, "A=1,B");
  o = splitLongOption("--tee=");
  EXPECT_EQ(o.name, "tee");
  EXPECT_EQ(o.value, "");
}

TEST(ProcessEnv, ReadsTheEnvironment) {
  ::setenv("RANKMAP_TEST_PROCESS_ENV", "x y", 1);
  EXPECT_EQ(processEnv("RANKMAP_TEST_PROCESS_ENV"), "x y");
  ::unsetenv("RANKMAP_TEST_PROCESS_ENV");
  EXPECT_FALSE(processEnv("RANKMAP_TEST_PROCESS_ENV"));
}

TEST(Mode, Parses) {
  EXPECT_EQ(parseMode("launch"), Mode::kLaunch);
  EXPECT_EQ(parseMode("shim"), Mode::kShim);
  EXPECT_EQ(parseMode("auto"), Mode::kAuto);
  EXPECT_THROW(parseMode("fast"), InvalidInput);
}

}  // namespace
}  // namespace rankmap::launch
