// torchrun command lines: parsing, this node's place in a plan, and the rewrites for the static
// and c10d rendezvous and for torch 1.13's Python 3.11 redirects crash.
#include "launch/torchrun.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "common/error.h"

namespace rankmap::launch {
namespace {

using Argv = std::vector<std::string>;

// Four hosts, provider order h0..h3; the plan's ring is h2, h0, h3, h1.
Plan fourHostPlan() {
  Plan p = Plan::identity({"h0", "h1", "h2", "h3"});
  p.order = {"h2", "h0", "h3", "h1"};
  p.derivePermutation();
  p.seal();
  return p;
}

std::vector<Host> fourHostAddresses() {
  return {{"h0", "10.1.1.1"}, {"h1", "10.1.1.2"}, {"h2", "10.1.1.3"}, {"h3", "10.1.1.4:7410"}};
}

TorchInstall newTorch() { return {"2.3.0", 3, 11, "--local_addr"}; }
TorchInstall torch113() { return {"1.13.1", 3, 11, ""}; }

const PlanSource kSource{"plan.json", false};

TorchrunCommand::EnvLookup envOf(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The value following `option` in argv (before the script), or "" when absent.
std::string valueAfter(const Argv& argv, const std::string& option) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == option) return argv[i + 1];
  return "";
}

TEST(TorchrunTest, RecognisesTorchrunAndPythonModule) {
  EXPECT_TRUE(isTorchrun({"torchrun", "train.py"}));
  EXPECT_TRUE(isTorchrun({"/usr/bin/torchrun", "train.py"}));
  EXPECT_TRUE(isTorchrun({"python3", "-m", "torch.distributed.run", "train.py"}));
  EXPECT_TRUE(isTorchrun({"/usr/bin/python3.11", "-m", "torch.distributed.run", "x.py"}));
  EXPECT_FALSE(isTorchrun({"python3", "-m", "torch.distributed.launch", "x.py"}));
  EXPECT_FALSE(isTorchrun({"mpirun", "torchrun"}));
  EXPECT_FALSE(isTorchrun({}));
}

TEST(TorchrunTest, ParsesOptionFormsAndStopsAtTheScript) {
  auto c = TorchrunCommand::parse({"torchrun", "--nnodes=4", "--nproc-per-node", "2", "-r3",
                                   "--tee", "1", "--module", "train", "--node_rank", "9"});
  EXPECT_EQ(c.scriptIndex(), 8u);
  EXPECT_EQ(c.value("nnodes"), "4");
  EXPECT_EQ(c.value("nproc_per_node"), "2");
  EXPECT_EQ(c.value("redirects"), "3");
  EXPECT_EQ(c.value("tee"), "1");
  // --node_rank after the script belongs to the script.
  EXPECT_FALSE(c.userSet("node_rank"));
  EXPECT_EQ(c.value("node_rank"), "0");
  EXPECT_EQ(c.rdzvBackend(), "static");
  EXPECT_EQ(c.fixedNodes(), 4);
}

TEST(TorchrunTest, ReadsPetEnvironmentDefaults) {
  auto c = TorchrunCommand::parse({"torchrun", "train.py"},
                                  envOf({{"PET_NNODES", "2:4"}, {"PET_RDZV_BACKEND", "c10d"}}));
  EXPECT_EQ(c.rdzvBackend(), "c10d");
  EXPECT_EQ(c.fixedNodes(), std::nullopt);
  EXPECT_TRUE(c.userSet("nnodes"));
}

// Options of torch 2.x's torchrun (read in torch/distributed/run.py, not run here: Debian has
// 1.13): known, so a 2.x command line is rewritten, not refused; none of them moves ranks.
TEST(TorchrunTest, ReadsTorch2Options) {
  Argv argv = {"torchrun",
               "--nnodes=4",
               "--nproc-per-node=2",
               "--local-ranks-filter=0",
               "--logs-specs",
               "default",
               "--event-log-handler",
               "null",
               "--numa-binding=node",
               "--signals-to-handle",
               "SIGTERM,SIGUSR1",
               "--duplicate-stdout-filters",
               "loss",
               "--duplicate_stderr_filters=err",
               "--shutdown-timeout",
               "30",
               "--virtual-local-rank",
               "--node-rank",
               "1",
               "--master-addr",
               "h0",
               "t.py"};
  auto c = TorchrunCommand::parse(argv);
  EXPECT_EQ(c.value("numa_binding"), "node");
  EXPECT_EQ(c.value("node_rank"), "1");
  EXPECT_EQ(argv[c.scriptIndex()], "t.py");
  auto d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(), {"h1", {}},
                          newTorch());
  ASSERT_TRUE(d.applied) << d.message;
  // h1 is at plan position 3; the dashed --node-rank/--master-addr are replaced, not doubled.
  EXPECT_EQ(valueAfter(d.command.argv, "--node_rank"), "3");
  EXPECT_EQ(valueAfter(d.command.argv, "--master_addr"), "10.1.1.3");
  EXPECT_EQ(std::count(d.command.argv.begin(), d.command.argv.end(), "--node-rank"), 0);
  EXPECT_EQ(std::count(d.command.argv.begin(), d.command.argv.end(), "--master-addr"), 0);
  EXPECT_EQ(std::count(d.command.argv.begin(), d.command.argv.end(), "--virtual-local-rank"), 1);
  EXPECT_THROW(TorchrunCommand::parse({"torchrun", "--virtual-local-rank=1", "t.py"}),
               NotSupported);
}

