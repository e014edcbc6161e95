// Measurement schedules: which host pairs are measured together.
//
// Round-robin tournament (circle method): with N hosts, all N(N-1)/2 pairs are measured in N-1
// rounds (N even) or N rounds (N odd, one host sits out each round), and no host is in two pairs
// of a round, so the measurements of a round do not share a host link. Pure functions.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace rankmap::probe {

// (a, b) host indices; for directed uses, a sends to b.
using HostPair = std::pair<int, int>;
using Round = std::vector<HostPair>;

// All pairs of 0..n-1 in rounds; every pair exactly once with a < b, no host twice in a round.
std::vector<Round> roundRobin(int n);

// Packs directed flows (src, dst) into slots such that within a slot no host appears twice and
// no uplink is used twice in the same direction: with `groupOf` (host -> group, same size as the
// host count; empty = every host its own group), a flow between different groups uses the
// source group's outbound uplink and the destination group's inbound uplink. At most
// `maxPerSlot` flows per slot (0 = no limit). Up to kPackLoadFirstMaxFlows flows, each slot is
// filled with the flows on the most loaded resources first (ties in the given order), which
// comes close to the lower bound (the most flows any one resource carries); beyond that, first
// fit in the given order. Deterministic.
inline constexpr size_t kPackLoadFirstMaxFlows = 4096;
std::vector<Round> packFlows(const std::vector<HostPair>& flows, const std::vector<int>& groupOf,
                             size_t maxPerSlot);

// Shift permutations for the contention probe: trial s has every host i send to (i + s) mod n,
// so every host sends and receives one flow at once. Returns min(n - 1, maxTrials) trials with
// shifts spread over 1..n-1 (all of them when maxTrials >= n - 1).
std::vector<Round> shiftTrials(int n, int maxTrials);

// The contention probe's trials: the shift permutations first, then seeded random
// derangements (every host sends to a random other host, each host receives once) up to
// `count` trials. More trials make it likelier that most hosts behind one uplink send across
// it at once, which is what reveals an uplink that a single flow cannot fill.
std::vector<Round> contentionTrials(int n, int count, unsigned seed);

}  // namespace rankmap::probe
