// Reading and rewriting mpirun command lines (launch/mpirun.h): hostfiles and --host
// lists with slots, the job the default and sequential mappers would place, the options that make
// rankmap run refuse (pass-through), and the launch- and shim-mode rewrites.
#include "launch/mpirun.h"

#include <gtest/gtest.h>

#include <map>

#include "common/error.h"

namespace rankmap::launch {
namespace {

using Argv = std::vector<std::string>;

// Parses with hostfiles from `files` and an environment from `env` (nothing from this process).
std::unique_ptr<MpirunCommand> parse(const Argv& argv, std::map<std::string, std::string> files = {},
                                     std::map<std::string, std::string> env = {}) {
  return MpirunCommand::parse(
      argv,
      [files](const std::string& p) {
        auto it = files.find(p);
        if (it == files.end()) RANKMAP_THROW(IoError, "{}: no such file", p);
        return it->second;
      },
      [env](const std::string& n) -> std::optional<std::string> {
        auto it = env.find(n);
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      });
}

std::vector<JobHost> hosts(std::initializer_list<std::pair<const char*, int>> l) {
  std::vector<JobHost> v;
  for (auto [s, n] : l) v.push_back({s, n});
  return v;
}

// The message of the NotSupported that parse() throws; "" when it does not throw.
std::string refusal(const Argv& argv, std::map<std::string, std::string> files = {},
                    std::map<std::string, std::string> env = {}) {
  try {
    parse(argv, files, env);
  } catch (const NotSupported& e) {
    return e.what();
  }
  return "";
}

TEST(OmpiHostfile, LinesSlotsAndComments) {
  auto e = parseOmpiHostfile("# cluster\nvm0 slots=2\n\n  vm1   slots=1 max_slots=4 # fast\n"
                             "10.0.0.7 cpu=3\nvm0 slots=1\nuser@vm9\n",
                             "hf");
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0], (HostEntry{"vm0", 2}));
  EXPECT_EQ(e[1], (HostEntry{"vm1", 1}));
  EXPECT_EQ(e[2], (HostEntry{"10.0.0.7", 3}));
  EXPECT_EQ(e[3], (HostEntry{"vm0", 1}));
  EXPECT_EQ(e[4], (HostEntry{"user@vm9", std::nullopt}));
}

TEST(OmpiHostfile, UnknownTokensAreRefusedWithTheLine) {
  try {
    parseOmpiHostfile("vm0 slots=2\nvm1 sockets=2\n", "my.hosts");
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("my.hosts:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sockets=2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parseOmpiHostfile("vm0 slots=two\n", "hf"), InvalidInput);
  EXPECT_THROW(parseOmpiHostfile("vm0 slots=0\n", "hf"), InvalidInput);
  EXPECT_THROW(parseOmpiHostfile("slots=2\n", "hf"), NotSupported);
}

// rankmap's own hosts file (`name address`, README's quick start) handed to mpirun: named as
// such, with the line mpirun wants.
TEST(OmpiHostfile, RankmapsHostsFileIsNamedWithTheFix) {
  try {
    parseOmpiHostfile("vm1 10.0.0.1\nvm2 10.0.0.2\n", "hosts");
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("hosts:1: \"vm1 10.0.0.1\" reads as rankmap's hosts file"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("`vm1 slots=1`"), std::string::npos) << e.what();
  }
}

TEST(OmpiHostList, SlotsAndForms) {
  auto e = parseOmpiHostList("a,b:2,10.1.2.3:4,a");
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0], (HostEntry{"a", std::nullopt}));
  EXPECT_EQ(e[1], (HostEntry{"b", 2}));
  EXPECT_EQ(e[2], (HostEntry{"10.1.2.3", 4}));
  EXPECT_THROW(parseOmpiHostList("a,,b"), NotSupported);
  EXPECT_THROW(parseOmpiHostList("a:*"), NotSupported);
  EXPECT_THROW(parseOmpiHostList("fe80::1:2"), NotSupported);
}

TEST(Mpirun, RecognisesLaunchers) {
  for (const char* s : {"mpirun", "/usr/bin/mpirun", "mpiexec", "orterun", "mpirun.openmpi",
                        "/opt/ompi/bin/mpiexec.hydra"})
    EXPECT_TRUE(isMpirun(s)) << s;
  for (const char* s : {"srun", "torchrun", "mpirunner", "./a.out", "python3", ""})
    EXPECT_FALSE(isMpirun(s)) << s;
}

