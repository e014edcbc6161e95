#include "shim_nccl/rank_table.h"

#include "common/error.h"

namespace rankmap::shim_nccl {

RankTable RankTable::identity(int size) {
  RankTable t;
  t.toReal_.resize(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) t.toReal_[static_cast<size_t>(i)] = i;
  t.toApp_ = t.toReal_;
  return t;
}

RankTable RankTable::fromPermutation(std::vector<int> appToReal) {
  RankTable t;
  const int n = static_cast<int>(appToReal.size());
  t.toApp_.assign(appToReal.size(), -1);
  for (int a = 0; a < n; ++a) {
    int r = appToReal[static_cast<size_t>(a)];
    if (r < 0 || r >= n || t.toApp_[static_cast<size_t>(r)] != -1)
      RANKMAP_THROW(InvalidInput, "rank table: entry {} ({}) is not a permutation of 0..{}", a, r,
                    n - 1);
    t.toApp_[static_cast<size_t>(r)] = a;
    if (r != a) t.identity_ = false;
  }
  t.toReal_ = std::move(appToReal);
  return t;
}

int RankTable::toReal(int appRank) const {
  if (appRank < 0 || appRank >= size()) return appRank;
  return toReal_[static_cast<size_t>(appRank)];
}

int RankTable::toApp(int realRank) const {
  if (realRank < 0 || realRank >= size()) return realRank;
  return toApp_[static_cast<size_t>(realRank)];
}

namespace {

// Copies app block a <-> real block toReal(a); `appIsDst` picks the direction. Runs of app ranks
// whose real ranks are consecutive become one copy.
std::vector<BlockCopy> blockCopies(const RankTable& table, size_t blockBytes, bool appIsDst) {
  std::vector<BlockCopy> out;
  if (blockBytes == 0) return out;
  const auto& toReal = table.appToReal();
  size_t a = 0;
  while (a < toReal.size()) {
    size_t run = 1;
    while (a + run < toReal.size() && toReal[a + run] == toReal[a] + static_cast<int>(run)) ++run;
    size_t appOff = a * blockBytes;
    size_t realOff = static_cast<size_t>(toReal[a]) * blockBytes;
    out.push_back(appIsDst ? BlockCopy{appOff, realOff, run * blockBytes}
                           : BlockCopy{realOff, appOff, run * blockBytes});
    a += run;
  }
  return out;
}

}  // namespace

std::vector<BlockCopy> realOrderToAppOrder(const RankTable& table, size_t blockBytes) {
  return blockCopies(table, blockBytes, /*appIsDst=*/true);
}

std::vector<BlockCopy> appOrderToRealOrder(const RankTable& table, size_t blockBytes) {
  return blockCopies(table, blockBytes, /*appIsDst=*/false);
}

}  // namespace rankmap::shim_nccl
