// RankTable: how one communicator's ranks map between the application's view and NCCL's, and
// the block copies that restore the application's block order around a real NCCL call.
//
// The application keeps its ranks (the "app" rank, what it passed to ncclCommInitRank); NCCL
// sees the plan's new rank (the "real" rank): real = permutation[app]. Everything the shim
// returns or fills is in app ranks and app block order, so the application cannot tell.
//
// Pure functions of the table and a block size: they are tested exhaustively without NCCL.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rankmap::shim_nccl {

class RankTable {
 public:
  // The identity of `size` ranks.
  static RankTable identity(int size);
  // From old (app) rank -> new (real) rank, e.g. Plan::permutation. Throws InvalidInput unless
  // it is a permutation of 0..size-1.
  static RankTable fromPermutation(std::vector<int> appToReal);

  int size() const { return static_cast<int>(toReal_.size()); }
  bool isIdentity() const { return identity_; }
  // Ranks outside [0, size) are returned unchanged, so that NCCL reports the bad argument itself.
  int toReal(int appRank) const;
  int toApp(int realRank) const;
  const std::vector<int>& appToReal() const { return toReal_; }

 private:
  std::vector<int> toReal_;
  std::vector<int> toApp_;
  bool identity_ = true;
};

// One copy of `bytes` from byte offset `src` of one buffer to byte offset `dst` of another.
struct BlockCopy {
  size_t dst = 0;
  size_t src = 0;
  size_t bytes = 0;
  bool operator==(const BlockCopy&) const = default;
};

// Restores app order after NCCL wrote blocks in real order (AllGather, Gather, AlltoAll's
// receive side): app block a <- real block toReal(a), for blocks of `blockBytes`.
// Adjacent blocks that stay adjacent are merged into one copy (a plan keeps a host's ranks
// contiguous, so there is one copy per host rather than per rank). Empty when blockBytes is 0.
std::vector<BlockCopy> realOrderToAppOrder(const RankTable& table, size_t blockBytes);

// Puts app-ordered blocks into real order before NCCL reads them (ReduceScatter, Scatter,
// AlltoAll's send side): real block toReal(a) <- app block a, merged the same way.
std::vector<BlockCopy> appOrderToRealOrder(const RankTable& table, size_t blockBytes);

}  // namespace rankmap::shim_nccl
