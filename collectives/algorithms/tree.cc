// Tree algorithms.
//
// Allreduce: NCCL's double binary tree. Two binary trees over the ring order, the second the
// mirror (or shift) of the first, so a rank that is an interior node of one is (mostly) a leaf
// of the other. Tree t handles half t of the vector: segments flow up (each node receives and
// reduces its children's partial sums, then sends to its parent), the root finalizes, and the
// segments flow back down. Both halves move at once, so each rank's links carry about the
// vector's size in each direction, and latency grows with log2 n instead of n.
//
// Packed trees (plan.json `trees`, Blink's idea): any number of spanning trees over the ranks,
// of any shape (the planner's are hierarchies of stars, with fast hosts as centres), each with a
// weight. The vector is cut into one piece per tree in proportion to the weights (element
// boundaries from integer units, as hier's blocks), and each piece is allreduced over its tree
// exactly as a half is over a binary tree above: a host's link carries its tree degree times the
// piece each way, so slow hosts (leaves) carry one piece and fast ones (centres) the fan-in. The
// double binary tree and the packed trees share one pipelined generator.
//
// Broadcast and reduce: one pipelined binary tree rooted at the root.
//
// Steps are emitted in order of a "time" shared by all ranks (segment s moves up from a node of
// height h at time s + h and down to a node of depth d at time s + H + d), which keeps the
// executor's blocking policy deadlock-free; see collectives/schedule/schedule.h.
#include <algorithm>
#include <functional>
#include <numeric>

#include "collectives/algorithms/common.h"

namespace rankmap::coll::algo {
namespace {

// Depths from the root down and heights from the leaves up, without recursion (trees over many
// ranks may be deep chains).
void measure(TreeShape& t) {
  const size_t n = t.nodes.size();
  t.height.assign(n, 0);
  t.depth.assign(n, 0);
  t.maxDepth = 0;
  for (size_t x = 0; x < n; ++x)
    if (t.nodes[x].parent < 0) t.root = static_cast<int>(x);
  std::vector<int> order{t.root};  // breadth first: parents before children
  for (size_t i = 0; i < order.size(); ++i)
    for (int c : t.nodes[static_cast<size_t>(order[i])].children) {
      t.depth[static_cast<size_t>(c)] = t.depth[static_cast<size_t>(order[i])] + 1;
      t.maxDepth = std::max(t.maxDepth, t.depth[static_cast<size_t>(c)]);
      order.push_back(c);
    }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int up = t.nodes[static_cast<size_t>(*it)].parent;
    if (up >= 0)
      t.height[static_cast<size_t>(up)] =
          std::max(t.height[static_cast<size_t>(up)], t.height[static_cast<size_t>(*it)] + 1);
  }
}

TreeShape shapeOf(int n, const std::function<TreeNode(int)>& nodeAt) {
  TreeShape t;
  for (int x = 0; x < n; ++x) t.nodes.push_back(nodeAt(x));
  measure(t);
  return t;
}

// Children of x sorted by height, so the first one to arrive reduces with the input.
std::vector<int> childrenByHeight(const TreeShape& t, int x) {
  auto c = t.nodes[static_cast<size_t>(x)].children;
  std::stable_sort(c.begin(), c.end(), [&](int a, int b) {
    return t.height[static_cast<size_t>(a)] < t.height[static_cast<size_t>(b)];
  });
  return c;
}

int64_t at(const std::vector<int>& v, int x) { return v[static_cast<size_t>(x)]; }

}  // namespace

TreeShape treeFromParents(const std::vector<int>& parent) {
  TreeShape t;
  t.nodes.resize(parent.size());
  for (size_t x = 0; x < parent.size(); ++x) {
    t.nodes[x].parent = parent[x];
    if (parent[x] >= 0)
      t.nodes[static_cast<size_t>(parent[x])].children.push_back(static_cast<int>(x));
  }
  measure(t);
  return t;
}

void pipelinedTreeAllreduce(ScheduleBuilder& b, int me, const std::vector<TreeShape>& trees,
                            const std::vector<Range>& ranges, const std::vector<int>& rankOf) {
  const uint64_t se = b.segmentElements();
  auto rank = [&](int x) { return rankOf[static_cast<size_t>(x)]; };
  int64_t tmax = 0;
  std::vector<std::vector<int>> kids;
  for (size_t t = 0; t < trees.size(); ++t) {
    tmax = std::max<int64_t>(tmax, static_cast<int64_t>(numSegments(ranges[t].len, se)) +
                                       at(trees[t].height, trees[t].root) + trees[t].maxDepth + 2);
    kids.push_back(childrenByHeight(trees[t], me));
  }
  for (int64_t time = 0; time < tmax; ++time) {
    for (size_t t = 0; t < trees.size(); ++t) {
      const TreeShape& sh = trees[t];
      const int64_t nseg = static_cast<int64_t>(numSegments(ranges[t].len, se));
      const int parent = sh.nodes[static_cast<size_t>(me)].parent;
      const int64_t h = at(sh.height, me), d = at(sh.depth, me);
      const int64_t rootH = at(sh.height, sh.root);
      auto seg = [&](int64_t s) { return segment(ranges[t], static_cast<uint64_t>(s), se); };
      auto inRange = [&](int64_t s) { return s >= 0 && s < nseg; };
      // Up: children's partial sums, then ours to the parent (or the root finalizes).
      for (size_t i = 0; i < kids[t].size(); ++i) {
        int c = kids[t][i];
        int64_t s = time - at(sh.height, c);
        if (!inRange(s)) continue;
        Range g = seg(s);
        b.recvReduce(rank(c), b.output(g.begin, g.len),
                     i == 0 ? b.input(g.begin, g.len) : b.output(g.begin, g.len));
      }
      if (int64_t s = time - h; inRange(s)) {
        Range g = seg(s);
        if (parent >= 0)
          b.send(rank(parent),
                 kids[t].empty() ? b.input(g.begin, g.len) : b.output(g.begin, g.len));
        else
          b.finalize(b.output(g.begin, g.len));
      }
      // Down: the result from the parent, then on to the children.
      if (int64_t s = time - rootH - d; parent >= 0 && inRange(s)) {
        Range g = seg(s);
        b.recv(rank(parent), b.output(g.begin, g.len));
      }
      if (int64_t s = time - rootH - d - 1; inRange(s)) {
        Range g = seg(s);
        for (int c : kids[t]) b.send(rank(c), b.output(g.begin, g.len));
      }
    }
  }
}

