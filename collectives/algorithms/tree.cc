// Tree algorithms.
//
// Allreduce: NCCL's double binary tree. Two binary trees over the ring order, the second the
// mirror (or shift) of the first, so a rank that is an interior node of one is (mostly) a leaf
// of the other. Tree t handles half t of the vector: segments flow up (each node receives and
// reduces its children's partial sums, then sends to its parent), the root finalizes, and the
// segments flow back down. Both halves move at once, so each rank's links carry about the
// vector's size in each direction, and latency grows with log2 n instead of n.
//
// Broadcast and reduce: one pipelined binary tree rooted at the root.
//
// Steps are emitted in order of a "time" shared by all ranks (segment s moves up from a node of
// height h at time s + h and down to a node of depth d at time s + H + d), which keeps the
// executor's blocking policy deadlock-free; see collectives/schedule/schedule.h.
#include <algorithm>
#include <functional>

#include "collectives/algorithms/common.h"

namespace rankmap::coll::algo {
namespace {

struct TreeShape {
  std::vector<TreeNode> nodes;  // by position in the tree's numbering
  std::vector<int> height;      // leaves 0
  std::vector<int> depth;       // root 0
  int root = 0;
  int maxDepth = 0;
};

TreeShape shapeOf(int n, const std::function<TreeNode(int)>& nodeAt) {
  TreeShape t;
  for (int x = 0; x < n; ++x) t.nodes.push_back(nodeAt(x));
  t.height.assign(static_cast<size_t>(n), 0);
  t.depth.assign(static_cast<size_t>(n), 0);
  for (int x = 0; x < n; ++x)
    if (t.nodes[static_cast<size_t>(x)].parent < 0) t.root = x;
  // Depth-first from the root: depths on the way down, heights on the way back.
  std::function<void(int, int)> visit = [&](int x, int d) {
    t.depth[static_cast<size_t>(x)] = d;
    t.maxDepth = std::max(t.maxDepth, d);
    int h = 0;
    for (int c : t.nodes[static_cast<size_t>(x)].children) {
      visit(c, d + 1);
      h = std::max(h, t.height[static_cast<size_t>(c)] + 1);
    }
    t.height[static_cast<size_t>(x)] = h;
  };
  visit(t.root, 0);
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

Schedule treeAllreduce(const AlgoParams& p) {
  ScheduleBuilder b(builderOptionsFor(p));
  const Ring ring(p);
  const int n = ring.n, pos = ring.pos;
  const uint64_t se = b.segmentElements();
  if (n == 1) {
    copyAndFinalize(b, p.count);
    return b.finish();
  }
  const uint64_t firstHalf = (p.count + 1) / 2;
  const Range halves[2] = {{0, firstHalf}, {firstHalf, p.count - firstHalf}};
  TreeShape shapes[2] = {shapeOf(n, [&](int x) { return doubleTree(n, x, 0); }),
                         shapeOf(n, [&](int x) { return doubleTree(n, x, 1); })};
  int64_t tmax = 0;
  for (int t = 0; t < 2; ++t)
    tmax = std::max<int64_t>(tmax, static_cast<int64_t>(numSegments(halves[t].len, se)) +
                                       at(shapes[t].height, shapes[t].root) +
                                       shapes[t].maxDepth + 2);
  std::vector<int> kids[2] = {childrenByHeight(shapes[0], pos), childrenByHeight(shapes[1], pos)};
  for (int64_t time = 0; time < tmax; ++time) {
    for (int t = 0; t < 2; ++t) {
      const TreeShape& sh = shapes[t];
      const int64_t nseg = static_cast<int64_t>(numSegments(halves[t].len, se));
      const int parent = sh.nodes[static_cast<size_t>(pos)].parent;
      const int64_t h = at(sh.height, pos), d = at(sh.depth, pos);
      const int64_t rootH = at(sh.height, sh.root);
      auto seg = [&](int64_t s) { return segment(halves[t], static_cast<uint64_t>(s), se); };
      auto inRange = [&](int64_t s) { return s >= 0 && s < nseg; };
      // Up: children's partial sums, then ours to the parent (or the root finalizes).
      for (size_t i = 0; i < kids[t].size(); ++i) {
        int c = kids[t][i];
        int64_t s = time - at(sh.height, c);
        if (!inRange(s)) continue;
        Range g = seg(s);
        b.recvReduce(ring.rankAt(c), b.output(g.begin, g.len),
                     i == 0 ? b.input(g.begin, g.len) : b.output(g.begin, g.len));
      }
      if (int64_t s = time - h; inRange(s)) {
        Range g = seg(s);
        if (parent >= 0)
          b.send(ring.rankAt(parent),
                 kids[t].empty() ? b.input(g.begin, g.len) : b.output(g.begin, g.len));
        else
          b.finalize(b.output(g.begin, g.len));
      }
      // Down: the result from the parent, then on to the children.
      if (int64_t s = time - rootH - d; parent >= 0 && inRange(s)) {
        Range g = seg(s);
        b.recv(ring.rankAt(parent), b.output(g.begin, g.len));
      }
      if (int64_t s = time - rootH - d - 1; inRange(s)) {
        Range g = seg(s);
        for (int c : kids[t]) b.send(ring.rankAt(c), b.output(g.begin, g.len));
      }
    }
  }
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
