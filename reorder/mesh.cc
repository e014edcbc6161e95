#include "reorder/mesh.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "common/config.h"
#include "common/error.h"

namespace rankmap::reorder {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls f(item) for each comma-separated item (empty items too: they are errors to the caller).
template <typename F>
void forEachItem(std::string_view text, F&& f) {
  for (size_t pos = 0;;) {
    size_t comma = text.find(',', pos);
    f(trim(text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos)));
    if (comma == std::string_view::npos) return;
    pos = comma + 1;
  }
}

bool validName(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

// Stride of each dimension's coordinate in the rank (the last dimension's is 1).
std::vector<size_t> strides(const std::vector<MeshDim>& dims) {
  std::vector<size_t> s(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * static_cast<size_t>(dims[d].size);
  return s;
}

}  // namespace

std::vector<MeshDim> parseMesh(std::string_view text, std::string_view source) {
  std::vector<MeshDim> dims;
  auto bad = [&](std::string_view item, std::string_view why) {
    return InvalidInput(
        fmt::format("{} '{}': {} ({}); expected NAME=SIZE[,NAME=SIZE...], outermost "
                    "first, e.g. pp=2,dp=4,tp=8",
                    source, text, why, item));
  };
  forEachItem(text, [&](std::string_view item) {
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) throw bad(item, "an item without '='");
    std::string_view name = trim(item.substr(0, eq)), size = trim(item.substr(eq + 1));
    if (!validName(name)) throw bad(item, "a dimension name of letters, digits, '_' or '-'");
    int v = 0;
    auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), v);
    if (ec != std::errc() || end != size.data() + size.size() || v < 1 || v > (1 << 24))
      throw bad(item, "a size that is a whole number from 1");
    for (const auto& d : dims)
      if (d.name == name)
        throw InvalidInput(
            fmt::format("{} '{}': dimension '{}' is named twice", source, text, name));
    MeshDim d;
    d.name = std::string(name);
    d.size = v;
    dims.push_back(std::move(d));
  });
  return dims;
}

std::optional<std::pair<std::string, uint64_t>> meshDefaultTraffic(std::string_view name) {
  struct Role {
    std::string_view names[3];
    std::string_view collective;
    uint64_t bytes;
  };
  static constexpr Role kRoles[] = {
      {{"dp", "ddp", "data"}, "allreduce", 256ull << 20},
      {{"fsdp", "shard", ""}, "allgather", 256ull << 20},
      {{"tp", "tensor", ""}, "allreduce", 32ull << 20},
      {{"pp", "pipe", "pipeline"}, "sendrecv", 8ull << 20},
      {{"ep", "expert", ""}, "alltoall", 32ull << 20},
      {{"cp", "sp", "context"}, "allgather", 32ull << 20},
  };
  for (const auto& r : kRoles)
    for (auto n : r.names)
      if (!n.empty() && n == name) return std::pair{std::string(r.collective), r.bytes};
  return std::nullopt;
}

void meshTraffic(std::vector<MeshDim>& dims, std::string_view traffic, std::string_view source) {
  std::set<std::string, std::less<>> given;
  if (!trim(traffic).empty()) {
    forEachItem(traffic, [&](std::string_view item) {
      auto bad = [&](std::string_view why) {
        return InvalidInput(
            fmt::format("{} '{}': {} ({}); expected DIM=COLLECTIVE:SIZE[,...], e.g. "
                        "dp=allreduce:256MiB,pp=sendrecv:8MiB",
                        source, traffic, why, item));
      };
      size_t eq = item.find('='), colon = item.find(':');
      if (eq == std::string_view::npos || colon == std::string_view::npos || colon < eq)
        throw bad("an item not of the form DIM=COLLECTIVE:SIZE");
      std::string_view name = trim(item.substr(0, eq));
      std::string_view coll = trim(item.substr(eq + 1, colon - eq - 1));
      std::string_view size = trim(item.substr(colon + 1));
      auto dim =
          std::find_if(dims.begin(), dims.end(), [&](const MeshDim& d) { return d.name == name; });
      if (dim == dims.end()) {
        std::string names;
        for (const auto& d : dims) names += (names.empty() ? "" : ", ") + d.name;
        throw bad(fmt::format("'{}' is not a dimension of the mesh ({})", name, names));
      }
      if (!given.insert(std::string(name)).second)
        throw bad(fmt::format("dimension '{}' is given twice", name));
      if (!isMeshCollective(coll))
        throw bad(fmt::format("collective '{}' is not one of {}", coll, kMeshCollectivesText));
      auto bytes = parseSize(size);
      if (!bytes) throw bad(fmt::format("'{}' is not a size such as 8MiB or 256M", size));
      dim->collective = std::string(coll);
      dim->bytes = *bytes;
    });
  }
  for (auto& d : dims) {
    if (given.count(d.name)) continue;
    auto def = meshDefaultTraffic(d.name);
    if (!def)
      throw InvalidInput(fmt::format(
          "{}: dimension '{}' of the mesh has no traffic and no default for its name (dp, fsdp, "
          "tp, pp, ep, cp have one): give it, e.g. --traffic {}=allreduce:64MiB",
          source, d.name, d.name));
    d.collective = def->first;
    d.bytes = def->second;
  }
}

namespace {
// A dimension found in a profile is named after the call that made its set.
std::string_view dimensionPrefix(std::string_view madeBy) {
  if (madeBy == "MPI_Comm_create") return "create";
  if (madeBy == "MPI_Comm_split") return "split";
  if (madeBy == kPointToPointSet) return "p2p";
  if (madeBy == "ncclCommInitRank") return "nccl";
  if (madeBy == "ncclCommSplit") return "ncclsplit";
  if (madeBy == "ncclCommShrink") return "ncclshrink";
  if (madeBy == "rankmapCommInitRoot") return "engine";
  return "group";  // PyTorch's new_group
}
}  // namespace

