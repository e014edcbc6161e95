// chooseRendezvous (collectives/connect.h) on environment maps: the precedence RANKMAP_ROOT /
// RANKMAP_RANK > Open MPI's library > torchrun's MASTER_ADDR/MASTER_PORT, and the errors that
// name the missing or malformed variable.
#include <gtest/gtest.h>

#include <string>

#include "collectives/connect.h"
#include "common/error.h"

namespace rankmap::coll {
namespace {

const LauncherEnvironment kOpenMpi = {{"OMPI_COMM_WORLD_RANK", "2"},
                                      {"OMPI_COMM_WORLD_SIZE", "8"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}};
const LauncherEnvironment kTorchrun = {{"RANK", "3"},
                                       {"WORLD_SIZE", "4"},
                                       {"LOCAL_RANK", "1"},
                                       {"MASTER_ADDR", "10.0.0.7"},
                                       {"MASTER_PORT", "29500"}};

RendezvousSettings explicitRoot(std::string root, int64_t rank = -1, int64_t size = -1) {
  RendezvousSettings s;
  s.root = std::move(root);
  s.rank = rank;
  s.size = size;
  return s;
}

std::string errorOf(const LauncherEnvironment& env, const RendezvousSettings& s) {
  try {
    chooseRendezvous(env, s);
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

TEST(Rendezvous, StandaloneNeedsRankSizeAndRoot) {
  Rendezvous r = chooseRendezvous({}, explicitRoot("10.0.0.1:4242", 1, 3));
  EXPECT_EQ(r.kind, RendezvousKind::kRoot);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.size, 3);
  EXPECT_EQ(r.root, "10.0.0.1:4242");
  EXPECT_EQ(r.source, "RANKMAP_RANK");
  EXPECT_EQ(r.rootSource, "RANKMAP_ROOT");
  EXPECT_NE(errorOf({}, explicitRoot("", 1, 3)).find("RANKMAP_ROOT is not set"), std::string::npos);
  EXPECT_NE(errorOf({}, explicitRoot("h:1", 3, 3)).find("rank 3 (from RANKMAP_RANK) outside"),
            std::string::npos);
  EXPECT_NE(errorOf({}, explicitRoot("h:1", 0, -1)).find("world size -1"), std::string::npos);
}

TEST(Rendezvous, ExplicitRankWinsOverEveryLauncher) {
  LauncherEnvironment env = kOpenMpi;
  env.insert(kTorchrun.begin(), kTorchrun.end());
  Rendezvous r = chooseRendezvous(env, explicitRoot("10.0.0.1:4242", 0, 2));
  EXPECT_EQ(r.source, "RANKMAP_RANK");
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.size, 2);
  // RANKMAP_RANK without RANKMAP_ROOT does not fall back to MPI or torchrun.
  EXPECT_NE(errorOf(env, explicitRoot("", 0, 2)).find("RANKMAP_ROOT is not set"),
            std::string::npos);
}

TEST(Rendezvous, RootOverrideKeepsTheLaunchersRank) {
  Rendezvous r = chooseRendezvous(kOpenMpi, explicitRoot("10.0.0.1:4242"));
  EXPECT_EQ(r.kind, RendezvousKind::kRoot);
  EXPECT_EQ(r.source, "Open MPI");
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.size, 8);
  EXPECT_EQ(r.root, "10.0.0.1:4242");

  r = chooseRendezvous(kTorchrun, explicitRoot("10.0.0.1:4242"));
  EXPECT_EQ(r.kind, RendezvousKind::kRoot);
  EXPECT_EQ(r.source, "torchrun");
  EXPECT_EQ(r.root, "10.0.0.1:4242");  // not MASTER_PORT+1
  EXPECT_EQ(r.rootSource, "RANKMAP_ROOT");

  r = chooseRendezvous({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}, explicitRoot("h:9"));
  EXPECT_EQ(r.source, "PMI");
  EXPECT_EQ(r.rank, 1);
}

TEST(Rendezvous, OpenMpiWithoutRootUsesTheMpiLibrary) {
  RendezvousSettings s;
  s.mpiLibrary = "/opt/ompi/lib/libmpi.so.40";
  Rendezvous r = chooseRendezvous(kOpenMpi, s);
  EXPECT_EQ(r.kind, RendezvousKind::kMpi);
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.size, 8);
  EXPECT_EQ(r.localRank, 0);
  EXPECT_EQ(r.mpiLibrary, "/opt/ompi/lib/libmpi.so.40");
  EXPECT_TRUE(r.root.empty());
  EXPECT_FALSE(r.sameHost);  // one rank per host

