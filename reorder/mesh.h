// Placing a job's communication groups: a device mesh (data, pipeline, tensor, expert parallel)
// instead of the world ring alone.
//
// The job's ranks form a mesh (PyTorch's init_device_mesh: outermost dimension first, the last
// varies fastest); rank r runs on host position r / ranksPerHost of the order. A group of
// dimension d is the ranks that differ only in their coordinate d, in ascending rank (the
// group's own rank order, which the job's library runs its ring in). So the mesh fixes which
// positions talk to which; the plan chooses which host takes each position.
//
// Step model (MeshModel): a step runs the dimensions one after the other, outermost first, as a
// program that calls one group's collective after the other does; within a dimension every group
// runs at once and the flows share the links max-min fairly (network_model.h completionUs,
// common/maxmin.h). Per group:
//   allreduce      a ring in group order: each member sends 2(k-1)/k of the buffer to the next
//   allgather, reducescatter   the same ring, (k-1)/k each
//   broadcast      a pipelined chain in group order: the buffer over each of the k-1 hops
//   sendrecv       pipeline stages: forward, the buffer from each member to the next (no wrap),
//                  then backward, the buffer back: two phases
//   alltoall       every member sends 1/k of the buffer to every other
// Traffic between ranks of one host moves at the intra-host rate. A phase takes the slower of its
// network flows and its busiest host's intra-host bytes, plus its steps times its slowest hop;
// the step is the sum of the phases. (A job that overlaps its dimensions' traffic runs faster
// than this; the placement that minimises the sum also keeps each dimension's own traffic low.)
//
// Placement (placeMesh): candidate orders are the input order, the world ring's plan and, for
// each ranking of the dimensions by locality, the mesh's host positions sorted so that the
// dimensions to keep local vary fastest, laid onto the world ring's walk (rack by rack, racks of
// a pod together) so that their groups fill racks first, and onto the same walk with each pod's
// racks largest first and smallest first (unequal racks holding whole groups). Also layouts that
// split the fastest dimension by a divisor, its low part fastest and its high part outside one
// or more slower dimensions (a rack holds a block of each group of the first dimension and
// whole groups of the second, where neither fits whole), the kMeshSplitLayouts lowest by the
// link-load bound. Each candidate is
// improved by swapping
// hosts between positions while the busiest link's load falls (the link-load bound, updated per
// swap from the flows of the two positions). Up to kMeshPolishMaxHosts hosts, the candidates,
// their swapped versions and kMeshPolishStarts random orders are polished by the step model
// itself, and the best is kicked (a few random swaps, polished again) kMeshKicks times. The
// fastest by the step model wins; the input order stays unless the winner is faster by the
// plan's minimum gain. exactMeshOrder() searches every arrangement of hosts the model cannot
// tell apart, for small jobs and for tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_profile.h"
#include "common/plan.h"
#include "reorder/network_model.h"
#include "reorder/ring.h"