TEST(TorchrunTest, RefusesWhatItDoesNotUnderstand) {
  EXPECT_THROW(TorchrunCommand::parse({"torchrun", "--nnode", "2", "train.py"}), NotSupported);
  EXPECT_THROW(TorchrunCommand::parse({"torchrun", "--bogus", "train.py"}), NotSupported);
  EXPECT_THROW(TorchrunCommand::parse({"torchrun", "--nnodes", "2"}), NotSupported);
  EXPECT_THROW(TorchrunCommand::parse({"torchrun", "--help"}), NotSupported);
  EXPECT_THROW(TorchrunCommand::parse({"torchrun", "--standalone=1", "t.py"}), NotSupported);
}

TEST(TorchrunTest, FindsSelfByNameShortNameOrAddress) {
  auto known = fourHostAddresses();
  Argv hosts = {"h0", "h1", "h2", "h3"};
  EXPECT_EQ(findSelf({"h1", {}}, hosts, known), "h1");
  EXPECT_EQ(findSelf({"h1.cluster.local", {}}, hosts, known), "h1");
  EXPECT_EQ(findSelf({"other", {"192.168.0.9", "10.1.1.4"}}, hosts, known), "h3");
  EXPECT_EQ(findSelf({"other", {"10.9.9.9"}}, hosts, known), std::nullopt);
  // Plan hosts spelled as addresses match without a topology.
  EXPECT_EQ(findSelf({"x", {"10.0.0.2"}}, {"10.0.0.1", "10.0.0.2"}, {}), "10.0.0.2");
  // Two matches (by name and by address) are ambiguous: nothing is guessed.
  EXPECT_EQ(findSelf({"h0", {"10.1.1.2"}}, hosts, known), std::nullopt);
}

TEST(TorchrunTest, StaticRendezvousTakesNodeRankAndMasterFromThePlan) {
  Argv argv = {"torchrun",    "--nnodes",
               "4",           "--nproc_per_node",
               "2",           "--node_rank",
               "1",           "--master_addr",
               "10.1.1.1",    "--master_port",
               "29500",       "train.py",
               "--node_rank", "7"};
  auto d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(),
                          {"h1", {"10.1.1.2"}}, newTorch());
  ASSERT_TRUE(d.applied) << d.message;
  Argv expect = {"torchrun",    "--nnodes",
                 "4",           "--nproc_per_node",
                 "2",           "--master_port",
                 "29500",       "--node_rank",
                 "3",           "--master_addr",
                 "10.1.1.3",    "train.py",
                 "--node_rank", "7"};
  EXPECT_EQ(d.command.argv, expect);
  EXPECT_NE(d.message.find("node rank 3 of 4"), std::string::npos) << d.message;

  // Every node agrees on a distinct rank and the same master.
  std::vector<std::string> ranks;
  for (const auto& h : fourHostAddresses()) {
    auto di = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(), {h.name, {}},
                             newTorch());
    ASSERT_TRUE(di.applied) << di.message;
    EXPECT_EQ(valueAfter(di.command.argv, "--master_addr"), "10.1.1.3");
    ranks.push_back(valueAfter(di.command.argv, "--node_rank"));
  }
  EXPECT_EQ(ranks, (std::vector<std::string>{"1", "3", "0", "2"}));
}