Schedule treeAllreduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const int n = ring.n;
  if (n == 1) {
    copyAndFinalize(b, p.count);
    return b.finish();
  }
  const uint64_t firstHalf = (p.count + 1) / 2;
  const std::vector<Range> halves = {{0, firstHalf}, {firstHalf, p.count - firstHalf}};
  const std::vector<TreeShape> shapes = {shapeOf(n, [&](int x) { return doubleTree(n, x, 0); }),
                                         shapeOf(n, [&](int x) { return doubleTree(n, x, 1); })};
  pipelinedTreeAllreduce(b, ring.pos, shapes, halves, ring.order);
  return b.finish();
}

Schedule packedTreesAllreduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  if (p.worldSize == 1) {
    copyAndFinalize(b, p.count);
    return b.finish();
  }
  std::vector<double> weights;
  std::vector<TreeShape> shapes;
  for (const auto& t : p.trees) {
    weights.push_back(t.weight);
    shapes.push_back(treeFromParents(t.parent));
  }
  const auto pieces = weightedBlocks(Range{0, p.count}, weightUnits(weights));
  std::vector<int> identity(static_cast<size_t>(p.worldSize));
  std::iota(identity.begin(), identity.end(), 0);
  pipelinedTreeAllreduce(b, p.rank, shapes, pieces, identity);
  return b.finish();
}

namespace {

// A binary tree rooted at `root` over the ring order: tree position x = ring position
// (x + rootPos) mod n.
struct RootedTree {
  TreeShape shape;
  int me = 0;  // this rank's tree position
  std::function<int(int)> rankAt;
};

RootedTree rootedTree(const AlgoParams& p) {
  const Ring ring(p);
  const int n = ring.n;
  const int rootPos = positionOf(ring.order, p.root);
  RootedTree rt;
  rt.shape = shapeOf(n, [&](int x) { return binaryTree(n, x); });
  rt.me = ring.distanceFrom(p.root);
  rt.rankAt = [ring, rootPos](int x) { return ring.rankAt(x + rootPos); };
  return rt;
}

}  // namespace

Schedule treeBroadcast(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const RootedTree rt = rootedTree(p);
  const TreeNode& node = rt.shape.nodes[static_cast<size_t>(rt.me)];
  // Segment s leaves a node of depth d at time s + d: per segment, receive then forward.
  forEachSegment(Range{0, p.count}, b.segmentElements(), [&](Range g) {
    Region src = b.output(g.begin, g.len);
    if (node.parent < 0) {
      src = b.input(g.begin, g.len);
      b.copy(b.output(g.begin, g.len), src);
    } else {
      b.recv(rt.rankAt(node.parent), b.output(g.begin, g.len));
    }
    for (int c : node.children) b.send(rt.rankAt(c), src);
  });
  return b.finish();
}

Schedule treeReduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const RootedTree rt = rootedTree(p);
  const TreeShape& sh = rt.shape;
  const TreeNode& node = sh.nodes[static_cast<size_t>(rt.me)];
  const auto kids = childrenByHeight(sh, rt.me);
  const uint64_t se = b.segmentElements();
  const int64_t nseg = static_cast<int64_t>(numSegments(p.count, se));
  const int64_t h = at(sh.height, rt.me);
  // Partial sums of interior non-root nodes live in an arena (live for up to `h` time units,
  // longer than the slot ring guarantees); the root accumulates in its output.
  Region acc;
  if (node.parent >= 0 && !kids.empty()) acc = b.arena(p.count * p.elementSize);
  auto accAt = [&](Range g) {
    if (node.parent < 0) return b.output(g.begin, g.len);
    return Region{acc.buffer, acc.offset + g.begin * p.elementSize, g.len * p.elementSize};
  };
  for (int64_t time = 0; time < nseg + h + 1; ++time) {
    for (size_t i = 0; i < kids.size(); ++i) {
      int64_t s = time - at(sh.height, kids[i]);
      if (s < 0 || s >= nseg) continue;
      Range g = segment(Range{0, p.count}, static_cast<uint64_t>(s), se);
      b.recvReduce(rt.rankAt(kids[i]), accAt(g), i == 0 ? b.input(g.begin, g.len) : accAt(g));
    }
    if (int64_t s = time - h; s >= 0 && s < nseg) {
      Range g = segment(Range{0, p.count}, static_cast<uint64_t>(s), se);
      if (node.parent >= 0) {
        b.send(rt.rankAt(node.parent), kids.empty() ? b.input(g.begin, g.len) : accAt(g));
      } else {
        if (kids.empty()) b.copy(b.output(g.begin, g.len), b.input(g.begin, g.len));
        b.finalize(b.output(g.begin, g.len));
      }
    }
  }
  return b.finish();
}

}  // namespace rankmap::coll::algo