ProfileMesh meshFromProfile(const JobProfile& profile, std::string_view source) {
  ProfileMesh out;
  const size_t world = static_cast<size_t>(profile.worldSize);
  struct Dim {
    size_t stride = 0, size = 0;
    std::string name;
    const ProfileSet* set = nullptr;
  };
  std::vector<Dim> found;
  double worldBytes = 0, groupBytes = 0;
  for (const auto& s : profile.sets) {
    std::string what = fmt::format("{} call {}", s.madeBy, s.call);
    double bytes = 0;
    for (const auto& t : s.traffic) bytes += static_cast<double>(t.bytes);
    // The world, or a communicator of every rank (an NCCL world, a duplicate of the world): the
    // world's traffic, which no order of groups places.
    if (s.call == 0 || (s.groups.size() == 1 && s.groups.front().size() == world)) {
      worldBytes += bytes;
      continue;
    }
    groupBytes += bytes * static_cast<double>(s.groups.size());
    size_t k = s.groups.front().size(), covered = 0;
    bool even = true;
    for (const auto& g : s.groups) {
      covered += g.size();
      even = even && g.size() == k;
      for (size_t i = 1; even && i < g.size(); ++i)
        even = g[i] - g[i - 1] == s.groups.front()[1] - s.groups.front()[0];
    }
    if (k < 2 && covered == world) continue;  // every rank alone: no traffic between ranks
    if (covered != world || !even || k < 2) {
      out.notes.push_back(fmt::format(
          "{} left out: its groups {} (a mesh dimension's groups hold every rank, equally many, "
          "evenly spaced)",
          what,
          covered != world ? fmt::format("hold {} of the {} ranks", covered, world)
                           : std::string("differ in size or spacing")));
      continue;
    }
    size_t stride = static_cast<size_t>(s.groups.front()[1] - s.groups.front()[0]);
    auto same = std::find_if(found.begin(), found.end(),
                             [&](const Dim& d) { return d.set->groups == s.groups; });
    if (same != found.end()) {
      out.notes.push_back(
          fmt::format("{} forms the groups of {} again: counted with it", what, same->name));
      continue;
    }
    found.push_back({stride, k, fmt::format("{}{}", dimensionPrefix(s.madeBy), s.call), &s});
  }
  // The world's traffic (one group) against all groups' (a set's traffic is per group).
  if (worldBytes > 0.01 * groupBytes)
    out.notes.push_back(fmt::format(
        "the world's own traffic ({:.0f}% of the bytes the job's groups moved) is not placed: "
        "a mesh plan orders the groups",
        100 * worldBytes / std::max(groupBytes, 1.0)));
  if (found.empty())
    RANKMAP_THROW(InvalidInput,
                  "{}: no set of groups that is a mesh dimension (the job formed no communicator "
                  "that splits its {} ranks into equal, evenly spaced groups)",
                  source, world);
  // Outermost first: widest spacing; spacings between dimensions no set has are filler.
  std::sort(found.begin(), found.end(),
            [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  std::vector<Dim> dims;
  size_t inner = 1;  // the spacing the next dimension inwards must have
  int rest = 0;
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    if (it->stride % inner != 0 || it->stride < inner)
      RANKMAP_THROW(InvalidInput,
                    "{}: the groups of {} (ranks {} apart) and those inside them do not form a "
                    "mesh in PyTorch's order (expected spacings that each divide the next)",
                    source, it->name, it->stride);
    if (it->stride > inner)
      dims.push_back({inner, it->stride / inner, fmt::format("rest{}", ++rest), nullptr});
    dims.push_back(*it);
    inner = it->stride * it->size;
  }
  if (world % inner != 0)
    RANKMAP_THROW(InvalidInput, "{}: the groups span {} ranks, which does not divide the job's {}",
                  source, inner, world);
  if (world > inner) dims.push_back({inner, world / inner, fmt::format("rest{}", ++rest), nullptr});
  std::reverse(dims.begin(), dims.end());
  for (const auto& d : dims) {
    MeshDim m;
    m.name = d.name;
    m.size = static_cast<int>(d.size);
    m.collective = "allreduce";
    out.dims.push_back(std::move(m));
  }
  // Each set must be exactly its dimension's groups.
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i].set) continue;
    if (meshGroups(out.dims, i) != dims[i].set->groups)
      RANKMAP_THROW(InvalidInput,
                    "{}: the groups of {} are not the groups of dimension {} of the mesh {} "
                    "(PyTorch's order: the last dimension varies fastest)",
                    source, dims[i].name, i, meshText(out.dims));
  }
  // Traffic: rounds (calls of the collective, or forward-and-back passes of a pipeline) and the
  // bytes of one round summed over the run, per dimension; a step is the fewest rounds.
  std::vector<std::pair<double, double>> runs(dims.size(), {0, 0});
  double steps = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i].set) continue;
    const ProfileTraffic* top = nullptr;
    uint64_t all = 0;
    for (const auto& t : dims[i].set->traffic) {
      all += t.bytes;
      if (t.bytes > 0 && (!top || t.bytes > top->bytes)) top = &t;
    }
    if (!top) continue;
    double perRound =
        top->collective == "sendrecv" ? 2.0 * static_cast<double>(dims[i].size - 1) : 1;
    double rounds = std::max(1.0, static_cast<double>(top->calls) / perRound);
    runs[i] = {rounds, static_cast<double>(all) / perRound};
    out.dims[i].collective = top->collective;
    steps = steps == 0 ? rounds : std::min(steps, rounds);
  }
  if (steps == 0)
    RANKMAP_THROW(InvalidInput, "{}: the job's groups moved no bytes (nothing to place)", source);
  for (size_t i = 0; i < dims.size(); ++i)
    out.dims[i].bytes = static_cast<uint64_t>(std::llround(runs[i].second / steps));
  return out;
}

void checkMeshWorld(const std::vector<MeshDim>& dims, size_t world, std::string_view source) {
  size_t product = 1;
  for (const auto& d : dims) product *= static_cast<size_t>(d.size);
  if (product != world)
    throw InvalidInput(fmt::format(
        "{} '{}': the mesh has {} ranks but the job has {} (hosts x ranks per host); expected "
        "sizes that multiply to {}",
        source, meshText(dims), product, world, world));
}

std::string meshText(const std::vector<MeshDim>& dims) {
  std::string s;
  for (const auto& d : dims) s += fmt::format("{}{}={}", s.empty() ? "" : ",", d.name, d.size);
  return s;
}

std::string meshTrafficText(const std::vector<MeshDim>& dims) {
  std::string s;
  for (const auto& d : dims)
    s += fmt::format("{}{}={}:{}", s.empty() ? "" : ",", d.name, d.collective, d.bytes);
  return s;
}

