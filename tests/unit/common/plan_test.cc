#include "common/plan.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace rankmap {
namespace {

Plan samplePlan() {
  Plan p;
  p.hosts = {"vm0", "vm1", "vm2", "vm3"};
  p.order = {"vm0", "vm2", "vm1", "vm3"};
  p.ranksPerHost = 2;
  p.derivePermutation();
  p.groups = {{"rack", 0.97, {{"vm0", "vm2"}, {"vm1", "vm3"}}}};
  p.confidence = 0.97;
  p.collectives["allreduce"] = {{0, 65536, Algorithm::kTree, 40, 0.1, 30},
                                {65536, AlgoRange::kUnbounded, Algorithm::kRing, 5000, 0.9, 4800}};
  p.predicted = {"allreduce 16 MiB ring", 1000, 3000, 3, 250, 83.3};
  p.models["allreduce"] = {{{Algorithm::kRing, {60, 0.25}}, {Algorithm::kTree, {20, 0.5}}}, 0.2};
  p.epoch = 7;
  p.seal();
  return p;
}

// samplePlan() with Open MPI's decision for two collectives.
Plan sampleWithOpenMpi() {
  Plan p = samplePlan();
  p.openMpi["allreduce"] = {{0, 65536, 3, 0, 0, 40, 35},
                            {65536, AlgoRange::kUnbounded, 4, 0, 0, 5000, 4800}};
  p.openMpi["bcast"] = {{0, AlgoRange::kUnbounded, 6, 131072, 0, 70, 0}};
  p.seal();
  return p;
}

std::string errorOf(const std::string& text) {
  try {
    Plan::parse(text, "plan.json");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(Plan, PermutationKeepsHostRanksContiguous) {
  auto p = samplePlan();
  // vm1 (old ranks 2,3) moves to position 2 -> new ranks 4,5; vm2 (old 4,5) -> new 2,3.
  EXPECT_EQ(p.permutation, (std::vector<int>{0, 1, 4, 5, 2, 3, 6, 7}));
  auto inv = p.inversePermutation();
  for (int r = 0; r < 8; ++r) EXPECT_EQ(inv[p.newRank(r)], r);
}

TEST(Plan, RoundTripAndHashStable) {
  auto p = samplePlan();
  auto back = Plan::parse(p.dump(), "mem");
  EXPECT_EQ(back, p);
  EXPECT_EQ(back.dump(), p.dump());
  EXPECT_EQ(p.hash.rfind("sha256:", 0), 0u);
  EXPECT_EQ(p.hash, samplePlan().hash);  // deterministic
}

// Plans written before "models" existed keep their hash: the field is written only when set.
TEST(Plan, ModelsAreOptionalAndHashed) {
  auto p = samplePlan();
  Plan without = p;
  without.models.clear();
  without.seal();
  EXPECT_EQ(without.toJson().count("models"), 0u);
  EXPECT_NE(without.hash, p.hash);
  EXPECT_EQ(Plan::parse(without.dump(), "mem"), without);
  auto back = Plan::parse(p.dump(), "mem");
  EXPECT_EQ(back.models.at("allreduce").algorithms.at(Algorithm::kTree).alphaUs, 20);
  EXPECT_EQ(back.models.at("allreduce").lowerBoundUsPerByte, 0.2);
}

// Ring weights and their predicted time: written only when set (older plans keep their hash),
// hashed, read back.
TEST(Plan, RingWeightsAreOptionalAndHashed) {
  auto p = samplePlan();
  EXPECT_EQ(p.toJson().count("ring_weights"), 0u);
  EXPECT_EQ(p.toJson()["predicted"].count("ring_weights_us"), 0u);
  Plan with = p;
  with.ringWeights.assign(p.hosts.size(), 0);
  with.ringWeights[1] = 1;
  with.predicted.ringWeightsUs = 123;
  with.seal();
  EXPECT_NE(with.hash, p.hash);
  auto back = Plan::parse(with.dump(), "mem");
  EXPECT_EQ(back, with);
  EXPECT_EQ(back.predicted.engineRingUs(), 123);
  EXPECT_EQ(p.predicted.engineRingUs(), p.predicted.planUs);
}

TEST(Plan, AlgorithmForBySize) {
  auto p = samplePlan();
  EXPECT_EQ(p.algorithmFor("allreduce", 8), Algorithm::kTree);
  EXPECT_EQ(p.algorithmFor("allreduce", 65536), Algorithm::kRing);
  EXPECT_EQ(p.algorithmFor("allreduce", 1ull << 40), Algorithm::kRing);
  EXPECT_FALSE(p.algorithmFor("broadcast", 8));
}

TEST(Plan, IdentityIsValid) {
  auto p = Plan::identity({"a", "b", "c"}, 3);
  EXPECT_EQ(p.worldSize(), 9u);
  for (int r = 0; r < 9; ++r) EXPECT_EQ(p.newRank(r), r);
  EXPECT_EQ(Plan::parse(p.dump(), "mem"), p);
}

TEST(Plan, TamperedContentFailsTheHash) {
  auto j = samplePlan().toJson();
  j["epoch"] = 8;
  auto m = errorOf(j.dump());
  EXPECT_NE(m.find("at /hash: expected the content hash"), std::string::npos) << m;
}

TEST(Plan, OpenMpisDecisionRoundTripsAndIsInTheHash) {
  Plan p = sampleWithOpenMpi();
  Plan back = Plan::parse(p.dump(), "plan.json");
  EXPECT_EQ(back, p);
  EXPECT_EQ(back.toJson()["open_mpi"]["bcast"][0]["algorithm"], "binomial");
  // A plan without it keeps its old document and hash: no "open_mpi" field at all.
  EXPECT_FALSE(samplePlan().toJson().contains("open_mpi"));
  EXPECT_NE(samplePlan().hash, p.hash);
  Json j = p.toJson();
  j["open_mpi"]["allreduce"][1]["algorithm"] = "recursive_doubling";
  EXPECT_NE(errorOf(j.dump()).find("the content hash"), std::string::npos);
}

TEST(Plan, MalformedOpenMpiDecisionsNameTheField) {
  auto base = sampleWithOpenMpi().toJson();
  struct Case {
    std::function<void(Json&)> mutate;
    const char* expect;
  } cases[] = {
      {[](Json& j) { j["open_mpi"]["allreduce"][0]["algorithm"] = "magic"; },
       "at /open_mpi/allreduce/0/algorithm: expected one of 1 basic_linear, 2 nonoverlapping"},
      {[](Json& j) { j["open_mpi"]["bcast"][0]["algorithm"] = "ring"; },
       "at /open_mpi/bcast/0/algorithm: expected one of 1 basic_linear"},
      {[](Json& j) { j["open_mpi"]["alltoall"] = j["open_mpi"]["bcast"]; },
       "at /open_mpi/alltoall: expected a collective among allreduce, bcast"},
      {[](Json& j) { j["open_mpi"]["allreduce"][1]["min_bytes"] = 5; },
       "at /open_mpi/allreduce/1/min_bytes: expected 65536"},
      {[](Json& j) { j["open_mpi"]["allreduce"][1]["max_bytes"] = 1 << 20; },
       "the last with max_bytes null"},
      {[](Json& j) { j["open_mpi"]["bcast"] = Json::array(); }, "at least one range"},
      {[](Json& j) { j["open_mpi"]["bcast"][0]["segsize"] = -1; },
       "at /open_mpi/bcast/0/segsize: expected an integer in [0, 2147483647]"},
      {[](Json& j) { j["open_mpi"]["bcast"][0]["faninout"] = 33; },
       "at /open_mpi/bcast/0/faninout: expected an integer in [0, 32]"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    Json j = base;
    cases[i].mutate(j);
    auto m = errorOf(j.dump());
    EXPECT_NE(m.find(cases[i].expect), std::string::npos) << i << ": " << m;
  }
}

TEST(Plan, MalformedPlansNameTheField) {
  auto base = samplePlan().toJson();
  struct Case {
    std::function<void(Json&)> mutate;
    const char* expect;
  } cases[] = {
      {[](Json& j) { j.erase("order"); }, "missing field 'order'"},
      {[](Json& j) { j["order"][1] = "vm9"; }, "at /order/1: expected a host listed in /hosts"},
      {[](Json& j) { j["order"][1] = "vm0"; },
       "at /order/1: expected a host name not listed twice"},
      {[](Json& j) { j["order"].erase(3); }, "at /order: expected an array of 4 elements, got 3"},
      {[](Json& j) { j["permutation"][0] = 1; }, "at /permutation/0: expected 0"},
      {[](Json& j) { j["permutation"][0] = -1; },
       "at /permutation/0: expected an integer in [0, 7]"},
      {[](Json& j) { j["ranks_per_host"] = 0; },
       "at /ranks_per_host: expected an integer in [1, 65536]"},
      {[](Json& j) { j["ranks_per_host"] = "two"; },
       "at /ranks_per_host: expected an integer, got string"},
      {[](Json& j) { j["collectives"]["allreduce"][0]["algorithm"] = "magic"; },
       "at /collectives/allreduce/0/algorithm: expected one of ring"},
      {[](Json& j) { j["collectives"]["allreduce"][1]["min_bytes"] = 5; },
       "at /collectives/allreduce/1/min_bytes: expected 65536"},
      {[](Json& j) { j["collectives"]["allreduce"][1]["max_bytes"] = 100000; },
       "last max_bytes is null"},
      {[](Json& j) { j["schema_version"] = 99; },
       "at /schema_version: expected plan schema version 1"},
      {[](Json& j) { j["hash"] = 5; }, "at /hash: expected a string"},
      {[](Json& j) {
         j["trees"] = Json::array({{{"weight", 1}, {"parent", {-1, -1, 0, 0}}}});
       },
       "exactly one root"},
      {[](Json& j) { j["models"]["allreduce"]["algorithms"]["ring"]["beta_us_per_byte"] = -1; },
       "at /models/allreduce/algorithms/ring/beta_us_per_byte: expected a non-negative"},
      {[](Json& j) {
         j["models"]["allreduce"]["algorithms"]["magic"] = {{"alpha_us", 1},
                                                            {"beta_us_per_byte", 1}};
       },
       "at /models/allreduce/algorithms/magic: expected a model of one of ring"},
      {[](Json& j) { j["models"]["allreduce"].erase("lower_bound_us_per_byte"); },
       "at /models/allreduce: missing field 'lower_bound_us_per_byte'"},
      {[](Json& j) {
         j["trees"] = Json::array({{{"weight", 1}, {"parent", {-1, 3, 1, 2}}}});
       },
       "at /trees/0/parent/1: expected a parent chain that reaches the root"},
      {[](Json& j) {
         j["chunk_weights"] = {0.5, -0.1, 0.3, 0.3};
       },
       "at /chunk_weights/1"},
      {[](Json& j) {
         j["chunk_weights"] = {0.4, 0.1, 0.4, 0.1};
         j["chunk_weights_basis"] = "luck";
       },
       "at /chunk_weights_basis: expected \"host_rates\" or \"uplinks\""},
      {[](Json& j) { j["chunk_weights_basis"] = "uplinks"; },
       "at /chunk_weights_basis: expected no basis: chunk_weights is empty"},
      {[](Json& j) {
         j["ring_weights"] = {0, 0, 0, 0};
       },
       "at /ring_weights: expected weights with a positive sum"},
      {[](Json& j) {
         j["ring_weights"] = {1, 0};
       },
       "at /ring_weights: expected"},
      {[](Json& j) {
         j["ring_weights"] = {1, 0, -1, 0};
       },
       "at /ring_weights/2"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    Json j = base;
    cases[i].mutate(j);
    auto m = errorOf(j.dump());
    EXPECT_NE(m.find("plan.json"), std::string::npos) << i << ": " << m;
    EXPECT_NE(m.find(cases[i].expect), std::string::npos) << i << ": " << m;
  }
}

TEST(Plan, EveryTruncationFailsCleanly) {
  std::string text = samplePlan().toJson().dump();  // compact: any proper prefix is incomplete
  for (size_t len = 0; len < text.size(); len += 5)
    EXPECT_FALSE(errorOf(text.substr(0, len)).empty()) << len;
}

TEST(Plan, RandomByteFlipsNeverCrash) {
  std::string text = samplePlan().dump();
  uint64_t s = 12345;
  for (int i = 0; i < 3000; ++i) {
    std::string t = text;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t[(s >> 33) % t.size()] = static_cast<char>(s >> 13);
    try {
      Plan::parse(t, "fuzz");
    } catch (const InvalidInput&) {
    }
  }
}

}  // namespace
}  // namespace rankmap
