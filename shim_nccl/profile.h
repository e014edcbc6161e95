// CommProfile: the communicators this process's NCCL calls made and what moved on them, for a
// job profile (common/job_profile.h, `rankmap run --record-profile`). On while RANKMAP_PROFILE_OUT
// is set.
//
// NCCL numbers ranks per communicator and never sees the job's world, so this process's part is
// handed, at MPI_Finalize, to the MPI shim in the same process (librankmap_nccl.so exports
// rankmap_nccl_profile_record; shim_mpi/profile.cc), which adds it to its world rank's record.
// JobProfile::merge then makes a group of the world ranks whose entries carry the same key.
//
// Entries, one per communicator in the order this process made them (JSON, as merge() reads it):
//   {"m": "ncclCommInitRank" | "ncclCommSplit" | "ncclCommShrink", "c": this process's count of
//    communicators so far, "k": the communicator's key, "t": {collective: [calls, bytes]}}
// The key is the same on every member of a communicator and differs between communicators:
// from its unique id (ncclCommInitRank, ...Config, ...Scalable: the first id), or for a child
// from the parent's key, the parent's count of splits (shrinks) and the colour. NCCL ranks of
// one communicator in one process (a thread or a group per GPU) are one entry, whose traffic is
// its busiest rank's (its message count and bytes for sendrecv: the ranks' sum). Traffic counts
// successful (or in-progress) calls as the member passed them, as the MPI shim does: allreduce
// and broadcast the buffer, allgather / reducescatter / alltoall the whole n-block buffer,
// sendrecv the messages this member sent. Reduce, gather and scatter are not counted (the
// planner's collectives: kMeshCollectives).
//
// Contract: thread-safe; every method is noexcept and does nothing when off; a communicator
// made before recording or by a call the profile does not follow (ncclCommInitAll: one
// process) is not recorded, nor its children.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shim_nccl/nccl_abi.h"

namespace rankmap::shim_nccl {

class CommProfile {
 public:
  explicit CommProfile(bool on) : on_(on) {}
  bool on() const { return on_; }

  void initialised(abi::Comm comm, const abi::UniqueId& id);
  // Every parent rank calls split (NoColor ones too): `child` is null for those, and the count
  // of splits still advances, so that the children's keys agree on every member.
  void split(abi::Comm parent, int color, abi::Comm child);
  void shrunk(abi::Comm parent, abi::Comm child);
  void destroyed(abi::Comm comm);
  // One call of `collective` (kMeshCollectives) moving `bytes` on `comm`.
  void traffic(abi::Comm comm, std::string_view collective, uint64_t bytes);

  // This process's entries, a JSON array ("[]" when off or when nothing was made).
  std::string record() const;

 private:
  struct Counter {
    uint64_t calls = 0, bytes = 0;
  };
  using Traffic = std::map<std::string, Counter, std::less<>>;
  struct Entry {
    std::string madeBy;
    int call = 0;
    std::string key;
    std::vector<Traffic> byHandle;  // each NCCL rank's own calls, kept after it is destroyed
  };
  // A live communicator handle: one NCCL rank. Calls and children are counted per handle: every
  // NCCL rank of a communicator makes the same calls in the same order, and one process may
  // hold several ranks of it (a thread or a group per GPU), which are still one member.
  struct Handle {
    size_t entry = 0, slot = 0;
    int splits = 0, shrinks = 0;
  };
  // Records `comm` as the communicator with `key` (one entry per key). Caller holds mu_.
  void add(abi::Comm comm, std::string_view madeBy, std::string key);
  // The key of `parent`'s next child of `kind`, or "" when the parent is not followed.
  std::string childKey(abi::Comm parent, std::string_view kind, int color);

  const bool on_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> byKey_;
  std::unordered_map<abi::Comm, Handle> live_;
};

}  // namespace rankmap::shim_nccl