TEST(Mpirun, EmucloudStyleSequentialCommand) {
  Argv argv{"mpirun", "--hostfile", "/s/hf", "--np", "4", "--bind-to", "none",
            "--mca", "plm_rsh_agent", "/s/rsh", "--mca", "btl_tcp_if_include", "10.1.0.0/16",
            "--mca", "pml", "ob1", "--mca", "rmaps", "seq", "--mca", "coll_tuned_use_dynamic_rules",
            "1", "./bench", "--bytes", "16777216", "-np", "9"};
  auto c = parse(argv, {{"/s/hf", "vm3\nvm1\nvm0\nvm2\nvm5\n"}});
  EXPECT_TRUE(c->sequential());
  EXPECT_EQ(c->np(), 4);
  EXPECT_EQ(argv[c->programIndex()], "./bench");
  EXPECT_EQ(c->job().hosts, hosts({{"vm3", 1}, {"vm1", 1}, {"vm0", 1}, {"vm2", 1}}));
  EXPECT_TRUE(c->job().contiguous);
  EXPECT_EQ(c->job().worldSize(), 4);
}

TEST(Mpirun, SequentialHostfileWithRepeatedHosts) {
  auto c = parse({"mpiexec", "-hostfile", "hf", "-mca", "rmaps", "seq", "prog"},
                 {{"hf", "a\na\nb\nb\n"}});
  EXPECT_EQ(c->job().hosts, hosts({{"a", 2}, {"b", 2}}));
  EXPECT_TRUE(c->job().contiguous);
  EXPECT_EQ(c->job().uniformRanksPerHost(), 2);

  auto d = parse({"mpirun", "--machinefile", "hf", "--mca", "rmaps", "seq", "prog"},
                 {{"hf", "a\nb\na\nc\n"}});
  EXPECT_EQ(d->job().hosts, hosts({{"a", 2}, {"b", 1}, {"c", 1}}));
  EXPECT_FALSE(d->job().contiguous);
  EXPECT_EQ(d->job().uniformRanksPerHost(), std::nullopt);

  // rmaps seq from the environment counts too.
  auto e = parse({"mpirun", "-machinefile", "hf", "prog"}, {{"hf", "x\ny\n"}}, {{"OMPI_MCA_rmaps", "seq"}});
  EXPECT_TRUE(e->sequential());
  EXPECT_EQ(e->job().hosts, hosts({{"x", 1}, {"y", 1}}));
}

TEST(Mpirun, BySlotFillsHostsInOrder) {
  auto c = parse({"mpirun", "-np", "5", "--hostfile", "hf", "prog"},
                 {{"hf", "a slots=2\nb slots=2\nc slots=2\n"}});
  EXPECT_FALSE(c->sequential());
  EXPECT_EQ(c->job().hosts, hosts({{"a", 2}, {"b", 2}, {"c", 1}}));
  // -np defaults to all slots; repeated lines add up.
  auto d = parse({"mpirun", "--hostfile", "hf", "prog"}, {{"hf", "a slots=2\nb slots=1\na slots=1\n"}});
  EXPECT_EQ(d->job().hosts, hosts({{"a", 3}, {"b", 1}}));
  // -np below the first host's slots.
  auto e = parse({"mpirun", "-n", "1", "--hostfile", "hf", "prog"}, {{"hf", "a slots=2\nb slots=2\n"}});
  EXPECT_EQ(e->job().hosts, hosts({{"a", 1}}));
}

TEST(Mpirun, HostListCountsMentionsAndSlots) {
  auto c = parse({"mpirun", "-H", "a,b,a", "prog"});
  EXPECT_EQ(c->job().hosts, hosts({{"a", 2}, {"b", 1}}));
  auto d = parse({"mpirun", "--host", "a:2,b:2", "-c", "4", "./x"});
  EXPECT_EQ(d->job().hosts, hosts({{"a", 2}, {"b", 2}}));
  auto e = parse({"mpirun", "-host", "a", "--host", "b", "prog"});
  EXPECT_EQ(e->job().hosts, hosts({{"a", 1}, {"b", 1}}));
}

