// Contention inference: which hosts sit behind a shared uplink, from sets of simultaneous flows.
//
// Model. Hosts are partitioned into groups; each group has one outbound and one inbound uplink.
// A flow from host s to host d uses s's outbound host link and d's inbound host link, and, when
// s and d are in different groups, the outbound uplink of s's group and the inbound uplink of
// d's group; every flow also uses one shared "total" link (the fabric's aggregate capacity, or
// the CPUs of an emulated cloud), unlimited unless the trials show such a limit. Concurrent TCP
// flows share every link max-min fairly (progressive filling).
//
// Evidence. Trials: sets of flows that ran at the same time, each with the rate its receiver
// measured (the round-robin rounds of a full probe, the shift trials of the contention probe,
// re-measurements). A single pair measured alone cannot reveal a shared uplink when every
// single flow gets the same rate (host 250 Mbit/s, uplink 500 Mbit/s); several flows leaving
// one group at once can.
//
// Fit. Host capacities are the best rate each host reached; for a candidate partition, each
// uplink's capacity is the largest aggregate observed through it. The partition's error is the
// sum over all observed flows of ((predicted - observed) / observed)^2. Candidate partitions
// (every host alone; components of "full-rate" pairs; clusters of hosts whose flows slowed
// down together at equal rates) are improved by local search (move one host, merge two
// groups) while the error drops by more than the noise allowance, and the best one wins.
// Cost: O(trials x links^2) per evaluation; the search is bounded by kMaxSearchHosts and a time
// budget, beyond which the best candidate is returned without local search.
#pragma once

#include <chrono>
#include <limits>
#include <vector>

#include "common/maxmin.h"
#include "common/topology.h"
#include "probe/schedule.h"

namespace rankmap::probe {

struct ObservedFlow {
  int src = 0;
  int dst = 0;
  double mbps = 0;
};
using ObservedTrial = std::vector<ObservedFlow>;

inline constexpr double kUnlimited = kUnlimitedRate;

struct LinkModel {
  std::vector<int> groupOf;             // host -> group (0..groups-1)
  std::vector<double> hostOut, hostIn;  // per host
  std::vector<double> upOut, upIn;      // per group; kUnlimited when unknown
  // What all flows together can get (a fabric's bisection, or the CPUs of an emulated cloud);
  // kUnlimited unless the trials show such a limit.
  double total = kUnlimited;
};

// Max-min fair rates of `flows` running together under `m` (common/maxmin.h).
std::vector<double> maxMinRates(const LinkModel& m, const std::vector<HostPair>& flows);

struct InferOptions {
  // A flow is "slowed" below this fraction of its host capacities (similarity seeding).
  double slowFraction = 0.85;
  // Minimum error drop, per observed flow, for the search to accept a move: measurements
  // within ~10% of each other are not worth a different partition.
  double minGainPerFlow = 0.004;
  std::chrono::milliseconds timeBudget{3000};
};

inline constexpr int kMaxSearchHosts = 96;

struct Inference {
  LinkModel model;           // groups numbered in order of their first host
  double error = 0;          // of the chosen partition
  double baselineError = 0;  // with every host alone (no shared uplinks)
  size_t flows = 0;          // observed flows used
  // Groups of >= 2 hosts whose uplink cannot carry all of them at their host rate
  // (oversubscribed): the shared links the contention probe reports.
  std::vector<std::vector<int>> sharedGroups() const;
  // min(upOut, upIn) of a group (finite part), 0 when unknown.
  double uplinkCapacity(int group) const;
  // 0..1: how much of the unexplained slow-down the partition explains.
  double confidence() const;
  int groupCount() const;
};

// Infers the partition from trials over `n` hosts. Flows naming hosts outside 0..n-1 are a bug
// (InternalError). Deterministic for the same input.
Inference inferGroups(int n, const std::vector<ObservedTrial>& trials,
                      const InferOptions& opts = {});

// The fit's error for a given partition (host -> group); for tests and diagnostics.
double partitionError(int n, const std::vector<ObservedTrial>& trials,
                      const std::vector<int>& groupOf);

// Host capacities used by the fit: the best rate each host sent and received at.
void hostCapacities(int n, const std::vector<ObservedTrial>& trials, std::vector<double>& out,
                    std::vector<double>& in);

}  // namespace rankmap::probe