std::vector<std::vector<int>> meshGroups(const std::vector<MeshDim>& dims, size_t d) {
  std::vector<size_t> st = strides(dims);
  size_t world = st.front() * static_cast<size_t>(dims.front().size);
  size_t k = static_cast<size_t>(dims[d].size);
  std::vector<std::vector<int>> groups;
  for (size_t r = 0; r < world; ++r) {
    if ((r / st[d]) % k != 0) continue;  // not the group's first member
    std::vector<int> g;
    for (size_t i = 0; i < k; ++i) g.push_back(static_cast<int>(r + i * st[d]));
    groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<MeshHop> meshGroupTraffic(const MeshDim& dim, const std::vector<int>& g) {
  std::vector<MeshHop> out;
  size_t m = g.size();
  if (m < 2 || dim.bytes == 0) return out;  // a dimension that moves nothing (meshFromProfile)
  double s = static_cast<double>(dim.bytes);
  double k = static_cast<double>(m);
  const std::string& c = dim.collective;
  if (c == "allreduce" || c == "allgather" || c == "reducescatter") {
    double f = (c == "allreduce" ? 2 : 1) * (k - 1) / k;
    for (size_t i = 0; i < m; ++i) out.push_back({g[i], g[(i + 1) % m], 0, f * s});
  } else if (c == "broadcast") {
    for (size_t i = 0; i + 1 < m; ++i) out.push_back({g[i], g[i + 1], 0, s});
  } else if (c == "sendrecv") {
    for (size_t i = 0; i + 1 < m; ++i) {
      out.push_back({g[i], g[i + 1], 0, s});  // forward: activations
      out.push_back({g[i + 1], g[i], 1, s});  // backward: their gradients
    }
  } else {  // alltoall
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < m; ++j)
        if (i != j) out.push_back({g[i], g[j], 0, s / k});
  }
  return out;
}

namespace {
// Message steps of one group's collective (each with the slowest hop's latency).
double meshSteps(const MeshDim& dim) {
  double k = dim.size;
  if (dim.collective == "allreduce") return 2 * (k - 1);
  if (dim.collective == "allgather" || dim.collective == "reducescatter" ||
      dim.collective == "broadcast")
    return k - 1;
  return 1;  // sendrecv (each direction), alltoall
}
}  // namespace

MeshModel::MeshModel(const NetworkModel& net, std::vector<MeshDim> dims, const RingParams& params)
    : net_(net), dims_(std::move(dims)), params_(params) {
  size_t n = net_.n;
  int rph = std::max(1, params_.ranksPerHost);
  checkMeshWorld(dims_, n * static_cast<size_t>(rph), "mesh");
  for (size_t d = 0; d < dims_.size(); ++d) {
    const MeshDim& dim = dims_[d];
    int phases = dim.collective == "sendrecv" ? 2 : 1;
    // Per phase: bytes per position pair, per position between its own ranks, the pairs used;
    // the same per group.
    std::vector<std::map<std::pair<int, int>, double>> pairs(phases);
    std::vector<std::vector<double>> intra(phases, std::vector<double>(n, 0));
    std::vector<std::set<std::pair<int, int>>> hops(phases);
    std::vector<Phase> out(phases);
    for (const auto& g : meshGroups(dims_, d)) {
      std::vector<std::map<std::pair<int, int>, double>> gPairs(phases);
      std::vector<std::map<int, double>> gIntra(phases);
      std::vector<std::set<std::pair<int, int>>> gHops(phases);
      for (const MeshHop& h : meshGroupTraffic(dim, g)) {
        int a = h.from / rph, b = h.to / rph;
        hops[h.phase].insert({a, b});
        gHops[h.phase].insert({a, b});
        if (a == b) {
          intra[h.phase][a] += h.bytes;
          gIntra[h.phase][a] += h.bytes;
        } else {
          pairs[h.phase][{a, b}] += h.bytes;
          gPairs[h.phase][{a, b}] += h.bytes;
        }
      }
      for (int ph = 0; ph < phases; ++ph) {
        GroupPart part;
        for (const auto& [ab, bytes] : gPairs[ph])
          part.flows.push_back({ab.first, ab.second, bytes});
        part.intra.assign(gIntra[ph].begin(), gIntra[ph].end());
        part.hops.assign(gHops[ph].begin(), gHops[ph].end());
        out[ph].groups.push_back(std::move(part));
      }
    }
    for (int ph = 0; ph < phases; ++ph) {
      Phase& p = out[ph];
      p.dim = static_cast<int>(d);
      p.steps = meshSteps(dim);
      p.hops.assign(hops[ph].begin(), hops[ph].end());
      p.intra = std::move(intra[ph]);
      for (const auto& [ab, bytes] : pairs[ph]) p.flows.push_back({ab.first, ab.second, bytes});
      phases_.push_back(std::move(p));
    }
  }
}

double MeshModel::partUs(const std::vector<int>& order, double steps,
                         const std::vector<Traffic>& traffic, double intraBytes,
                         const std::vector<std::pair<int, int>>& hops) const {
  std::vector<Flow> flows;
  flows.reserve(traffic.size());
  for (const auto& t : traffic) flows.push_back({order[t.a], order[t.b], t.bytes});
  double network = flows.empty() ? 0 : completionUs(net_, flows);
  double intra = intraBytes / bytesPerUs(params_.intraHostMbps);
  double hop = 0;
  for (auto [a, b] : hops)
    hop = std::max(hop, (a == b ? params_.intraHostLatencyUs : net_.latencyUs(order[a], order[b])) +
                            params_.stepOverheadUs);
  return std::max(network, intra) + steps * hop;
}

double MeshModel::phaseUs(const std::vector<int>& order, const Phase& p) const {
  double intra = 0;
  for (double b : p.intra) intra = std::max(intra, b);
  return partUs(order, p.steps, p.flows, intra, p.hops);
}

namespace {
// The weight of a minimum cut of an undirected graph on `v` nodes (Stoer-Wagner), `w` its
// symmetric v x v weights; 0 when it is not connected.
double minCutWeight(size_t v, std::vector<double> w) {
  if (v < 2) return 0;
  std::vector<size_t> alive(v);
  std::iota(alive.begin(), alive.end(), 0);
  std::vector<double> key(v);
  std::vector<char> added(v);
  double best = std::numeric_limits<double>::infinity();
  while (alive.size() > 1) {
    for (size_t a : alive) key[a] = 0, added[a] = 0;
    size_t prev = alive[0], last = alive[0];
    for (size_t i = 0; i < alive.size(); ++i) {  // maximum adjacency order
      size_t sel = v;
      for (size_t a : alive)
        if (!added[a] && (sel == v || key[a] > key[sel])) sel = a;
      added[sel] = 1;
      prev = last;
      last = sel;
      for (size_t a : alive)
        if (!added[a]) key[a] += w[sel * v + a];
    }
    best = std::min(best, key[last]);  // the cut between `last` and the rest
    for (size_t a : alive) {
      w[prev * v + a] += w[last * v + a];
      w[a * v + prev] = w[prev * v + a];
    }
    w[prev * v + prev] = 0;
    alive.erase(std::find(alive.begin(), alive.end(), last));
  }
  return best;
}
}  // namespace

double MeshModel::lowerBoundUs() const {
  size_t n = net_.n;
  std::vector<double> hostRates(net_.hostMbps.begin(), net_.hostMbps.end());
  std::sort(hostRates.rbegin(), hostRates.rend());
  double minLatency = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b)
      minLatency = std::min(minLatency, net_.latencyUs(static_cast<int>(a), static_cast<int>(b)));
  // Per level: its groups' sizes, largest first, and all their uplinks' capacity both ways.
  struct Level {
    std::vector<int> sizes;
    double bytesPerUs = 0;
  };
  std::vector<Level> levels(net_.levels);
  for (size_t s = 0; s < net_.switches(); ++s) {
    Level& l = levels[static_cast<size_t>(net_.switchLevel[s])];
    l.sizes.push_back(net_.switchSize[s]);
    l.bytesPerUs += 2 * bytesPerUs(net_.uplinkMbps[s]);
  }
  for (auto& l : levels) std::sort(l.sizes.rbegin(), l.sizes.rend());
  // Groups of one dimension mostly have the same traffic shape: their cut is computed once.
  std::map<std::vector<double>, std::pair<size_t, double>> cuts;  // shape -> positions, cut
  std::vector<double> floors;  // per phase: its time apart from its steps' latency
  double latencies = 0;
  for (const Phase& p : phases_) {
    std::vector<double> out(n, 0), in(n, 0);
    double bytes = 0;
    for (const Traffic& t : p.flows) {
      out[static_cast<size_t>(t.a)] += t.bytes;
      in[static_cast<size_t>(t.b)] += t.bytes;
      bytes += t.bytes;
    }
    std::sort(out.rbegin(), out.rend());
    std::sort(in.rbegin(), in.rend());
    double network = bytes / bytesPerUs(net_.fabricMbps);
    for (size_t i = 0; i < n; ++i)
      network = std::max(network, std::max(out[i], in[i]) / bytesPerUs(hostRates[i]));
    std::vector<double> crossing(levels.size(), 0);
    for (const GroupPart& g : p.groups) {
      if (g.flows.empty()) continue;
      std::map<int, size_t> node;
      std::vector<double> shape;
      for (const Traffic& t : g.flows)
        for (int pos : {t.a, t.b}) node.emplace(pos, node.size());
      for (const Traffic& t : g.flows)
        shape.insert(shape.end(),
                     {static_cast<double>(node[t.a]), static_cast<double>(node[t.b]), t.bytes});
      auto it = cuts.find(shape);
      if (it == cuts.end()) {
        size_t v = node.size();
        std::vector<double> w(v * v, 0);
        for (const Traffic& t : g.flows) {
          size_t a = node[t.a], b = node[t.b];
          w[a * v + b] += t.bytes;
          w[b * v + a] += t.bytes;
        }
        it = cuts.emplace(shape, std::pair{v, minCutWeight(v, std::move(w))}).first;
      }
      auto [positions, cut] = it->second;
      for (size_t l = 0; l < levels.size(); ++l) {
        size_t spanned = 0, held = 0;
        while (held < positions && spanned < levels[l].sizes.size())
          held += static_cast<size_t>(levels[l].sizes[spanned++]);
        if (spanned >= 2) crossing[l] += static_cast<double>(spanned) * cut;
      }
    }
    for (size_t l = 0; l < levels.size(); ++l)
      if (levels[l].bytesPerUs > 0) network = std::max(network, crossing[l] / levels[l].bytesPerUs);
    double intra = 0;
    for (double b : p.intra) intra = std::max(intra, b);
    double hop = 0;
    for (auto [a, b] : p.hops)
      hop = std::max(hop,
                     (a == b ? params_.intraHostLatencyUs : minLatency) + params_.stepOverheadUs);
    floors.push_back(std::max(network, intra / bytesPerUs(params_.intraHostMbps)));
    latencies += p.steps * hop;
  }
  double separate = latencies;
  for (double f : floors) separate += f;
  return std::max(separate, latencies + switchBoundUs(floors));
}

