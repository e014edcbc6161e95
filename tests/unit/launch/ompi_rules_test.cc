// Open MPI's decision from the plan (launch/ompi_rules.h): the coll_tuned rules file read back
// as Open MPI 4.1's reader reads it, the user's coll_tuned settings winning (command line, -x,
// environment, mca-params files), the rewritten mpirun command in launch and shim mode, the
// check that every host reads the file, and the engine's advice. No processes, no network.
#include "launch/ompi_rules.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>

#include "common/error.h"
#include "common/openmpi.h"
#include "launch/launch.h"
#include "launch/mpirun.h"
#include "tests/unit/common/plan_util.h"

namespace rankmap::launch {
namespace {

using Argv = std::vector<std::string>;

// Open MPI 4.1's rules reader, as coll_tuned_dynamic_file.c and coll_base_util.c read: the next
// integer (strtol base 0, as fscanf "%li"), skipping any other character, and from '#' to the end
// of the line.
class OmpiReader {
 public:
  explicit OmpiReader(std::string text) : text_(std::move(text)) {}
  long next() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c)) ||
          ((c == '-' || c == '+') && pos_ + 1 < text_.size() &&
           std::isdigit(static_cast<unsigned char>(text_[pos_ + 1])))) {
        char* end = nullptr;
        long v = std::strtol(text_.c_str() + pos_, &end, 0);
        pos_ = static_cast<size_t>(end - text_.c_str());
        return v;
      }
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      }
      ++pos_;
    }
    throw std::runtime_error("rules file ended early");
  }
  bool atEnd() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (!std::isspace(static_cast<unsigned char>(c))) {
        return false;
      }
      ++pos_;
    }
    return true;
  }

 private:
  std::string text_;
  size_t pos_ = 0;
};

struct MsgRule {
  long size, alg, faninout, segsize;
};
struct ComRule {
  long size;
  std::vector<MsgRule> msgs;
};
using Rules = std::map<long, std::vector<ComRule>>;  // collective id -> communicator rules

Rules readRules(const std::string& text) {
  OmpiReader r(text);
  Rules out;
  long ncol = r.next();
  for (long c = 0; c < ncol; ++c) {
    long id = r.next();
    long ncs = r.next();
    auto& coms = out[id];
    for (long k = 0; k < ncs; ++k) {
      ComRule com{r.next(), {}};
      long nms = r.next();
      for (long m = 0; m < nms; ++m) {
        MsgRule msg{r.next(), r.next(), r.next(), r.next()};
        com.msgs.push_back(msg);
      }
      coms.push_back(com);
    }
  }
  EXPECT_TRUE(r.atEnd()) << "trailing data in the rules file";
  return out;
}

// ompi_coll_tuned_get_com_rule_ptr + get_target_method_params: the last communicator rule of
// size <= the communicator's (the first when none is), then the last message rule <= the size.
MsgRule lookup(const Rules& rules, long coll, long commSize, long bytes) {
  const auto& coms = rules.at(coll);
  const ComRule* best = &coms.front();
  for (const auto& c : coms) {
    if (c.size > commSize) break;
    best = &c;
  }
  const MsgRule* m = &best->msgs.front();
  for (const auto& r : best->msgs) {
    if (r.size > bytes) break;
    m = &r;
  }
  return *m;
}

Plan planWithRules(int k = 1) {
  Plan p =
      testing::orderedPlan({"vm0", "vm1", "vm2", "vm3"}, {"vm0", "vm2", "vm1", "vm3"}, k, 0.9, 3.0);
  p.openMpi["allreduce"] = {{0, 65536, 3, 0, 0, 120, 0},
                            {65536, 1 << 20, 6, 0, 0, 900, 850},
                            {1 << 20, AlgoRange::kUnbounded, 4, 0, 0, 50000, 30000}};
  p.openMpi["bcast"] = {{0, 8192, 1, 0, 0, 50, 0},
                        {8192, AlgoRange::kUnbounded, 2, 131072, 4, 9000, 0}};
  p.seal();
  return p;
}

