// Hierarchy inference: which hosts share a rack, which racks share a pod, from what the probes
// measured. See docs/planner.md for the method and its reasons.
//
// Signals ("features"), each turned into a per-pair dissimilarity:
//   bandwidth  -log(bw(i,j) / min(rate_i, rate_j)): the single-flow rate relative to what the two
//              hosts' own links allow, so a slow NIC does not look like a remote rack;
//   latency    log(min latency);
//   shared     the number of shared links (from the contention probe) that contain exactly one of
//              the two hosts: the count of oversubscribed links a flow between them crosses.
// Each measured feature is first clustered on its own (on a deterministic sample of at most
// kAnalysisHosts hosts) to see whether it shows any level at all and how noisy it is within the
// finest groups it finds (sigma). Informative features are combined in units of their own noise
// (x / sigma), shared links count kSharedLinkSigmas per link, and the combination is clustered
// with average linkage. Levels are where the merge heights jump (linkage.h). A level's
// confidence is the balanced accuracy of "same group <=> dissimilarity below the cut", scaled by
// the margin of the jump and by the measured coverage.
//
// A level above the innermost is kept only when some signal shows a switch there, not a rate
// class: racks behind uplinks of 500, 125 and 250 Mbit/s measure 250 between the first and the
// third and 125 to the second, which clusters as two "pods", yet every one of those rates is
// the narrower of the two racks' own uplinks, and nothing the racks share shows. So, with the
// groups of the kept level below: bandwidth shows the level when flows across its groups are
// slower than the two groups' own uplinks explain (each group's uplink deficit is its least
// dissimilarity to any other group, and a flow shows the narrower of the two: the median excess
// over that across the level must reach kSwitchSigmas of the feature's noise); latency shows it
// when pairs across its groups are farther than pairs inside them by as much; a shared link
// (contention probe) shows it when its hosts are one of its groups. A level no signal shows is
// dropped (Hierarchy::rateClasses keeps it for the report) and the levels are renamed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/topology.h"
#include "reorder/measurements.h"

namespace rankmap::reorder {

inline constexpr size_t kAnalysisHosts = 384;
inline constexpr double kMinLogGap = 0.405;       // log(1.5): levels differ by >= 1.5x
inline constexpr double kSpreadFactor = 4.0;      // jump >= 4 sd of the level below it
inline constexpr double kMinSigmaGap = 5.0;       // in the combined, noise-normalised units
inline constexpr double kMinFeatureSigma = 0.02;  // 2%: the resolution we trust in any probe
inline constexpr double kSharedLinkSigmas = 16.0;
inline constexpr double kSwitchSigmas = 2.5;  // what a signal must show of a switch, in noise

struct FeatureReport {
  std::string name;          // "bandwidth", "latency", "shared_links"
  size_t pairs = 0;          // measured unordered pairs
  bool informative = false;  // showed at least one level on its own
  int levels = 0;            // levels it showed on its own
  double sigma = 0;          // within-group noise (log units; 0 for shared links)
  double gap = 0;            // its largest jump between levels (log units / links)
};

struct Hierarchy {
  struct Level {
    std::string name;
    double confidence = 0;
    double gap = 0;            // the jump in merge height at this cut (combined units)
    std::vector<int> groupOf;  // host -> group (0.., ordered by lowest member)
    int groups = 0;
  };
  // A level the clustering found that no signal shows to be a switch (a rate class: groups
  // that differ only in the rates of their own uplinks); reported, not planned.
  struct RateClass {
    int groups = 0;
    std::vector<int> groupOf;   // host -> class (0.., ordered by lowest member)
    std::string below;          // the level it groups ("rack")
    double unexplainedLog = 0;  // bandwidth: the median excess over the uplinks below (log)
    double latencyLog = 0;      // latency: across minus within (log), 0 when not measured
  };
  size_t n = 0;
  std::vector<Level> levels;  // innermost first; each a coarsening of the one before
  std::vector<FeatureReport> features;
  std::vector<RateClass> rateClasses;

  // The innermost level at which a and b share a group; levels.size() when only the root does.
  int lcaLevel(int a, int b) const;
  // Members of each group of level `l`, in increasing host index.
  std::vector<std::vector<int>> members(size_t l) const;
  // The document form, with host names.
  std::vector<HierarchyLevel> toLevels(const std::vector<std::string>& names) const;
};

// Infers the hierarchy. `sharedSets` are the shared links as host index sets.
Hierarchy inferHierarchy(const Measurements& m, const std::vector<std::vector<int>>& sharedSets);

// A hierarchy given by the document (topology.json "groups"); throws InvalidInput naming
// `source` when the levels are not nested (a group of a level split across the next level).
Hierarchy hierarchyFromLevels(const std::vector<HierarchyLevel>& levels,
                              const std::vector<std::string>& names, std::string_view source);

// Adjusted Rand index of two labelings of the same items (1 = identical partitions).
double adjustedRandIndex(const std::vector<int>& a, const std::vector<int>& b);

}  // namespace rankmap::reorder
