// CommProfile: the communicators a library in this process made (NCCL's through the NCCL shim,
// the engine's through its C API) and what moved on them, for a job profile
// (common/job_profile.h, `rankmap run --record-profile`). On while RANKMAP_PROFILE_OUT is set.
//
// Those libraries number ranks per communicator and never see the job's world, so this
// process's part is handed, at MPI_Finalize, to the MPI shim in the same process (each library
// exports a function that copies record() out: kProfileRecordSymbols; shim_mpi/profile.cc),
// which adds it to its world rank's record. JobProfile::merge then makes a group of the world
// ranks whose entries carry the same key.
//
// Entries, one per communicator in the order this process made them (JSON, as merge() reads it):
//   {"m": the call that made it, "c": this process's count of communicators so far, "k": the
//    communicator's key, "t": {collective: [calls, bytes]}}
// The key is the same on every member of a communicator and differs between communicators: from
// material that all members share (an NCCL unique id; the engine's root address and how many
// communicators this process made there before), or for a child from the parent's key, the
// parent's count of splits (shrinks) and the colour. Handles of one communicator in one process
// (NCCL ranks of a thread or a group per GPU) are one entry, whose traffic is its busiest
// handle's (for sendrecv, messages and bytes: the handles' sum). The caller counts calls as the
// member passed them, as the MPI shim does: allreduce and broadcast the buffer, allgather /
// reducescatter / alltoall the whole n-block buffer, sendrecv the messages this member sent;
// only the planner's collectives (kMeshCollectives).
//
// Contract: thread-safe; every method is noexcept and does nothing when off; a communicator made
// before recording, or whose parent is not followed, is not recorded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rankmap {

// The C functions that copy a library's record out, `size_t f(char* buf, size_t cap)`: at most
// cap - 1 bytes and a NUL into buf (when cap > 0), returning the record's length like snprintf
// ("[]" when nothing was recorded; 0 on any failure). The MPI shim looks each one up with dlsym.
inline constexpr const char* kProfileRecordSymbols[] = {"rankmap_nccl_profile_record",
                                                        "rankmapProfileRecord"};

class CommProfile {
 public:
  using Handle = const void*;
  explicit CommProfile(bool on) : on_(on) {}
  bool on() const { return on_; }

  // `comm` was made by `madeBy`; members share `keyMaterial`.
  void made(Handle comm, std::string_view madeBy, std::string_view keyMaterial);
  // Every parent member calls split (those without a colour too): `child` is null for those, and
  // the parent's count of splits still advances, so that the children's keys agree.
  void split(Handle parent, std::string_view madeBy, int color, Handle child);
  void shrunk(Handle parent, std::string_view madeBy, Handle child);
  void destroyed(Handle comm);
  // One call of `collective` (kMeshCollectives) moving `bytes` on `comm`.
  void traffic(Handle comm, std::string_view collective, uint64_t bytes);

  // This process's entries, a JSON array ("[]" when off or when nothing was made).
  std::string record() const;
  // record() copied out as kProfileRecordSymbols' functions do.
  size_t copyRecord(char* buf, size_t cap) const noexcept;

 private:
  struct Counter {
    uint64_t calls = 0, bytes = 0;
  };
  using Traffic = std::map<std::string, Counter, std::less<>>;
  struct Entry {
    std::string madeBy;
    int call = 0;
    std::string key;
    std::vector<Traffic> byHandle;  // each handle's own calls, kept after it is destroyed
  };
  // A live handle. Calls and children are counted per handle: every member of a communicator
  // makes the same calls in the same order, and one process may hold several handles of it.
  struct Live {
    size_t entry = 0, slot = 0;
    int splits = 0, shrinks = 0;
  };
  // Records `comm` as the communicator with `key` (one entry per key). Caller holds mu_.
  void add(Handle comm, std::string_view madeBy, std::string key);
  // The key of `parent`'s next child of `kind`, or "" when the parent is not followed.
  std::string childKey(Handle parent, std::string_view kind, int color);

  const bool on_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> byKey_;
  std::unordered_map<Handle, Live> live_;
};

}  // namespace rankmap