TEST(CollTunedRules, ReadBackAsOpenMpiReadsThem) {
  Plan p = planWithRules();
  std::string text = collTunedRules(p);
  Rules rules = readRules(text);
  ASSERT_EQ(rules.size(), 2u);
  const long allreduce = findOmpiCollective("allreduce")->collId;
  const long bcast = findOmpiCollective("bcast")->collId;
  EXPECT_EQ(allreduce, 2);
  EXPECT_EQ(bcast, 7);
  // For a communicator of the plan's 4 ranks: the plan's ranges, bounds included.
  EXPECT_EQ(lookup(rules, allreduce, 4, 0).alg, 3);
  EXPECT_EQ(lookup(rules, allreduce, 4, 65535).alg, 3);
  EXPECT_EQ(lookup(rules, allreduce, 4, 65536).alg, 6);
  EXPECT_EQ(lookup(rules, allreduce, 4, (1 << 20) - 1).alg, 6);
  EXPECT_EQ(lookup(rules, allreduce, 4, 1 << 20).alg, 4);
  EXPECT_EQ(lookup(rules, allreduce, 4, 1L << 40).alg, 4);
  MsgRule chain = lookup(rules, bcast, 4, 1 << 24);
  EXPECT_EQ(chain.alg, 2);
  EXPECT_EQ(chain.segsize, 131072);
  EXPECT_EQ(chain.faninout, 4);
  // Every other communicator size: algorithm 0, Open MPI's own decision.
  for (long size : {1L, 2L, 3L, 5L, 64L})
    for (long coll : {allreduce, bcast}) EXPECT_EQ(lookup(rules, coll, size, 1 << 20).alg, 0);
  // Every message rule list starts at 0, as Open MPI requires, and ascends.
  for (const auto& [coll, coms] : rules)
    for (const auto& c : coms) {
      ASSERT_FALSE(c.msgs.empty());
      EXPECT_EQ(c.msgs.front().size, 0);
      for (size_t i = 1; i < c.msgs.size(); ++i) EXPECT_GT(c.msgs[i].size, c.msgs[i - 1].size);
    }
  // The comments name the plan and each choice.
  EXPECT_NE(text.find(p.hash), std::string::npos);
  EXPECT_NE(text.find("rabenseifner"), std::string::npos);
}

TEST(CollTunedRules, TheWorldOfTheRanksPerHost) {
  Rules rules = readRules(collTunedRules(planWithRules(2)));
  EXPECT_EQ(lookup(rules, 2, 8, 1 << 20).alg, 4);
  EXPECT_EQ(lookup(rules, 2, 4, 1 << 20).alg, 0);
}

TEST(CollTunedRules, NothingWithoutTheDecision) {
  Plan p = testing::orderedPlan({"vm0", "vm1"}, {"vm1", "vm0"});
  EXPECT_EQ(collTunedRules(p), "");
}

TEST(CollTunedRules, WhatDecidesCollTuned) {
  EXPECT_TRUE(decidesCollTuned("coll_tuned_allreduce_algorithm", "4"));
  EXPECT_TRUE(decidesCollTuned("coll_tuned_use_dynamic_rules", "0"));
  EXPECT_TRUE(decidesCollTuned("coll", "^tuned"));
  EXPECT_TRUE(decidesCollTuned("coll", "^hcoll,tuned"));
  EXPECT_TRUE(decidesCollTuned("coll", "basic,libnbc,self"));
  EXPECT_FALSE(decidesCollTuned("coll", "^hcoll"));
  EXPECT_FALSE(decidesCollTuned("coll", "tuned,basic,libnbc,self"));
  EXPECT_FALSE(decidesCollTuned("btl", "tcp,self"));
  EXPECT_FALSE(decidesCollTuned("coll_base_verbose", "10"));
}

