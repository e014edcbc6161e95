// Dispatch from (collective, algorithm) to a generator, the declines, and the binary trees.
#include "collectives/algorithms/algorithms.h"

#include <numeric>

#include "collectives/algorithms/common.h"
#include "common/error.h"

namespace rankmap::coll {
namespace algo {

std::vector<int> effectiveOrder(const AlgoParams& p) {
  if (!p.order.empty()) return p.order;
  std::vector<int> id(static_cast<size_t>(p.worldSize));
  std::iota(id.begin(), id.end(), 0);
  return id;
}

int positionOf(const std::vector<int>& order, int rank) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == rank) return static_cast<int>(i);
  RANKMAP_THROW(InternalError, "rank {} missing from the order", rank);
}

void copyInputToOwnBlock(ScheduleBuilder& b, const AlgoParams& p) {
  const uint64_t mine = rankBlock(p.rank, p.count).begin;
  forEachSegment(Range{0, p.count}, b.segmentElements(), [&](Range g) {
    b.copy(b.output(mine + g.begin, g.len), b.input(g.begin, g.len));
  });
}

void copyAndFinalize(ScheduleBuilder& b, uint64_t count) {
  forEachSegment(Range{0, count}, b.segmentElements(), [&](Range g) {
    b.copy(b.output(g.begin, g.len), b.input(g.begin, g.len));
    b.finalize(b.output(g.begin, g.len));
  });
}

}  // namespace algo

namespace {

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

void checkParams(const AlgoParams& p) {
  if (p.worldSize < 1) RANKMAP_THROW(InvalidInput, "world size {} < 1", p.worldSize);
  if (p.rank < 0 || p.rank >= p.worldSize)
    RANKMAP_THROW(InvalidInput, "rank {} outside a world of {}", p.rank, p.worldSize);
  if (p.elementSize == 0) RANKMAP_THROW(InvalidInput, "element size 0");
  if ((p.collective == Collective::kBroadcast || p.collective == Collective::kReduce) &&
      (p.root < 0 || p.root >= p.worldSize))
    RANKMAP_THROW(InvalidInput, "root {} outside a world of {}", p.root, p.worldSize);
  // Bytes of the largest buffer must fit in 64 bits.
  if (p.count > (UINT64_MAX / p.elementSize) / static_cast<uint64_t>(p.worldSize))
    RANKMAP_THROW(InvalidInput, "{} elements of {} bytes overflow", p.count, p.elementSize);
  if (p.numSlots < 2) RANKMAP_THROW(InvalidInput, "{} scratch slots (at least 2)", p.numSlots);
  if (!p.order.empty()) {
    if (p.order.size() != static_cast<size_t>(p.worldSize))
      RANKMAP_THROW(InvalidInput, "order of {} ranks for a world of {}", p.order.size(),
                    p.worldSize);
    std::vector<bool> seen(p.order.size(), false);
    for (int r : p.order) {
      if (r < 0 || r >= p.worldSize || seen[static_cast<size_t>(r)])
        RANKMAP_THROW(InvalidInput, "order is not a permutation of 0..{}", p.worldSize - 1);
      seen[static_cast<size_t>(r)] = true;
    }
  }
}

}  // namespace

BuilderOptions builderOptionsFor(const AlgoParams& p) {
  BuilderOptions o;
  o.rank = p.rank;
  o.worldSize = p.worldSize;
  o.elementSize = p.elementSize;
  o.segmentBytes = p.segmentBytes;
  o.numSlots = p.numSlots;
  const uint64_t bytes = p.count * p.elementSize;
  const uint64_t all = bytes * static_cast<uint64_t>(p.worldSize);
  switch (p.collective) {
    case Collective::kAllreduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
      o.inputBytes = o.outputBytes = bytes;
      if (p.inPlace) o.alias = {Alias::Kind::kInputInOutput, 0};
      break;
    case Collective::kAllgather:
      o.inputBytes = bytes;
      o.outputBytes = all;
      if (p.inPlace)
        o.alias = {Alias::Kind::kInputInOutput, bytes * static_cast<uint64_t>(p.rank)};
      break;
    case Collective::kReduceScatter:
      o.inputBytes = all;
      o.outputBytes = bytes;
      if (p.inPlace)
        o.alias = {Alias::Kind::kOutputInInput, bytes * static_cast<uint64_t>(p.rank)};
      break;
    case Collective::kBarrier:
      break;
  }
  return o;
}