namespace rankmap::reorder {

// Up to this many hosts, placeMesh() also polishes each candidate by the step model.
inline constexpr size_t kMeshPolishMaxHosts = 16;
// ... from this many random starts besides the layouts.
inline constexpr size_t kMeshPolishStarts = 32;
// ... for at most this many passes over every pair of positions.
inline constexpr int kMeshPolishPasses = 10;
// ... and then kicked this many times from the best (three random swaps, polished again).
inline constexpr size_t kMeshKicks = 64;
// Layouts that split the fastest dimension in two (its low part fastest, its high part further
// out): this many of them, the lowest by the link-load bound, join the candidates.
inline constexpr size_t kMeshSplitLayouts = 3;
// MeshModel::switchBoundUs: at most this many columns (a set of them is a bit mask), this many
// phases inside the rows (4^phases weightings) and this many sets of columns tried per switch.
inline constexpr size_t kMeshBoundMaxColumns = 64;
inline constexpr size_t kMeshBoundMaxRowPhases = 5;
inline constexpr size_t kMeshBoundMaxSets = 100000;

// "pp=2,dp=4,tp=8": dimensions outermost first. Traffic is left empty (meshTraffic fills it).
// Throws InvalidInput naming `source` and the item: not NAME=SIZE, a size below 1, a name twice.
std::vector<MeshDim> parseMesh(std::string_view text, std::string_view source);

// Sets each dimension's collective and bytes: from `traffic` ("dp=allreduce:256MiB,
// pp=sendrecv:8MiB"; may be empty) where it names the dimension, else the default of its role
// (meshDefaultTraffic). Throws InvalidInput naming `source`: a dimension the mesh lacks, a
// dimension given twice, an unknown collective, a bad size, a dimension with neither.
void meshTraffic(std::vector<MeshDim>& dims, std::string_view traffic, std::string_view source);

// The traffic of a dimension by its conventional name, or nullopt: dp/ddp/data allreduce 256 MiB
// (gradients), fsdp/shard allgather 256 MiB, tp/tensor allreduce 32 MiB, pp/pipe/pipeline
// sendrecv 8 MiB (activations), ep/expert alltoall 32 MiB, cp/sp/context allgather 32 MiB.
std::optional<std::pair<std::string, uint64_t>> meshDefaultTraffic(std::string_view name);

// The mesh a job's recorded profile describes (common/job_profile.h), with its traffic per step:
// each set of groups that partitions the job's ranks into equal groups of evenly spaced ranks is
// a dimension (named after its call: split2, create3, group1 for new_group, p2p3 for
// point-to-point), outermost = widest spacing; a set that does not (a group of some ranks only,
// unequal groups) is left out and said in `notes`, as is the world's own traffic, which no mesh
// placement changes; spacings no set has become dimensions without traffic (rest1, ...). Traffic: a
// set's largest collective, with the bytes of its others added; per step = the run's bytes over the
// run's steps, a step being one call of the dimension called least (for sendrecv: one message
// forward and one back per stage pair). Throws InvalidInput naming `source`: sets that together are
// no mesh in PyTorch's order (what was expected), no set at all, no bytes moved.
struct ProfileMesh {
  std::vector<MeshDim> dims;
  std::vector<std::string> notes;
};
ProfileMesh meshFromProfile(const JobProfile& profile, std::string_view source);

// Throws InvalidInput naming `source` unless the sizes multiply to `world`.
void checkMeshWorld(const std::vector<MeshDim>& dims, size_t world, std::string_view source);

// "pp=2,dp=4,tp=8" back from the dimensions, and their traffic as meshTraffic() reads it
// ("pp=sendrecv:8388608,dp=allreduce:268435456": what a client sends the agent).
std::string meshText(const std::vector<MeshDim>& dims);
std::string meshTrafficText(const std::vector<MeshDim>& dims);

// The ranks of every group of dimension `d`, each in group rank order (ascending).
std::vector<std::vector<int>> meshGroups(const std::vector<MeshDim>& dims, size_t d);

// What one group of `dim` sends in a step, rank to rank (group members, ascending), as the step
// model prices it (see the file comment): phase 0, and for sendrecv phase 1 (backward).
struct MeshHop {
  int from = 0, to = 0;
  int phase = 0;
  double bytes = 0;
};
std::vector<MeshHop> meshGroupTraffic(const MeshDim& dim, const std::vector<int>& group);

struct MeshTimes {
  double stepUs = 0;          // every dimension at once
  std::vector<double> dimUs;  // each dimension alone
};

// The step model of a mesh on a network (see the file comment). Positions are host positions
// of an order; evaluate() takes the order (host index by position).
class MeshModel {
 public:
  MeshModel(const NetworkModel& net, std::vector<MeshDim> dims, const RingParams& params);

  MeshTimes evaluate(const std::vector<int>& order) const;
  double stepUs(const std::vector<int>& order) const { return evaluate(order).stepUs; }
  // The link-load bound of the step's network traffic, microseconds: per phase, the busiest link
  // direction's bytes over its rate, summed (what the swaps lower); and the sum of every phase's
  // link directions' times squared.
  std::pair<double, double> loadProfile(const std::vector<int>& order) const;
  // Swaps hosts between positions while the link-load bound falls (or stays and the sum of the
  // squared link times falls), at most `passes` passes over
  // the positions; each position tries up to `tries` partners per pass (all of them when the
  // job is small), chosen by a generator seeded with `seed` (deterministic).
  std::vector<int> improve(std::vector<int> order, int passes, size_t tries, uint64_t seed) const;

  // Simulated annealing on the link-load bound (its first part, plus `normWeight` x the 2-norm
  // of the link times): `moves` random swaps, a higher energy taken with probability
  // exp(-increase / T), T falling geometrically from `startFraction` of the start's energy to a
  // millionth of it; the best order seen. A search that assumes nothing about layouts:
  // tests/bench/mesh_bench's baseline.
  std::vector<int> anneal(std::vector<int> order, size_t moves, double startFraction,
                          double normWeight, uint64_t seed) const;