TEST(CollTunedRules, SettingsOutsideTheCommandLine) {
  std::map<std::string, std::string> files;
  std::map<std::string, std::string> env{{"HOME", "/home/u"}};
  CollTunedSources src;
  src.env = [&](const std::string& n) -> std::optional<std::string> {
    auto it = env.find(n);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  src.read = [&](const std::string& f) -> std::optional<std::string> {
    auto it = files.find(f);
    return it == files.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  EXPECT_EQ(userCollTunedOutside(src), std::nullopt);
  files["/etc/openmpi/openmpi-mca-params.conf"] =
      "# coll_tuned_allreduce_algorithm = 4 (commented)\nbtl_base_warn_component_unused=0\n";
  EXPECT_EQ(userCollTunedOutside(src), std::nullopt);
  files["/home/u/.openmpi/mca-params.conf"] = "  coll_tuned_allreduce_algorithm = 4 # ring\n";
  EXPECT_EQ(userCollTunedOutside(src),
            "coll_tuned_allreduce_algorithm = 4 in /home/u/.openmpi/mca-params.conf");
  // OMPI_MCA_mca_base_param_files replaces the default files.
  env["OMPI_MCA_mca_base_param_files"] = "/a.conf:/b.conf";
  EXPECT_EQ(userCollTunedOutside(src), std::nullopt);
  files["/b.conf"] = "coll = ^tuned\n";
  EXPECT_EQ(userCollTunedOutside(src), "coll = ^tuned in /b.conf");
  // The environment first.
  src.environment = {"PATH=/bin", "OMPI_MCA_coll_tuned_use_dynamic_rules=1"};
  EXPECT_EQ(userCollTunedOutside(src),
            "OMPI_MCA_coll_tuned_use_dynamic_rules=1 in the environment");
}

std::unique_ptr<MpirunCommand> rulesCmd(const Argv& argv, const std::string& hostfile = "",
                                        std::map<std::string, std::string> env = {}) {
  return MpirunCommand::parse(
      argv, [hostfile](const std::string&) { return hostfile; },
      [env](const std::string& n) -> std::optional<std::string> {
        auto it = env.find(n);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      });
}

RunOptions rulesOpts(RulesMode rules, Mode mode = Mode::kAuto) {
  RunOptions o;
  o.mode = mode;
  o.dir = "/run/rm";
  o.shimLib = "/lib/librankmap_mpi.so";
  o.planPath = "/plans/plan.json";
  o.rules = rules;
  o.engineRouting = true;  // no engine advice in these tests (EngineAdvice covers it)
  return o;
}

PlanSource rulesFileSource() { return {"/plans/plan.json", false}; }

const Argv kArgv{"mpirun", "--hostfile",        "/hf",    "--mca",  "rmaps",   "seq",
                 "--mca",  "plm_rsh_agent",     "/agent", "-x",     "FOO=1",   "--bind-to",
                 "none",   "--output-filename", "/out",   "./prog", "--bytes", "8"};
const char* kHosts = "vm0\nvm1\nvm2\nvm3\n";
const Argv kRuleOptions{
    "--mca", "coll_tuned_use_dynamic_rules",      "1",
    "--mca", "coll_tuned_dynamic_rules_filename", "/run/rm/coll_tuned_rules.conf"};

TEST(PrepareRunRules, LaunchModeHandsOpenMpiTheRules) {
  auto c = rulesCmd(kArgv, kHosts);
  Plan p = planWithRules();
  RunDecision d = prepareRun(*c, p, "", rulesFileSource(), {}, rulesOpts(RulesMode::kOn));
  ASSERT_TRUE(d.applied) << d.message;
  ASSERT_TRUE(d.rules);
  Argv want{"mpirun"};
  want.insert(want.end(), kRuleOptions.begin(), kRuleOptions.end());
  for (const char* w : {"--hostfile", "/run/rm/hostfile", "--mca", "rmaps", "seq", "-np", "4",
                        "--mca", "plm_rsh_agent", "/agent", "-x", "FOO=1", "--bind-to", "none",
                        "--output-filename", "/out", "./prog", "--bytes", "8"})
    want.push_back(w);
  EXPECT_EQ(d.command.argv, want);
  ASSERT_EQ(d.command.files.size(), 2u);
  EXPECT_EQ(d.command.files[1].first, "/run/rm/coll_tuned_rules.conf");
  EXPECT_EQ(d.command.files[1].second, collTunedRules(p));
  EXPECT_FALSE(d.rules->kept);
  EXPECT_TRUE(d.rules->check.argv.empty()) << "RANKMAP_MPI_RULES=1: no check";
  // Without the rules: the launch-mode command as before.
  EXPECT_EQ(Argv(d.command.argv.begin() + 7, d.command.argv.end()),
            Argv(d.rules->withoutRules.begin() + 1, d.rules->withoutRules.end()));
  EXPECT_NE(d.message.find("coll_tuned rules /run/rm/coll_tuned_rules.conf"), std::string::npos)
      << d.message;
}

TEST(PrepareRunRules, AutoChecksThatEveryHostReadsThem) {
  auto c = rulesCmd(kArgv, kHosts);
  RunDecision d =
      prepareRun(*c, planWithRules(), "", rulesFileSource(), {}, rulesOpts(RulesMode::kAuto));
  ASSERT_TRUE(d.rules);
  // The job's launch options (not its output options, rmaps or program), each host once.
  EXPECT_EQ(d.rules->check.argv,
            (Argv{"mpirun", "--mca", "plm_rsh_agent", "/agent", "-x", "FOO=1", "--bind-to", "none",
                  "--hostfile", "/run/rm/hostfile-check", "--mca", "rmaps", "seq", "-np", "4",
                  "/bin/sh", "-c", "test -r \"$0\"", "/run/rm/coll_tuned_rules.conf"}));
  ASSERT_EQ(d.rules->check.files.size(), 1u);
  EXPECT_EQ(d.rules->check.files[0].second, kHosts);
  EXPECT_NE(d.message.find("if every host reads them"), std::string::npos) << d.message;
}

TEST(PrepareRunRules, KeptWhereTheUserAsks) {
  auto c = rulesCmd(kArgv, kHosts);
  RunOptions o = rulesOpts(RulesMode::kOn);
  o.rulesPath = "/shared/rules.conf";
  RunDecision d = prepareRun(*c, planWithRules(), "", rulesFileSource(), {}, o);
  ASSERT_TRUE(d.rules);
  EXPECT_TRUE(d.rules->kept);
  EXPECT_EQ(d.rules->path, "/shared/rules.conf");
  EXPECT_EQ(d.command.files.size(), 1u) << "only the hostfile goes in the run directory";
  EXPECT_EQ(d.command.argv[6], "/shared/rules.conf");
}

TEST(PrepareRunRules, TheUsersSettingsWin) {
  Plan p = planWithRules();
  for (const auto& [extra, env, what] :
       std::vector<std::tuple<Argv, std::map<std::string, std::string>, std::string>>{
           {{"--mca", "coll_tuned_allreduce_algorithm", "4"},
            {},
            "--mca coll_tuned_allreduce_algorithm 4"},
           {{"-mca", "coll", "^tuned"}, {}, "-mca coll ^tuned"},
           {{"-x", "OMPI_MCA_coll_tuned_use_dynamic_rules=0"},
            {},
            "-x OMPI_MCA_coll_tuned_use_dynamic_rules=0"},
           {{"-x", "OMPI_MCA_coll_tuned_bcast_algorithm"},
            {{"OMPI_MCA_coll_tuned_bcast_algorithm", "6"}},
            "-x OMPI_MCA_coll_tuned_bcast_algorithm=6"}}) {
    Argv argv{"mpirun"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), kArgv.begin() + 1, kArgv.end());
    auto c = rulesCmd(argv, kHosts, env);
    RunDecision d = prepareRun(*c, p, "", rulesFileSource(), {}, rulesOpts(RulesMode::kAuto));
    EXPECT_TRUE(d.applied) << "the plan order still applies";
    EXPECT_FALSE(d.rules) << what;
    ASSERT_EQ(d.notes.size(), 1u) << what;
    EXPECT_NE(d.notes[0].find("your setting decides (" + what + ")"), std::string::npos)
        << d.notes[0];
    for (const auto& w : d.command.argv) EXPECT_NE(w, "coll_tuned_dynamic_rules_filename");
  }
  // Another coll list that keeps tuned: the rules go in.
  Argv argv{"mpirun", "--mca", "coll", "^hcoll"};
  argv.insert(argv.end(), kArgv.begin() + 1, kArgv.end());
  EXPECT_TRUE(
      prepareRun(*rulesCmd(argv, kHosts), p, "", rulesFileSource(), {}, rulesOpts(RulesMode::kOn))
          .rules);
  // A setting outside the command line (environment, mca-params file).
  RunOptions o = rulesOpts(RulesMode::kOn);
  o.userCollTuned = "coll_tuned_allreduce_algorithm = 4 in /home/u/.openmpi/mca-params.conf";
  RunDecision d = prepareRun(*rulesCmd(kArgv, kHosts), p, "", rulesFileSource(), {}, o);
  EXPECT_FALSE(d.rules);
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("mca-params.conf"), std::string::npos);
}

