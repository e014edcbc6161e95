#include "probe/schedule.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "common/error.h"

namespace rankmap::probe {

std::vector<Round> roundRobin(int n) {
  if (n < 0) RANKMAP_THROW(InvalidInput, "roundRobin: {} hosts", n);
  std::vector<Round> rounds;
  if (n < 2) return rounds;
  // Circle method on an even number of seats; with n odd, seat n is a bye.
  int seats = n % 2 == 0 ? n : n + 1;
  int m = seats - 1;  // seat m stays fixed, seats 0..m-1 rotate
  for (int r = 0; r < m; ++r) {
    Round round;
    auto add = [&](int a, int b) {
      if (a >= n || b >= n) return;  // the bye
      round.emplace_back(std::min(a, b), std::max(a, b));
    };
    add(r, m);
    for (int i = 1; i < seats / 2; ++i) add((r + i) % m, (r - i + m) % m);
    rounds.push_back(std::move(round));
  }
  return rounds;
}

std::vector<Round> shiftTrials(int n, int maxTrials) {
  std::vector<Round> trials;
  if (n < 2 || maxTrials <= 0) return trials;
  int count = std::min(n - 1, maxTrials);
  for (int k = 0; k < count; ++k) {
    // Spread the chosen shifts evenly over 1..n-1.
    int s = 1 + static_cast<int>((static_cast<long>(k) * (n - 1)) / count);
    Round t;
    for (int i = 0; i < n; ++i) t.emplace_back(i, (i + s) % n);
    trials.push_back(std::move(t));
  }
  return trials;
}

std::vector<Round> contentionTrials(int n, int count, unsigned seed) {
  std::vector<Round> trials = shiftTrials(n, count);
  if (n < 2) return trials;
  std::mt19937 rng(seed);
  while (static_cast<int>(trials.size()) < count) {
    std::vector<int> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    // Sattolo's algorithm: a uniformly random single cycle, hence a derangement.
    for (int i = n - 1; i > 0; --i) {
      std::uniform_int_distribution<int> pick(0, i - 1);
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(pick(rng))]);
    }
    Round t;
    for (int i = 0; i < n; ++i) t.emplace_back(i, perm[static_cast<size_t>(i)]);
    trials.push_back(std::move(t));
  }
  return trials;
}

}  // namespace rankmap::probe
