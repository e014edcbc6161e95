// Plan agreement: before a permuted ncclCommInitRank, every rank of the communicator must hold the
// same plan, or all of them must use identity order. A disagreement found after init would be too
// late: two ranks would already have claimed the same NCCL rank, and NCCL fails or hangs.
//
// How (chosen over "an extra ncclAllGather of the plan hash after init", which detects the
// problem only after the duplicate-rank init it should have prevented): the agreement rides on
// the unique-id exchange the application already does.
// 1. The process that calls ncclGetUniqueId (and has a valid plan) starts a small agreement
//    server on the address NCCL's own bootstrap chose (so it is reachable exactly when NCCL's is)
//    and writes an IdTail (server address, nonce, its timeout) into the id's unused last 64 bytes.
//    NCCL reads only the first 36 bytes (magic + socket address of its bootstrap root) and hashes
//    the whole id into the communicator hash, which stays equal on all ranks. The tail is only
//    written when those 64 bytes are all zero.
// 2. The application hands the id to every rank as usual. Each rank's shim, before calling the
//    real init, sends its PlanVote (common/plan_agreement.h: app rank, nranks, its plan's hash or
//    why it has none) and waits for the verdict.
// 3. The server applies the one agreement rule (checkPlanVote vote by vote, judgePlan at the
//    end): it answers "apply" to all only after every rank 0..nranks-1 voted once, for the
//    creator's plan hash, with a usable plan. Any disagreement is final at once: identity to
//    everyone who voted and to everyone who votes later. At its deadline it answers identity to
//    the voters it has and closes.
// Safety: Permute needs this rank's vote. A rank that could not deliver its vote (server gone,
// unreachable, refused) uses identity, and so does everyone else, since the server cannot have
// answered Permute without it. A rank whose vote was delivered waits for the answer up to the
// server's deadline plus a margin; the server answers every connection it accepted, so only a
// dead server leaves it without one (then identity, the job is failing anyway), and a live but
// silent one past the deadline is an error (ncclSystemError), never a guess.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/plan_agreement.h"
#include "shim_nccl/nccl_abi.h"

namespace rankmap::shim_nccl {

// The agreement server's address and the id's nonce, stored in bytes [64, 128) of the id.
struct IdTail {
  uint64_t nonce = 0;
  uint32_t timeoutMs = 0;  // the server's deadline, measured from when it started
  std::string host;        // numeric IPv4 or IPv6 address
  uint16_t port = 0;
  bool operator==(const IdTail&) const = default;
};

inline constexpr size_t kTailOffset = 64;

// Writes `tail`; returns false (and leaves the id alone) unless bytes [64, 128) are all zero.
bool encodeTail(abi::UniqueId& id, const IdTail& tail);
// The tail, or nullopt when the id carries none (no shim, or no plan, at the creator).
std::optional<IdTail> decodeTail(const abi::UniqueId& id);
// The numeric host of NCCL's bootstrap root in the id (its bytes 8..35 are a sockaddr), or
// nullopt when they do not look like one.
std::optional<std::string> ncclRootHost(const abi::UniqueId& id);

inline constexpr std::chrono::seconds kAnswerMargin{30};

// Starts the agreement server for one unique id on `host` (a numeric address; port chosen by the
// kernel), in a detached thread that ends by `timeout`; returns the tail to write into the id.
// Throws SystemError when it cannot listen, InvalidInput when `host` is not numeric.
IdTail startAgreementServer(const std::string& host, const std::string& creatorHash,
                            std::chrono::milliseconds timeout);

// A rank's side: votes (vote.rank = the application's rank, vote.worldSize = nranks) and returns
// the verdict. Identity when the vote cannot be delivered, the server closes without answering
// or what answers is not the server (another program on a reused port); throws TimeoutError when a
// delivered vote gets no answer by the server's deadline plus a margin (kAnswerMargin), counted
// from this call.
PlanVerdict agree(const IdTail& tail, const PlanVote& vote);

}  // namespace rankmap::shim_nccl