double MeshModel::switchBoundUs(const std::vector<double>& floors) const {
  size_t n = net_.n;
  // The host positions as a grid: the dimensions outside the ranks a host holds, which must be
  // whole innermost dimensions (else no bound here).
  size_t rem = static_cast<size_t>(ranksPerHost()), outer = dims_.size();
  while (outer > 0 && rem > 1) {
    size_t size = static_cast<size_t>(dims_[outer - 1].size);
    if (rem % size != 0) return 0;
    rem /= size;
    --outer;
  }
  if (rem != 1 || outer == 0) return 0;
  std::vector<size_t> stride(outer);
  size_t line = 0;  // the largest grid dimension: its lines are the columns, the rest a row
  for (size_t d = outer, st = 1; d-- > 0; st *= static_cast<size_t>(dims_[d].size)) {
    stride[d] = st;
    if (dims_[d].size > dims_[line].size) line = d;
  }
  size_t rows = static_cast<size_t>(dims_[line].size), columns = n / rows;
  if (rows < 2 || columns > kMeshBoundMaxColumns) return 0;
  auto rowOf = [&](size_t pos) { return pos / stride[line] % rows; };
  auto columnOf = [&](size_t pos) {
    return pos / (stride[line] * rows) * stride[line] + pos % stride[line];
  };
  // Phases along the columns: the minimum cut of one column's flows, both ways. Phases inside
  // the rows: one row's flows, by column.
  std::vector<double> columnCut(phases_.size(), -1);  // -1: not a phase along the columns
  struct RowFlow {
    uint64_t from = 0, to = 0;  // column bits
    double bytes = 0;
  };
  std::vector<std::pair<size_t, std::vector<RowFlow>>> rowPhases;  // phase, flows
  double rowFloors = 0, others = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (p.flows.empty()) {
      others += floors[i];
    } else if (static_cast<size_t>(p.dim) == line) {
      std::vector<double> w(rows * rows, 0);
      for (const Traffic& t : p.flows) {
        size_t a = static_cast<size_t>(t.a), b = static_cast<size_t>(t.b);
        if (columnOf(a) != 0 || columnOf(b) != 0) continue;
        w[rowOf(a) * rows + rowOf(b)] += t.bytes;
        w[rowOf(b) * rows + rowOf(a)] += t.bytes;
      }
      columnCut[i] = minCutWeight(rows, std::move(w));
    } else {
      std::vector<RowFlow> flows;
      for (const Traffic& t : p.flows) {
        size_t a = static_cast<size_t>(t.a), b = static_cast<size_t>(t.b);
        if (rowOf(a) == 0)
          flows.push_back({uint64_t{1} << columnOf(a), uint64_t{1} << columnOf(b), t.bytes});
      }
      rowPhases.emplace_back(i, std::move(flows));
      rowFloors += floors[i];
    }
  }
  if (rowPhases.size() > kMeshBoundMaxRowPhases) return 0;
  // The weights a row phase's time is bounded by (Lagrange: max(floor, out, in) is at least any
  // mix of the three): the floor, its bytes out, in, or half of both.
  constexpr double kWeights[][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 0.5, 0.5}};
  size_t mixes = 1;
  for (size_t k = 0; k < rowPhases.size(); ++k) mixes *= std::size(kWeights);
  std::vector<std::vector<const double*>> mixWeights(mixes);  // per mix: per row phase
  for (size_t mix = 0; mix < mixes; ++mix)
    for (size_t k = 0, m = mix; k < rowPhases.size(); ++k, m /= std::size(kWeights))
      mixWeights[mix].push_back(kWeights[m % std::size(kWeights)]);
  // Per subset T of a row's columns (bits): per row phase its bytes out of T, then into T; last,
  // T's size. The same for every set of columns and every switch, so computed once.
  std::unordered_map<uint64_t, std::vector<double>> bySubset;
  auto subsetBytes = [&](uint64_t T) -> const std::vector<double>& {
    auto [it, fresh] = bySubset.try_emplace(T);
    if (fresh) {
      for (const auto& [phase, flows] : rowPhases) {
        double out = 0, in = 0;
        for (const RowFlow& f : flows) {
          if ((T & f.from) && !(T & f.to)) out += f.bytes;
          if (!(T & f.from) && (T & f.to)) in += f.bytes;
        }
        it->second.insert(it->second.end(), {out, in});
      }
      it->second.push_back(std::popcount(T));
    }
    return it->second;
  };
  std::map<std::pair<int, double>, double> bySwitch;  // (hosts, uplink rate) -> bound
  double best = 0;
  for (size_t s = 0; s < net_.switches(); ++s) {
    int hosts = net_.switchSize[s];
    double rate = bytesPerUs(net_.uplinkMbps[s]);
    if (hosts < 1 || static_cast<size_t>(hosts) >= n || !(rate > 0) || std::isinf(rate)) continue;
    auto [it, fresh] = bySwitch.emplace(std::pair{hosts, rate}, 0.0);
    if (!fresh) {
      best = std::max(best, it->second);
      continue;
    }
    size_t held = static_cast<size_t>(hosts);
    // The column phases when the switch holds hosts of `m` columns: the columns it does not hold
    // whole each cross its uplink by their cut. It holds at most f whole, f x rows hosts, with a
    // host at least in each of the other m - f.
    auto columnPart = [&](size_t m) {
      size_t whole = std::min({held / rows, m, (held - m) / (rows - 1)});
      double partial = static_cast<double>(m - whole), sum = 0;
      for (size_t i = 0; i < phases_.size(); ++i)
        if (columnCut[i] >= 0) sum += std::max(floors[i], partial * columnCut[i] / (2 * rate));
      return sum;
    };
    // The row phases when the switch's hosts are in the columns P: per row, the subset T of P it
    // holds; its bytes out of T and into T cross the uplink.
    std::vector<const std::vector<double>*> subsets;
    auto rowPart = [&](uint64_t P) {
      if (rowPhases.empty()) return 0.0;
      subsets.clear();
      for (uint64_t T = P; T > 0; T = (T - 1) & P) subsets.push_back(&subsetBytes(T));
      double part = 0;
      for (const auto& w : mixWeights) {
        double fixed = 0, perHost = std::numeric_limits<double>::infinity();
        for (size_t k = 0; k < rowPhases.size(); ++k) fixed += w[k][0] * floors[rowPhases[k].first];
        for (const std::vector<double>* b : subsets) {
          double sum = 0;
          for (size_t k = 0; k < rowPhases.size(); ++k)
            sum += w[k][1] * (*b)[2 * k] + w[k][2] * (*b)[2 * k + 1];
          perHost = std::min(perHost, sum / rate / b->back());
        }
        part = std::max(part, fixed + static_cast<double>(held) * perHost);
      }
      return part;
    };
    // Every set of columns by size, the fewest that hold the switch's hosts first; the column
    // phases only grow with the size, so once they and the row phases' floors reach the least
    // found, larger sets cannot be below it. Past kMeshBoundMaxSets sets, that sum is the bound.
    double least = std::numeric_limits<double>::infinity();
    size_t tried = 0;
    for (size_t m = (held + rows - 1) / rows; m <= std::min(columns, held); ++m) {
      double floor = columnPart(m) + rowFloors;
      if (floor >= least) break;
      double sets = 1;
      for (size_t k = 0; k < m; ++k) sets = sets * static_cast<double>(columns - k) / (k + 1);
      if (static_cast<double>(tried) + sets > kMeshBoundMaxSets) {
        least = floor;
        break;
      }
      size_t count = static_cast<size_t>(std::llround(sets));
      tried += count;
      double column = columnPart(m);
      uint64_t P = m >= 64 ? ~uint64_t{0} : (uint64_t{1} << m) - 1;
      for (size_t k = 0; k < count; ++k) {
        least = std::min(least, column + rowPart(P));
        if (k + 1 == count) break;
        uint64_t low = P & (~P + 1), ripple = P + low;  // the next set of m columns (Gosper)
        P = (((ripple ^ P) >> 2) / low) | ripple;
      }
    }
    it->second = least + others;
    best = std::max(best, it->second);
  }
  return best;
}