std::optional<std::string> declineReason(Algorithm algo, const AlgoParams& p) {
  const auto coll = p.collective;
  const std::string name =
      std::string(algorithmName(algo)) + " " + std::string(collectiveName(coll));
  if (coll == Collective::kBarrier) {
    if (algo == Algorithm::kDissemination) return std::nullopt;
    return "barrier runs only the dissemination algorithm";
  }
  switch (algo) {
    case Algorithm::kRing:
      return std::nullopt;
    case Algorithm::kTree:
      if (coll == Collective::kAllreduce || coll == Collective::kBroadcast ||
          coll == Collective::kReduce)
        return std::nullopt;
      return name + " is not implemented";
    case Algorithm::kRhd:
      if (coll == Collective::kAllreduce) return std::nullopt;
      if (coll == Collective::kAllgather || coll == Collective::kReduceScatter) {
        if (isPowerOfTwo(p.worldSize)) return std::nullopt;
        return fmt::format("{} needs a power-of-two world size, not {}", name, p.worldSize);
      }
      return name + " is not implemented";
    case Algorithm::kHier: {
      if (coll != Collective::kAllreduce) return name + " is not implemented";
      if (p.groups.empty()) return "hier allreduce needs groups (the plan has none)";
      std::vector<int> seen(static_cast<size_t>(p.worldSize), 0);
      size_t members = 0;
      for (const auto& g : p.groups) {
        if (g.size() != p.groups.front().size())
          return fmt::format("hier allreduce needs equal-sized groups ({} vs {} ranks)",
                             p.groups.front().size(), g.size());
        for (int r : g) {
          if (r < 0 || r >= p.worldSize || seen[static_cast<size_t>(r)]++)
            return fmt::format("hier allreduce groups do not partition the {} ranks",
                               p.worldSize);
          ++members;
        }
      }
      if (members != static_cast<size_t>(p.worldSize))
        return fmt::format("hier allreduce groups cover {} of {} ranks", members, p.worldSize);
      return std::nullopt;
    }
    case Algorithm::kTrees:
      return "packed trees ('trees' in plan.json) are not implemented by the engine";
    case Algorithm::kDissemination:
      return name + " is not implemented";
  }
  return "unknown algorithm";
}

Schedule buildSchedule(Algorithm algo, const AlgoParams& p) {
  checkParams(p);
  if (auto why = declineReason(algo, p)) RANKMAP_THROW(NotSupported, "{}", *why);
  using namespace algo;
  switch (p.collective) {
    case Collective::kAllreduce:
      switch (algo) {
        case Algorithm::kRing: return ringAllreduce(p);
        case Algorithm::kTree: return treeAllreduce(p);
        case Algorithm::kRhd: return rhdAllreduce(p);
        case Algorithm::kHier: return hierAllreduce(p);
        default: break;
      }
      break;
    case Collective::kAllgather:
      return algo == Algorithm::kRhd ? rhdAllgather(p) : ringAllgather(p);
    case Collective::kReduceScatter:
      return algo == Algorithm::kRhd ? rhdReduceScatter(p) : ringReduceScatter(p);
    case Collective::kBroadcast:
      return algo == Algorithm::kTree ? treeBroadcast(p) : ringBroadcast(p);
    case Collective::kReduce:
      return algo == Algorithm::kTree ? treeReduce(p) : ringReduce(p);
    case Collective::kBarrier:
      return disseminationBarrier(p);
  }
  RANKMAP_THROW(InternalError, "no generator for {} {}", algorithmName(algo),
                collectiveName(p.collective));
}

TreeNode binaryTree(int n, int pos) {
  // NCCL's btree: the root (0) has one child, the top of a balanced tree in which position x's
  // level is its lowest set bit. Parent of x with lowest bit b: (x ^ b) | (b << 1), or x ^ b when
  // that is out of range; children: x - b/2 and the largest x + b/2^k in range.
  TreeNode t;
  if (n <= 1) return t;
  int bit = 1;
  while (bit < n && !(bit & pos)) bit <<= 1;
  if (pos == 0) {
    t.children.push_back(bit >> 1);
    return t;
  }
  int up = (pos ^ bit) | (bit << 1);
  if (up >= n) up = pos ^ bit;
  t.parent = up;
  int low = bit >> 1;
  if (low > 0) {
    t.children.push_back(pos - low);
    while (low > 0 && pos + low >= n) low >>= 1;
    if (low > 0) t.children.push_back(pos + low);
  }
  return t;
}

TreeNode doubleTree(int n, int pos, int tree) {
  if (tree == 0 || n <= 1) return binaryTree(n, pos);
  TreeNode t;
  auto map = [&](int x) {
    if (x < 0) return -1;
    return n % 2 == 1 ? (x + 1) % n : n - 1 - x;
  };
  int base = n % 2 == 1 ? (pos - 1 + n) % n : n - 1 - pos;
  TreeNode b = binaryTree(n, base);
  t.parent = map(b.parent);
  for (int c : b.children) t.children.push_back(map(c));
  return t;
}

}  // namespace rankmap::coll
