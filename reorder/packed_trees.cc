#include "reorder/packed_trees.h"

#include <algorithm>
#include <map>

namespace rankmap::reorder {

std::vector<PackedTree> packTrees(const NetworkModel& net, const std::vector<int>& order) {
  size_t n = net.n;
  std::vector<PackedTree> out;
  if (n < 2 || n > kMaxTreeHosts) return out;
  std::vector<int> posOf(n);
  for (size_t p = 0; p < n; ++p) posOf[order[p]] = static_cast<int>(p);

  const auto tree = net.switchTree();

  std::vector<double> load(n, 0);  // pieces carried so far, per host link
  std::map<std::vector<int>, double> trees;
  for (size_t t = 0; t < kTrees; ++t) {
    std::vector<int> parent(n, -1);
    std::vector<int> degree(n, 0);
    // Picks the centre among `cands` that would carry `extra` more edges at the least
    // load-to-rate ratio; ties to the lowest host index.
    auto pick = [&](const std::vector<int>& cands, int extra) {
      int best = cands.front();
      double bestScore = 0;
      for (size_t i = 0; i < cands.size(); ++i) {
        int c = cands[i];
        double score = (load[c] + degree[c] + extra) / net.hostMbps[c];
        if (i == 0 || score < bestScore) {
          best = c;
          bestScore = score;
        }
      }
      return best;
    };
    auto attach = [&](const std::vector<int>& members, int centre) {
      for (int m : members)
        if (m != centre) {
          parent[m] = centre;
          ++degree[m];
          ++degree[centre];
        }
    };
    // Centre of each switch, bottom up.
    std::vector<int> centre(net.switches(), -1);
    for (size_t l = 0; l < net.levels; ++l)
      for (size_t s = 0; s < net.switches(); ++s) {
        if (net.switchLevel[s] != static_cast<int>(l)) continue;
        std::vector<int> cands;
        if (l == 0)
          cands = tree.hostsOf[s];
        else
          for (int c : tree.children[s]) cands.push_back(centre[c]);
        centre[s] = pick(cands, static_cast<int>(cands.size()) - 1 + 1);
        attach(cands, centre[s]);
      }
    std::vector<int> top;
    if (net.levels == 0) {
      for (size_t h = 0; h < n; ++h) top.push_back(h);
    } else {
      for (int s : tree.tops) top.push_back(centre[s]);
    }
    int root = pick(top, static_cast<int>(top.size()) - 1);
    attach(top, root);
    for (size_t h = 0; h < n; ++h) load[h] += degree[h];
    std::vector<int> byPos(n, -1);
    for (size_t h = 0; h < n; ++h) byPos[posOf[h]] = parent[h] < 0 ? -1 : posOf[parent[h]];
    trees[byPos] += 1.0 / kTrees;
  }
  for (auto& [parent, weight] : trees) out.push_back({weight, parent});
  // Heaviest first; the map order (by parent array) breaks ties deterministically.
  std::stable_sort(out.begin(), out.end(),
                   [](const PackedTree& a, const PackedTree& b) { return a.weight > b.weight; });
  return out;
}

}  // namespace rankmap::reorder
