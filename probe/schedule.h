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
