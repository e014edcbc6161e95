// A job's profile: the communication groups one run of a job formed and the traffic each group
// moved, recorded by the MPI shim (RANKMAP_PROFILE_OUT; `rankmap run --record-profile`) and read by
// `rankmap run --profile`, which plans the next run of the same job for those groups
// (reorder/mesh.h meshFromProfile). docs/formats.md, "profile.json", is the format's reference.
//
// Ranks are the job's: MPI_COMM_WORLD as the program saw it (reordered by a plan or not). A set
// is the groups that one communicator-creating call made across the job: the `call`-th such call
// of every rank (MPI_Comm_split, MPI_Comm_create); groups are disjoint, each ascending, in
// ascending order of their first rank. Ranks that got no communicator are in no group. Traffic
// is per group, averaged over the set's groups: for a collective, the calls each member made and
// the sum of their buffers (count x type size, as a member passed it); for "sendrecv", the
// point-to-point messages the members sent each other and their bytes, summed over the members.
// The set "MPI_COMM_WORLD" (call 0, one group of every rank) is the world's own traffic.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rankmap {

struct ProfileTraffic {
  std::string collective;  // kMeshCollectives (common/plan.h)
  uint64_t calls = 0;      // collectives: calls per member; sendrecv: messages in the group
  uint64_t bytes = 0;
  bool operator==(const ProfileTraffic&) const = default;
};

struct ProfileSet {
  std::string madeBy;  // "MPI_Comm_split", "MPI_Comm_create", "MPI_COMM_WORLD"
  int call = 0;        // 1 = each rank's first communicator-creating call; 0 = the world
  std::vector<std::vector<int>> groups;
  std::vector<ProfileTraffic> traffic;  // at most one entry per collective
  bool operator==(const ProfileSet&) const = default;
};

struct JobProfile {
  static constexpr int kVersion = 1;
  std::string program;  // the executable's file name (no folder): which job this is
  int worldSize = 0;
  std::string recorded;          // UTC time of recording, ISO 8601
  std::vector<ProfileSet> sets;  // in call order
  bool operator==(const JobProfile&) const = default;

  std::string dump() const;
  // Throws InvalidInput naming `source` and the field: wrong schema or version, ranks outside
  // the world, a rank in two groups of a set, a group not ascending, an unknown collective, a
  // collective twice in a set.
  static JobProfile parse(std::string_view text, std::string_view source);
  static JobProfile load(const std::string& path);
};

}  // namespace rankmap
