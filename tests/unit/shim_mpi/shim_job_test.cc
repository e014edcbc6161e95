// The MPI shim inside real jobs on this machine: 4 ranks (shared memory), unmodified C, Fortran and
// mpi4py programs. Compiled once per MPI (RANKMAP_MPI_FLAVOUR): librankmap_mpi.so under Open MPI's
// mpirun (shim_mpi_test), librankmap_mpich.so under MPICH's Hydra mpiexec (shim_mpich_test), each
// with programs built against that MPI. Checks the rank each process gets against the plan (the
// programs print their MPI_COMM_WORLD rank next to the launcher's rank, OMPI_COMM_WORLD_RANK or
// PMI_RANK), that results do not change, and that every bad or disagreeing plan gives the
// identity order with one line from rank 0.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "common/files.h"
#include "common/job_profile.h"
#include "common/plan.h"
#include "tests/unit/common/plan_util.h"
#include "tests/unit/shim_mpi/subprocess.h"

namespace rankmap::shim_mpi {
namespace {

using testing::Completed;
using testing::TempDir;

constexpr int kRanks = 4;
constexpr int kJobTimeoutMs = 60000;
constexpr bool kMpich = std::string_view(RANKMAP_MPI_FLAVOUR) == "mpich";

Plan makePlan(std::vector<std::string> hosts, std::vector<std::string> order, int k) {
  return testing::orderedPlan(std::move(hosts), std::move(order), k, 0.9);
}

// mpirun on this machine; `contexts` are the MPMD parts (each: ranks, words before the program).
struct Job {
  std::vector<std::string> mpirunArgs;
  std::vector<std::string> program;
};

std::map<std::string, std::string> mpiEnv() {
  if (kMpich) return {};
  // Open MPI's session directory under this test's own folder: two mpiruns creating
  // /tmp/ompi.HOST.UID at once (tests run in parallel) can fail orte_init with "File exists".
  static const TempDir sessions;
  return {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
          {"OMPI_MCA_orte_tmpdir_base", sessions.path()},
          // Keep the run quiet and local whatever the machine has.
          {"OMPI_MCA_btl", "self,vader"}, {"OMPI_MCA_pml", "ob1"},
          {"OMPI_MCA_rmaps_base_oversubscribe", "1"}, {"OMPI_MCA_hwloc_base_binding_policy", "none"}};
}

Completed mpirun(const std::vector<std::string>& words, std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv{RANKMAP_MPIRUN};
  if (!kMpich) argv.insert(argv.end(), {"--oversubscribe", "--mca", "btl", "self,vader"});
  argv.insert(argv.end(), words.begin(), words.end());
  auto e = mpiEnv();
  for (auto& [k, v] : env) e[k] = v;
  return testing::runCommand(argv, e, Deadline::afterMs(kJobTimeoutMs),
                             {"LD_PRELOAD", "RANKMAP_PLAN", "RANKMAP_LOG", "RANKMAP_LOG_FILE"});
}

// The launcher's words that set NAME=VALUE in every rank: Open MPI's `-x NAME=VALUE`, Hydra's
// `-genv NAME VALUE`.
std::vector<std::string> setEnv(const std::string& name, const std::string& value) {
  if (kMpich) return {"-genv", name, value};
  return {"-x", name + "=" + value};
}

// "rank R of N on HOST launcher L" lines: launcher rank -> MPI_COMM_WORLD rank. Searched in the
// whole output: mpirun forwards each write of a rank as it comes, so lines can arrive glued.
std::map<int, int> rankMap(const std::string& out) {
  std::map<int, int> m;
  static const std::regex re(R"(rank (\d+) of (\d+) on (\S+?) launcher (-?\d+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    m[std::stoi((*it)[4])] = std::stoi((*it)[1]);
  return m;
}

std::vector<std::string> checks(const std::string& out) {
  std::vector<std::string> c;
  for (const auto& line : testing::lines(out))
    if (line.rfind("check ", 0) == 0) c.push_back(line);
  return c;
}

int countLines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (const auto& line : testing::lines(text)) n += line.find(needle) != std::string::npos;
  return n;
}

std::string describe(const Completed& c) {
  return "exit " + std::to_string(c.status) + (c.timedOut ? " (timed out)" : "") + "\nstdout:\n" +
         c.out + "\nstderr:\n" + c.err;
}

std::map<int, int> identityMap() {
  std::map<int, int> m;
  for (int r = 0; r < kRanks; ++r) m[r] = r;
  return m;
}

class ShimJob : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(RANKMAP_MPIRUN, X_OK) != 0) GTEST_SKIP() << "mpirun not found";
    // Launcher rank r on host h<r>; the plan's ring h2 h0 h3 h1.
    plan_ = makePlan({"h0", "h1", "h2", "h3"}, {"h2", "h0", "h3", "h1"}, 1);
    plan_.save(dir_.file("plan.json"));
    other_ = makePlan({"h0", "h1", "h2", "h3"}, {"h1", "h0", "h3", "h2"}, 1);
    other_.save(dir_.file("other.json"));
  }

  std::map<int, int> planned(const Plan& p) const {
    std::map<int, int> m;
    for (int r = 0; r < kRanks; ++r) m[r] = p.newRank(r);
    return m;
  }

  std::vector<std::string> withShim(const std::string& planPath) const {
    auto words = setEnv("LD_PRELOAD", RANKMAP_SHIM_LIB);
    for (auto& w : setEnv("RANKMAP_PLAN", planPath)) words.push_back(w);
    return words;
  }

  // An MPMD job of the C program: n1 ranks with `plan1`, then n2 with `plan2`. `-x` before the
  // first program would reach only that one, so each part sets its own environment.
  Completed twoPlanJob(int n1, const std::string& plan1, int n2, const std::string& plan2) {
    const std::string preload = std::string("LD_PRELOAD=") + RANKMAP_SHIM_LIB;
    return mpirun({"-np", std::to_string(n1), "env", preload, "RANKMAP_PLAN=" + dir_.file(plan1),
                   RANKMAP_PROOF_C, ":", "-np", std::to_string(n2), "env", preload,
                   "RANKMAP_PLAN=" + dir_.file(plan2), RANKMAP_PROOF_C});
  }

  // The plain run's check lines, the reference every shimmed run must reproduce.
  const std::vector<std::string>& plainChecks() {
    if (plainChecks_.empty()) {
      Completed c = mpirun({"-np", std::to_string(kRanks), RANKMAP_PROOF_C});
      EXPECT_EQ(c.status, 0) << describe(c);
      EXPECT_EQ(rankMap(c.out), identityMap()) << describe(c);
      plainChecks_ = checks(c.out);
      EXPECT_EQ(plainChecks_.size(), 7u) << describe(c);
    }
    return plainChecks_;
  }

  TempDir dir_;
  Plan plan_, other_;
  std::vector<std::string> plainChecks_;
};

