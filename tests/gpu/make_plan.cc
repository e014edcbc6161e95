// gpu_make_plan: writes a plan.json for the GPU test scripts.
//
//   gpu_make_plan OUT HOSTS RANKS_PER_HOST [identity|reverse]
//
// Hosts are named h0..h{HOSTS-1}; "reverse" orders them backwards (every rank moves when
// RANKS_PER_HOST is 1 and HOSTS > 1), "identity" keeps them.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/plan.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s OUT HOSTS RANKS_PER_HOST identity|reverse\n", argv[0]);
    return 2;
  }
  const int hosts = std::atoi(argv[2]);
  const int rph = std::atoi(argv[3]);
  const std::string mode = argv[4];
  rankmap::Plan p;
  for (int h = 0; h < hosts; ++h) p.hosts.push_back("h" + std::to_string(h));
  p.order = p.hosts;
  if (mode == "reverse") p.order.assign(p.hosts.rbegin(), p.hosts.rend());
  p.ranksPerHost = rph;
  p.derivePermutation();
  p.confidence = mode == "identity" ? 0 : 0.9;
  p.seal();
  p.save(argv[1]);
  return 0;
}
