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

  std::vector<double> load(n, 0);                 // pieces carried so far, per host link
  std::vector<double> upLoad(net.switches(), 0);  // ... and per uplink
  std::map<std::vector<int>, double> trees;
  for (size_t t = 0; t < kTrees; ++t) {
    std::vector<int> parent(n, -1);
    std::vector<int> degree(n, 0);
    std::vector<int> cross(net.switches(), 0);  // this tree's edges over each uplink
    // Picks, among `cands` (hosts, each the centre of its switch at level `level` - 1, or hosts
    // of one innermost group for level 0), the centre that the other candidates will attach to:
    // its host link takes `extra` more edges and its uplinks below `level` the other
    // candidates' edges. The one whose most loaded link, relative to its rate, would be least
    // loaded; ties to the first.
    auto pick = [&](const std::vector<int>& cands, int extra, size_t level) {
      const int others = static_cast<int>(cands.size()) - 1;
      int best = cands.front();
      double bestScore = 0;
      for (size_t i = 0; i < cands.size(); ++i) {
        int c = cands[i];
        double score = (load[c] + degree[c] + extra) / net.hostMbps[c];
        for (size_t l = 0; l < level; ++l) {
          const int w = net.switchAt(c, l);
          score = std::max(score, (upLoad[w] + cross[w] + others) / net.uplinkMbps[w]);
        }
        if (i == 0 || score < bestScore) {
          best = c;
          bestScore = score;
        }
      }
      return best;
    };
    auto attach = [&](const std::vector<int>& members, int centre, size_t level) {
      for (int m : members)
        if (m != centre) {
          parent[m] = centre;
          ++degree[m];
          ++degree[centre];
          for (size_t l = 0; l < level; ++l) {
            ++cross[net.switchAt(m, l)];
            ++cross[net.switchAt(centre, l)];
          }
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
        centre[s] = pick(cands, static_cast<int>(cands.size()) - 1 + 1, l);
        attach(cands, centre[s], l);
      }
    std::vector<int> top;
    if (net.levels == 0) {
      for (size_t h = 0; h < n; ++h) top.push_back(h);
    } else {
      for (int s : tree.tops) top.push_back(centre[s]);
    }
    int root = pick(top, static_cast<int>(top.size()) - 1, net.levels);
    attach(top, root, net.levels);
    for (size_t h = 0; h < n; ++h) load[h] += degree[h];
    for (size_t w = 0; w < net.switches(); ++w) upLoad[w] += cross[w];
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
