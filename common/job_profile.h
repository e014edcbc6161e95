// A job's profile: the communication groups one run of a job formed and the traffic each group
// moved, recorded inside the job (`rankmap run --record-profile`: the MPI shim, shim_mpi/profile.h,
// or for torchrun jobs the Python hook launch/python/sitecustomize.py) and read by `rankmap run
// --profile`, which plans the next run of the same job for those groups (reorder/mesh.h
// meshFromProfile). docs/formats.md, "profile.json", is the format's reference.
//
// Ranks are the job's: MPI_COMM_WORLD as the program saw it (reordered by a plan or not), or
// torch.distributed's global ranks. A set is the groups that one communicator-creating call made
// across the job (the `call`-th such call of every rank: MPI_Comm_split, MPI_Comm_create), or, in
// PyTorch, consecutive new_group calls whose groups are disjoint and equal in size (every rank
// makes every group, so every rank numbers them alike), or the `call`-th NCCL or engine
// communicator of every rank ("ncclCommInitRank", "ncclCommSplit", "ncclCommShrink",
// "rankmapCommInitRoot", "rankmapCommInitFromEnv": common/comm_profile.h, beside the MPI shim,
// numbered apart from the MPI calls); groups are disjoint, each ascending, in
// ascending order of their first rank. Ranks that got no communicator are in no group. Traffic
// is per group, averaged over the set's groups: for a collective, the calls each member made and
// the sum of their buffers (count x type size, as a member passed it); for "sendrecv", the
// point-to-point messages the members sent each other and their bytes, summed over the members.
// The set of call 0 (one group of every rank: "MPI_COMM_WORLD", or "world" in PyTorch) is the
// world's own traffic, but for its point-to-point messages: ranks connected by them (a pipeline
// whose stages send on the world) form the set "point-to-point", whose groups are the connected
// ranks and whose traffic is their messages.
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
  std::string
      madeBy;  // "MPI_Comm_split", "MPI_Comm_create", "MPI_COMM_WORLD", "ncclCommSplit", ...
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

  // The profile from every rank's record (rank r's at [r]), each a JSON array of the sets the
  // rank was in: {"m": made_by, "c": call, "g": [its group's ranks], "t": {collective: [calls,
  // bytes]}, "p": [[peer, messages, bytes], ...]} ("p": point-to-point messages this rank sent on
  // the world, in the set of call 0 only; may be absent). An entry may name its communicator by
  // a key instead of "g" ({"m", "c", "k": key, "t"}: those of NCCL's and the engine's
  // communicators, common/comm_profile.h, which cannot see world ranks): its group is every rank
  // whose entry of that set carries the same key. Throws InvalidInput naming the rank's record and
  // the field when a record is malformed, and what the profile's reader would refuse (ranks that
  // disagree on a set's groups).
  static JobProfile merge(const std::vector<std::string>& records, std::string program,
                          std::string recorded);
  // The records file a torchrun job's rank 0 writes (launch/python/sitecustomize.py), merged:
  // {"schema": "rankmap.profile-records", "version": 1, "program": the script's file name,
  // "records": [rank 0's record text, rank 1's, ...]}. Throws InvalidInput naming `source` and the
  // field, or what merge() refuses.
  static JobProfile fromRecords(std::string_view text, std::string_view source,
                                std::string recorded);
};

// The set that point-to-point messages on the world form (JobProfile::merge).
inline constexpr std::string_view kPointToPointSet = "point-to-point";

}  // namespace rankmap