TEST_F(ShimJob, CProgramRanksFollowThePlanAndResultsDoNotChange) {
  const auto& reference = plainChecks();
  ASSERT_NE(planned(plan_), identityMap());
  auto words = withShim(dir_.file("plan.json"));
  words.insert(words.end(), {"-np", std::to_string(kRanks), RANKMAP_PROOF_C});
  Completed c = mpirun(words);
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(rankMap(c.out), planned(plan_)) << describe(c);
  EXPECT_EQ(checks(c.out), reference) << describe(c);
  // One line, from rank 0 only, on stderr.
  EXPECT_EQ(countLines(c.err, "MPI_COMM_WORLD reordered by plan"), 1) << describe(c);
  EXPECT_EQ(countLines(c.out, "rankmap"), 0) << describe(c);
}

TEST_F(ShimJob, TwoRanksPerHostStayContiguous) {
  Plan p = makePlan({"a", "b"}, {"b", "a"}, 2);
  p.save(dir_.file("k2.json"));
  auto words = withShim(dir_.file("k2.json"));
  words.insert(words.end(), {"-np", std::to_string(kRanks), RANKMAP_PROOF_C});
  Completed c = mpirun(words);
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(rankMap(c.out), (std::map<int, int>{{0, 2}, {1, 3}, {2, 0}, {3, 1}})) << describe(c);
}

TEST_F(ShimJob, FortranGoesThroughPmpi) {
  if (std::string(RANKMAP_PROOF_F).empty()) GTEST_SKIP() << "MPI Fortran not found at configure time";
  Completed plain = mpirun({"-np", std::to_string(kRanks), RANKMAP_PROOF_F});
  ASSERT_EQ(plain.status, 0) << describe(plain);
  ASSERT_EQ(rankMap(plain.out), identityMap()) << describe(plain);
  auto words = withShim(dir_.file("plan.json"));
  words.insert(words.end(), {"-np", std::to_string(kRanks), RANKMAP_PROOF_F});
  Completed c = mpirun(words);
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(rankMap(c.out), planned(plan_)) << describe(c);
  EXPECT_EQ(checks(c.out), checks(plain.out)) << describe(c);
  EXPECT_EQ(checks(c.out).size(), 4u) << describe(c);
}