TEST(PrepareRunRules, OffMeansNothingAndSaysNothing) {
  RunDecision d = prepareRun(*rulesCmd(kArgv, kHosts), planWithRules(), "", rulesFileSource(), {},
                             rulesOpts(RulesMode::kOff));
  EXPECT_TRUE(d.applied);
  EXPECT_FALSE(d.rules);
  EXPECT_TRUE(d.notes.empty());
  for (const auto& w : d.command.argv) EXPECT_EQ(w.find("coll_tuned"), std::string::npos);
}

TEST(PrepareRunRules, APlanInTheLaunchersOrderStillHandsOverTheRules) {
  Plan p = planWithRules();
  p.order = p.hosts;
  p.derivePermutation();
  p.seal();
  RunDecision d =
      prepareRun(*rulesCmd(kArgv, kHosts), p, "", rulesFileSource(), {}, rulesOpts(RulesMode::kOn));
  ASSERT_TRUE(d.applied) << d.message;
  ASSERT_TRUE(d.rules);
  Argv want{"mpirun"};
  want.insert(want.end(), kRuleOptions.begin(), kRuleOptions.end());
  want.insert(want.end(), kArgv.begin() + 1, kArgv.end());
  EXPECT_EQ(d.command.argv, want);
  EXPECT_NE(d.message.find("keeps the launcher's host order"), std::string::npos) << d.message;
  // Without the rules it stays the original command.
  d = prepareRun(*rulesCmd(kArgv, kHosts), p, "", rulesFileSource(), {},
                 rulesOpts(RulesMode::kOff));
  EXPECT_FALSE(d.applied);
  EXPECT_EQ(d.command.argv, kArgv);
}

