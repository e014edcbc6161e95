// Reading and rewriting MPICH Hydra command lines (launch/hydra.h): hostfiles and -hosts lists
// with host:N, the job Hydra's round-robin placement makes (-ppn, -n below and above one round),
// the options that make rankmap run refuse (pass-through), the launch- and shim-mode rewrites;
// and telling an MPI's launcher and library apart (launch/mpi_family.h).
#include "launch/hydra.h"

#include <gtest/gtest.h>

#include <map>

#include "common/error.h"
#include "launch/mpi_family.h"
#include "launch/process.h"

namespace rankmap::launch {
namespace {

using Argv = std::vector<std::string>;

std::unique_ptr<HydraCommand> parseHydra(const Argv& argv,
                                         std::map<std::string, std::string> files = {},
                                         std::map<std::string, std::string> env = {}) {
  return HydraCommand::parse(
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

std::vector<JobHost> hydraHosts(std::initializer_list<std::pair<const char*, int>> l) {
  std::vector<JobHost> v;
  for (auto [s, n] : l) v.push_back({s, n});
  return v;
}

std::string hydraRefusal(const Argv& argv, std::map<std::string, std::string> files = {},
                         std::map<std::string, std::string> env = {}) {
  try {
    parseHydra(argv, files, env);
  } catch (const NotSupported& e) {
    return e.what();
  }
  return "";
}

TEST(HydraHostfile, HostsCountsAndComments) {
  auto e = parseHydraHostfile("# rack a\nvm0:2\n\n  vm1   # one\n10.0.0.7:3\n", "hf");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], (HostEntry{"vm0", 2}));
  EXPECT_EQ(e[1], (HostEntry{"vm1", std::nullopt}));
  EXPECT_EQ(e[2], (HostEntry{"10.0.0.7", 3}));
}

TEST(HydraHostfile, BadLinesNameTheSourceAndLine) {
  try {
    parseHydraHostfile("vm0:2\nvm1 ifhn=10.0.0.2\n", "hosts.txt");
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("hosts.txt:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ifhn=10.0.0.2"), std::string::npos) << e.what();
  }
  try {
    parseHydraHostfile("vm1 10.0.0.1\n", "hosts");
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("reads as rankmap's hosts file"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("`vm1:1`"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parseHydraHostfile("vm0:x\n", "hf"), InvalidInput);
  EXPECT_THROW(parseHydraHostfile("vm0:0\n", "hf"), InvalidInput);
}

// At most kMaxJobRanks ranks (a few bytes of -np made a vector of a billion ranks).
TEST(Hydra, JobsOfMoreThanMaxRanksAreRefused) {
  const std::string max = std::to_string(kMaxJobRanks), over = std::to_string(kMaxJobRanks + 1);
  EXPECT_NE(hydraRefusal({"mpiexec", "-n", over, "-hosts", "a", "prog"}).find("ranks"),
            std::string::npos);
  EXPECT_NE(hydraRefusal({"mpiexec", "-hosts", "a:" + max + ",b:" + max, "prog"}).find("ranks"),
            std::string::npos);
}

TEST(Hydra, OneRoundByDefault) {
  auto c = parseHydra({"mpiexec", "-f", "hf", "./app", "-n", "3"}, {{"hf", "a:2\nb:2\nc\n"}});
  EXPECT_EQ(c->job().hosts, hydraHosts({{"a", 2}, {"b", 2}, {"c", 1}}));
  EXPECT_TRUE(c->job().contiguous);
  EXPECT_EQ(c->program(), "./app");  // the program's own -n is not Hydra's
}

TEST(Hydra, FewerRanksThanARoundFillInOrder) {
  auto c = parseHydra({"mpiexec.hydra", "-hosts", "a:2,b:2,c:2", "-n", "3", "./app"});
  EXPECT_EQ(c->job().hosts, hydraHosts({{"a", 2}, {"b", 1}}));
}

TEST(Hydra, PpnGivesEveryHostItsCount) {
  auto c = parseHydra({"mpiexec", "-ppn", "2", "-f", "hf", "./app"}, {{"hf", "a:4\nb\n"}});
  EXPECT_EQ(c->job().hosts, hydraHosts({{"a", 2}, {"b", 2}}));
  EXPECT_TRUE(c->job().contiguous);
}

TEST(Hydra, MoreRanksThanARoundWrapAround) {
  // Hydra's rounds: a a b b, then a a b b again: not contiguous.
  auto c = parseHydra({"mpiexec", "-hosts", "a:2,b:2", "-np", "8", "./app"});
  EXPECT_EQ(c->job().hosts, hydraHosts({{"a", 4}, {"b", 4}}));
  EXPECT_FALSE(c->job().contiguous);
  // One host per line, one rank each, one round: the emulated cloud's form.
  auto one =
      parseHydra({"mpiexec", "-f", "hf", "-n", "4", "./app"}, {{"hf", "vm0\nvm1\nvm2\nvm3\n"}});
  EXPECT_EQ(one->job().hosts, hydraHosts({{"vm0", 1}, {"vm1", 1}, {"vm2", 1}, {"vm3", 1}}));
}

TEST(Hydra, DefaultHostfileFromTheEnvironment) {
  auto c =
      parseHydra({"mpiexec", "./app"}, {{"/etc/hf", "a\nb\n"}}, {{"HYDRA_HOST_FILE", "/etc/hf"}});
  EXPECT_EQ(c->job().hosts, hydraHosts({{"a", 1}, {"b", 1}}));
}

TEST(Hydra, RefusesWhatItDoesNotModel) {
  const std::map<std::string, std::string> hf{{"hf", "a\nb\n"}};
  EXPECT_NE(hydraRefusal({"mpiexec", "-n", "2", "./app"}).find("no -f or -hosts"),
            std::string::npos);
  EXPECT_NE(
      hydraRefusal({"mpiexec", "-f", "hf", "-configfile", "c", "./app"}, hf).find("-configfile"),
      std::string::npos);
  EXPECT_NE(hydraRefusal({"mpiexec", "-f", "hf", "-rmk", "slurm", "./app"}, hf).find("-rmk"),
            std::string::npos);
  EXPECT_NE(hydraRefusal({"mpiexec", "-f", "hf", "-frobnicate", "./app"}, hf).find("-frobnicate"),
            std::string::npos);
  EXPECT_NE(hydraRefusal({"mpiexec", "-f", "hf", "-n", "1", "./a", ":", "-n", "1", "./b"}, hf)
                .find("MPMD"),
            std::string::npos);
  EXPECT_NE(hydraRefusal({"mpiexec", "-f", "hf", "-hosts", "a", "./app"}, hf).find("both"),
            std::string::npos);
  EXPECT_NE(hydraRefusal({"mpiexec", "-f", "hf"}, hf).find("no program"), std::string::npos);
  EXPECT_THROW(parseHydra({"mpiexec", "-f", "hf", "-n", "two", "./app"}, hf), InvalidInput);
}

TEST(Hydra, LaunchRewriteWritesHydraHostfileInOrder) {
  auto c = parseHydra({"mpiexec", "-launcher", "ssh", "-launcher-exec", "/x/agent", "-f", "hf",
                       "-ppn", "2", "-n", "4", "-genv", "UCX_TLS", "tcp", "./app", "--bytes", "8"},
                      {{"hf", "a\nb\n"}});
  ASSERT_EQ(c->job().hosts, hydraHosts({{"a", 2}, {"b", 2}}));
  Command r = c->launchInOrder(hydraHosts({{"b", 2}, {"a", 2}}), "/d");
  EXPECT_EQ(r.argv,
            (Argv{"mpiexec", "-f", "/d/hostfile", "-n", "4", "-launcher", "ssh", "-launcher-exec",
                  "/x/agent", "-genv", "UCX_TLS", "tcp", "./app", "--bytes", "8"}));
  ASSERT_EQ(r.files.size(), 1u);
  EXPECT_EQ(r.files[0], (std::pair<std::string, std::string>{"/d/hostfile", "b:2\na:2\n"}));
  EXPECT_THROW(c->launchInOrder(hydraHosts({{"b", 1}, {"a", 2}}), "/d"), Error);
}

TEST(Hydra, ShimRewritePreloadsAndKeepsPlacement) {
  auto c = parseHydra({"mpiexec", "-hosts", "a,b", "-genv", "LD_PRELOAD", "libx.so", "./app"});
  EXPECT_EQ(c->withShim("/l/librankmap_mpich.so", {{"RANKMAP_PLAN", "/p.json"}}).argv,
            (Argv{"mpiexec", "-genv", "LD_PRELOAD", "/l/librankmap_mpich.so:libx.so", "-genv",
                  "RANKMAP_PLAN", "/p.json", "-hosts", "a,b", "./app"}));
  // The launching environment's LD_PRELOAD reaches the ranks (Hydra passes it on): kept.
  auto e = parseHydra({"mpiexec", "-hosts", "a,b", "./app"}, {}, {{"LD_PRELOAD", "liby.so"}});
  EXPECT_EQ(e->withShim("s.so", {{"RANKMAP_PLAN", "p"}}).argv[3], "s.so:liby.so");
  auto none = parseHydra({"mpiexec", "-genvnone", "-hosts", "a,b", "./app"}, {},
                         {{"LD_PRELOAD", "liby.so"}});
  EXPECT_EQ(none->withShim("s.so", {{"RANKMAP_PLAN", "p"}}).argv[3], "s.so");
  // No Open MPI rules for an MPICH job.
  EXPECT_FALSE(c->collTunedOnCommandLine().has_value());
  EXPECT_EQ(c->mpiFamily(), MpiFamily::kMpich);
}

TEST(MpiFamily, LauncherNamesVersionTextsAndLibraries) {
  EXPECT_EQ(mpiFamilyOfLauncherName("/usr/bin/orterun"), MpiFamily::kOpenMpi);
  EXPECT_EQ(mpiFamilyOfLauncherName("mpirun.openmpi"), MpiFamily::kOpenMpi);
  EXPECT_EQ(mpiFamilyOfLauncherName("/usr/bin/mpiexec.hydra"), MpiFamily::kMpich);
  EXPECT_EQ(mpiFamilyOfLauncherName("mpirun.mpich"), MpiFamily::kMpich);
  EXPECT_EQ(mpiFamilyOfLauncherName("mpiexec"), MpiFamily::kUnknown);
  EXPECT_EQ(mpiFamilyOfVersionText("mpirun (Open MPI) 4.1.4\n"), MpiFamily::kOpenMpi);
  EXPECT_EQ(mpiFamilyOfVersionText("HYDRA build details:\n    Version: 4.0.2\n"),
            MpiFamily::kMpich);
  EXPECT_EQ(mpiFamilyOfVersionText("Intel(R) MPI Library for Linux* OS, Version 2021.9"),
            MpiFamily::kMpich);
  EXPECT_EQ(mpiFamilyOfVersionText("usage: foo"), MpiFamily::kUnknown);
  EXPECT_EQ(mpiFamilyOfLibrary("libmpi.so.40"), MpiFamily::kOpenMpi);
  EXPECT_EQ(mpiFamilyOfLibrary("/usr/lib/x86_64-linux-gnu/libmpi_mpifh.so.40"),
            MpiFamily::kOpenMpi);
  EXPECT_EQ(mpiFamilyOfLibrary("libmpich.so.12"), MpiFamily::kMpich);
  EXPECT_EQ(mpiFamilyOfLibrary("libmpi.so.12"), MpiFamily::kMpich);  // Intel MPI, Cray MPICH
  EXPECT_EQ(mpiFamilyOfLibrary("libmpi.so"), MpiFamily::kUnknown);
  EXPECT_EQ(mpiFamilyOfLibrary("libc.so.6"), MpiFamily::kUnknown);
}

// The launchers installed here, found through PATH and the alternatives (skips when absent).
TEST(MpiFamily, InstalledLaunchers) {
  if (!findOnPath("mpiexec.hydra")) GTEST_SKIP() << "MPICH's mpiexec.hydra not installed";
  EXPECT_EQ(launcherFamily("mpiexec.hydra", Deadline::afterMs(5000)), MpiFamily::kMpich);
  if (!findOnPath("orterun")) GTEST_SKIP() << "Open MPI's orterun not installed";
  EXPECT_EQ(launcherFamily("orterun", Deadline::afterMs(5000)), MpiFamily::kOpenMpi);
}

}  // namespace
}  // namespace rankmap::launch
