// Slurm: hostlists, SLURM_HOSTFILE, topology.conf, and srun command lines (no Slurm needed).
#include "launch/slurm.h"
#include "launch/launchers.h"

#include <map>

#include <gtest/gtest.h>

#include "common/error.h"

namespace rankmap::launch {
namespace {

using Names = std::vector<std::string>;

SrunCommand::EnvLookup srunEnv(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(SlurmTest, ExpandsHostlists) {
  EXPECT_EQ(expandHostlist("node[01-03,07],login"),
            (Names{"node01", "node02", "node03", "node07", "login"}));
  EXPECT_EQ(expandHostlist("vm[8-10]"), (Names{"vm8", "vm9", "vm10"}));
  EXPECT_EQ(expandHostlist("r[1-2]n[1-2]"), (Names{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expandHostlist("gpu[1-2]-ib"), (Names{"gpu1-ib", "gpu2-ib"}));
  for (const char* bad : {"node[1-", "node[]", "node[3-1]", "node[a-b]", "a,,b", "x]y", "n[1[2]]"})
    EXPECT_THROW(expandHostlist(bad), InvalidInput) << bad;
}

TEST(SlurmTest, CompressesHostlists) {
  EXPECT_EQ(compressHostlist({"node01", "node02", "node03", "node07", "login"}),
            "node[01-03,07],login");
  EXPECT_EQ(compressHostlist({"vm5", "vm1", "vm2", "vm10"}), "vm[1-2,5,10]");
  EXPECT_EQ(compressHostlist({"rack0"}), "rack0");
  EXPECT_EQ(compressHostlist({"node09", "node10"}), "node[09-10]");
  for (const Names& hosts : {Names{"a1", "a2", "b07", "b08", "c"}, Names{"x", "y"}}) {
    auto back = expandHostlist(compressHostlist(hosts));
    EXPECT_EQ(std::set<std::string>(back.begin(), back.end()),
              std::set<std::string>(hosts.begin(), hosts.end()));
  }
}

Plan rackPlan() {
  Plan p = Plan::identity({"vm0", "vm1", "vm2", "vm3"}, 2);
  p.order = {"vm1", "vm3", "vm0", "vm2"};
  p.derivePermutation();
  p.groups = {{"rack", 0.9, {{"vm1", "vm3"}, {"vm0", "vm2"}}}};
  p.seal();
  return p;
}

// Bounded work for any hostlist (tests/fuzz: a few bytes made a million names, and compressing
// them took minutes).
TEST(SlurmTest, HostlistsHoldAtMostMaxHosts) {
  EXPECT_EQ(expandHostlist("n[1-100000]").size(), kMaxHostlistHosts);
  EXPECT_THROW(expandHostlist("n[0-100000]"), InvalidInput);
  EXPECT_THROW(expandHostlist("n[1-100000],login"), InvalidInput);
  EXPECT_THROW(expandHostlist("a[1-400]b[1-400]"), InvalidInput);
  // Counted before a name is made: 10^10 names in 21 bytes (tests/fuzz: out of memory), and
  // ranges that are each allowed but not together.
  EXPECT_THROW(expandHostlist("a[0-99998][0-99998]"), InvalidInput);
  EXPECT_THROW(expandHostlist("a[0-99998,0-99998]"), InvalidInput);
  // Many groups and many literals: the same result as one at a time.
  auto hosts = expandHostlist("x[1-300]y[1-300],gpu[1-300]-ib");
  ASSERT_EQ(hosts.size(), 90300u);
  EXPECT_EQ(expandHostlist(compressHostlist(hosts)), hosts);
}

TEST(SlurmTest, HostfileListsEachTaskInPlanOrder) {
  EXPECT_EQ(slurmHostfile(rackPlan(), 2), "vm1\nvm1\nvm3\nvm3\nvm0\nvm0\nvm2\nvm2\n");
  EXPECT_EQ(slurmHostfile(rackPlan(), 1), "vm1\nvm3\nvm0\nvm2\n");
  EXPECT_THROW(slurmHostfile(rackPlan(), 0), InvalidInput);
}

TEST(SlurmTest, TopologyConfFromOneLevel) {
  auto conf = slurmTopologyConf({"vm0", "vm1", "vm2", "vm3"}, rackPlan().groups, "plan p.json");
  EXPECT_NE(conf.find("SwitchName=rack0 Nodes=vm[1,3]\n"), std::string::npos) << conf;
  EXPECT_NE(conf.find("SwitchName=rack1 Nodes=vm[0,2]\n"), std::string::npos) << conf;
  EXPECT_NE(conf.find("SwitchName=root Switches=rack[0-1]\n"), std::string::npos) << conf;
  EXPECT_EQ(conf.rfind("#", 0), 0u);
}

TEST(SlurmTest, TopologyConfFromNestedLevels) {
  std::vector<HierarchyLevel> levels = {
      {"rack", 1, {{"a1", "a2"}, {"b1"}, {"c1", "c2"}}},
      {"pod", 1, {{"a1", "a2", "b1"}, {"c1", "c2"}}},
  };
  auto conf = slurmTopologyConf({"a1", "a2", "b1", "c1", "c2"}, levels, "t.json");
  EXPECT_NE(conf.find("SwitchName=rack0 Nodes=a[1-2]\n"), std::string::npos) << conf;
  EXPECT_NE(conf.find("SwitchName=rack1 Nodes=b1\n"), std::string::npos) << conf;
  EXPECT_NE(conf.find("SwitchName=pod0 Switches=rack[0-1]\n"), std::string::npos) << conf;
  EXPECT_NE(conf.find("SwitchName=pod1 Switches=rack2\n"), std::string::npos) << conf;
  EXPECT_NE(conf.find("SwitchName=root Switches=pod[0-1]\n"), std::string::npos) << conf;

  // A rack split across pods: the levels do not nest.
  levels[1].groups = {{"a1", "b1"}, {"a2", "c1", "c2"}};
  EXPECT_THROW(slurmTopologyConf({"a1", "a2", "b1", "c1", "c2"}, levels, "t.json"), InvalidInput);
}

TEST(SlurmTest, TopologyConfWithoutHierarchyIsOneSwitch) {
  auto conf = slurmTopologyConf({"n1", "n2", "n3"}, {}, "t.json");
  EXPECT_NE(conf.find("SwitchName=root Nodes=n[1-3]\n"), std::string::npos) << conf;
}

TEST(SlurmTest, TopologyYamlHasTheTreeAndTheBlocks) {
  std::vector<HierarchyLevel> levels = {
      {"rack", 1, {{"a1", "a2"}, {"b1", "b2", "b3"}, {"c1", "c2"}}},
      {"pod", 1, {{"a1", "a2", "b1", "b2", "b3"}, {"c1", "c2"}}},
  };
  Names hosts = {"a1", "a2", "b1", "b2", "b3", "c1", "c2"};
  auto yaml = slurmTopologyYaml(hosts, levels, "t.json");
  const char* tree =
      "- topology: rankmap-tree\n"
      "  cluster_default: true\n"
      "  tree:\n"
      "    switches:\n"
      "      - switch: \"rack0\"\n"
      "        nodes: \"a[1-2]\"\n"
      "      - switch: \"rack1\"\n"
      "        nodes: \"b[1-3]\"\n"
      "      - switch: \"rack2\"\n"
      "        nodes: \"c[1-2]\"\n"
      "      - switch: \"pod0\"\n"
      "        children: \"rack[0-1]\"\n"
      "      - switch: \"pod1\"\n"
      "        children: \"rack2\"\n"
      "      - switch: \"root\"\n"
      "        children: \"pod[0-1]\"\n";
  EXPECT_NE(yaml.find(tree), std::string::npos) << yaml;
  const char* block =
      "- topology: rankmap-block\n"
      "  cluster_default: false\n"
      "  block:\n"
      "    block_sizes:\n"
      "      - 2\n"
      "    blocks:\n"
      "      - block: \"rack0\"\n"
      "        nodes: \"a[1-2]\"\n"
      "      - block: \"rack1\"\n"
      "        nodes: \"b[1-3]\"\n"
      "      - block: \"rack2\"\n"
      "        nodes: \"c[1-2]\"\n";
  EXPECT_NE(yaml.find(block), std::string::npos) << yaml;
  EXPECT_EQ(yaml.rfind("#", 0), 0u);

  // The same nesting check as topology.conf.
  levels[1].groups = {{"a1", "b1"}, {"a2", "b2", "b3", "c1", "c2"}};
  EXPECT_THROW(slurmTopologyYaml(hosts, levels, "t.json"), InvalidInput);

  // No levels: one switch and one block of every host.
  auto flat = slurmTopologyYaml({"n1", "n2", "n3"}, {}, "t.json");
  EXPECT_NE(flat.find("      - switch: \"root\"\n        nodes: \"n[1-3]\"\n"), std::string::npos)
      << flat;
  EXPECT_NE(flat.find("block_sizes:\n      - 3\n"), std::string::npos) << flat;
}

TEST(SrunTest, ReadsThePlacementFromTheAllocation) {
  auto env = srunEnv({{"SLURM_JOB_NODELIST", "vm[0-3]"}});
  auto c = SrunCommand::parse({"srun", "-n", "8", "--mpi=pmix", "./app", "-n", "3"}, env);
  ASSERT_EQ(c->job().hosts.size(), 4u);
  EXPECT_EQ(c->job().hosts[2], (JobHost{"vm2", 2}));
  EXPECT_EQ(c->programIndex(), 4u);

  c = SrunCommand::parse({"srun", "-N2", "--ntasks-per-node=3", "app"}, env);
  EXPECT_EQ(c->job().hosts, (std::vector<JobHost>{{"vm0", 3}, {"vm1", 3}}));

  c = SrunCommand::parse({"srun", "-w", "n[5-6]", "app"}, srunEnv({}));
  EXPECT_EQ(c->job().hosts, (std::vector<JobHost>{{"n5", 1}, {"n6", 1}}));

  c = SrunCommand::parse({"srun", "app"},
                         srunEnv({{"SLURM_JOB_NODELIST", "a,b"}, {"SLURM_NTASKS", "4"}}));
  EXPECT_EQ(c->job().worldSize(), 4);
}

TEST(SrunTest, RefusesPlacementItDoesNotModel) {
  auto env = srunEnv({{"SLURM_JOB_NODELIST", "vm[0-3]"}});
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{"srun", "--distribution=cyclic", "app"},
        {"srun", "-m", "plane=2", "app"},
        {"srun", "--exclude=vm1", "app"},
        {"srun", "--frobnicate", "app"},
        {"srun", "-n", "6", "app"},
        {"srun", "-lu", "app"},
        {"srun", "-n", "4"},
        {"srun", "--multi-prog", "conf"}})
    EXPECT_THROW(SrunCommand::parse(argv, env), NotSupported) << argv[1];
  EXPECT_THROW(SrunCommand::parse({"srun", "app"}, srunEnv({})), NotSupported);
  EXPECT_THROW(SrunCommand::parse({"srun", "-n", "zero", "app"}, env), InvalidInput);
  // At most kMaxJobRanks tasks, counted without overflow (tests/fuzz: `-n 8000000` made a
  // SLURM_HOSTFILE of 8 million lines).
  EXPECT_THROW(SrunCommand::parse({"srun", "-n", "8000000", "app"}, env), NotSupported);
  auto many = srunEnv({{"SLURM_JOB_NODELIST", "vm[1-100000]"}});
  EXPECT_THROW(SrunCommand::parse({"srun", "--ntasks-per-node=16777216", "app"}, many),
               NotSupported);
  EXPECT_THROW(
      SrunCommand::parse({"srun", "-n", "100000", "--ntasks-per-node=16777216", "app"}, many),
      NotSupported);
}

TEST(SrunTest, LaunchInOrderWritesAHostfileAndUsesArbitraryDistribution) {
  auto env = srunEnv({{"SLURM_JOB_NODELIST", "vm[0-3]"}});
  auto c = SrunCommand::parse({"srun", "-w", "vm[0-3]", "-n", "8", "-l", "./app", "x"}, env);
  std::vector<JobHost> ordered = {{"vm1", 2}, {"vm3", 2}, {"vm0", 2}, {"vm2", 2}};
  auto cmd = c->launchInOrder(ordered, "/rundir");
  EXPECT_EQ(cmd.argv, (std::vector<std::string>{"env", "SLURM_HOSTFILE=/rundir/slurm-hostfile",
                                                "srun", "--distribution=arbitrary", "--ntasks=8",
                                                "-l", "./app", "x"}));
  ASSERT_EQ(cmd.files.size(), 1u);
  EXPECT_EQ(cmd.files[0].second, "vm1\nvm1\nvm3\nvm3\nvm0\nvm0\nvm2\nvm2\n");
}

TEST(SrunTest, ShimModeExportsThePreload) {
  auto env = srunEnv({{"SLURM_JOB_NODELIST", "vm[0-1]"}});
  auto c = SrunCommand::parse({"srun", "--export=ALL,A=1", "app"}, env);
  auto cmd = c->withShim("/lib/librankmap_mpi.so", {{"RANKMAP_PLAN", "/p/plan.json"}});
  ASSERT_EQ(cmd.argv.size(), 3u);
  EXPECT_EQ(cmd.argv[1].rfind("--export=ALL,A=1,LD_PRELOAD=/lib/librankmap_mpi.so", 0), 0u)
      << cmd.argv[1];
  EXPECT_NE(cmd.argv[1].find(",RANKMAP_PLAN=/p/plan.json"), std::string::npos);
  cmd = SrunCommand::parse({"srun", "app"}, env)->withShim("/s.so", {{"RANKMAP_PLAN", "/p.json"}});
  EXPECT_EQ(cmd.argv[1].rfind("--export=ALL,LD_PRELOAD=/s.so", 0), 0u) << cmd.argv[1];
}

TEST(SrunTest, ParseLaunchCommandDispatchesSrun) {
  std::string why;
  auto cmd = parseLaunchCommand({"srun", "--bogus", "app"}, why);
  EXPECT_EQ(cmd, nullptr);
  EXPECT_NE(why.find("srun arguments not understood"), std::string::npos) << why;
}

}  // namespace
}  // namespace rankmap::launch