TEST(PrepareRunRules, ShimModeToo) {
  Argv argv{"mpirun", "--host", "vm0,vm1,vm2,vm3", "./prog"};
  RunDecision d = prepareRun(*rulesCmd(argv), planWithRules(), "", rulesFileSource(), {},
                             rulesOpts(RulesMode::kOn, Mode::kShim));
  ASSERT_TRUE(d.applied) << d.message;
  ASSERT_TRUE(d.rules);
  EXPECT_EQ(Argv(d.command.argv.begin() + 1, d.command.argv.begin() + 7), kRuleOptions);
  EXPECT_NE(d.message.find("shim mode"), std::string::npos);
}

TEST(PrepareRunRules, NoDecisionForTheJobsWorld) {
  // A plan made without Open MPI's model: the message says so, the job runs in plan order.
  Plan p = testing::orderedPlan({"vm0", "vm1", "vm2", "vm3"}, {"vm0", "vm2", "vm1", "vm3"});
  RunDecision d = prepareRun(*rulesCmd(kArgv, kHosts), p, "", rulesFileSource(), {},
                             rulesOpts(RulesMode::kAuto));
  EXPECT_TRUE(d.applied);
  EXPECT_FALSE(d.rules);
  EXPECT_TRUE(d.notes.empty());
  EXPECT_NE(d.message.find("Open MPI's own algorithms (the plan has no Open MPI decision for 4 "
                           "ranks)"),
            std::string::npos)
      << d.message;
  // A plan adapted to another number of ranks per host loses its decision.
  Plan adapted = adaptPlan(planWithRules(), {"vm0", "vm1", "vm2", "vm3"}, 2);
  EXPECT_TRUE(adapted.openMpi.empty());
  EXPECT_FALSE(adaptPlan(planWithRules(), {"vm0", "vm1", "vm2", "vm3"}, 1).openMpi.empty());
}

TEST(EngineAdvice, NamesTheCollectiveAndTheSizes) {
  Plan p = planWithRules();
  auto advice = engineAdvice(p);
  ASSERT_TRUE(advice);
  // allreduce >= 1 MiB: 50 ms against 30 ms (1.67x); 64 KiB .. 1 MiB is within 10%.
  EXPECT_NE(advice->find("allreduce at >= 1 MiB"), std::string::npos) << *advice;
  EXPECT_NE(advice->find("1.67x"), std::string::npos) << *advice;
  EXPECT_NE(advice->find("RANKMAP_MPI_ENGINE=1"), std::string::npos);
  EXPECT_EQ(advice->find("bcast"), std::string::npos) << "no engine time for bcast";
  // Reported by prepareRun unless the engine is already on.
  RunOptions o = rulesOpts(RulesMode::kOn);
  o.engineRouting = false;
  RunDecision d = prepareRun(*rulesCmd(kArgv, kHosts), p, "", rulesFileSource(), {}, o);
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_EQ(d.notes[0], *advice);
  o.engineRouting = true;
  EXPECT_TRUE(prepareRun(*rulesCmd(kArgv, kHosts), p, "", rulesFileSource(), {}, o).notes.empty());
  Plan slow = planWithRules();
  for (auto& r : slow.openMpi["allreduce"]) r.engineUs = r.predictedUs;
  slow.seal();
  EXPECT_EQ(engineAdvice(slow), std::nullopt);
}

TEST(RulesMode, Parses) {
  EXPECT_EQ(parseRulesMode("auto"), RulesMode::kAuto);
  EXPECT_EQ(parseRulesMode("1"), RulesMode::kOn);
  EXPECT_EQ(parseRulesMode("on"), RulesMode::kOn);
  EXPECT_EQ(parseRulesMode("0"), RulesMode::kOff);
  EXPECT_EQ(parseRulesMode("off"), RulesMode::kOff);
  EXPECT_THROW(parseRulesMode("yes please"), InvalidInput);
}

}  // namespace
}  // namespace rankmap::launch