TEST_F(ShimJob, Mpi4pyProgram) {
  Completed probe = testing::runCommand({"/usr/bin/python3", "-c", "import mpi4py"}, {},
                                        Deadline::afterMs(20000));
  if (probe.status != 0) GTEST_SKIP() << "python3-mpi4py not installed";
  // Debian builds python3-mpi4py for its default MPI, Open MPI (it links libmpi.so.40): under
  // another MPI's launcher its ranks would not form one job.
  Completed lib = testing::runCommand(
      {"/usr/bin/python3", "-c", "from mpi4py import MPI; print(MPI.Get_library_version())"},
      mpiEnv(), Deadline::afterMs(20000));
  const bool mpichBuild = lib.out.find("MPICH") != std::string::npos;
  if (mpichBuild != kMpich)
    GTEST_SKIP() << "python3-mpi4py is built for another MPI: " << lib.out.substr(0, 60);
  auto words = withShim(dir_.file("plan.json"));
  words.insert(words.end(), {"-np", std::to_string(kRanks), "/usr/bin/python3", RANKMAP_PROOF_PY});
  Completed c = mpirun(words);
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(rankMap(c.out), planned(plan_)) << describe(c);
  EXPECT_EQ(checks(c.out).size(), 4u) << describe(c);
}

TEST_F(ShimJob, SubstitutionRulesHold) {
  for (bool shim : {false, true}) {
    std::vector<std::string> words;
    if (shim) words = withShim(dir_.file("plan.json"));
    words.insert(words.end(), {"-np", std::to_string(kRanks), RANKMAP_SHIM_RULES});
    Completed c = mpirun(words);
    ASSERT_EQ(c.status, 0) << describe(c);
    EXPECT_NE(c.out.find("rules passed 8"), std::string::npos) << "shim " << shim << "\n" << describe(c);
  }
}

// One rank gets a different plan: every rank keeps the identity order, rank 0 says why once.
TEST_F(ShimJob, DisagreeingPlanGivesIdentity) {
  const auto& reference = plainChecks();
  Completed c = twoPlanJob(1, "other.json", 3, "plan.json");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(rankMap(c.out), identityMap()) << describe(c);
  EXPECT_EQ(checks(c.out), reference) << describe(c);
  EXPECT_EQ(countLines(c.err, "identity order"), 1) << describe(c);
  EXPECT_EQ(countLines(c.err, "ranks disagree on the plan"), 1) << describe(c);
}

TEST_F(ShimJob, OneRankWithAnUnreadablePlanGivesIdentity) {
  Completed c = twoPlanJob(3, "plan.json", 1, "missing.json");
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(rankMap(c.out), identityMap()) << describe(c);
  EXPECT_EQ(countLines(c.err, "rank(s) 3 have no usable plan"), 1) << describe(c);
}