std::vector<std::vector<double>> MeshModel::groupUs(const std::vector<int>& order) const {
  RANKMAP_ASSERT(order.size() == net_.n);
  std::vector<std::vector<double>> out(dims_.size());
  for (const auto& p : phases_) {
    auto& times = out[static_cast<size_t>(p.dim)];
    times.resize(p.groups.size(), 0);
    for (size_t g = 0; g < p.groups.size(); ++g) {
      const GroupPart& part = p.groups[g];
      double intra = 0;
      for (const auto& [pos, bytes] : part.intra) intra = std::max(intra, bytes);
      times[g] += partUs(order, p.steps, part.flows, intra, part.hops);
    }
  }
  return out;
}

MeshTimes MeshModel::evaluate(const std::vector<int>& order) const {
  RANKMAP_ASSERT(order.size() == net_.n);
  MeshTimes t;
  t.dimUs.assign(dims_.size(), 0);
  for (const auto& p : phases_) {
    double us = phaseUs(order, p);
    t.dimUs[static_cast<size_t>(p.dim)] += us;
    t.stepUs += us;
  }
  return t;
}

std::pair<double, double> MeshModel::loadProfile(const std::vector<int>& order) const {
  double bound = 0, sq = 0;
  std::vector<double> load(2 * net_.links());
  for (const auto& p : phases_) {
    std::fill(load.begin(), load.end(), 0);
    for (const auto& t : p.flows)
      net_.forEachLink(order[t.a], order[t.b],
                       [&](size_t link, bool down) { load[2 * link + down] += t.bytes; });
    double worst = 0;
    for (size_t l = 0; l < load.size(); ++l) {
      double x = load[l] / bytesPerUs(net_.linkMbps(l / 2));
      worst = std::max(worst, x);
      sq += x * x;
    }
    bound += worst;
  }
  return {bound, sq};
}