  LauncherEnvironment oneHost = kOpenMpi;
  oneHost["OMPI_COMM_WORLD_LOCAL_SIZE"] = "8";
  EXPECT_TRUE(chooseRendezvous(oneHost, s).sameHost);
  // Open MPI wins over torchrun variables that happen to be set too.
  LauncherEnvironment both = kOpenMpi;
  both.insert(kTorchrun.begin(), kTorchrun.end());
  EXPECT_EQ(chooseRendezvous(both, s).kind, RendezvousKind::kMpi);
}

TEST(Rendezvous, MpichWithoutRootIsAClearError) {
  std::string e = errorOf({{"PMI_RANK", "0"}, {"PMI_SIZE", "4"}}, RendezvousSettings{});
  EXPECT_NE(e.find("MPICH"), std::string::npos) << e;
  EXPECT_NE(e.find("set RANKMAP_ROOT"), std::string::npos) << e;
}

TEST(Rendezvous, TorchrunListensOnTheNextPort) {
  Rendezvous r = chooseRendezvous(kTorchrun, RendezvousSettings{});
  EXPECT_EQ(r.kind, RendezvousKind::kRoot);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.size, 4);
  EXPECT_EQ(r.localRank, 1);
  EXPECT_EQ(r.root, "10.0.0.7:29501");
  EXPECT_EQ(r.rootSource, "MASTER_ADDR:MASTER_PORT+1");

  LauncherEnvironment v6 = kTorchrun;
  v6["MASTER_ADDR"] = "fd00::7";
  EXPECT_EQ(chooseRendezvous(v6, RendezvousSettings{}).root, "[fd00::7]:29501");
}

TEST(Rendezvous, TorchrunErrorsNameTheVariable) {
  LauncherEnvironment env = kTorchrun;
  env.erase("MASTER_PORT");
  EXPECT_NE(errorOf(env, {}).find("MASTER_PORT"), std::string::npos);
  env = kTorchrun;
  env.erase("MASTER_ADDR");
  EXPECT_NE(errorOf(env, {}).find("MASTER_ADDR"), std::string::npos);
  env = kTorchrun;
  env["MASTER_PORT"] = "65535";
  EXPECT_NE(errorOf(env, {}).find("MASTER_PORT=65535: expected 1..65534"), std::string::npos);
  env = kTorchrun;
  env.erase("WORLD_SIZE");
  EXPECT_NE(errorOf(env, {}).find("RANK is set but WORLD_SIZE is not"), std::string::npos);
  env = kTorchrun;
  env["RANK"] = "three";
  EXPECT_NE(errorOf(env, {}).find("RANK=\"three\": expected an integer"), std::string::npos);
  env = kTorchrun;
  env["RANK"] = "4";
  EXPECT_NE(errorOf(env, {}).find("rank 4 (from torchrun) outside a world of 4"),
            std::string::npos);
}

TEST(Rendezvous, NothingToGoOnNamesEveryWay) {
  std::string e = errorOf({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}, RendezvousSettings{});
  EXPECT_NE(e.find("no rank"), std::string::npos) << e;
  EXPECT_NE(e.find("mpirun"), std::string::npos) << e;
  EXPECT_NE(e.find("torchrun"), std::string::npos) << e;
  EXPECT_NE(e.find("RANKMAP_ROOT"), std::string::npos) << e;
  // Empty values count as unset.
  EXPECT_NE(errorOf({{"OMPI_COMM_WORLD_RANK", ""}}, {}).find("no rank"), std::string::npos);
}

TEST(Rendezvous, DescribeNamesSourceAndRoot) {
  EXPECT_EQ(chooseRendezvous(kTorchrun, {}).describe(),
            "rank 3 of 4 from torchrun, local rank 1, root 10.0.0.7:29501 "
            "(MASTER_ADDR:MASTER_PORT+1)");
  Rendezvous m = chooseRendezvous(kOpenMpi, {});
  m.root = "10.0.0.2:4000";
  EXPECT_EQ(m.describe(),
            "rank 2 of 8 from Open MPI's library libmpi.so.40, local rank 0, root 10.0.0.2:4000 "
            "(MPI_Bcast)");
}

}  // namespace
}  // namespace rankmap::coll