TEST_F(ShimJob, BadPlansGiveIdentity) {
  // Corrupt (not JSON), for another world size, and none at all.
  {
    FILE* f = std::fopen(dir_.file("corrupt.json").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("{\"schema_version\": 1, \"hosts\": [", f);
    std::fclose(f);
  }
  makePlan({"h0", "h1"}, {"h1", "h0"}, 1).save(dir_.file("two.json"));
  struct Case {
    std::vector<std::string> prefix;
    std::string why;
  } cases[] = {
      {withShim(dir_.file("corrupt.json")), "not valid JSON"},
      {withShim(dir_.file("two.json")), "is for 2 ranks, the job has 4"},
      {setEnv("LD_PRELOAD", RANKMAP_SHIM_LIB), "RANKMAP_PLAN is not set"},
  };
  for (const auto& k : cases) {
    auto words = k.prefix;
    words.insert(words.end(), {"-np", std::to_string(kRanks), RANKMAP_PROOF_C});
    Completed c = mpirun(words);
    ASSERT_EQ(c.status, 0) << describe(c);
    EXPECT_EQ(rankMap(c.out), identityMap()) << describe(c);
    EXPECT_EQ(countLines(c.err, "identity order"), 1) << describe(c);
    EXPECT_EQ(countLines(c.err, k.why), 1) << k.why << "\n" << describe(c);
  }
}

// RANKMAP_MPI_ENGINE=1: the engine serves Allreduce, Bcast, Allgather and Reduce_scatter_block
// on the reordered world (over TCP on loopback here); results must not change, C or Fortran.
TEST_F(ShimJob, EngineServesCollectivesWithIdenticalResults) {
  const auto& reference = plainChecks();
  std::vector<std::pair<std::string, std::vector<std::string>>> programs{{RANKMAP_PROOF_C, reference}};
  if (!std::string(RANKMAP_PROOF_F).empty()) {
    Completed plain = mpirun({"-np", std::to_string(kRanks), RANKMAP_PROOF_F});
    ASSERT_EQ(plain.status, 0) << describe(plain);
    programs.push_back({RANKMAP_PROOF_F, checks(plain.out)});
  }
  static const std::regex served(R"(engine served (\d+) collective call\(s\); (\d+) went to MPI)");
  for (const auto& [program, expected] : programs) {
    auto words = withShim(dir_.file("plan.json"));
    for (auto& w : setEnv("RANKMAP_MPI_ENGINE", "1")) words.push_back(w);
    for (auto& w : setEnv("RANKMAP_TRANSPORT", "tcp")) words.push_back(w);
    words.insert(words.end(), {"-np", std::to_string(kRanks), program, "--bytes", "1048576",
                               "--iters", "2"});
    Completed c = mpirun(words);
    ASSERT_EQ(c.status, 0) << describe(c);
    EXPECT_EQ(rankMap(c.out), planned(plan_)) << describe(c);
    EXPECT_EQ(checks(c.out), expected) << describe(c);
    EXPECT_EQ(countLines(c.err, "engine routing on"), 1) << describe(c);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(c.err, m, served)) << describe(c);
    // The checked allreduce, bcast and allgather (and, in C, reduce_scatter_block), plus the 3
    // timed allreduces.
    EXPECT_GE(std::stoi(m[1]), 6) << describe(c);
  }
}