TEST(TorchrunTest, StaticRdzvEndpointMovesToThePlansFirstHost) {
  Argv argv = {
      "python3", "-m", "torch.distributed.run", "--nnodes=4", "--rdzv_endpoint=10.1.1.1:29600",
      "t.py"};
  auto d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(), {"h2", {}},
                          newTorch());
  ASSERT_TRUE(d.applied) << d.message;
  Argv expect = {"python3",     "-m", "torch.distributed.run", "--nnodes=4",
                 "--node_rank", "0",  "--rdzv_endpoint",       "10.1.1.3:29600",
                 "t.py"};
  EXPECT_EQ(d.command.argv, expect);
}

TEST(TorchrunTest, C10dGetsLocalAddrsThatSortInPlanOrder) {
  Argv argv = {"torchrun",        "--nnodes",       "4",   "--rdzv_backend", "c10d",
               "--rdzv_endpoint", "10.1.1.1:29400", "t.py"};
  std::vector<std::pair<std::string, std::string>> sortKeys;  // local addr, host
  for (const auto& h : fourHostAddresses()) {
    auto d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(), {h.name, {}},
                            newTorch());
    ASSERT_TRUE(d.applied) << d.message;
    std::string local = valueAfter(d.command.argv, "--local_addr");
    ASSERT_FALSE(local.empty());
    // The value still names this host's address for inet_aton (and so getaddrinfo).
    in_addr parsed{}, want{};
    ASSERT_EQ(inet_aton(local.c_str(), &parsed), 1) << local;
    std::string addr = h.address.substr(0, h.address.find(':'));
    ASSERT_EQ(inet_pton(AF_INET, addr.c_str(), &want), 1);
    EXPECT_EQ(parsed.s_addr, want.s_addr) << local;
    // ... and for getaddrinfo, which torch's TCPStore uses when this node hosts the store.
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    ASSERT_EQ(getaddrinfo(local.c_str(), nullptr, &hints, &res), 0) << local;
    EXPECT_EQ(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr, want.s_addr);
    freeaddrinfo(res);
    sortKeys.emplace_back(local, h.name);
  }
  std::sort(sortKeys.begin(), sortKeys.end());
  std::vector<std::string> sorted;
  for (const auto& [k, h] : sortKeys) sorted.push_back(h);
  EXPECT_EQ(sorted, fourHostPlan().order);
}

TEST(TorchrunTest, SortableLocalAddrHandlesAddressesOfDifferentLengths) {
  // 1.0.0.9 is 7 hex digits, 192.168.0.1 is 8: position still decides.
  std::string a = sortableLocalAddr(0, 2, "192.168.0.1");
  std::string b = sortableLocalAddr(1, 2, "1.0.0.9");
  EXPECT_LT(a, b);
  EXPECT_EQ(a, "0x00c0a80001");
  EXPECT_THROW(sortableLocalAddr(0, 2, "vm1"), InvalidInput);
  EXPECT_THROW(sortableLocalAddr(2, 2, "1.2.3.4"), InvalidInput);
}

TEST(TorchrunTest, C10dWithoutLocalAddrRunsUnchangedSayingWhy) {
  Argv argv = {"torchrun", "--nnodes",    "4", "--rdzv_backend", "c10d", "--rdzv_endpoint",
               "h0:29400", "--redirects", "1", "--tee",          "1",    "t.py"};
  auto d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(), {"h1", {}},
                          torch113());
  EXPECT_FALSE(d.applied);
  EXPECT_EQ(d.command.argv, argv);
  EXPECT_NE(d.message.find("no --local_addr"), std::string::npos) << d.message;
}

TEST(TorchrunTest, PlanThatDoesNotCoverTheNodeKeepsTheLaunchersOrder) {
  Argv argv = {"torchrun", "--nnodes", "4", "--node_rank", "2", "t.py"};
  auto d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(),
                          {"stranger", {"10.9.9.9"}}, newTorch());
  EXPECT_FALSE(d.applied);
  EXPECT_EQ(d.command.argv, argv);
  EXPECT_NE(d.message.find("does not hold this node"), std::string::npos) << d.message;

  Argv five = {"torchrun", "--nnodes", "5", "t.py"};
  d = decideTorchrun(five, fourHostPlan(), "", kSource, fourHostAddresses(), {"h1", {}},
                     newTorch());
  EXPECT_FALSE(d.applied);
  EXPECT_NE(d.message.find("--nnodes 5"), std::string::npos) << d.message;

  d = decideTorchrun(argv, std::nullopt, "cannot read p.json", kSource, {}, {"h1", {}}, newTorch());
  EXPECT_FALSE(d.applied);
  EXPECT_NE(d.message.find("cannot read p.json"), std::string::npos) << d.message;
}