// The link loads of an order, per phase and link direction, updated per swap of two positions
// (improve, anneal): the flows that touch either position leave their links and come back.
class MeshModel::LoadState {
 public:
  LoadState(const MeshModel& m, std::vector<int> order) : m_(m), order_(std::move(order)) {
    for (size_t p = 0; p < m.phases_.size(); ++p)
      for (const auto& t : m.phases_[p].flows) flows_.push_back({p, &t});
    width_ = 2 * m.net_.links();
    load_.assign(m.phases_.size() * width_, 0);
    inv_.resize(width_);
    for (size_t l = 0; l < width_; ++l) inv_[l] = 1 / bytesPerUs(m.net_.linkMbps(l / 2));
    for (size_t f = 0; f < flows_.size(); ++f) apply(f, 1);
    touch_.resize(m.net_.n);
    for (size_t f = 0; f < flows_.size(); ++f) {
      touch_[flows_[f].second->a].push_back(static_cast<uint32_t>(f));
      touch_[flows_[f].second->b].push_back(static_cast<uint32_t>(f));
    }
  }
  bool trivial() const { return m_.net_.n < 3 || flows_.empty(); }
  const std::vector<int>& order() const { return order_; }
  // The phases' busiest links' times summed, then the sum of squared link times: swaps that
  // leave the busiest links as they are but unload others count too (the maximum alone is flat
  // almost everywhere).
  std::pair<double, double> bound() const {
    double w = 0, sq = 0;
    for (size_t p = 0; p < m_.phases_.size(); ++p) {
      double worst = 0;
      for (size_t l = 0; l < width_; ++l) {
        double x = load_[p * width_ + l] * inv_[l];
        worst = std::max(worst, x);
        sq += x * x;
      }
      w += worst;
    }
    return {w, sq};
  }
  // Positions whose hosts the model cannot tell apart by their links: swapping changes no load.
  bool alike(size_t i, size_t j) const {
    int x = order_[i], y = order_[j];
    return (m_.net_.levels == 0 || m_.net_.switchAt(x, 0) == m_.net_.switchAt(y, 0)) &&
           m_.net_.hostMbps[x] == m_.net_.hostMbps[y];
  }
  void swap(size_t i, size_t j) {
    changed_.clear();
    for (uint32_t f : touch_[i]) changed_.push_back(f);
    for (uint32_t f : touch_[j]) {
      const Traffic* t = flows_[f].second;
      if (t->a != static_cast<int>(i) && t->b != static_cast<int>(i)) changed_.push_back(f);
    }
    for (uint32_t f : changed_) apply(f, -1);
    std::swap(order_[i], order_[j]);
    for (uint32_t f : changed_) apply(f, 1);
  }

 private:
  void apply(size_t f, double sign) {
    // Not a structured binding: clang 14 (the fuzz tree's compiler) does not capture one.
    const size_t p = flows_[f].first;
    const Traffic* t = flows_[f].second;
    double* at = load_.data() + p * width_;
    m_.net_.forEachLink(order_[t->a], order_[t->b],
                        [&](size_t link, bool down) { at[2 * link + down] += sign * t->bytes; });
  }

  const MeshModel& m_;
  std::vector<int> order_;
  std::vector<std::pair<size_t, const Traffic*>> flows_;  // every phase's, with its phase
  size_t width_ = 0;
  std::vector<double> load_, inv_;
  std::vector<std::vector<uint32_t>> touch_;  // per position, its flows
  std::vector<uint32_t> changed_;
};

std::vector<int> MeshModel::improve(std::vector<int> order, int passes, size_t tries,
                                    uint64_t seed) const {
  LoadState st(*this, std::move(order));
  if (st.trivial()) return st.order();
  size_t n = net_.n;
  std::mt19937_64 rng(seed);
  std::pair<double, double> current = st.bound();
  bool everyPartner = n <= 64 || tries >= n;
  for (int pass = 0; pass < passes; ++pass) {
    bool moved = false;
    for (size_t i = 0; i < n; ++i) {
      size_t count = everyPartner ? n : tries;
      for (size_t t = 0; t < count; ++t) {
        size_t j = everyPartner ? t : static_cast<size_t>(rng() % n);
        if (j == i || st.alike(i, j)) continue;
        st.swap(i, j);
        auto b = st.bound();
        bool lower = b.first < current.first * (1 - 1e-9) ||
                     (b.first <= current.first && b.second < current.second * (1 - 1e-9));
        if (lower) {
          current = b;
          moved = true;
        } else {
          st.swap(i, j);  // back
        }
      }
    }
    if (!moved) break;
  }
  return st.order();
}