// RANKMAP_PROFILE_OUT: the shim records the groups the program's MPI_Comm_split calls form and
// their traffic (a dp=2 x pp=2 step: a 64 KiB allreduce in the data-parallel groups, 4 KiB each
// way in the pipeline's), in the program's ranks whether a plan reorders the world or not.
TEST_F(ShimJob, RecordsTheGroupsItsCommunicatorsFormAndTheirTraffic) {
  for (bool planned : {false, true}) {
    SCOPED_TRACE(planned ? "with a plan" : "identity order");
    std::string out = dir_.file(planned ? "planned-profile.json" : "profile.json");
    auto words = setEnv("LD_PRELOAD", RANKMAP_SHIM_LIB);
    for (auto& w : setEnv("RANKMAP_PROFILE_OUT", out)) words.push_back(w);
    if (planned)
      for (auto& w : setEnv("RANKMAP_PLAN", dir_.file("plan.json"))) words.push_back(w);
    for (std::string w : {"-np", "4", RANKMAP_MESH_STEP, "--dp", "2", "--pp", "2", "--dp-bytes",
                          "65536", "--pp-bytes", "4096", "--iters", "3", "--warmup", "1"})
      words.push_back(w);
    Completed c = mpirun(words);
    ASSERT_EQ(c.status, 0) << describe(c);
    EXPECT_NE(c.out.find("check mesh_step wrong=0"), std::string::npos) << describe(c);
    EXPECT_EQ(countLines(c.err, "job profile of"), 1) << describe(c);
    JobProfile p = JobProfile::load(out);
    EXPECT_EQ(p.program, fileNameOf(RANKMAP_MESH_STEP));
    EXPECT_EQ(p.worldSize, 4);
    ASSERT_EQ(p.sets.size(), 3u) << p.dump();
    EXPECT_EQ(p.sets[0].madeBy, "MPI_COMM_WORLD");
    EXPECT_EQ(p.sets[1].madeBy, "MPI_Comm_split");
    EXPECT_EQ(p.sets[1].groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
    EXPECT_EQ(p.sets[1].traffic, (std::vector<ProfileTraffic>{{"allreduce", 4, 4 * 65536}}));
    EXPECT_EQ(p.sets[2].call, 2);
    EXPECT_EQ(p.sets[2].groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
    // Per pipeline group and step: one message forward, one back.
    EXPECT_EQ(p.sets[2].traffic, (std::vector<ProfileTraffic>{{"sendrecv", 8, 8 * 4096}}));
  }
}

// With librankmap_nccl.so preloaded beside the MPI shim, the NCCL communicators of each process
// join its rank's record under their keys (common/comm_profile.h), and the merged profile holds
// their groups in world ranks: here one NCCL communicator per pair of ranks (over the NCCL test
// double in process mode, which joins ranks across processes at init and moves no data).
TEST_F(ShimJob, RecordsTheNcclCommunicatorsOfEveryRank) {
  const std::string out = dir_.file("nccl-profile.json");
  const std::string doubleDir = dir_.file("nccl-double");
  std::filesystem::create_directories(doubleDir);
  auto words = setEnv("LD_PRELOAD", std::string(RANKMAP_SHIM_LIB) + ":" + RANKMAP_NCCL_SHIM_LIB);
  for (const auto& [k, v] :
       std::map<std::string, std::string>{{"RANKMAP_PROFILE_OUT", out},
                                          {"RANKMAP_NCCL_DOUBLE_PROCESS", "1"},
                                          {"RANKMAP_NCCL_DOUBLE_DIR", doubleDir}})
    for (auto& w : setEnv(k, v)) words.push_back(w);
  for (std::string w : {"-np", "4", RANKMAP_NCCL_GROUPS}) words.push_back(w);
  Completed c = mpirun(words);
  ASSERT_EQ(c.status, 0) << describe(c);
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(c.out.find(fmt::format("nccl_groups rank {} result 0", r)), std::string::npos)
        << describe(c);
  EXPECT_EQ(countLines(c.err, "job profile of"), 1) << describe(c);
  JobProfile p = JobProfile::load(out);
  EXPECT_EQ(p.program, fileNameOf(RANKMAP_NCCL_GROUPS));
  ASSERT_EQ(p.sets.size(), 2u) << p.dump();
  EXPECT_EQ(p.sets[0].madeBy, "MPI_COMM_WORLD");
  EXPECT_EQ(p.sets[1].madeBy, "ncclCommInitRank");
  EXPECT_EQ(p.sets[1].call, 1);
  EXPECT_EQ(p.sets[1].groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
}

// The communicators a program makes through rankmap's engine (its C API, librankmap.so) join the
// profile the same way: one per pair of ranks over TCP on loopback, three allreduces of 4 KiB.
TEST_F(ShimJob, RecordsTheEngineCommunicatorsOfEveryRank) {
  const std::string out = dir_.file("engine-profile.json");
  auto words = setEnv("LD_PRELOAD", RANKMAP_SHIM_LIB);
  for (auto& w : setEnv("RANKMAP_PROFILE_OUT", out)) words.push_back(w);
  for (std::string w : {"-np", "4", RANKMAP_ENGINE_GROUPS}) words.push_back(w);
  Completed c = mpirun(words);
  ASSERT_EQ(c.status, 0) << describe(c);
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(c.out.find(fmt::format("engine_groups rank {} result 0", r)), std::string::npos)
        << describe(c);
  JobProfile p = JobProfile::load(out);
  ASSERT_EQ(p.sets.size(), 2u) << p.dump();
  EXPECT_EQ(p.sets[1].madeBy, "rankmapCommInitRoot");
  EXPECT_EQ(p.sets[1].groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(p.sets[1].traffic, (std::vector<ProfileTraffic>{{"allreduce", 3, 3 * 4096}}));
}

// Ranks that disagree on recording (the setting on half of them): nobody records, rank 0 says
// so, and MPI_Finalize is not left waiting for a gather the others never join.
TEST_F(ShimJob, RecordingNeedsEveryRank) {
  const std::string preload = std::string("LD_PRELOAD=") + RANKMAP_SHIM_LIB;
  const std::string out = dir_.file("half.json");
  Completed c = mpirun({"-np",
                        "2",
                        "env",
                        preload,
                        "RANKMAP_PROFILE_OUT=" + out,
                        RANKMAP_MESH_STEP,
                        "--dp",
                        "2",
                        "--pp",
                        "2",
                        ":",
                        "-np",
                        "2",
                        "env",
                        preload,
                        RANKMAP_MESH_STEP,
                        "--dp",
                        "2",
                        "--pp",
                        "2"});
  ASSERT_EQ(c.status, 0) << describe(c);
  EXPECT_EQ(countLines(c.err,
                       "job profile not recorded: RANKMAP_PROFILE_OUT is set on 2 of the 4 "
                       "ranks"),
            1)
      << describe(c);
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace rankmap::shim_mpi