TEST(TorchrunTest, UnknownOptionRunsUnchangedNamingIt) {
  Argv argv = {"torchrun", "--nnodes", "4", "--frobnicate", "t.py"};
  auto d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(), {"h1", {}},
                          torch113());
  EXPECT_FALSE(d.applied);
  EXPECT_EQ(d.command.argv, argv);
  EXPECT_NE(d.message.find("--frobnicate"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("--redirects"), std::string::npos) << d.message;
}

TEST(TorchrunTest, StandaloneIsLeftAlone) {
  Argv argv = {"torchrun", "--standalone", "--nproc_per_node", "2", "t.py"};
  auto d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(), {"h1", {}},
                          newTorch());
  EXPECT_FALSE(d.applied);
  EXPECT_EQ(d.command.argv, argv);
}

TEST(TorchrunTest, Python311RedirectsCrashIsWorkedAround) {
  TorchInstall old = torch113();
  EXPECT_TRUE(old.redirectsBug());
  EXPECT_FALSE(newTorch().redirectsBug());
  EXPECT_FALSE((TorchInstall{"1.13.1", 3, 10, ""}.redirectsBug()));

  // Neither set: both added, with or without a plan.
  Argv argv = {"torchrun", "--nnodes", "4", "t.py", "a"};
  auto d = decideTorchrun(argv, std::nullopt, "none", kSource, {}, {"h1", {}}, old);
  Argv expect = {"torchrun", "--nnodes", "4", "--redirects", "1", "--tee", "1", "t.py", "a"};
  EXPECT_EQ(d.command.argv, expect);
  EXPECT_NE(d.message.find("added --redirects 1 --tee 1"), std::string::npos) << d.message;

  d = decideTorchrun(argv, fourHostPlan(), "", kSource, fourHostAddresses(), {"h1", {}}, old);
  ASSERT_TRUE(d.applied);
  EXPECT_EQ(valueAfter(d.command.argv, "--redirects"), "1");
  EXPECT_EQ(valueAfter(d.command.argv, "--node_rank"), "3");

  // Only --redirects 2 given: tee's default 0 still crashes, so --tee 1 is added.
  d = decideTorchrun({"torchrun", "--redirects", "2", "t.py"}, std::nullopt, "", kSource, {},
                     {"h1", {}}, old);
  EXPECT_EQ(d.command.argv, (Argv{"torchrun", "--redirects", "2", "--tee", "1", "t.py"}));

  // The user's own crashing values are kept, with a warning.
  Argv mine = {"torchrun", "--redirects", "3", "--tee", "0:3", "t.py"};
  d = decideTorchrun(mine, std::nullopt, "", kSource, {}, {"h1", {}}, old);
  EXPECT_EQ(d.command.argv, mine);
  EXPECT_NE(d.message.find("will fail"), std::string::npos) << d.message;

  // Working values: nothing to say.
  Argv fine = {"torchrun", "--redirects", "0:1,1:2", "--tee", "1", "t.py"};
  d = decideTorchrun(fine, std::nullopt, "", kSource, {}, {"h1", {}}, old);
  EXPECT_EQ(d.command.argv, fine);
  EXPECT_EQ(d.message.find("redirects"), std::string::npos) << d.message;

  // A newer torch needs nothing.
  d = decideTorchrun(argv, std::nullopt, "", kSource, {}, {"h1", {}}, newTorch());
  EXPECT_EQ(d.command.argv, argv);
}

TEST(TorchrunTest, ProbesAnInstalledTorchWhenThereIsOne) {
  auto install = probeTorchInstall("/usr/bin/python3");
  if (!install) GTEST_SKIP() << "no torch for /usr/bin/python3 (python3-torch not installed)";
  EXPECT_FALSE(install->torchVersion.empty());
  EXPECT_EQ(install->pythonMajor, 3);
  EXPECT_FALSE(probeTorchInstall("/nonexistent/python").has_value());
}

}  // namespace
}  // namespace rankmap::launch