TEST(Mpirun, ProgramArgumentsAreNotMpirunOptions) {
  auto c = parse({"mpirun", "-H", "a,b", "--tag-output", "-x", "OMP_NUM_THREADS=2", "python3",
                  "train.py", "--hostfile", "nope", "-np", "99"});
  EXPECT_EQ(c->programIndex(), 6u);
  EXPECT_EQ(c->job().worldSize(), 2);
}

TEST(Mpirun, RefusesWhatItDoesNotModel) {
  std::map<std::string, std::string> hf{{"hf", "a slots=2\nb slots=2\n"}};
  struct Case {
    Argv argv;
    const char* why;
  } cases[] = {
      {{"mpirun", "--frobnicate", "-H", "a", "prog"}, "--frobnicate"},
      {{"mpirun", "--np=2", "-H", "a,b", "prog"}, "--np=2"},
      {{"mpirun", "--map-by", "node", "--hostfile", "hf", "prog"}, "--map-by"},
      {{"mpirun", "-N", "1", "--hostfile", "hf", "prog"}, "-N"},
      {{"mpirun", "--npernode", "1", "--hostfile", "hf", "prog"}, "--npernode"},
      {{"mpirun", "--rankfile", "rf", "--hostfile", "hf", "prog"}, "--rankfile"},
      {{"mpirun", "--hostfile", "hf", "-np", "1", "a", ":", "-np", "1", "b"}, "MPMD"},
      {{"mpirun", "--hostfile", "hf", "--mca", "rmaps", "round_robin", "prog"}, "round_robin"},
      {{"mpirun", "--hostfile", "hf", "--mca", "rmaps_base_mapping_policy", "node", "prog"},
       "rmaps_base_mapping_policy"},
      {{"mpirun", "--hostfile", "hf", "-H", "a", "prog"}, "both --hostfile and --host"},
      {{"mpirun", "--hostfile", "hf", "--hostfile", "hf", "prog"}, "more than one --hostfile"},
      {{"mpirun", "-np", "4", "prog"}, "no --hostfile or --host"},
      {{"mpirun", "--hostfile", "hf"}, "no program"},
      {{"mpirun", "--hostfile", "hf", "-np", "5", "prog"}, "oversubscription"},
      {{"mpirun", "--hostfile", "hf", "--app", "appfile"}, "--app"},
      {{"mpirun", "--version"}, "--version"},
      {{"mpirun", "--hostfile", "hf", "-np"}, "expects 1 value"},
      {{"srun", "-N", "2", "prog"}, "not an mpirun command"},
  };
  for (const auto& k : cases) {
    std::string why = refusal(k.argv, hf);
    EXPECT_NE(why.find(k.why), std::string::npos) << "for " << shellJoin(k.argv) << ": got '" << why << "'";
  }
  EXPECT_NE(refusal({"mpirun", "--hostfile", "hf", "prog"}, hf,
                    {{"OMPI_MCA_rmaps_base_mapping_policy", "node"}})
                .find("OMPI_MCA_rmaps_base_mapping_policy"),
            std::string::npos);
  // Without slots= Open MPI would count cores: not modelled unless the mapping is sequential.
  EXPECT_NE(refusal({"mpirun", "-np", "2", "--hostfile", "h2", "prog"}, {{"h2", "a\nb\n"}}).find("slots="),
            std::string::npos);
  EXPECT_EQ(refusal({"mpirun", "--hostfile", "h2", "--mca", "rmaps", "seq", "prog"}, {{"h2", "a\nb\n"}}),
            "");
  EXPECT_THROW(parse({"mpirun", "-np", "four", "-H", "a", "prog"}), InvalidInput);
  EXPECT_THROW(parse({"mpirun", "--hostfile", "absent", "prog"}), IoError);
}