  // A lower bound of stepUs() over every order, microseconds, from counting alone (it assumes
  // nothing about layouts: tests/bench/mesh_bench scores the heuristic against it). Per phase:
  // the latest of (a) its flows on the host links, the heaviest positions on the fastest hosts;
  // (b) per level, each group of positions spans at least as many of the level's groups as the
  // largest of them need to hold it, and the uplink of each one it spans carries at least the
  // minimum cut of its traffic, both ways together; those bytes spread over all the level's
  // uplinks; (c) all its network bytes at the fabric rate; (d) its busiest position's bytes
  // between its own ranks; plus its steps times the cheapest hop it could have. And, where the
  // hosts hold whole innermost dimensions: the phases one after the other on one switch's uplink
  // (switchBoundUs), since the order that serves one phase best may cost another.
  double lowerBoundUs() const;

  // The same by the step model itself (every swap evaluated in full): small jobs only.
  std::vector<int> polish(std::vector<int> order, int passes) const;

  // Per dimension, each group's time alone (its own phases' traffic on the network, nothing
  // else), groups in meshGroups() order: what `rankmap show` states per group.
  std::vector<std::vector<double>> groupUs(const std::vector<int>& order) const;

  const NetworkModel& net() const { return net_; }
  const std::vector<MeshDim>& dims() const { return dims_; }
  int ranksPerHost() const { return std::max(1, params_.ranksPerHost); }
  size_t positions() const { return net_.n; }

 private:
  // Bytes per step from position a to position b (a != b).
  struct Traffic {
    int a = 0, b = 0;
    double bytes = 0;
  };
  // One phase of a step: one dimension's groups all at once (a pipeline has two: forward and
  // backward). Its time: its flows' completion or its busiest position's bytes between its own
  // ranks, whichever is later, plus `steps` times its slowest hop.
  // Each group's part of a phase, for groupUs().
  struct GroupPart {
    std::vector<Traffic> flows;
    std::vector<std::pair<int, double>> intra;  // position, bytes between its own ranks
    std::vector<std::pair<int, int>> hops;
  };
  struct Phase {
    int dim = 0;
    double steps = 0;
    std::vector<Traffic> flows;
    std::vector<double> intra;              // per position
    std::vector<std::pair<int, int>> hops;  // position pairs (a == b: inside a host)
    std::vector<GroupPart> groups;          // meshGroups() order
  };
  class LoadState;  // an order's link loads, updated per swap (improve, anneal)
  double phaseUs(const std::vector<int>& order, const Phase& p) const;
  // A lower bound of the step's phases apart from their latency, from one switch's uplink: the
  // host positions form a grid (the dimensions outside a host); its largest dimension's lines are
  // columns, the rest of a position's coordinates its place in a row. Any switch holds some set
  // of columns in part, each of which its uplink carries that column's minimum cut of (both ways
  // together), and some mix of row subsets, whose bytes into and out of the subset it carries.
  // Per switch size and uplink: the least over every set of columns of the phases' times, each at
  // least its floor (`floors`, per phase, what lowerBoundUs counts for it alone); the row part by
  // Lagrange weights (any mix of floor, bytes out and bytes in bounds the phase), the subsets as
  // a fractional mix (a relaxation: still a bound); sets by size, stopped where the column phases
  // alone reach the least found. The largest over the switches; 0 where the hosts do not hold
  // whole innermost dimensions or the grid has too many columns.
  double switchBoundUs(const std::vector<double>& floors) const;
  // A phase's time on `flows`, the largest of `intraBytes` and the slowest of `hops`.
  double partUs(const std::vector<int>& order, double steps, const std::vector<Traffic>& flows,
                double intraBytes, const std::vector<std::pair<int, int>>& hops) const;

  const NetworkModel& net_;
  std::vector<MeshDim> dims_;
  RingParams params_;
  std::vector<Phase> phases_;  // in dimension order
};

struct MeshPlacement {
  std::vector<int> order;  // host index by position
  MeshTimes times;
  std::string basis;  // which candidate won: "input order", "world ring", "layout tp,dp,pp"
};

// The order for the mesh (see the file comment). `walk` is the world ring's plan order (host
// index by position, groups contiguous); `minGain` as PlanOptions::minGain.
MeshPlacement placeMesh(const MeshModel& model, const std::vector<int>& walk, double minGain);

// The fastest order by the step model over every arrangement of hosts that the model cannot tell
// apart (same innermost group, same host rate, no latency matrix); nullopt when there are more
// than `maxArrangements` arrangements.
std::optional<MeshPlacement> exactMeshOrder(const MeshModel& model, size_t maxArrangements);

}  // namespace rankmap::reorder
