// The job's mesh: parsing, groups, the step model, placement against the exact search, and
// plan.json's "mesh".
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/job_profile.h"
#include "common/json.h"
#include "common/plan.h"
#include "common/topology.h"
#include "reorder/mesh.h"
#include "reorder/planner.h"
#include "tests/unit/reorder/test_util.h"

namespace rankmap::reorder {
namespace {

using test::hierarchyOf;
using test::isPermutation;

std::vector<MeshDim> mesh(const std::string& text, const std::string& traffic = "") {
  auto dims = parseMesh(text, "--mesh");
  meshTraffic(dims, traffic, "--traffic");
  return dims;
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

// Racks of the given sizes, host links `host`, uplinks `uplink`, 2 us per link.
NetworkModel racks(const std::vector<int>& sizes, double host = 1000, double uplink = 250) {
  std::vector<int> label;
  for (size_t r = 0; r < sizes.size(); ++r)
    label.insert(label.end(), sizes[r], static_cast<int>(r));
  return modelFromHierarchy(hierarchyOf({label}), std::vector<double>(label.size(), host), {uplink},
                            2, {10});
}

// The racks that the ranks of each group of dimension `d` land in under `order`.
std::vector<std::set<int>> groupRacks(const NetworkModel& net, const std::vector<MeshDim>& dims,
                                      size_t d, const std::vector<int>& order, int rph = 1) {
  std::vector<std::set<int>> out;
  for (const auto& g : meshGroups(dims, d)) {
    std::set<int> r;
    for (int rank : g) r.insert(net.switchAt(order[rank / rph], 0));
    out.push_back(r);
  }
  return out;
}

TEST(Mesh, ParsesDimensionsOutermostFirstWithDefaultTraffic) {
  auto dims = mesh("pp=2, dp=4,tp=8");
  ASSERT_EQ(dims.size(), 3u);
  EXPECT_EQ(dims[0].name, "pp");
  EXPECT_EQ(dims[1].size, 4);
  EXPECT_EQ(dims[0].collective, "sendrecv");
  EXPECT_EQ(dims[1].collective, "allreduce");
  EXPECT_EQ(dims[1].bytes, 256ull << 20);
  EXPECT_EQ(meshText(dims), "pp=2,dp=4,tp=8");
  dims = mesh("dp=4,pp=2", "pp=sendrecv:1MiB, dp=reducescatter:64M");
  EXPECT_EQ(dims[0].collective, "reducescatter");
  EXPECT_EQ(dims[0].bytes, 64ull << 20);
  EXPECT_EQ(dims[1].bytes, 1ull << 20);
}

TEST(Mesh, BadInputNamesTheFieldAndWhatWasExpected) {
  EXPECT_NE(errorOf([] { mesh("pp=2,dp"); }).find("an item without '='"), std::string::npos);
  EXPECT_NE(errorOf([] { mesh("pp=0"); }).find("a whole number from 1"), std::string::npos);
  EXPECT_NE(errorOf([] { mesh("pp=2,,dp=2"); }).find("--mesh"), std::string::npos);
  EXPECT_NE(errorOf([] { mesh("dp=2,dp=4"); }).find("dimension 'dp' is named twice"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              mesh("dp=4", "tp=allreduce:1M");
            }).find("'tp' is not a dimension of the mesh (dp)"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              mesh("dp=4", "dp=allreduce:1M,dp=allgather:1M");
            }).find("dimension 'dp' is given twice"),
            std::string::npos);
  EXPECT_NE(errorOf([] { mesh("dp=4", "dp=allsum:1M"); }).find("collective 'allsum'"),
            std::string::npos);
  EXPECT_NE(errorOf([] { mesh("dp=4", "dp=allreduce:lots"); }).find("'lots' is not a size"),
            std::string::npos);
  EXPECT_NE(errorOf([] { mesh("rows=4"); }).find("dimension 'rows' of the mesh has no traffic"),
            std::string::npos);
  EXPECT_EQ(errorOf([] { mesh("rows=4", "rows=allreduce:1M"); }), "");
  EXPECT_NE(errorOf([] {
              checkMeshWorld(mesh("pp=2,dp=3"), 8, "--mesh");
            }).find("the mesh has 6 ranks but the job has 8"),
            std::string::npos);
}

TEST(Mesh, GroupsFollowPyTorchsConventionTheLastDimensionFastest) {
  auto dims = mesh("pp=2,dp=4,tp=2");
  auto tp = meshGroups(dims, 2), dp = meshGroups(dims, 1), pp = meshGroups(dims, 0);
  ASSERT_EQ(tp.size(), 8u);
  EXPECT_EQ(tp[0], (std::vector<int>{0, 1}));
  ASSERT_EQ(dp.size(), 4u);
  EXPECT_EQ(dp[0], (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(dp[1], (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(dp[2], (std::vector<int>{8, 10, 12, 14}));
  ASSERT_EQ(pp.size(), 8u);
  EXPECT_EQ(pp[3], (std::vector<int>{3, 11}));
}

// The issue's example: 8 VMs in 2 racks, mesh dp=4 x pp=2. The world ring's order (racks
// contiguous) puts each data-parallel group {0,2,4,6} across both racks; the mesh plan keeps each
// in one rack and sends only the activations across.
TEST(Mesh, DataParallelGroupsLandInOneRackEach) {
  NetworkModel net = racks({4, 4});
  auto dims = mesh("dp=4,pp=2");
  MeshModel model(net, dims, RingParams{});
  std::vector<int> walk = {0, 1, 2, 3, 4, 5, 6, 7};
  MeshPlacement p = placeMesh(model, walk, 0.01);
  ASSERT_TRUE(isPermutation(p.order, 8));
  for (const auto& r : groupRacks(net, dims, 0, p.order)) EXPECT_EQ(r.size(), 1u);
  EXPECT_LT(p.times.stepUs * 1.5, model.stepUs(walk));
  // The step is the dimensions one after the other; the gradients' ring stays in the racks, as
  // fast as in a network of one rack.
  EXPECT_NEAR(p.times.stepUs, p.times.dimUs[0] + p.times.dimUs[1], 1e-6 * p.times.stepUs);
  NetworkModel flat = racks({8}, 1000, 250);
  MeshModel oneRack(flat, dims, RingParams{});
  EXPECT_NEAR(p.times.dimUs[0], oneRack.evaluate(walk).dimUs[0], 1e-6 * p.times.stepUs);
}

// Each group alone: a group inside one rack is as fast as in a network of one rack, one that
// crosses the uplink is slower, and no group alone is slower than its dimension with every group
// at once.
TEST(Mesh, EachGroupAloneIsTimedOnItsOwnTraffic) {
  NetworkModel net = racks({4, 4}, 1000, 100);
  auto dims = mesh("dp=4,pp=2", "dp=allreduce:16MiB,pp=sendrecv:1MiB");
  MeshModel model(net, dims, RingParams{});
  // dp group 0 (ranks 0 2 4 6) on hosts 0-3 (rack 0), dp group 1 (1 3 5 7) on hosts 4-7 (rack
  // 1); every pipeline pair crosses. Then ranks 4 and 5 trade hosts: both groups cross.
  std::vector<int> inRacks = {0, 4, 1, 5, 2, 6, 3, 7};
  auto alone = model.groupUs(inRacks);
  ASSERT_EQ(alone.size(), 2u);
  ASSERT_EQ(alone[0].size(), 2u);
  ASSERT_EQ(alone[1].size(), 4u);
  EXPECT_NEAR(alone[0][0], alone[0][1], 1e-6 * alone[0][0]);
  MeshTimes all = model.evaluate(inRacks);
  for (size_t d = 0; d < 2; ++d)
    for (double us : alone[d]) EXPECT_LE(us, all.dimUs[d] * (1 + 1e-9));
  std::vector<int> across = {0, 4, 1, 5, 6, 2, 3, 7};  // ranks 4 and 5 swapped racks
  auto mixed = model.groupUs(across);
  EXPECT_GT(mixed[0][0], 2 * alone[0][0]);  // 16 MiB's ring over a 100 Mbit/s uplink
  EXPECT_GT(mixed[0][1], 2 * alone[0][1]);
  // The pipeline pairs cross racks in both orders, alone as fast.
  for (size_t g = 0; g < 4; ++g) EXPECT_NEAR(mixed[1][g], alone[1][g], 1e-9 * alone[1][g]);
}

// Small jobs, each checked against the exact search.
struct SmallCase {
  std::vector<int> racks;
  std::string mesh, traffic;
  int rph;
};
const SmallCase kSmallCases[] = {
    {{4, 4}, "dp=4,pp=2", "", 1},
    {{4, 4}, "pp=2,dp=4", "", 1},
    {{4, 4}, "dp=2,pp=2,tp=2", "", 1},
    {{4, 4}, "ep=8", "", 1},
    {{4, 4}, "dp=4,pp=2,tp=2", "", 2},
    {{5, 4, 3}, "dp=3,pp=4", "", 1},
    {{5, 4, 3}, "dp=4,pp=3", "", 1},
    {{5, 4, 3}, "pp=2,dp=6", "dp=allreduce:64MiB,pp=sendrecv:64MiB", 1},
    {{6, 6}, "dp=6,pp=2", "", 1},
    {{3, 3, 3}, "dp=3,tp=3", "dp=allreduce:64MiB,tp=allreduce:64MiB", 1},
    {{2, 2, 2, 2}, "dp=4,pp=2", "", 1},
    {{2, 2, 2, 2}, "dp=4,pp=2", "dp=broadcast:8MiB,pp=allgather:64MiB", 1},
};

// The heuristic against every arrangement the model can tell apart, on small jobs; the lower
// bound (lowerBoundUs) below the best of them and below random orders.
TEST(Mesh, PlacementIsWithinFivePercentOfTheExactSearchAndTheBoundBelowEveryOrder) {
  std::mt19937_64 rng(7);
  for (const auto& c : kSmallCases) {
    SCOPED_TRACE(c.mesh);
    NetworkModel net = racks(c.racks);
    RingParams rp;
    rp.ranksPerHost = c.rph;
    MeshModel model(net, mesh(c.mesh, c.traffic), rp);
    std::vector<int> walk(net.n);
    std::iota(walk.begin(), walk.end(), 0);
    MeshPlacement p = placeMesh(model, walk, 0.01);
    auto exact = exactMeshOrder(model, 200000);
    ASSERT_TRUE(exact);
    EXPECT_LE(exact->times.stepUs, p.times.stepUs * (1 + 1e-9));
    EXPECT_LE(p.times.stepUs, exact->times.stepUs * 1.05)
        << p.basis << " " << ::testing::PrintToString(p.order) << " exact "
        << ::testing::PrintToString(exact->order) << " dims "
        << ::testing::PrintToString(p.times.dimUs) << " vs "
        << ::testing::PrintToString(exact->times.dimUs);
    double bound = model.lowerBoundUs();
    EXPECT_GT(bound, 0);
    EXPECT_LE(bound, exact->times.stepUs * (1 + 1e-9));
    for (int k = 0; k < 50; ++k) {
      std::shuffle(walk.begin(), walk.end(), rng);
      EXPECT_LE(bound, model.stepUs(walk) * (1 + 1e-9));
    }
  }
}

// The lower bound is tight where counting alone decides: dp groups that cannot fit in a rack
// cross each uplink once each way; groups that fit are held by the host links.
TEST(Mesh, LowerBoundIsTightWhereCountingDecides) {
  // One data-parallel allreduce of 8 hosts over two racks: at best each uplink carries one hop
  // each way, 2 x 7/8 x 64 MiB at 250 Mbit/s, the bound's uplink term; the host links (1000)
  // allow four times that.
  NetworkModel net = racks({4, 4});
  MeshModel ring(net, mesh("dp=8", "dp=allreduce:64MiB"), RingParams{});
  double hopBytes = 2.0 * 7 / 8 * 64 * 1048576;
  double bound = ring.lowerBoundUs();
  EXPECT_GE(bound, hopBytes / bytesPerUs(250));
  EXPECT_LE(bound, exactMeshOrder(ring, 200000)->times.stepUs * (1 + 1e-9));
  EXPECT_GT(bound, exactMeshOrder(ring, 200000)->times.stepUs * 0.95);
  // Two groups of four that fit in the racks: the host links bound it.
  MeshModel fits(net, mesh("pp=2,dp=4", "dp=allreduce:64MiB,pp=sendrecv:1KiB"), RingParams{});
  auto best = exactMeshOrder(fits, 200000);
  EXPECT_GT(fits.lowerBoundUs(), best->times.stepUs * 0.95);
}

// Where no order serves every phase at its best (a rack that keeps the pipelines' hops inside
// carries more data-parallel rings over its uplink, and the reverse), the bound takes the phases
// on one rack's uplink together: near the split layout's step on the network below, and never
// above an order that a search or chance found. A host that holds part of a dimension (tp=4 on
// 2 ranks per host) has no grid: the phases are bounded apart, as before.
TEST(Mesh, LowerBoundTakesThePhasesOnOneUplinkTogether) {
  std::vector<int> rack, pod;
  for (int h = 0; h < 128; ++h) rack.push_back(h / 8), pod.push_back(h / 32);
  NetworkModel net = modelFromHierarchy(hierarchyOf({rack, pod}), std::vector<double>(128, 10000),
                                        {5000, 10000}, 2, {5, 20});
  std::vector<int> walk(net.n);
  std::iota(walk.begin(), walk.end(), 0);
  std::mt19937_64 rng(11);
  for (auto [text, rph] : {std::pair{"dp=32,pp=4,tp=8", 8},
                           {"pp=4,dp=32,tp=8", 8},
                           {"dp=16,pp=4,tp=4", 2},
                           {"pp=2,dp=16,ep=4", 1}}) {
    SCOPED_TRACE(text);
    RingParams rp;
    rp.ranksPerHost = rph;
    MeshModel model(net, mesh(text), rp);
    MeshPlacement p = placeMesh(model, walk, 0.01);
    double bound = model.lowerBoundUs();
    EXPECT_LE(bound, p.times.stepUs * (1 + 1e-9));
    if (rph == 8) {
      EXPECT_GT(bound, p.times.stepUs / 1.05) << p.basis;
    }
    std::vector<int> order = walk;
    for (int k = 0; k < 20; ++k) {
      std::shuffle(order.begin(), order.end(), rng);
      EXPECT_LE(bound, model.stepUs(order) * (1 + 1e-9));
      EXPECT_LE(bound, model.stepUs(model.improve(order, 4, 16, k)) * (1 + 1e-9));
    }
  }
}

// Where a pipeline's hops cross the pods' uplinks whenever each data-parallel group has a pod,
// a rack takes a block of two data-parallel groups' hosts and half of each pipeline: the layout
// that splits the fastest dimension (what the 1024-host rows of docs/performance.md need).
// 128 hosts x 8 ranks in racks of 8 at 1:16 and pods of 4 racks at 1:2, dp=32 x pp=4 x tp=8.
TEST(Mesh, SplitLayoutsPutBlocksOfGroupsInRacks) {
  std::vector<int> rack, pod;
  for (int h = 0; h < 128; ++h) rack.push_back(h / 8), pod.push_back(h / 32);
  NetworkModel net = modelFromHierarchy(hierarchyOf({rack, pod}), std::vector<double>(128, 10000),
                                        {5000, 10000}, 2, {5, 20});
  RingParams rp;
  rp.ranksPerHost = 8;
  MeshModel model(net, mesh("dp=32,pp=4,tp=8"), rp);
  std::vector<int> walk(net.n);
  std::iota(walk.begin(), walk.end(), 0);
  MeshPlacement p = placeMesh(model, walk, 0.01);
  EXPECT_NE(p.basis.find('%'), std::string::npos) << p.basis;
  EXPECT_LT(p.times.stepUs, model.lowerBoundUs() * 1.3) << p.basis;
}

// The annealing baseline (tests/bench/mesh_bench) returns an order of the same hosts, and the
// best it saw: never a higher link-load bound than its start's.
TEST(Mesh, AnnealingReturnsTheBestOrderItSaw) {
  NetworkModel net = racks({4, 4, 4});
  MeshModel model(net, mesh("dp=4,pp=3"), RingParams{});
  std::vector<int> start{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // dp groups across racks
  std::vector<int> annealed = model.anneal(start, 20000, 0.05, 0.05, 1);
  EXPECT_TRUE(isPermutation(annealed, 12));
  EXPECT_LE(model.loadProfile(annealed).first, model.loadProfile(start).first);
  EXPECT_LT(model.stepUs(annealed), model.stepUs(start));
}

TEST(Mesh, ExactSearchDeclinesTooManyArrangements) {
  NetworkModel net = racks({4, 4});
  MeshModel model(net, mesh("dp=4,pp=2"), RingParams{});
  EXPECT_FALSE(exactMeshOrder(model, 10));  // 8! / (4! 4!) = 70
  EXPECT_TRUE(exactMeshOrder(model, 70));
}

// A recorded profile (common/job_profile.h) becomes the mesh it describes: sets of evenly spaced
// groups are dimensions, outermost = widest spacing; traffic per step from the run's bytes.
JobProfile profileOf(int world, std::vector<ProfileSet> sets) {
  JobProfile p;
  p.program = "prog";
  p.worldSize = world;
  p.recorded = "2026-12-04T05:00:00Z";
  p.sets = std::move(sets);
  return p;
}

TEST(Mesh, AProfilesGroupsBecomeTheMeshTheyForm) {
  // dp=4 x pp=2 (pp fastest) over 5 steps: 16 MiB allreduce, 1 MiB each way per stage pair.
  JobProfile p = profileOf(
      8,
      {{"MPI_COMM_WORLD", 0, {{0, 1, 2, 3, 4, 5, 6, 7}}, {{"allreduce", 6, 48}}},
       {"MPI_Comm_split", 1, {{0, 2, 4, 6}, {1, 3, 5, 7}}, {{"allreduce", 5, 5 * (16ull << 20)}}},
       {"MPI_Comm_split",
        2,
        {{0, 1}, {2, 3}, {4, 5}, {6, 7}},
        {{"sendrecv", 10, 10 * (1ull << 20)}}}});
  ProfileMesh m = meshFromProfile(p, "profile.json");
  EXPECT_EQ(meshText(m.dims), "split1=4,split2=2");
  EXPECT_EQ(meshTrafficText(m.dims), "split1=allreduce:16777216,split2=sendrecv:1048576");
  EXPECT_TRUE(m.notes.empty()) << m.notes.front();  // 48 bytes on the world: not worth a word

  // The same groups made in the other order, a spacing no set has (a filler dimension with no
  // traffic), a set that is no dimension (left out, said), the world's heavy traffic (said).
  p = profileOf(16, {{"MPI_COMM_WORLD",
                      0,
                      {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
                      {{"allreduce", 3, 3 * (64ull << 20)}}},
                     {"MPI_Comm_split",
                      1,
                      {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}},
                      {{"allreduce", 6, 6 * (32ull << 20)}, {"broadcast", 3, 3 * (1ull << 20)}}},
                     {"MPI_Comm_split",
                      2,
                      {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}},
                      {{"alltoall", 3, 3 * (8ull << 20)}}},
                     {"MPI_Comm_create", 3, {{0, 1, 2}}, {{"allreduce", 3, 3}}}});
  m = meshFromProfile(p, "profile.json");
  EXPECT_EQ(meshText(m.dims), "split2=4,rest1=2,split1=2");
  // Steps: the fewest calls (alltoall, 3); split1's 6 calls of 32 MiB and its broadcasts' 3 MiB
  // are 65 MiB a step, priced as its allreduce.
  EXPECT_EQ(meshTrafficText(m.dims),
            "split2=alltoall:8388608,rest1=allreduce:0,split1=allreduce:68157440");
  ASSERT_EQ(m.notes.size(), 2u);
  EXPECT_EQ(m.notes[0],
            "MPI_Comm_create call 3 left out: its groups hold 3 of the 16 ranks (a "
            "mesh dimension's groups hold every rank, equally many, evenly spaced)");
  EXPECT_NE(m.notes[1].find("the world's own traffic (12% of the bytes the job's groups moved) "
                            "is not placed"),
            std::string::npos)
      << m.notes[1];
  for (size_t d = 0; d < m.dims.size(); ++d) EXPECT_FALSE(meshGroups(m.dims, d).empty());

  // Groups that are no mesh in PyTorch's order, and groups that moved nothing: refused, naming
  // the file and what was expected.
  p = profileOf(8,
                {{"MPI_Comm_split", 1, {{0, 2, 4, 6}, {1, 3, 5, 7}}, {{"allreduce", 1, 8}}},
                 {"MPI_Comm_split", 2, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}, {{"allreduce", 1, 8}}}});
  EXPECT_NE(errorOf([&] { meshFromProfile(p, "--profile p.json"); })
                .find("--profile p.json: the groups of split2 (ranks 4 apart) and those inside "
                      "them do not form a mesh"),
            std::string::npos);
  p = profileOf(4, {{"MPI_Comm_split", 1, {{0, 1}, {2, 3}}, {}}});
  EXPECT_EQ(errorOf([&] { meshFromProfile(p, "--profile p.json"); }),
            "--profile p.json: the job's groups moved no bytes (nothing to place)");
  p = profileOf(4, {{"MPI_Comm_split", 1, {{0, 1, 3}, {2}}, {{"allreduce", 1, 8}}}});
  EXPECT_NE(errorOf([&] {
              meshFromProfile(p, "--profile p.json");
            }).find("--profile p.json: no set of groups that is a mesh dimension"),
            std::string::npos);
}

// Every rank's record merged into the profile (JobProfile::merge), as PyTorch's hook writes them
// for dp=2 x pp=2 (pp fastest): the data-parallel groups from new_group, the pipeline's messages
// on the world. Ranks joined by messages form the point-to-point set, which takes the world's
// sendrecv traffic; the mesh is then the one the job runs.
TEST(Mesh, RanksRecordsMergeAndAPipelinesMessagesFormASet) {
  std::vector<std::string> records;
  for (int r = 0; r < 4; ++r) {
    const int q = r % 2, peer = r ^ 1;
    Json world = {{"m", "world"},
                  {"c", 0},
                  {"g", {0, 1, 2, 3}},
                  {"t", {{"allreduce", {3, 12}}, {"sendrecv", {3, 3 << 20}}}},
                  {"p", Json::array({Json::array({peer, 3, 3 << 20})})}};
    Json dp = {{"m", "new_group"},
               {"c", 1},
               {"g", {q, q + 2}},
               {"t", {{"allreduce", {3, 3ull * (16 << 20) + static_cast<uint64_t>(q) * 8}}}}};
    records.push_back(Json::array({world, dp}).dump());
  }
  JobProfile p = JobProfile::merge(records, "mesh_train.py", "2026-12-06T00:00:00Z");
  EXPECT_EQ(p.program, "mesh_train.py");
  EXPECT_EQ(p.worldSize, 4);
  ASSERT_EQ(p.sets.size(), 3u) << p.dump();
  EXPECT_EQ(p.sets[0].madeBy, "world");
  EXPECT_EQ(p.sets[0].traffic, (std::vector<ProfileTraffic>{{"allreduce", 3, 12}}));
  EXPECT_EQ(p.sets[1].groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  // A collective's buffer as its members passed it, averaged over the set's groups.
  EXPECT_EQ(p.sets[1].traffic,
            (std::vector<ProfileTraffic>{{"allreduce", 3, 3ull * (16 << 20) + 4}}));
  EXPECT_EQ(p.sets[2].madeBy, "point-to-point");
  EXPECT_EQ(p.sets[2].call, 2);
  EXPECT_EQ(p.sets[2].groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  // Both members' messages: 3 steps, one each way.
  EXPECT_EQ(p.sets[2].traffic, (std::vector<ProfileTraffic>{{"sendrecv", 6, 6ull << 20}}));
  ProfileMesh m = meshFromProfile(p, "profile.json");
  EXPECT_EQ(meshText(m.dims), "group1=2,p2p2=2");

  // A record that is not what the hook or the shim writes: the rank and the field named.
  records[1] = R"([{"m": "world", "g": [0, 1, 2, 3], "t": {}}])";
  EXPECT_NE(errorOf([&] {
              JobProfile::merge(records, "x", "2026-12-06T00:00:00Z");
            }).find("profile record of rank 1"),
            std::string::npos);
  records[1] = R"([{"m": "new_group", "c": 1, "g": [1, 3], "t": {}, "p": [[0, 1, 8]]}])";
  EXPECT_NE(errorOf([&] {
              JobProfile::merge(records, "x", "2026-12-06T00:00:00Z");
            }).find("expected point-to-point peers only in the set of call 0"),
            std::string::npos);
  // The file a torchrun job's rank 0 writes: the records with the script's name.
  Json file = {{"schema", "rankmap.profile-records"},
               {"version", 1},
               {"program", "train.py"},
               {"records", Json::array()}};
  for (int r = 0; r < 4; ++r) file["records"].push_back(Json::array().dump());
  EXPECT_EQ(JobProfile::fromRecords(file.dump(), "records.json", "2026-12-06T00:00:00Z").program,
            "train.py");
  file["schema"] = "rankmap.profile";
  EXPECT_NE(errorOf([&] {
              JobProfile::fromRecords(file.dump(), "records.json", "2026-12-06T00:00:00Z");
            }).find("records.json: at /schema: expected \"rankmap.profile-records\""),
            std::string::npos);
  // Ranks that disagree on a set's groups: the profile is refused, not written.
  records[1] = R"([{"m": "new_group", "c": 1, "g": [0, 1], "t": {}}])";
  EXPECT_NE(errorOf([&] {
              JobProfile::merge(records, "x", "2026-12-06T00:00:00Z");
            }).find("a rank in one group of the set only"),
            std::string::npos);
}

// The NCCL shim's entries name their communicator by key (it cannot see world ranks): merged
// with the MPI shim's, the ranks that hold one key are a group. dp=2 x tp=2 (tp fastest) of an
// MPI job whose ranks also made an NCCL world, NCCL tensor-parallel communicators from their own
// unique ids, and data-parallel ones by ncclCommSplit: a mesh of NCCL sets, the NCCL world's
// traffic the world's.
TEST(Mesh, NcclCommunicatorsMergeByKeyIntoTheirGroups) {
  std::vector<std::string> records;
  for (int r = 0; r < 4; ++r) {
    const int q = r % 2, pair = r / 2;
    Json world = {{"m", "MPI_COMM_WORLD"}, {"c", 0}, {"g", {0, 1, 2, 3}}, {"t", Json::object()}};
    Json ncclWorld = {
        {"m", "ncclCommInitRank"}, {"c", 1}, {"k", "w0"}, {"t", {{"allreduce", {1, 1 << 20}}}}};
    Json tp = {{"m", "ncclCommInitRank"},
               {"c", 2},
               {"k", pair == 0 ? "tpA" : "tpB"},
               {"t", {{"allgather", {4, 4 << 20}}}}};
    Json dp = {{"m", "ncclCommSplit"},
               {"c", 3},
               {"k", q == 0 ? "dp0" : "dp1"},
               {"t", {{"allreduce", {4, 4ull << 24}}, {"sendrecv", {2, 2 << 10}}}}};
    records.push_back(Json::array({world, ncclWorld, tp, dp}).dump());
  }
  JobProfile p = JobProfile::merge(records, "train", "2026-12-06T00:00:00Z");
  ASSERT_EQ(p.sets.size(), 4u) << p.dump();
  EXPECT_EQ(p.sets[1].madeBy, "ncclCommInitRank");
  EXPECT_EQ(p.sets[1].groups, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_EQ(p.sets[2].groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(p.sets[2].traffic, (std::vector<ProfileTraffic>{{"allgather", 4, 4 << 20}}));
  EXPECT_EQ(p.sets[3].madeBy, "ncclCommSplit");
  EXPECT_EQ(p.sets[3].groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  // A collective's buffer as every member passed it; messages summed over the members.
  EXPECT_EQ(p.sets[3].traffic,
            (std::vector<ProfileTraffic>{{"allreduce", 4, 4ull << 24}, {"sendrecv", 4, 4 << 10}}));
  ProfileMesh m = meshFromProfile(p, "profile.json");
  EXPECT_EQ(meshText(m.dims), "ncclsplit3=2,nccl2=2");

  // An entry with both a group and a key, or with an empty key: refused, naming the rank.
  records[1] = R"([{"m": "ncclCommInitRank", "c": 1, "k": "w0", "g": [0, 1], "t": {}}])";
  EXPECT_NE(errorOf([&] {
              JobProfile::merge(records, "x", "2026-12-06T00:00:00Z");
            }).find("profile record of rank 1"),
            std::string::npos);
  records[1] = R"([{"m": "ncclCommInitRank", "c": 1, "k": "", "t": {}}])";
  EXPECT_NE(errorOf([&] {
              JobProfile::merge(records, "x", "2026-12-06T00:00:00Z");
            }).find("profile record of rank 1"),
            std::string::npos);
}

// profile.json: what the shim writes reads back the same; what it must not accept names the field.
TEST(Mesh, AProfileReadsBackAndBadOnesNameTheField) {
  JobProfile p = profileOf(
      4, {{"MPI_Comm_split", 1, {{0, 2}, {1, 3}}, {{"allreduce", 2, 16}, {"sendrecv", 4, 64}}}});
  EXPECT_EQ(JobProfile::parse(p.dump(), "p.json"), p);
  auto bad = [&](const std::function<void(Json&)>& change) {
    Json j = Json::parse(p.dump());
    change(j);
    return errorOf([&] { JobProfile::parse(j.dump(), "p.json"); });
  };
  EXPECT_NE(bad([](Json& j) {
              j["schema"] = "rankmap.plan";
            }).find("p.json: at /schema: expected \"rankmap.profile\""),
            std::string::npos);
  EXPECT_NE(bad([](Json& j) { j["version"] = 2; }).find("at /version: expected profile version 1"),
            std::string::npos);
  EXPECT_NE(bad([](Json& j) {
              j["sets"][0]["groups"][0][1] = 4;
            }).find("at /sets/0/groups/0/1: expected an integer in [0, 3]"),
            std::string::npos);
  EXPECT_NE(bad([](Json& j) {
              j["sets"][0]["groups"][1][1] = 2;
            }).find("at /sets/0/groups/1/1: expected a rank in one group of the set only"),
            std::string::npos);
  EXPECT_NE(bad([](Json& j) {
              j["sets"][0]["traffic"][1]["collective"] = "allreduce";
            }).find("at /sets/0/traffic/1/collective: expected each collective once per set"),
            std::string::npos);
  EXPECT_NE(bad([](Json& j) {
              j["sets"][0]["traffic"][0]["collective"] = "gather";
            }).find("expected allreduce, allgather"),
            std::string::npos);
}

TEST(Mesh, PlanCarriesTheMeshAndReadsItBack) {
  Topology t = Topology::load(test::fixture("testbed_8vm_2rack.json"));
  PlanOptions o = test::quietOptions();
  o.mesh = mesh("dp=4,pp=2");
  PlanResult r = planTopology(t, o);
  ASSERT_TRUE(r.plan.mesh);
  const PlanMesh& m = *r.plan.mesh;
  EXPECT_EQ(m.dims.size(), 2u);
  EXPECT_GT(m.stepUs, 0);
  EXPECT_LT(m.stepUs * 1.5, m.worldRingStepUs);
  EXPECT_LE(m.stepUs, m.inputStepUs);
  // Each data-parallel group inside one of the plan's racks.
  std::map<std::string, size_t> rackOf;
  ASSERT_FALSE(r.plan.groups.empty());
  for (size_t g = 0; g < r.plan.groups[0].groups.size(); ++g)
    for (const auto& h : r.plan.groups[0].groups[g]) rackOf[h] = g;
  for (const auto& g : meshGroups(m.dims, 0)) {
    std::set<size_t> in;
    for (int rank : g) in.insert(rackOf.at(r.plan.order[rank]));
    EXPECT_EQ(in.size(), 1u);
  }
  // Each group's time alone, in meshGroups order: 2 data-parallel groups, 4 pipeline pairs.
  ASSERT_EQ(m.dims[0].groupsUs.size(), 2u);
  ASSERT_EQ(m.dims[1].groupsUs.size(), 4u);
  for (const auto& d : m.dims)
    for (double us : d.groupsUs) {
      EXPECT_GT(us, 0);
      EXPECT_LE(us, d.predictedUs * (1 + 1e-9));
    }
  std::string text = r.plan.dump();
  EXPECT_NE(text.find("\"schema_version\": 2"), std::string::npos);
  EXPECT_NE(text.find("\"groups_us\""), std::string::npos);
  EXPECT_EQ(Plan::parse(text, "plan.json"), r.plan);

  // Without a mesh: version 1, as before.
  PlanResult plain = planTopology(t, test::quietOptions());
  EXPECT_NE(plain.plan.dump().find("\"schema_version\": 1"), std::string::npos);
  EXPECT_FALSE(Plan::parse(plain.plan.dump(), "plan.json").mesh);

  // A mesh in a version 1 plan, or one that does not cover the world, is refused by name.
  Json doc = r.plan.toJson();
  doc["schema_version"] = 1;
  EXPECT_NE(errorOf([&] { Plan::fromJson(doc, "plan.json"); }).find("schema version 1"),
            std::string::npos);
  doc = r.plan.toJson();
  doc["mesh"]["dims"][1]["groups_us"] = Json::array({1.0, 2.0});
  EXPECT_NE(errorOf([&] { Plan::fromJson(doc, "plan.json"); }).find("groups_us"),
            std::string::npos);
  Plan without = r.plan;  // groups_us is optional
  without.mesh->dims[1].groupsUs.clear();
  without.seal();
  EXPECT_EQ(without.dump().find("\"groups_us\"", without.dump().find("\"pp\"")), std::string::npos);
  EXPECT_EQ(Plan::parse(without.dump(), "plan.json"), without);
  doc = r.plan.toJson();
  doc["mesh"]["dims"][0]["size"] = 3;
  EXPECT_NE(errorOf([&] { Plan::fromJson(doc, "plan.json"); }).find("multiply to the world size 8"),
            std::string::npos);
  // The world must match when planning too.
  o.mesh = mesh("dp=4,pp=4");
  EXPECT_NE(errorOf([&] { planTopology(t, o); }).find("--mesh 'dp=4,pp=4': the mesh has 16 ranks"),
            std::string::npos);
}

}  // namespace
}  // namespace rankmap::reorder
