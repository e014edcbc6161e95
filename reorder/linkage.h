// Average-linkage (UPGMA) agglomerative clustering over a dissimilarity with missing entries,
// and the cuts of its dendrogram where the merge heights jump (the locality levels).
//
// Algorithm: the nearest-neighbour chain. Start a chain at the first active cluster, repeatedly
// push the nearest neighbour of the chain's top; when two clusters are each other's nearest
// neighbours, merge them and pop both. Average linkage is reducible (a merged cluster is never
// nearer to a third than the nearer of its parts), so the chain finds exactly the merges of
// the greedy algorithm in O(N^2) time and O(N^2) memory. The distance between clusters is the
// mean over their *measured* pairs: we keep the mean and the count per cluster pair, so missing
// pairs simply do not vote. Clusters with no measured pair between them are infinitely far.
//
// Determinism: ties go to the previous chain element (required for termination), then to the
// lowest index; merged clusters live in the lower slot.
#pragma once

#include <cstddef>
#include <vector>

#include "reorder/numeric.h"

namespace rankmap::reorder {

struct Merge {
  int a = 0;  // any leaf of the first cluster
  int b = 0;  // any leaf of the second cluster
  double height = 0;
};

struct Dendrogram {
  size_t n = 0;
  std::vector<Merge> merges;  // n - 1 merges, sorted by height (heights may be +inf)
};

// The working matrix: n x n row-major means of the measured pairs between two clusters, +inf
// where there is none. Leaves hold one measured pair or none, so their counts are implied by the
// value (+inf: 0, else 1) and only merged clusters keep counts (one row each, recycled when a
// cluster is merged away): 4 bytes per pair instead of 8. A measured value must therefore not
// be +inf (the generic overload below takes any values).
using LinkageMatrix = std::vector<float, DefaultInitAllocator<float>>;

// `means` is n x n row-major, symmetric, consumed; +inf = missing; the diagonal is ignored (and
// may be left unset). Callers that build the dissimilarity themselves fill it directly, which
// saves a second n x n matrix.
Dendrogram averageLinkage(LinkageMatrix means, size_t n);
// `d` is n x n row-major, symmetric; NaN = missing; the diagonal is ignored.
Dendrogram averageLinkage(const std::vector<float>& d, size_t n);

// Cluster labels after the first `merges` merges: label = rank of the cluster's lowest member
// (so labels are 0.., ordered by first member).
std::vector<int> cutDendrogram(const Dendrogram& dendrogram, size_t merges);

struct LevelCut {
  size_t merges = 0;  // cut after this many merges
  double below = 0;   // height of the last merge below the cut
  double above = 0;   // height of the first merge above it
  double gap() const { return above - below; }
};

// Scans the finite merge heights bottom up; a cut is made where the next height exceeds the
// current one by at least `minGap` and by at least `spreadFactor` standard deviations of the
// heights merged since the previous cut (a jump, not the tail of a noisy level).
std::vector<LevelCut> findLevelCuts(const Dendrogram& dendrogram, double minGap,
                                    double spreadFactor);

}  // namespace rankmap::reorder