std::vector<int> MeshModel::anneal(std::vector<int> order, size_t moves, double startFraction,
                                   double normWeight, uint64_t seed) const {
  LoadState st(*this, std::move(order));
  if (st.trivial() || moves == 0) return st.order();
  size_t n = net_.n;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  // The energy: the bound, plus normWeight x the 2-norm of the link times (a slope where the
  // busiest links alone are flat).
  auto energy = [&] {
    auto [w, sq] = st.bound();
    return w + normWeight * std::sqrt(sq);
  };
  double current = energy(), best = current;
  std::vector<int> bestOrder = st.order();
  // Geometric cooling from startFraction of the start's bound to a millionth of it.
  double t = startFraction * current,
         cool = std::pow(1e-6 / std::max(startFraction, 1e-9), 1.0 / static_cast<double>(moves));
  for (size_t k = 0; k < moves; ++k, t *= cool) {
    size_t i = static_cast<size_t>(rng() % n), j = static_cast<size_t>(rng() % n);
    if (i == j || st.alike(i, j)) continue;
    st.swap(i, j);
    double b = energy();
    if (b <= current || unit(rng) < std::exp((current - b) / std::max(t, 1e-300))) {
      current = b;
      if (b < best * (1 - 1e-12)) {
        best = b;
        bestOrder = st.order();
      }
    } else {
      st.swap(i, j);
    }
  }
  return bestOrder;
}

std::vector<int> MeshModel::polish(std::vector<int> order, int passes) const {
  size_t n = net_.n;
  double current = stepUs(order);
  double currentSq = loadProfile(order).second;
  for (int pass = 0; pass < passes; ++pass) {
    bool moved = false;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) {
        std::swap(order[i], order[j]);
        double t = stepUs(order);
        // Faster, or as fast and the links less loaded (the step is flat where its slowest flow
        // stays: the load moves it towards where a later swap pays).
        bool faster = t < current * (1 - 1e-9);
        double sq = t <= current * (1 + 1e-12) ? loadProfile(order).second : 0;
        if (faster || (t <= current * (1 + 1e-12) && sq < currentSq * (1 - 1e-9))) {
          current = t;
          currentSq = sq;
          moved = true;
        } else {
          std::swap(order[i], order[j]);
        }
      }
    if (!moved) break;
  }
  return order;
}

