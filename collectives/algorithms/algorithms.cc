// Dispatch from (collective, algorithm) to a generator, the declines, and the binary trees.
#include "collectives/algorithms/algorithms.h"

#include <cmath>
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

std::vector<Range> uniformBlocks(Range span, uint64_t parts) {
  Partition part{span.len, parts};
  std::vector<Range> out;
  for (uint64_t i = 0; i < parts; ++i) out.push_back(part.block(i, span.begin));
  return out;
}

std::vector<uint64_t> weightUnits(const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += w;
  std::vector<uint64_t> units(weights.size(), 1);
  if (!(total > 0) || !std::isfinite(total)) return units;
  // The largest weight is at least total / n, so some unit count is positive.
  for (size_t i = 0; i < weights.size(); ++i)
    units[i] = static_cast<uint64_t>(std::llround(weights[i] / total * 4294967296.0));
  return units;
}

std::vector<Range> weightedBlocks(Range span, const std::vector<uint64_t>& units) {
  unsigned __int128 total = 0;
  for (uint64_t u : units) total += u;
  std::vector<Range> out;
  out.reserve(units.size());
  if (total == 0) return uniformBlocks(span, units.size());
  unsigned __int128 before = 0;
  uint64_t start = span.begin;
  for (size_t i = 0; i < units.size(); ++i) {
    before += units[i];
    // The last block ends at the span's end exactly (before == total there).
    const auto end = span.begin + static_cast<uint64_t>(span.len * before / total);
    out.push_back(Range{start, end - start});
    start = end;
  }
  return out;
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

// nullopt when parent[] is a tree over all n nodes: one root (-1), every parent in range, and
// every node's chain of parents reaching the root.
std::optional<std::string> spanningTreeError(const std::vector<int>& parent, int n) {
  if (parent.size() != static_cast<size_t>(n))
    return fmt::format("{} parents for {} ranks", parent.size(), n);
  int roots = 0;
  for (int x = 0; x < n; ++x) {
    const int up = parent[static_cast<size_t>(x)];
    if (up == -1)
      ++roots;
    else if (up < 0 || up >= n || up == x)
      return fmt::format("rank {} has parent {}", x, up);
  }
  if (roots != 1) return fmt::format("{} roots", roots);
  // 0 = unvisited, 1 = on the current chain, 2 = reaches the root.
  std::vector<char> state(static_cast<size_t>(n), 0);
  std::vector<int> chain;
  for (int x = 0; x < n; ++x) {
    int y = x;
    while (y >= 0 && state[static_cast<size_t>(y)] == 0) {
      state[static_cast<size_t>(y)] = 1;
      chain.push_back(y);
      y = parent[static_cast<size_t>(y)];
    }
    if (y >= 0 && state[static_cast<size_t>(y)] == 1)
      return fmt::format("rank {}'s chain of parents loops", x);
    for (int c : chain) state[static_cast<size_t>(c)] = 2;
    chain.clear();
  }
  return std::nullopt;
}

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
  auto checkWeights = [&](const std::vector<double>& weights, std::string_view what) {
    if (weights.empty()) return;
    if (weights.size() != static_cast<size_t>(p.worldSize))
      RANKMAP_THROW(InvalidInput, "{} {}s for a world of {}", weights.size(), what, p.worldSize);
    for (size_t r = 0; r < weights.size(); ++r)
      if (!(weights[r] >= 0) || !std::isfinite(weights[r]))
        RANKMAP_THROW(InvalidInput, "{} {} of rank {}: expected a finite number >= 0", what,
                      weights[r], r);
  };
  checkWeights(p.weights, "chunk weight");
  checkWeights(p.ringWeights, "ring weight");
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
      if (p.inPlace) o.alias = {Alias::Kind::kInputInOutput, bytes * static_cast<uint64_t>(p.rank)};
      break;
    case Collective::kReduceScatter:
      o.inputBytes = all;
      o.outputBytes = bytes;
      if (p.inPlace) o.alias = {Alias::Kind::kOutputInInput, bytes * static_cast<uint64_t>(p.rank)};
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
        if (g.empty()) return "hier allreduce groups include an empty one";
        for (int r : g) {
          if (r < 0 || r >= p.worldSize || seen[static_cast<size_t>(r)]++)
            return fmt::format("hier allreduce groups do not partition the {} ranks", p.worldSize);
          ++members;
        }
      }
      if (members != static_cast<size_t>(p.worldSize))
        return fmt::format("hier allreduce groups cover {} of {} ranks", members, p.worldSize);
      return std::nullopt;
    }
    case Algorithm::kTrees: {
      if (coll != Collective::kAllreduce) return name + " is not implemented";
      if (p.trees.empty()) return "trees allreduce needs packed trees (the plan has none)";
      double total = 0;
      for (size_t t = 0; t < p.trees.size(); ++t) {
        const auto& tree = p.trees[t];
        if (!(tree.weight >= 0) || !std::isfinite(tree.weight))
          return fmt::format("packed tree {} has weight {} (expected a finite number >= 0)", t,
                             tree.weight);
        total += tree.weight;
        if (auto why = spanningTreeError(tree.parent, p.worldSize))
          return fmt::format("packed tree {} is not a spanning tree of the {} ranks: {}", t,
                             p.worldSize, *why);
      }
      if (!(total > 0)) return "the packed trees all weigh 0";
      return std::nullopt;
    }
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
        case Algorithm::kRing:
          return ringAllreduce(p);
        case Algorithm::kTree:
          return treeAllreduce(p);
        case Algorithm::kRhd:
          return rhdAllreduce(p);
        case Algorithm::kHier:
          return hierAllreduce(p);
        case Algorithm::kTrees:
          return packedTreesAllreduce(p);
        default:
          break;
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