// At most kMaxJobRanks ranks, counted without overflow (tests/fuzz: a sequential hostfile of
// 8 million lines from `-n 8000000`): more is run unchanged, with the reason.
TEST(Mpirun, JobsOfMoreThanMaxRanksAreRefused) {
  const std::string max = std::to_string(kMaxJobRanks), over = std::to_string(kMaxJobRanks + 1);
  std::map<std::string, std::string> hf{{"one", "a slots=" + max + "\n"},
                                        {"line", "a slots=" + max + " slots=1\n"},
                                        {"hosts", "a slots=" + max + "\nb slots=" + max + "\n"},
                                        {"again", "a slots=" + max + "\na slots=" + max + "\n"}};
  EXPECT_EQ(parse({"mpirun", "--hostfile", "one", "prog"}, hf)->job().worldSize(), kMaxJobRanks);
  for (const Argv& argv :
       {Argv{"mpirun", "-np", over, "-H", "a", "prog"}, Argv{"mpirun", "-H", "a:" + over, "prog"},
        Argv{"mpirun", "--hostfile", "line", "prog"}, Argv{"mpirun", "--hostfile", "hosts", "prog"},
        Argv{"mpirun", "--hostfile", "again", "prog"}}) {
    std::string why = refusal(argv, hf);
    EXPECT_NE(why.find("ranks"), std::string::npos) << shellJoin(argv) << ": got '" << why << "'";
  }
}

TEST(Mpirun, LaunchRewriteWritesTheHostfileInOrder) {
  Argv argv{"mpirun", "--np", "6", "--hostfile", "/s/hf", "--bind-to", "none", "--mca", "btl",
            "tcp,self", "./prog", "--np", "1"};
  auto c = parse(argv, {{"/s/hf", "a slots=2\nb slots=2\nc slots=2\n"}});
  Command cmd = c->launchInOrder(hosts({{"c", 2}, {"a", 2}, {"b", 2}}), "/run/x");
  EXPECT_EQ(cmd.argv, (Argv{"mpirun", "--hostfile", "/run/x/hostfile", "--mca", "rmaps", "seq",
                            "-np", "6", "--bind-to", "none", "--mca", "btl", "tcp,self", "./prog",
                            "--np", "1"}));
  ASSERT_EQ(cmd.files.size(), 1u);
  EXPECT_EQ(cmd.files[0].first, "/run/x/hostfile");
  EXPECT_EQ(cmd.files[0].second, "c\nc\na\na\nb\nb\n");
  // The rewrite keeps the rank count: a host list with other counts is a bug.
  EXPECT_THROW(c->launchInOrder(hosts({{"c", 2}, {"a", 2}}), "/run/x"), InvalidInput);
}

TEST(Mpirun, LaunchRewriteReplacesHostListAndSeq) {
  auto c = parse({"mpirun", "-H", "a,b", "--mca", "rmaps", "seq", "-x", "A=1", "prog"});
  Command cmd = c->launchInOrder(hosts({{"b", 1}, {"a", 1}}), "/d");
  EXPECT_EQ(cmd.argv, (Argv{"mpirun", "--hostfile", "/d/hostfile", "--mca", "rmaps", "seq", "-np",
                            "2", "-x", "A=1", "prog"}));
  EXPECT_EQ(cmd.files[0].second, "b\na\n");
}

TEST(Mpirun, ShimRewritePreloadsAndKeepsPlacement) {
  auto c = parse({"mpirun", "-H", "a,b", "-x", "LD_PRELOAD=/opt/prof.so", "-x", "RANKMAP_PLAN=/old",
                  "-x", "B=2", "prog", "-x", "LD_PRELOAD=keep"});
  Command cmd = c->withShim("/lib/librankmap_mpi.so", {{"RANKMAP_PLAN", "/p/plan.json"}});
  EXPECT_EQ(cmd.argv, (Argv{"mpirun", "-x", "LD_PRELOAD=/lib/librankmap_mpi.so:/opt/prof.so", "-x",
                            "RANKMAP_PLAN=/p/plan.json", "-H", "a,b", "-x", "B=2", "prog", "-x",
                            "LD_PRELOAD=keep"}));
  EXPECT_TRUE(cmd.files.empty());
  // `-x LD_PRELOAD` without a value exports mpirun's own value: kept after the shim.
  auto d = MpirunCommand::parse({"mpirun", "-H", "a", "-x", "LD_PRELOAD", "prog"}, {},
                                [](const std::string& n) -> std::optional<std::string> {
                                  if (n == "LD_PRELOAD") return "/x.so";
                                  return std::nullopt;
                                });
  EXPECT_EQ(d->withShim("/s.so", {{"RANKMAP_PLAN", "/p"}}).argv[2], "LD_PRELOAD=/s.so:/x.so");
}

}  // namespace
}  // namespace rankmap::launch