MeshPlacement placeMesh(const MeshModel& model, const std::vector<int>& walk, double minGain) {
  const auto& dims = model.dims();
  size_t n = model.positions();
  size_t rph = static_cast<size_t>(model.ranksPerHost());
  std::vector<int> input(n);
  std::iota(input.begin(), input.end(), 0);
  std::vector<std::pair<std::string, std::vector<int>>> candidates = {{"input order", input},
                                                                      {"world ring", walk}};
  // The walks the layouts fill: the world ring's, and the same with each pod's racks (innermost
  // groups) largest first and smallest first, so that unequal racks can hold whole groups.
  const NetworkModel& net = model.net();
  std::vector<std::pair<std::string, std::vector<int>>> walks = {{"", walk}};
  if (net.levels > 0) {
    std::map<int, size_t> firstOfRack, rackSize;
    std::map<int, size_t> firstOfTop;
    // Racks move only within their outermost group (with one level, all of them together).
    auto topOf = [&](int h) { return net.levels >= 2 ? net.switchAt(h, net.levels - 1) : 0; };
    for (size_t i = 0; i < n; ++i) {
      int r = net.switchAt(walk[i], 0), top = topOf(walk[i]);
      firstOfRack.emplace(r, i);
      firstOfTop.emplace(top, i);
      ++rackSize[r];
    }
    for (int sign : {-1, 1}) {
      std::vector<int> w = walk;
      auto key = [&](int h) {
        int r = net.switchAt(h, 0);
        return std::tuple{firstOfTop[topOf(h)], sign * static_cast<long>(rackSize[r]),
                          firstOfRack[r]};
      };
      std::stable_sort(w.begin(), w.end(), [&](int a, int b) { return key(a) < key(b); });
      if (w != walk)
        walks.emplace_back(sign < 0 ? " on racks largest first" : " on racks smallest first",
                           std::move(w));
    }
  }
  // Each ranking of the dimensions by locality (at most 5 dimensions: 120 rankings).
  std::vector<size_t> st = strides(dims);
  std::vector<size_t> rank(dims.size());
  std::iota(rank.begin(), rank.end(), 0);
  // A layout: parts of dimensions, fastest first; a part is the coordinate's digit (c / div) %
  // mod (a whole dimension: div 1, mod its size). Positions sorted by their parts' digits, the
  // slowest first, fill the walk.
  struct Part {
    size_t dim, div, mod;
    std::string name;
  };
  auto lay = [&](const std::vector<Part>& parts, const std::string& name,
                 std::vector<std::pair<std::string, std::vector<int>>>& into) {
    std::vector<std::vector<size_t>> keys(n);
    for (size_t p = 0; p < n; ++p) {
      size_t r = p * rph;
      for (size_t x = parts.size(); x-- > 0;) {
        const Part& q = parts[x];
        keys[p].push_back((r / st[q.dim] % static_cast<size_t>(dims[q.dim].size)) / q.div % q.mod);
      }
    }
    std::vector<int> seq(n);
    std::iota(seq.begin(), seq.end(), 0);
    std::stable_sort(seq.begin(), seq.end(), [&](int a, int b) {
      return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)];
    });
    for (const auto& [how, w] : walks) {
      std::vector<int> order(n);
      for (size_t i = 0; i < n; ++i) order[static_cast<size_t>(seq[i])] = w[i];
      into.emplace_back(name + how, std::move(order));
    }
  };
  auto nameOf = [](const std::vector<Part>& ps) {
    std::string name = "layout ";
    for (size_t x = 0; x < ps.size(); ++x) name += (x ? "," : "") + ps[x].name;
    return name;
  };
  std::vector<std::pair<std::string, std::vector<int>>> splits;
  if (dims.size() <= 5) {
    do {
      std::vector<Part> parts;
      for (size_t d : rank)
        parts.push_back({d, 1, static_cast<size_t>(dims[d].size), dims[d].name});
      lay(parts, nameOf(parts), candidates);
      // The fastest dimension split: its low part fastest, its high part after the j-th.
      size_t d0 = rank[0], s0 = static_cast<size_t>(dims[d0].size);
      for (size_t f = 2; rank.size() >= 2 && f < s0; ++f) {
        if (s0 % f != 0) continue;
        for (size_t j = 2; j <= rank.size(); ++j) {
          std::vector<Part> ps = parts;
          ps[0] = {d0, 1, f, fmt::format("{}%{}", dims[d0].name, f)};
          ps.insert(ps.begin() + static_cast<long>(j),
                    Part{d0, f, s0 / f, fmt::format("{}/{}", dims[d0].name, f)});
          lay(ps, nameOf(ps), splits);
        }
      }
    } while (std::next_permutation(rank.begin(), rank.end()));
  }
  // The split layouts lowest by the link-load bound join the candidates.
  if (!splits.empty()) {
    std::vector<std::pair<double, size_t>> byBound;
    for (size_t i = 0; i < splits.size(); ++i)
      byBound.emplace_back(model.loadProfile(splits[i].second).first, i);
    std::sort(byBound.begin(), byBound.end());
    for (size_t k = 0; k < std::min(kMeshSplitLayouts, byBound.size()); ++k)
      candidates.push_back(std::move(splits[byBound[k].second]));
  }
  // Small jobs: also random starts, polished (a single swap cannot undo a layout's choice of
  // which groups share a rack; the exact search showed the layouts alone up to 17% slower).
  if (n <= kMeshPolishMaxHosts) {
    std::mt19937_64 rng(0x73746172);
    for (size_t s = 0, starts = kMeshPolishStarts; s < starts; ++s) {
      std::vector<int> order = walk;
      std::shuffle(order.begin(), order.end(), rng);
      candidates.emplace_back(fmt::format("random start {}", s + 1), std::move(order));
    }
  }
  size_t tries = std::min<size_t>(n, 16);
  MeshPlacement best{input, model.evaluate(input), "input order"};
  double inputUs = best.times.stepUs;
  std::set<std::vector<int>> seen;
  for (size_t c = 1; c < candidates.size(); ++c) {
    auto& [name, order] = candidates[c];
    std::vector<std::pair<std::string, std::vector<int>>> tried = {
        {name, order}, {name + ", swaps", model.improve(order, 3, tries, 0x6d657368 + c)}};
    // Small jobs: swaps by the step model itself, which sees what the load bound does not (flows
    // held back by another link leave room; latency), from the candidate and from its swaps.
    if (n <= kMeshPolishMaxHosts)
      for (size_t k = 0; k < 2; ++k)
        tried.emplace_back(tried[k].first + ", polished",
                           model.polish(tried[k].second, kMeshPolishPasses));
    for (auto& [what, o] : tried) {
      if (!seen.insert(o).second) continue;
      MeshTimes t = model.evaluate(o);
      if (t.stepUs < best.times.stepUs * (1 - 1e-9)) best = {o, std::move(t), what};
    }
  }
  // Small jobs: kicks from the best (a few random swaps, then polished), kept when faster; a
  // kick reaches what one swap at a time cannot (two groups trading racks).
  if (n <= kMeshPolishMaxHosts) {
    std::mt19937_64 rng(0x6b69636b);
    for (size_t k = 0; k < kMeshKicks; ++k) {
      std::vector<int> o = best.order;
      for (int s = 0; s < 3; ++s) std::swap(o[rng() % n], o[rng() % n]);
      o = model.polish(std::move(o), kMeshPolishPasses);
      MeshTimes t = model.evaluate(o);
      if (t.stepUs < best.times.stepUs * (1 - 1e-9))
        best = {std::move(o), std::move(t),
                best.basis + (best.basis.ends_with(", kicks") ? "" : ", kicks")};
    }
  }
  if (best.times.stepUs >= inputUs * (1 - minGain))
    return {input, model.evaluate(input), "input order"};
  return best;
}

std::optional<MeshPlacement> exactMeshOrder(const MeshModel& model, size_t maxArrangements) {
  const NetworkModel& net = model.net();
  size_t n = net.n;
  // Hosts alike to the model share a class; with measured latencies or caps every host differs.
  std::vector<int> cls(n);
  std::map<std::tuple<int, double, double>, int> ids;
  for (size_t h = 0; h < n; ++h) {
    if (net.latency || net.caps) {
      cls[h] = static_cast<int>(h);
      continue;
    }
    auto key = std::tuple{net.levels ? net.switchAt(static_cast<int>(h), 0) : 0, net.hostMbps[h],
                          net.linkLatencyUs.empty() ? 0.0 : net.linkLatencyUs[h]};
    cls[h] = ids.emplace(key, static_cast<int>(ids.size())).first->second;
  }
  // n! / prod(count!) arrangements, counted without overflow.
  std::map<int, size_t> counts;
  for (int c : cls) ++counts[c];
  double arrangements = std::lgamma(static_cast<double>(n) + 1);
  for (auto [c, k] : counts) arrangements -= std::lgamma(static_cast<double>(k) + 1);
  if (arrangements > std::log(static_cast<double>(maxArrangements)) + 1e-9) return std::nullopt;
  std::vector<std::vector<int>> members(counts.size());
  for (size_t h = 0; h < n; ++h) members[cls[h]].push_back(static_cast<int>(h));
  std::vector<int> labels(cls.begin(), cls.end());
  std::sort(labels.begin(), labels.end());
  std::optional<MeshPlacement> best;
  std::vector<int> order(n);
  do {
    std::vector<size_t> next(members.size(), 0);
    for (size_t p = 0; p < n; ++p) order[p] = members[labels[p]][next[labels[p]]++];
    MeshTimes t = model.evaluate(order);
    if (!best || t.stepUs < best->times.stepUs * (1 - 1e-12))
      best = MeshPlacement{order, std::move(t), "exact"};
  } while (std::next_permutation(labels.begin(), labels.end()));
  return best;
}

}  // namespace rankmap::reorder
