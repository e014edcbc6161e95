// `rankmap plan`, `rankmap show` and `rankmap export` as a user runs them: the built binary on the
// fixtures.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/http_client.h"
#include "common/json.h"
#include "common/plan.h"
#include "tests/unit/common/fifo_reader.h"
#include "tests/unit/reorder/test_util.h"

namespace rankmap::cli {
namespace {

namespace test = reorder::test;

struct Outcome {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/reorder_cli_" + std::to_string(::getpid());
    ASSERT_EQ(std::system(("mkdir -p '" + dir_ + "'").c_str()), 0);
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  // Runs `rankmap ARGS` with a 60 s bound; never hangs the suite.
  Outcome rankmap(const std::string& args) {
    std::string cmd = "timeout 60 '" + std::string(RANKMAP_CLI) + "' " + args + " >'" + dir_ +
                      "/out' 2>'" + dir_ + "/err'";
    int status = std::system(cmd.c_str());
    Outcome r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(dir_ + "/out");
    r.err = slurp(dir_ + "/err");
    return r;
  }
  std::string path(const std::string& name) { return dir_ + "/" + name; }
  std::string dir_;
};

// Unequal racks behind unequal uplinks as a link model: the plan carries chunk weights for hier
// and says what every algorithm would take; --uniform-shares makes the same plan without them.
TEST_F(Cli, PlanWithUnequalUplinksCarriesChunkWeightsUnlessUniformShares) {
  {
    std::ofstream t(path("unequal.json"));
    t << R"({"schema_version":2,"hosts":[)";
    for (int i = 0; i < 10; ++i)
      t << (i ? "," : "") << R"({"name":"vm)" << i << R"(","address":""})";
    t << R"(],"probe":{"latency_samples":0,"bandwidth_max_ms":0,"bandwidth_max_bytes":0,)"
      << R"("contention":false},"time":"","version":0,"groups":[{"name":"rack","confidence":1,)"
      << R"("groups":[["vm0","vm1","vm2","vm3"],["vm4","vm5","vm6"],["vm7","vm8","vm9"]]}],)"
      << R"("links":{"hosts":[)";
    for (int i = 0; i < 10; ++i) t << (i ? "," : "") << R"({"out_mbps":1000,"in_mbps":1000})";
    t << R"(],"uplinks":[[{"out_mbps":500,"in_mbps":500},{"out_mbps":125,"in_mbps":125},)"
      << R"({"out_mbps":250,"in_mbps":250}]],"host_latency_us":15,"uplink_latency_us":[15]},)"
      << R"("measured":[]})";
  }
  Outcome r = rankmap("plan --topology " + path("unequal.json") + " --out " + path("w.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("allreduce 16 MiB predicted: ring "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; hier "), std::string::npos) << r.out;
  Plan w = Plan::load(path("w.json"));
  EXPECT_EQ(w.chunkWeights.size(), 10u);
  EXPECT_EQ(w.algorithmFor("allreduce", 16u << 20), Algorithm::kHier);
  // The plan says why: the uplinks (every host link is 1000), and show explains it per rack.
  EXPECT_EQ(w.chunkWeightsBasis, Plan::kWeightsByUplinks);
  EXPECT_NE(r.out.find("chunk weights: hier's shares balance the groups' uplinks"),
            std::string::npos)
      << r.out;
  r = rankmap("show " + path("w.json") + " --topology " + path("unequal.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("balanced by the groups' uplinks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(vm4, vm5 and vm6): 0 of each piece, leader vm4, uplink 125 Mbit/s"),
            std::string::npos)
      << r.out;
  EXPECT_NE(
      r.out.find("(vm0, vm1, vm2 and vm3): 0.75 of each piece, leader vm0, uplink 500 Mbit/s"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("each pair of groups exchanges over one flow each way"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("host links measured"), std::string::npos) << r.out;
  r = rankmap("plan --topology " + path("unequal.json") + " --uniform-shares --out " +
              path("u.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  Plan u = Plan::load(path("u.json"));
  EXPECT_TRUE(u.chunkWeights.empty());
  EXPECT_TRUE(u.chunkWeightsBasis.empty());
  EXPECT_EQ(u.order, w.order);
}

TEST_F(Cli, PlanWritesAValidPlanAndASummary) {
  Outcome r = rankmap("plan --topology " + test::fixture("testbed_8vm_2rack.json") + " --out " +
                      path("plan.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("rack: 2 groups"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("faster than the input order"), std::string::npos) << r.out;
  Plan p = Plan::load(path("plan.json"));
  EXPECT_EQ(p.hosts.size(), 8u);
  EXPECT_GT(p.predicted.speedup, 2.5);

  // To stdout: the plan is the only thing there; the summary goes to stderr.
  Outcome s = rankmap("plan -t " + test::fixture("testbed_8vm_2rack.json") +
                      " --ranks-per-host 2 -c allreduce -c allgather");
  ASSERT_EQ(s.code, 0) << s.err;
  Plan q = Plan::parse(s.out, "stdout");
  EXPECT_EQ(q.ranksPerHost, 2);
  EXPECT_EQ(q.collectives.count("allgather"), 1u);
  EXPECT_NE(s.err.find("rankmap plan:"), std::string::npos);
}

TEST_F(Cli, ExportWritesTheSchedulersFiles) {
  const std::string topo = test::fixture("links_sparse.json");
  // -o DIR: topology.conf and topology.yaml, the same as each format on stdout.
  Outcome both = rankmap("export --slurm-topology --topology " + topo + " -o " + dir_);
  ASSERT_EQ(both.code, 0) << both.err;
  Outcome conf = rankmap("export --slurm-topology --topology " + topo);
  Outcome yaml = rankmap("export --slurm-topology --format yaml --topology " + topo);
  ASSERT_EQ(conf.code, 0) << conf.err;
  ASSERT_EQ(yaml.code, 0) << yaml.err;
  EXPECT_EQ(slurp(path("topology.conf")), conf.out);
  EXPECT_EQ(slurp(path("topology.yaml")), yaml.out);
  EXPECT_NE(conf.out.find("SwitchName=root Switches=pod[0-1]\n"), std::string::npos) << conf.out;
  EXPECT_NE(yaml.out.find("- topology: rankmap-block\n"), std::string::npos) << yaml.out;

  // Labels from a topology with a link model carry annotations; from a plan (no rates) not.
  Outcome labels = rankmap("export --k8s-labels --topology " + topo);
  ASSERT_EQ(labels.code, 0) << labels.err;
  EXPECT_NE(labels.out.find("kubectl label nodes l0 rankmap.io/level-1=rack0 "), std::string::npos)
      << labels.out;
  EXPECT_NE(labels.out.find("kubectl annotate nodes l0 rankmap.io/host-out-mbps="),
            std::string::npos);
  ASSERT_EQ(rankmap("plan -t " + topo + " -o " + path("p.json")).code, 0);
  Outcome fromPlan = rankmap("export --k8s-labels --plan " + path("p.json"));
  ASSERT_EQ(fromPlan.code, 0) << fromPlan.err;
  EXPECT_NE(fromPlan.out.find("kubectl label nodes l0 rankmap.io/level-1="), std::string::npos);
  EXPECT_EQ(fromPlan.out.find("kubectl annotate"), std::string::npos) << fromPlan.out;

  // One inference: from a topology whose file declares no groups, export finds the racks that
  // plan finds (it said "0 inferred level(s) (none: one switch)").
  {
    const std::string bare = test::fixture("testbed_8vm_2rack.json");
    ASSERT_EQ(rankmap("plan -t " + bare + " -o " + path("bare.json")).code, 0);
    Outcome fromTopology = rankmap("export --slurm-topology --topology " + bare);
    Outcome fromItsPlan = rankmap("export --slurm-topology --plan " + path("bare.json"));
    ASSERT_EQ(fromTopology.code, 0) << fromTopology.err;
    ASSERT_EQ(fromItsPlan.code, 0) << fromItsPlan.err;
    EXPECT_NE(fromTopology.out.find("1 inferred level(s)"), std::string::npos) << fromTopology.out;
    auto switches = [](const std::string& conf) {  // the lines after the two comment lines
      return conf.substr(conf.find("\nSwitchName="));
    };
    EXPECT_EQ(switches(fromTopology.out), switches(fromItsPlan.out)) << fromTopology.out;
    Outcome labels = rankmap("export --k8s-labels --topology " + bare);
    EXPECT_NE(labels.out.find("rankmap.io/level-1="), std::string::npos) << labels.out;
  }

  Outcome kueue = rankmap("export --kueue-topology --kueue-name tas --topology " + topo);
  ASSERT_EQ(kueue.code, 0) << kueue.err;
  EXPECT_NE(kueue.out.find("  name: tas\n"), std::string::npos) << kueue.out;

  // Bad input: exit 2 naming what was expected.
  Outcome badName = rankmap("export --kueue-topology --kueue-name Bad_Name --topology " + topo);
  EXPECT_EQ(badName.code, 2);
  EXPECT_NE(badName.err.find("DNS-1123"), std::string::npos) << badName.err;
  Outcome badFormat = rankmap("export --k8s-labels --format yaml --topology " + topo);
  EXPECT_EQ(badFormat.code, 2);
  EXPECT_NE(badFormat.err.find("--slurm-topology"), std::string::npos) << badFormat.err;
}

TEST_F(Cli, PlanWithAHostsFileKeepsItsOrder) {
  Outcome r = rankmap("plan -t " + test::fixture("testbed_8vm_2rack.json") + " --hosts " +
                      test::fixture("testbed_8vm_2rack.hosts") + " -o " + path("p.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  Plan p = Plan::load(path("p.json"));
  EXPECT_EQ(p.hosts, (std::vector<std::string>{"vm0", "vm2", "vm3", "vm5", "vm6", "vm7"}));
}

TEST_F(Cli, ShowPlanTopologyAndSvg) {
  ASSERT_EQ(
      rankmap("plan -t " + test::fixture("bandwidth_only.json") + " -o " + path("p.json")).code, 0);
  Outcome show = rankmap("show " + path("p.json"));
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("groups:"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("ring (new rank order)"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("predicted:"), std::string::npos) << show.out;

  Outcome topo =
      rankmap("show " + test::fixture("bandwidth_only.json") + " --svg " + path("t.svg"));
  ASSERT_EQ(topo.code, 0) << topo.err;
  EXPECT_NE(topo.out.find("inferred groups"), std::string::npos) << topo.out;
  EXPECT_EQ(slurp(path("t.svg")).rfind("<svg", 0), 0u);

  Outcome svg = rankmap("show " + path("p.json") + " --topology " +
                        test::fixture("bandwidth_only.json") + " --svg " + path("p.svg"));
  ASSERT_EQ(svg.code, 0) << svg.err;
  EXPECT_NE(slurp(path("p.svg")).find("</svg>"), std::string::npos);
  // A plan alone cannot be drawn.
  Outcome noTopo = rankmap("show " + path("p.json") + " --svg " + path("x.svg"));
  EXPECT_EQ(noTopo.code, 2);
  EXPECT_NE(noTopo.err.find("--topology"), std::string::npos) << noTopo.err;
}

// A plan with a mesh: `rankmap show` lists each dimension's groups (ranks, hosts, racks) with
// each group's predicted time alone, --json carries the groups, and the SVG marks the cells each
// dimension's traffic uses.
TEST_F(Cli, ShowStatesEachGroupOfTheMeshAndDrawsIt) {
  std::string topo = test::fixture("testbed_8vm_2rack.json");
  Outcome plan = rankmap("plan -t " + topo + " --mesh dp=4,pp=2 -o " + path("m.json"));
  ASSERT_EQ(plan.code, 0) << plan.err;
  Outcome show = rankmap("show " + path("m.json"));
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("the job's groups:"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("dp groups, each alone, slowest first:"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("pp groups, each alone, slowest first:"), std::string::npos) << show.out;
  // Both data-parallel groups, each in one rack, with a time.
  std::regex dpGroup(
      R"(\[[01]\] ranks ([0-7]) ([0-7]) ([0-7]) ([0-7]) on \S+ \S+ \S+ \S+ \(rack \d\): [0-9.]+ (ms|s)\n)");
  auto begin = std::sregex_iterator(show.out.begin(), show.out.end(), dpGroup);
  EXPECT_EQ(std::distance(begin, std::sregex_iterator()), 2) << show.out;

  Outcome json = rankmap("show --json " + path("m.json"));
  ASSERT_EQ(json.code, 0) << json.err;
  Json doc = Json::parse(json.out);
  EXPECT_EQ(doc["mesh"]["dims"][0]["groups"], Json::parse("[[0,2,4,6],[1,3,5,7]]"));
  EXPECT_EQ(doc["mesh"]["dims"][1]["groups_us"].size(), 4u);

  Outcome svg = rankmap("show " + path("m.json") + " -t " + topo + " --svg " + path("m.svg"));
  ASSERT_EQ(svg.code, 0) << svg.err;
  std::string drawing = slurp(path("m.svg"));
  EXPECT_NE(drawing.find("class=\"mesh-hop\" data-dim=\"dp\""), std::string::npos);
  EXPECT_NE(drawing.find("class=\"mesh-hop\" data-dim=\"pp\""), std::string::npos);
  EXPECT_NE(drawing.find("dp groups (2 of 4, allreduce"), std::string::npos);
}

// A launcher command line rankmap run cannot read (README's quick start once handed rankmapd's
// hosts file to mpirun): a warning that says why, what mpirun wants, and that --strict makes it
// an error; with --strict or RANKMAP_RUN_STRICT=1, exit 2 and nothing runs.
TEST_F(Cli, RunSaysWhatItCannotReadAndStrictRefusesIt) {
  ASSERT_EQ(
      rankmap("plan -t " + test::fixture("testbed_8vm_2rack.json") + " -o " + path("p.json")).code,
      0);
  std::ofstream(path("hosts")) << "vm0 10.0.0.1\nvm1 10.0.0.2\n";
  const std::string job =
      " --plan " + path("p.json") + " -- mpirun --hostfile " + path("hosts") + " -np 2 ./prog";
  Outcome lax = rankmap("run --dry-run" + job);
  EXPECT_EQ(lax.code, 0) << lax.err;
  EXPECT_NE(lax.err.find("running the original command unchanged"), std::string::npos) << lax.err;
  EXPECT_NE(lax.err.find("reads as rankmap's hosts file"), std::string::npos) << lax.err;
  EXPECT_NE(lax.err.find("--strict (RANKMAP_RUN_STRICT=1) makes this an error"), std::string::npos)
      << lax.err;
  Outcome strict = rankmap("run --strict --dry-run" + job);
  EXPECT_EQ(strict.code, 2) << strict.err;
  EXPECT_EQ(strict.out, "");
  EXPECT_NE(strict.err.find(path("hosts") + ":1"), std::string::npos) << strict.err;
  ::setenv("RANKMAP_RUN_STRICT", "1", 1);
  Outcome setting = rankmap("run --dry-run" + job);
  ::unsetenv("RANKMAP_RUN_STRICT");
  EXPECT_EQ(setting.code, 2) << setting.err;
}

// `rankmap run --xgboost N --hosts H` reads rankmap's hosts file (README's quick start gives it
// the one rankmapd reads): the names in order, and the addresses reach hosts no topology names
// (the tracker's address is the local one that routes to the first host).
TEST_F(Cli, XgboostRunReadsTheAddressesOfRankmapsHostsFile) {
  ASSERT_EQ(
      rankmap("plan -t " + test::fixture("testbed_8vm_2rack.json") + " -o " + path("p.json")).code,
      0);
  std::ofstream(path("hosts")) << "# rankmap's hosts file\nvm0 127.0.0.1:7411\nvm2 127.0.0.2\n";
  Outcome r = rankmap("run --plan " + path("p.json") + " --xgboost 2 --hosts " + path("hosts") +
                      " --dry-run -- /usr/bin/python3 train.py");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("tracker 127.0.0.1:"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("ssh vm0 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ssh vm2 "), std::string::npos) << r.out;
  std::ofstream(path("names")) << "vm0\nvm2\n";  // names alone: nothing tells where vm0 is
  Outcome bare = rankmap("run --plan " + path("p.json") + " --xgboost 2 --hosts " + path("names") +
                         " --dry-run -- /usr/bin/python3 train.py");
  EXPECT_EQ(bare.code, 2) << bare.err;
  EXPECT_NE(bare.err.find("no local address reaches host \"vm0\""), std::string::npos) << bare.err;
}

// One meaning per short option across subcommands (-o an output file, -c the collective, -t a
// topology, ...), read from every subcommand's --help; nccl-tests' -o and -c in bench are
// --op and --check, and typing them the nccl-tests way says so.
TEST_F(Cli, ShortOptionsMeanOneThingInEverySubcommand) {
  std::map<std::string, std::set<std::string>> meanings;  // "-o" -> {"--out", "--output"}
  const std::regex shortLong(R"(^\s+(-[A-Za-z]),(--[a-z][a-z-]*))");
  for (const char* sub : {"config", "run", "export", "probe", "plan", "show", "bench", "hosts",
                          "doctor", "completion"}) {
    Outcome help = rankmap(std::string(sub) + " --help");
    ASSERT_EQ(help.code, 0) << sub << help.err;
    std::istringstream lines(help.out);
    for (std::string line; std::getline(lines, line);)
      if (std::smatch m; std::regex_search(line, m, shortLong)) {
        std::string name = m[2];
        if (name == "--output") name = "--out";  // export's spelling of the same thing
        meanings[m[1]].insert(name);
      }
  }
  ASSERT_TRUE(meanings.count("-o") && meanings.count("-c")) << "no short options read";
  for (const auto& [opt, names] : meanings)
    EXPECT_EQ(names.size(), 1u) << opt << " means " << ::testing::PrintToString(names);
  EXPECT_EQ(*meanings["-o"].begin(), "--out");
  EXPECT_EQ(*meanings["-c"].begin(), "--collective");
  Outcome op = rankmap("bench --loopback 2 -b 1K -e 1K -o sum");
  EXPECT_EQ(op.code, 2);
  EXPECT_NE(op.err.find("the reduction is --op (nccl-tests' -o)"), std::string::npos) << op.err;
  Outcome check = rankmap("bench --loopback 2 -b 1K -e 1K -c 1");
  EXPECT_EQ(check.code, 2);
  EXPECT_NE(check.err.find("nccl-tests' -c 0/1 is --check here"), std::string::npos) << check.err;
}

// `show --json`: the same numbers as the text, as one JSON document on stdout (even with --svg,
// whose note goes to stderr): every range's at_bytes inside it and its lower bound not above its
// prediction; a topology's inferred groups and network model.
TEST_F(Cli, ShowJsonIsTheSameNumbersForPrograms) {
  ASSERT_EQ(
      rankmap("plan -t " + test::fixture("testbed_8vm_2rack.json") + " -o " + path("p.json")).code,
      0);
  Outcome show = rankmap("show " + path("p.json") + " --json -t " +
                         test::fixture("testbed_8vm_2rack.json") + " --svg " + path("p.svg"));
  ASSERT_EQ(show.code, 0) << show.err;
  Json j = parseJson(show.out, "show --json");
  EXPECT_EQ(j["kind"], "plan");
  EXPECT_EQ(j["hosts"], 8);
  EXPECT_EQ(j["order"].size(), 8u);
  EXPECT_EQ(j["groups"][0]["groups"].size(), 2u);
  for (const auto& r : j["collectives"]["allreduce"]) {
    EXPECT_GE(r["at_bytes"].get<double>(), r["min_bytes"].get<double>());
    if (!r["max_bytes"].is_null()) {
      EXPECT_LT(r["at_bytes"].get<double>(), r["max_bytes"].get<double>());
    }
    EXPECT_LE(r["lower_bound_us"].get<double>(), r["predicted_us"].get<double>());
    EXPECT_GT(r["busbw_bytes_per_second"].get<double>(), 0);
  }
  EXPECT_EQ(j["collectives"]["allreduce"].back()["algorithm"], "hier");
  EXPECT_TRUE(j["open_mpi"].contains("allreduce"));
  EXPECT_NE(show.err.find("svg written to " + path("p.svg")), std::string::npos) << show.err;
  EXPECT_NE(slurp(path("p.svg")).find("</svg>"), std::string::npos);

  Outcome topo = rankmap("show --json " + test::fixture("testbed_8vm_2rack.json"));
  ASSERT_EQ(topo.code, 0) << topo.err;
  Json t = parseJson(topo.out, "show --json (topology)");
  EXPECT_EQ(t["kind"], "topology");
  EXPECT_EQ(t["groups"][0]["groups"].size(), 2u);
  EXPECT_EQ(t["network_model"]["uplinks"][0]["level"], "rack");
  EXPECT_NEAR(t["predicted"]["speedup"].get<double>(), 3.0, 0.45);
}

// Outputs named by a FIFO (`plan --out`, `show --svg`, `export -o`) arrive through it, and the
// FIFO is still a FIFO: nothing is renamed over it.
TEST_F(Cli, OutputsToAFifoArriveThroughIt) {
  std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto isFifo = [&] {
    struct stat st {};
    return ::lstat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
  };
  {
    rankmap::testing::FifoReader reader(fifo);
    Outcome r = rankmap("plan -t " + test::fixture("testbed_8vm_2rack.json") + " --out " + fifo);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(Plan::parse(reader.data(), "fifo").hosts.size(), 8u);
    EXPECT_TRUE(isFifo());
  }
  {
    rankmap::testing::FifoReader reader(fifo);
    Outcome r = rankmap("show " + test::fixture("bandwidth_only.json") + " --svg " + fifo);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(reader.data().rfind("<svg", 0), 0u);
    EXPECT_TRUE(isFifo());
  }
  {
    rankmap::testing::FifoReader reader(fifo);
    Outcome r = rankmap("export --k8s-labels --topology " + test::fixture("links_sparse.json") +
                        " -o " + fifo);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(reader.data().find("kubectl label nodes l0 "), std::string::npos) << reader.data();
    EXPECT_TRUE(isFifo());
  }
}

// Outputs named by a character device (the null device's numbers, made here: this needs root)
// or by a link to one are written into it: it stays the same device. Root once replaced the
// machine's /dev/null with a regular file this way.
TEST_F(Cli, OutputsToACharacterDeviceLeaveItADevice) {
  std::string dev = path("null");
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "mknod of a character device needs root (" << std::strerror(errno) << ")";
  std::string link = path("stdout");
  ASSERT_EQ(::symlink(dev.c_str(), link.c_str()), 0);
  auto isTheDevice = [&] {
    struct stat st {};
    return ::lstat(dev.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
  };
  for (const std::string& out : {dev, link}) {
    Outcome plan =
        rankmap("plan --topology " + test::fixture("testbed_8vm_2rack.json") + " --out " + out);
    EXPECT_EQ(plan.code, 0) << plan.err;
    EXPECT_TRUE(isTheDevice()) << "plan --out " << out;
    Outcome svg = rankmap("show " + test::fixture("bandwidth_only.json") + " --svg " + out);
    EXPECT_EQ(svg.code, 0) << svg.err;
    EXPECT_TRUE(isTheDevice()) << "show --svg " << out;
    Outcome labels = rankmap("export --k8s-labels --topology " +
                             test::fixture("links_sparse.json") + " -o " + out);
    EXPECT_EQ(labels.code, 0) << labels.err;
    EXPECT_TRUE(isTheDevice()) << "export -o " << out;
    struct stat st {};
    EXPECT_TRUE(::lstat(link.c_str(), &st) == 0 && S_ISLNK(st.st_mode));
  }
}

// An output in a folder that does not exist: the error names the path as given and the missing
// folder, not a temporary file, and no source location.
TEST_F(Cli, AnOutputInAMissingFolderIsNamedAsGiven) {
  std::string out = path("none/p.json");
  Outcome r = rankmap("plan -t " + test::fixture("testbed_8vm_2rack.json") + " -o " + out);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(
      r.err.find("rankmap plan: " + out + ": cannot write: No such file or directory (the folder " +
                 path("none") + " does not exist)\n"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find(".tmp"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(".cc:"), std::string::npos) << r.err;
}

// Usage errors as git and kubectl treat them: exit 2 (not CLI11's 105/106/109), a mistyped
// subcommand answered with the nearest names, global flags anywhere on the line.
TEST_F(Cli, UsageErrorsExitTwoAndSuggestTheNearestCommand) {
  Outcome typo = rankmap("plna");
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.err.find("'plna' is not a rankmap command"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("\tplan\n"), std::string::npos) << typo.err;
  Outcome far = rankmap("xyzzy");
  EXPECT_EQ(far.code, 2);
  EXPECT_EQ(far.err.find("most similar"), std::string::npos) << far.err;
  EXPECT_NE(far.err.find("See 'rankmap --help'."), std::string::npos) << far.err;
  EXPECT_EQ(rankmap("").code, 2);                   // no subcommand
  EXPECT_EQ(rankmap("plan").code, 2);               // a required option missing
  EXPECT_EQ(rankmap("plan --no-such-flag -t x").code, 2);
  EXPECT_EQ(rankmap("--version").code, 0);
  EXPECT_EQ(rankmap("plan --help").code, 0);
  std::string topo = test::fixture("testbed_8vm_2rack.json");
  Outcome late = rankmap("plan -t " + topo + " -o " + path("p.json") + " -v");
  EXPECT_EQ(late.code, 0) << late.err;
  EXPECT_NE(late.err.find("debug"), std::string::npos) << "-v after the subcommand: " << late.err;
}

// `show PLAN --topology T` with a T the plan cannot have been made from is bad input naming the
// hosts it lacks; a plan made with --hosts (part of T) is shown; the same hosts measured another
// time are shown with a warning.
TEST_F(Cli, ShowRefusesATopologyThePlanWasNotMadeFrom) {
  std::string topo = test::fixture("testbed_8vm_2rack.json");
  ASSERT_EQ(rankmap("plan -t " + topo + " -o " + path("p.json")).code, 0);
  Outcome other = rankmap("show " + path("p.json") + " -t " +
                          test::fixture("two_racks_slow_uplinks.json"));
  EXPECT_EQ(other.code, 2) << other.err;
  EXPECT_NE(other.err.find("not the topology " + path("p.json") + " was made from: 8 of its 8 "
                           "hosts are not in it (vm0, vm1, vm2, vm3, vm4, ...)"),
            std::string::npos)
      << other.err;
  ASSERT_EQ(rankmap("plan -t " + topo + " --hosts " + test::fixture("testbed_8vm_2rack.hosts") +
                    " -o " + path("part.json"))
                .code,
            0);
  Outcome part = rankmap("show " + path("part.json") + " -t " + topo);
  EXPECT_EQ(part.code, 0) << part.err;
  EXPECT_EQ(part.err.find("measured another time"), std::string::npos) << part.err;
  // The same hosts, one latency's 99th percentile 10 us higher: another measurement.
  std::string text = slurp(topo);
  size_t at = text.find("\"p99\":", text.find("\"latency_us\""));
  ASSERT_NE(at, std::string::npos);
  at += 6;
  ASSERT_TRUE(text[at] >= '1' && text[at] <= '8') << text.substr(at, 8);
  ++text[at];
  {
    std::ofstream f(path("again.json"));
    f << text;
  }
  Outcome again = rankmap("show " + path("p.json") + " -t " + path("again.json"));
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("measured another time"), std::string::npos) << again.err;
}

TEST_F(Cli, BadInputsExitTwoNamingTheFileAndField) {
  struct Case {
    std::string args, needle;
  };
  std::string neg = test::fixture("bad_negative.json");
  std::string asym = test::fixture("bad_asymmetric.json");
  {
    std::ofstream f(path("hosts"));
    f << "vm0\nnobody\n";
  }
  {
    std::ofstream f(path("broken.json"));
    f << "{\"schema_version\": 1, \"hosts\": [";
  }
  // NaN as a JSON literal, as a string, and a negative latency, edited into a valid topology.
  std::string testbed = slurp(test::fixture("testbed_8vm_2rack.json"));
  auto edited = [&](const std::string& name, const std::string& from, const std::string& to) {
    std::string text = testbed;
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    std::ofstream(path(name)) << text;
    return path(name);
  };
  std::string nanLiteral = edited("nan.json", "253.77", "NaN");
  std::string nanString = edited("nan_string.json", "253.77", "\"NaN\"");
  std::string negLatency = edited("neg_latency.json", "{\"min\":52.96", "{\"min\":-52.96");
  for (const Case& c : {
           Case{"plan -t " + neg, neg + ": at /bandwidth_mbps/1/2"},
           Case{"plan -t " + asym, asym + ": at /bandwidth_mbps/"},
           Case{"plan -t " + path("missing.json"), path("missing.json")},
           Case{"plan -t " + path("broken.json"), path("broken.json") + ": not valid JSON"},
           Case{"plan -t " + test::fixture("testbed_8vm_2rack.json") + " --hosts " + path("hosts"),
                path("hosts") + ":2: host 'nobody' is not in"},
           Case{"plan -t " + test::fixture("testbed_8vm_2rack.json") + " -c alltoall",
                "collective 'alltoall'"},
           Case{"show " + neg, neg + ": at /bandwidth_mbps/1/2"},
           Case{"plan -t " + nanLiteral, nanLiteral + ": not valid JSON"},
           Case{"plan -t " + nanString, nanString + ": at /bandwidth_mbps/0/1: expected a number"},
           Case{"plan -t " + negLatency,
                negLatency + ": at /latency_us/0/1/min: expected a non-negative"},
       }) {
    Outcome r = rankmap(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    // The user's words: no source location, no library tag (issue 45).
    EXPECT_FALSE(std::regex_search(r.err, std::regex(R"(\w\.(cc|h):\d+)"))) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << c.args << "\n" << r.err;
  }
}

// A free loopback port (bound, then released for the agent that is started next).
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

// A real rankmapd on loopback ports, named `a`, with the fixture's key and token: started by
// the constructor (its stderr in DIR/agent.log), stopped (SIGTERM) by stop() or the destructor.
struct RunningAgent {
  RunningAgent(const std::string& dir, const std::string& extraArgs, const std::string& env = "")
      : dir(dir) {
    std::ofstream(dir + "/key") << std::string(64, 'k') << "\n";
    std::ofstream(dir + "/token") << std::string(32, 't') << "\n";
    for (const char* f : {"/key", "/token"}) ::chmod((dir + f).c_str(), 0600);
    const int port = freePort(), probePort = freePort();
    url = fmt::format("http://127.0.0.1:{}", port);
    const std::string cmd = fmt::format(
        "{} '{}' --name a --listen 127.0.0.1:{} --probe-listen 127.0.0.1:{} --state-dir '{}/state' "
        "--token-file '{}/token' --key-file '{}/key' {} 2>'{}/agent.log' & echo $! >'{}/pid'",
        env, RANKMAPD, port, probePort, dir, dir, dir, extraArgs, dir, dir);
    if (port > 0 && probePort > 0 && std::system(cmd.c_str()) == 0)
      pid = std::stoi(slurp(dir + "/pid"));
    for (int i = 0; i < 100 && pid > 0 && !up; ++i) {
      try {
        up = HttpClient(url).get("/v1/health", Deadline::after(std::chrono::seconds(1))).status ==
             200;
      } catch (const std::exception&) {
      }
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~RunningAgent() { stop(); }
  void stop() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    for (int i = 0; i < 100 && ::kill(pid, 0) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(pid, SIGKILL);
    pid = -1;
  }
  Json health() const {
    return parseJson(
        HttpClient(url).get("/v1/health", Deadline::after(std::chrono::seconds(5))).body, "health");
  }
  std::string log() const { return slurp(dir + "/agent.log"); }
  std::string dir, url;
  int pid = -1;
  bool up = false;
};

// `rankmap probe --agent` with a token file that is not the agent's: the error names the file
// and says which token to pass, not "pass --token-file" (it was passed).
TEST_F(Cli, AWrongTokenFileIsNamedNotAskedFor) {
  std::ofstream(path("other")) << std::string(32, 'o') << "\n";
  ::chmod(path("other").c_str(), 0600);
  std::ofstream(path("hosts")) << "a 127.0.0.1:1\nb 127.0.0.2:1\n";
  RunningAgent agent(dir_, "");
  ASSERT_TRUE(agent.up) << agent.log();
  const std::string url = agent.url;
  Outcome r = rankmap("probe --hosts " + path("hosts") + " --out " + path("t.json") + " --agent " +
                      url + " --token-file " + path("other"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("wrong bearer token (HTTP 401): the token in " + path("other") +
                       " is not this agent's"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("pass --token-file or set"), std::string::npos) << r.err;
}

// `rankmap hosts --from-endpointslices`: the DaemonSet's peers from kubectl's EndpointSlices as
// a hosts file a real rankmapd reads; written atomically, and left alone (same inode, nothing for
// the agent's watch to see) when it already holds the list; bad input is exit 2 naming the file.
TEST_F(Cli, HostsFromEndpointSlicesFeedTheAgentAndAreRewrittenOnlyOnChange) {
  std::string slices = std::string(RANKMAP_TEST_DATA_DIR) + "/kubernetes/endpointslices.json";
  Outcome printed = rankmap("hosts --from-endpointslices '" + slices + "'");
  ASSERT_EQ(printed.code, 0) << printed.err;
  EXPECT_NE(printed.out.find("\ncpu-node-c [fd00:10::13]\ngpu-node-a 10.0.1.11\n"
                             "gpu-node-b 10.0.1.12\n"),
            std::string::npos)
      << printed.out;
  Outcome wrote =
      rankmap("hosts --from-endpointslices '" + slices + "' -o '" + path("hosts") + "'");
  ASSERT_EQ(wrote.code, 0) << wrote.err;
  EXPECT_NE(wrote.err.find("wrote 3 hosts to"), std::string::npos) << wrote.err;
  struct stat first {};
  ASSERT_EQ(::stat(path("hosts").c_str(), &first), 0);
  Outcome again =
      rankmap("hosts --from-endpointslices '" + slices + "' -o '" + path("hosts") + "' --json");
  ASSERT_EQ(again.code, 0) << again.err;
  Json j = parseJson(again.out, "hosts --json");
  EXPECT_EQ(j["written"], false);
  EXPECT_EQ(j["hosts"].size(), 3u);
  struct stat second {};
  ASSERT_EQ(::stat(path("hosts").c_str(), &second), 0);
  EXPECT_EQ(first.st_ino, second.st_ino);
  EXPECT_EQ(first.st_mtim.tv_nsec, second.st_mtim.tv_nsec);

  RunningAgent agent(dir_, "--hosts '" + path("hosts") + "'");
  ASSERT_TRUE(agent.up) << agent.log();
  EXPECT_EQ(agent.health()["hosts"], 3) << agent.log();
  agent.stop();

  std::ofstream(path("pods.json")) << R"({"items": [{"kind": "Pod"}]})";
  Outcome bad = rankmap("hosts --from-endpointslices '" + path("pods.json") + "'");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find(path("pods.json") + ": at /items/0/kind"), std::string::npos) << bad.err;
}

// rankmapd under systemd's readiness protocol (Type=notify): READY=1 once it serves; SIGHUP
// (`systemctl reload`) reloads the hosts file, between RELOADING=1 and READY=1, and keeps the
// list it had when the new file is bad; STOPPING=1 on SIGTERM. A real rankmapd and a datagram
// socket standing in for systemd's.
TEST_F(Cli, RankmapdNotifiesSystemdAndReloadsItsHostsOnSighup) {
  const std::string sockPath = path("notify");
  int sock = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sockPath.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, sockPath.c_str(), sockPath.size());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } closeSock{sock};
  auto next = [&] {  // the next datagram within 10 s, or ""
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return std::string();
    char buf[256];
    ssize_t n = ::recv(sock, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  };
  std::ofstream(path("hosts")) << "a 127.0.0.1:7411\n";
  RunningAgent agent(dir_, "--hosts '" + path("hosts") + "'", "NOTIFY_SOCKET='" + sockPath + "'");
  ASSERT_TRUE(agent.up) << agent.log();
  EXPECT_EQ(next(), "READY=1");
  EXPECT_EQ(agent.health()["hosts"], 1);

  std::ofstream(path("hosts")) << "a 127.0.0.1:7411\nb 127.0.0.2:7411\n";
  ASSERT_EQ(::kill(agent.pid, SIGHUP), 0);
  EXPECT_EQ(next(), "RELOADING=1");
  EXPECT_EQ(next(), "READY=1");
  EXPECT_EQ(agent.health()["hosts"], 2) << agent.log();

  std::ofstream(path("hosts")) << "a 127.0.0.1:7411\nb not-an-address\n";
  ASSERT_EQ(::kill(agent.pid, SIGHUP), 0);
  EXPECT_EQ(next(), "RELOADING=1");
  EXPECT_EQ(next(), "READY=1");
  EXPECT_EQ(agent.health()["hosts"], 2);
  EXPECT_NE(agent.log().find("reload: keeping the 2 hosts it had: " + path("hosts")),
            std::string::npos)
      << agent.log();

  agent.stop();
  EXPECT_EQ(next(), "STOPPING=1");
}

// `rankmap completion bash`, sourced by a real bash: subcommands, a subcommand's options (an
// option group's too), the global ones anywhere; another shell is a usage error.
TEST_F(Cli, BashCompletionCompletesSubcommandsAndOptions) {
  Outcome script = rankmap("completion bash");
  ASSERT_EQ(script.code, 0) << script.err;
  std::ofstream(path("completion.bash")) << script.out;
  std::ofstream(path("complete.sh"))
      << "source '" << path("completion.bash") << "'\n"
      << "while IFS= read -r line; do read -ra COMP_WORDS <<<\"$line\"; "
         "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _rankmap; echo \"${COMPREPLY[*]}\"; done\n";
  std::ofstream(path("lines")) << "rankmap pl\nrankmap plan --to\nrankmap -v show --sv\n"
                                  "rankmap export --k8s-l\nrankmap --vers\nrankmap bench -\n";
  ASSERT_EQ(std::system(("bash '" + path("complete.sh") + "' <'" + path("lines") + "' >'" +
                         path("got") + "'")
                            .c_str()),
            0);
  std::istringstream got(slurp(path("got")));
  std::vector<std::string> answers;
  for (std::string line; std::getline(got, line);) answers.push_back(line);
  ASSERT_EQ(answers.size(), 6u) << slurp(path("got"));
  EXPECT_EQ(answers[0], "plan");
  EXPECT_EQ(answers[1], "--topology");
  EXPECT_EQ(answers[2], "--svg");
  EXPECT_EQ(answers[3], "--k8s-labels");
  EXPECT_EQ(answers[4], "--version");
  EXPECT_NE(answers[5].find("--minbytes"), std::string::npos) << answers[5];
  EXPECT_NE(answers[5].find("--verbose"), std::string::npos) << answers[5];
  Outcome zsh = rankmap("completion zsh");
  EXPECT_EQ(zsh.code, 2);
  EXPECT_NE(zsh.err.find("shell 'zsh': expected bash"), std::string::npos) << zsh.err;
}

TEST_F(Cli, PlanAndShowATopologyWithoutMatrices) {
  // A sparse probe's topology.json (schema 2): a link model, measured pairs, no matrices.
  std::string topo = test::fixture("links_sparse.json");
  Outcome r = rankmap("plan -t " + topo + " -c all -o " + path("plan.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("link model: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("of 552 directed pairs measured"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rack: 6 groups"), std::string::npos) << r.out;
  Plan p = Plan::load(path("plan.json"));
  EXPECT_EQ(p.order.size(), 24u);
  EXPECT_GT(p.predicted.speedup, 1.0);
  r = rankmap("show " + topo + " --svg " + path("t.svg"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("matrices omitted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("groups (of the link model)"), std::string::npos) << r.out;
  std::string svg = slurp(path("t.svg"));
  EXPECT_NE(svg.find("link model: "), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST_F(Cli, ShowExplainsChunkWeightsAndTreesAndDrawsThem) {
  // The heterogeneous fixture (four hosts at 200 Mbit/s among 1000): its plan runs packed trees.
  std::string topo = test::fixture("heterogeneous.json");
  Outcome r = rankmap("plan -t " + topo + " -o " + path("trees.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  Plan p = Plan::load(path("trees.json"));
  ASSERT_FALSE(p.trees.empty());
  r = rankmap("show " + path("trees.json") + " --topology " + topo + " --svg " + path("trees.svg"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("packed trees ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tree 1: weight "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", root "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a ring carries"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the slowest hosts ("), std::string::npos) << r.out;

  // Chunk weights by rate on the same hosts (the slow ones a fifth of the fast ones' share).
  Plan w = p;
  w.trees.clear();
  w.chunkWeights.clear();
  Json truth = readJsonFile(test::fixture("fixtures_truth.json")).at("heterogeneous");
  std::vector<double> rate = truth.at("host_mbps").get<std::vector<double>>();
  for (const auto& h : w.order) w.chunkWeights.push_back(rate.at(std::stoul(h.substr(1))) / 8000);
  for (auto& range : w.collectives.at("allreduce")) range.algorithm = Algorithm::kHier;
  w.seal();
  w.save(path("weights.json"));
  r = rankmap("show " + path("weights.json") + " --topology " + topo + " --svg " +
              path("weights.svg"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("chunk weights (hier's shards, used for allreduce"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("4 host(s) at 0.2x the largest share"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("smaller because their host links measured"), std::string::npos) << r.out;
  // Without the topology the reason is relative.
  r = rankmap("show " + path("weights.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("measured 0.2x the fastest's"), std::string::npos) << r.out;

  // Both SVGs are well-formed XML (a real parser reads them) with the new elements: one bar
  // per host, and the trees drawn with one edge per non-root host.
  auto countXml = [&](const std::string& file, const std::string& xpath) {
    std::string cmd =
        "python3 -c 'import sys, xml.etree.ElementTree as E; "
        "r = E.parse(sys.argv[1]).getroot(); "
        "print(len(r.findall(sys.argv[2], {\"s\": \"http://www.w3.org/2000/svg\"})))' '" +
        file + "' '" + xpath + "' >'" + path("count") + "' 2>&1";
    int status = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(path("count"));
    return std::atoi(slurp(path("count")).c_str());
  };
  EXPECT_EQ(countXml(path("weights.svg"), ".//s:g[@id=\"shares\"]/s:rect[@class=\"share\"]"), 12);
  EXPECT_EQ(countXml(path("weights.svg"), ".//s:g[@id=\"trees\"]"), 0);
  size_t drawn = std::min<size_t>(p.trees.size(), 4);
  EXPECT_EQ(countXml(path("trees.svg"), ".//s:g[@id=\"trees\"]/s:g[@class=\"tree\"]"),
            static_cast<int>(drawn));
  EXPECT_EQ(countXml(path("trees.svg"), ".//s:g[@class=\"tree\"]/s:line[@class=\"tree-edge\"]"),
            static_cast<int>(drawn * 11));
  EXPECT_EQ(countXml(path("trees.svg"), ".//s:g[@class=\"tree\"]/s:circle[@class=\"tree-root\"]"),
            static_cast<int>(drawn));
}

TEST_F(Cli, FallbackIsAWarningNotAnError) {
  // Too many missing pairs, and a single host.
  for (std::string name : {"sparse.json", "single_host.json"}) {
    Outcome r = rankmap("plan -t " + test::fixture(name) + " -o " + path("p.json"));
    ASSERT_EQ(r.code, 0) << name << "\n" << r.err;
    EXPECT_NE(r.out.find("fallback"), std::string::npos) << name << "\n" << r.out;
    Plan p = Plan::load(path("p.json"));
    EXPECT_EQ(p.confidence, 0) << name;
    EXPECT_EQ(p.order, p.hosts) << name;
  }
}

// The lines of `text` that start with `prefix`.
std::vector<std::string> linesStarting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

std::string prior(const std::string& name) {
  return std::string(RANKMAP_TEST_DATA_DIR) + "/priors/" + name;
}

// A declared placement with two deliberate mistakes (tests/data/priors/README.md) for the noisy
// fixture's four racks of four: `rankmap show` flags exactly those two, naming the hosts, the
// declared switch and the measured rack, and the measured rates; from the plan and from the
// topology with --prior alike.
TEST_F(Cli, ShowFlagsExactlyTheTwoMistakesOfAPrior) {
  std::string topo = test::fixture("noisy.json");
  std::string wrong = prior("noisy_two_mistakes_aws.json");
  Outcome p = rankmap("plan -t " + topo + " --prior " + wrong + " -o " + path("p.json"));
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("2 disagreement(s) with the measured racks"), std::string::npos) << p.out;
  Plan plan = Plan::load(path("p.json"));
  ASSERT_TRUE(plan.prior);
  EXPECT_EQ(plan.prior->format, "aws");
  // Measured groups win: the plan's racks are the measured ones.
  ASSERT_FALSE(plan.groups.empty());
  EXPECT_EQ(plan.groups[0].groups,
            (std::vector<std::vector<std::string>>{{"h0", "h2", "h5", "h13"},
                                                   {"h1", "h6", "h7", "h14"},
                                                   {"h3", "h9", "h11", "h12"},
                                                   {"h4", "h8", "h10", "h15"}}));
  ASSERT_EQ(plan.prior->disagreements.size(), 2u);
  // The rates say why: across racks between the hosts declared together, inside a rack between
  // those declared apart.
  const PlanPrior& pr = *plan.prior;
  EXPECT_LT(pr.disagreements[0].betweenMbps, 0.5 * pr.sameGroupMbps);
  EXPECT_GT(pr.disagreements[1].betweenMbps, 0.8 * pr.sameGroupMbps);

  const std::string together =
      "  declared together, measured apart: switch nn-leaf-01 holds hosts of rack 0 (h0, h2, h5 "
      "and h13) and rack 1 (h1, h6, h7 and h14); ";
  const std::string apart =
      "  declared apart, measured together: rack 2 holds hosts declared behind switch "
      "nn-leaf-03a (h3 and h9) and switch nn-leaf-03b (h11 and h12); ";
  for (const std::string& args : {"show " + path("p.json"), "show " + topo + " --prior " + wrong}) {
    Outcome s = rankmap(args);
    ASSERT_EQ(s.code, 0) << args << "\n" << s.err;
    EXPECT_NE(s.out.find("16 host(s) declared, 16 of the plan's 16 covered"), std::string::npos)
        << s.out;
    auto lines = linesStarting(s.out, "  declared ");
    ASSERT_EQ(lines.size(), 2u) << s.out;
    EXPECT_EQ(lines[0].rfind(together, 0), 0u) << lines[0];
    EXPECT_EQ(lines[1].rfind(apart, 0), 0u) << lines[1];
    for (const auto& l : lines) EXPECT_NE(l.find(" Mbit/s between them"), std::string::npos) << l;
  }
}

// The same racks declared correctly (Topograph's node labels): no disagreement; and the prior
// can come from RANKMAP_PRIOR.
TEST_F(Cli, ShowSaysACorrectPriorAgrees) {
  std::string topo = test::fixture("noisy.json");
  ::setenv("RANKMAP_PRIOR", prior("noisy_correct_k8s.json").c_str(), 1);
  Outcome p = rankmap("plan -t " + topo + " -o " + path("p.json"));
  ::unsetenv("RANKMAP_PRIOR");
  ASSERT_EQ(p.code, 0) << p.err;
  Outcome s = rankmap("show " + path("p.json"));
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("prior: "), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("(k8s_labels), levels fabric.topograph.run/tier-2 > "
                       "fabric.topograph.run/tier-1 > fabric.topograph.run/tier-0"),
            std::string::npos)
      << s.out;
  EXPECT_NE(s.out.find("agrees with the measured racks at its lowest level"), std::string::npos)
      << s.out;
  EXPECT_TRUE(linesStarting(s.out, "  declared ").empty()) << s.out;
  // A plan made without a prior says nothing about one.
  ASSERT_EQ(rankmap("plan -t " + topo + " -o " + path("q.json")).code, 0);
  EXPECT_EQ(rankmap("show " + path("q.json")).out.find("prior"), std::string::npos);
}

TEST_F(Cli, BadPriorExitsTwoNamingTheFileAndField) {
  std::string topo = test::fixture("noisy.json");
  {
    std::ofstream f(path("bad.json"));
    f << R"({"Instances": [{"InstanceId": "i-1", "NetworkNodes": ["a"]}, {"InstanceId": "i-2"}]})";
  }
  Outcome r = rankmap("plan -t " + topo + " --prior " + path("bad.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(path("bad.json") + ": at /Instances/1: missing field 'NetworkNodes'"),
            std::string::npos)
      << r.err;
  r = rankmap("plan -t " + topo + " --prior " + path("missing.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--prior: " + path("missing.json")), std::string::npos) << r.err;
  // From the environment, the error names the setting that gave the file.
  ::setenv("RANKMAP_PRIOR", path("missing.json").c_str(), 1);
  r = rankmap("plan -t " + topo);
  ::unsetenv("RANKMAP_PRIOR");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("RANKMAP_PRIOR (environment): " + path("missing.json")), std::string::npos)
      << r.err;
  r = rankmap("plan -t " + topo + " --prior " + prior("noisy_correct_k8s.json") +
              " --prior-labels a,,b");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("expected label keys"), std::string::npos) << r.err;
  // A plan shows the prior it was made with; comparing another needs the topology.
  ASSERT_EQ(rankmap("plan -t " + topo + " -o " + path("p.json")).code, 0);
  r = rankmap("show " + path("p.json") + " --prior " + prior("noisy_correct_k8s.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("a plan shows the prior it was made with"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace rankmap::cli
