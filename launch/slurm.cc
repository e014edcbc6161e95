#include "launch/slurm.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/json.h"

namespace rankmap::launch {
namespace {

enum class Kind {
  kPlain,         // kept as is
  kNtasks,        // -n
  kNodes,         // -N
  kNodelist,      // -w
  kPerNode,       // --ntasks-per-node
  kDistribution,  // -m
  kExport,        // --export
  kRefuse,        // placement rankmap run does not model, or not a job
};
enum class Arg { kNone, kRequired, kOptional };  // kOptional: only as --name=value

struct Spec {
  std::string_view name;
  char shortName;  // 0 = none
  Arg arg;
  Kind kind;
};

// srun options (Slurm 22/23). An option not listed makes the parser refuse: its word count is
// unknown, so the program cannot be found reliably.
constexpr Spec kSpecs[] = {
    {"ntasks", 'n', Arg::kRequired, Kind::kNtasks},
    {"nodes", 'N', Arg::kRequired, Kind::kNodes},
    {"nodelist", 'w', Arg::kRequired, Kind::kNodelist},
    {"ntasks-per-node", 0, Arg::kRequired, Kind::kPerNode},
    {"distribution", 'm', Arg::kRequired, Kind::kDistribution},
    {"export", 0, Arg::kRequired, Kind::kExport},
    {"exclude", 'x', Arg::kRequired, Kind::kRefuse},
    {"relative", 'r', Arg::kRequired, Kind::kRefuse},
    {"nodefile", 'F', Arg::kRequired, Kind::kRefuse},
    {"multi-prog", 0, Arg::kNone, Kind::kRefuse},
    {"het-group", 0, Arg::kRequired, Kind::kRefuse},
    {"spread-job", 0, Arg::kNone, Kind::kRefuse},
    {"use-min-nodes", 0, Arg::kNone, Kind::kRefuse},
    {"arbitrary", 0, Arg::kNone, Kind::kRefuse},
    {"help", 'h', Arg::kNone, Kind::kRefuse},
    {"usage", 0, Arg::kNone, Kind::kRefuse},
    {"version", 'V', Arg::kNone, Kind::kRefuse},
    {"cpus-per-task", 'c', Arg::kRequired, Kind::kPlain},
    {"partition", 'p', Arg::kRequired, Kind::kPlain},
    {"time", 't', Arg::kRequired, Kind::kPlain},
    {"time-min", 0, Arg::kRequired, Kind::kPlain},
    {"job-name", 'J', Arg::kRequired, Kind::kPlain},
    {"output", 'o', Arg::kRequired, Kind::kPlain},
    {"error", 'e', Arg::kRequired, Kind::kPlain},
    {"input", 'i', Arg::kRequired, Kind::kPlain},
    {"account", 'A', Arg::kRequired, Kind::kPlain},
    {"qos", 'q', Arg::kRequired, Kind::kPlain},
    {"reservation", 0, Arg::kRequired, Kind::kPlain},
    {"constraint", 'C', Arg::kRequired, Kind::kPlain},
    {"dependency", 'd', Arg::kRequired, Kind::kPlain},
    {"chdir", 'D', Arg::kRequired, Kind::kPlain},
    {"mem", 0, Arg::kRequired, Kind::kPlain},
    {"mem-per-cpu", 0, Arg::kRequired, Kind::kPlain},
    {"mem-per-gpu", 0, Arg::kRequired, Kind::kPlain},
    {"mem-bind", 0, Arg::kRequired, Kind::kPlain},
    {"mpi", 0, Arg::kRequired, Kind::kPlain},
    {"gres", 0, Arg::kRequired, Kind::kPlain},
    {"gpus", 'G', Arg::kRequired, Kind::kPlain},
    {"gpus-per-node", 0, Arg::kRequired, Kind::kPlain},
    {"gpus-per-task", 0, Arg::kRequired, Kind::kPlain},
    {"gpu-bind", 0, Arg::kRequired, Kind::kPlain},
    {"cpus-per-gpu", 0, Arg::kRequired, Kind::kPlain},
    {"tres-per-task", 0, Arg::kRequired, Kind::kPlain},
    {"cpu-bind", 0, Arg::kRequired, Kind::kPlain},
    {"hint", 0, Arg::kRequired, Kind::kPlain},
    {"threads-per-core", 0, Arg::kRequired, Kind::kPlain},
    {"cores-per-socket", 0, Arg::kRequired, Kind::kPlain},
    {"sockets-per-node", 0, Arg::kRequired, Kind::kPlain},
    {"ntasks-per-core", 0, Arg::kRequired, Kind::kPlain},
    {"ntasks-per-socket", 0, Arg::kRequired, Kind::kPlain},
    {"ntasks-per-gpu", 0, Arg::kRequired, Kind::kRefuse},
    {"signal", 0, Arg::kRequired, Kind::kPlain},
    {"comment", 0, Arg::kRequired, Kind::kPlain},
    {"network", 0, Arg::kRequired, Kind::kPlain},
    {"open-mode", 0, Arg::kRequired, Kind::kPlain},
    {"wait", 'W', Arg::kRequired, Kind::kPlain},
    {"licenses", 'L', Arg::kRequired, Kind::kPlain},
    {"wckey", 0, Arg::kRequired, Kind::kPlain},
    {"begin", 'b', Arg::kRequired, Kind::kPlain},
    {"deadline", 0, Arg::kRequired, Kind::kPlain},
    {"container", 0, Arg::kRequired, Kind::kPlain},
    {"prolog", 0, Arg::kRequired, Kind::kPlain},
    {"epilog", 0, Arg::kRequired, Kind::kPlain},
    {"task-prolog", 0, Arg::kRequired, Kind::kPlain},
    {"task-epilog", 0, Arg::kRequired, Kind::kPlain},
    {"switches", 0, Arg::kRequired, Kind::kPlain},
    {"slurmd-debug", 0, Arg::kRequired, Kind::kPlain},
    {"exclusive", 0, Arg::kOptional, Kind::kPlain},
    {"kill-on-bad-exit", 'K', Arg::kOptional, Kind::kPlain},
    {"propagate", 0, Arg::kOptional, Kind::kPlain},
    {"nice", 0, Arg::kOptional, Kind::kPlain},
    {"immediate", 'I', Arg::kOptional, Kind::kPlain},
    {"no-kill", 'k', Arg::kOptional, Kind::kPlain},
    {"x11", 0, Arg::kOptional, Kind::kPlain},
    {"overlap", 0, Arg::kNone, Kind::kPlain},
    {"exact", 0, Arg::kNone, Kind::kPlain},
    {"overcommit", 'O', Arg::kNone, Kind::kPlain},
    {"oversubscribe", 's', Arg::kNone, Kind::kPlain},
    {"unbuffered", 'u', Arg::kNone, Kind::kPlain},
    {"label", 'l', Arg::kNone, Kind::kPlain},
    {"quiet", 'Q', Arg::kNone, Kind::kPlain},
    {"verbose", 'v', Arg::kNone, Kind::kPlain},
    {"pty", 0, Arg::kNone, Kind::kPlain},
    {"test-only", 0, Arg::kNone, Kind::kPlain},
    {"disable-status", 'X', Arg::kNone, Kind::kPlain},
};

const Spec* findLong(std::string_view name) {
  for (const auto& s : kSpecs)
    if (s.name == name) return &s;
  return nullptr;
}
const Spec* findShort(char c) {
  for (const auto& s : kSpecs)
    if (s.shortName == c) return &s;
  return nullptr;
}

int parseCount(const std::string& text, std::string_view what) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > (1 << 24))
    RANKMAP_THROW(InvalidInput, "srun {} {:?}: expected a positive integer", what, text);
  return static_cast<int>(v);
}

// Splits at commas outside brackets.
std::vector<std::string> splitTop(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string sanitize(const std::string& name) {
  std::string out;
  for (char c : name)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') ? c : '_';
  return out.empty() ? std::string("level") : out;
}

// A hostlist parsed and counted in full before a name is made: the count of an item is the
// product of its brackets' sizes, so a few bytes can name 10^10 hosts (tests/fuzz: out of memory).
struct ParsedHostlist {
  // An item is literals and brackets; a bracket's ranges are (first, last, digits of first).
  struct Range {
    long first, last;
    size_t width;
  };
  struct Part {
    std::string literal;        // when ranges is empty
    std::vector<Range> ranges;  // a bracket
  };
  std::vector<std::vector<Part>> items;
  size_t total = 0;
};

ParsedHostlist parseHostlist(std::string_view expr) {
  auto bad = [&](std::string_view why) {
    RANKMAP_THROW(InvalidInput, "hostlist {:?}: {}", std::string(expr), why);
  };
  ParsedHostlist out;
  auto tooMany = [&] { bad(fmt::format("expected at most {} hosts", kMaxHostlistHosts)); };
  for (const auto& item : splitTop(expr)) {
    if (item.empty()) bad("expected no empty item");
    std::vector<ParsedHostlist::Part> parts;
    size_t count = 1;
    size_t i = 0;
    while (i < item.size()) {
      if (item[i] == ']') bad("expected ']' only after '['");
      if (item[i] != '[') {
        size_t j = item.find('[', i);
        std::string lit = item.substr(i, j == std::string::npos ? std::string::npos : j - i);
        if (lit.find(']') != std::string::npos) bad("expected ']' only after '['");
        parts.push_back({std::move(lit), {}});
        i = j == std::string::npos ? item.size() : j;
        continue;
      }
      size_t close = item.find(']', i);
      if (close == std::string::npos) bad("expected a closing ']'");
      std::string body = item.substr(i + 1, close - i - 1);
      if (body.empty() || body.find('[') != std::string::npos) bad("expected ranges inside [...]");
      ParsedHostlist::Part part;
      size_t size = 0;
      std::string range;
      std::stringstream ss(body);
      while (std::getline(ss, range, ',')) {
        auto dash = range.find('-');
        std::string lo = range.substr(0, dash);
        std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
        auto digits = [](const std::string& s) {
          return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
          });
        };
        if (!digits(lo) || !digits(hi))
          bad(fmt::format("expected a number or a range, got {:?}", range));
        long a = std::stol(lo), b = std::stol(hi);
        if (b < a) bad(fmt::format("expected an increasing range, got {:?}", range));
        if (b - a >= static_cast<long>(kMaxHostlistHosts))
          bad(fmt::format("expected a range of at most {} hosts", kMaxHostlistHosts));
        size += static_cast<size_t>(b - a + 1);
        if (size > kMaxHostlistHosts) tooMany();
        part.ranges.push_back({a, b, lo.size()});
      }
      count *= size;  // both at most kMaxHostlistHosts: no overflow
      if (count > kMaxHostlistHosts) tooMany();
      parts.push_back(std::move(part));
      i = close + 1;
    }
    out.total += count;
    if (out.total > kMaxHostlistHosts) tooMany();
    out.items.push_back(std::move(parts));
  }
  return out;
}

}  // namespace

size_t hostlistSize(std::string_view expr) { return parseHostlist(expr).total; }

std::vector<std::string> expandHostlist(std::string_view expr) {
  ParsedHostlist parsed = parseHostlist(expr);
  std::vector<std::string> out;
  out.reserve(parsed.total);
  for (const auto& parts : parsed.items) {
    std::vector<std::string> partial = {""};
    for (const auto& part : parts) {
      if (part.ranges.empty()) {
        for (auto& p : partial) p += part.literal;
        continue;
      }
      std::vector<std::string> next;
      for (const auto& p : partial)
        for (const auto& r : part.ranges)
          for (long v = r.first; v <= r.last; ++v)
            next.push_back(fmt::format("{}{:0{}}", p, v, r.width));
      partial = std::move(next);
    }
    for (auto& p : partial) out.push_back(std::move(p));
  }
  return out;
}

std::string compressHostlist(const std::vector<std::string>& hosts) {
  struct Group {
    std::string prefix;
    size_t width;  // digits of a zero-padded suffix; 0 = not padded
    std::set<long> numbers;
  };
  std::vector<Group> groups;
  std::vector<std::pair<bool, size_t>> order;  // (is group, index) in first-appearance order
  std::vector<std::string> literals;
  // Indexes, so that a million names take linear time (tests/fuzz found the linear searches
  // quadratic: minutes for a hostlist like "gpu[1-1000]-[1-1000]").
  std::unordered_set<std::string> literalSet;
  std::map<std::pair<std::string, size_t>, size_t> groupIndex;  // (prefix, width) -> groups
  for (const auto& h : hosts) {
    size_t k = h.size();
    while (k > 0 && std::isdigit(static_cast<unsigned char>(h[k - 1]))) --k;
    std::string digits = h.substr(k);
    if (digits.empty() || digits.size() > 9) {
      if (literalSet.insert(h).second) {
        literals.push_back(h);
        order.push_back({false, literals.size() - 1});
      }
      continue;
    }
    size_t width = digits.size() > 1 && digits[0] == '0' ? digits.size() : 0;
    std::string prefix = h.substr(0, k);
    // The first group made with this prefix and width, or (an unpadded number joins a padded
    // group of its own width: "10" with "01") with the number's width.
    size_t idx = groups.size();
    if (auto g = groupIndex.find({prefix, width}); g != groupIndex.end()) idx = g->second;
    if (width == 0)
      if (auto g = groupIndex.find({prefix, digits.size()}); g != groupIndex.end())
        idx = std::min(idx, g->second);
    if (idx == groups.size()) {
      groupIndex.emplace(std::make_pair(prefix, width), idx);
      groups.push_back({prefix, width, {}});
      order.push_back({true, idx});
    }
    groups[idx].numbers.insert(std::stol(digits));
  }
  std::string out;
  for (auto [isGroup, idx] : order) {
    if (!out.empty()) out += ',';
    if (!isGroup) {
      out += literals[idx];
      continue;
    }
    const Group& g = groups[idx];
    std::vector<std::string> ranges;
    auto it = g.numbers.begin();
    while (it != g.numbers.end()) {
      long a = *it, b = a;
      auto jt = std::next(it);
      while (jt != g.numbers.end() && *jt == b + 1) b = *jt++;
      std::string sa = fmt::format("{:0{}}", a, g.width), sb = fmt::format("{:0{}}", b, g.width);
      ranges.push_back(a == b ? sa : sa + "-" + sb);
      it = jt;
    }
    if (g.numbers.size() == 1)
      out += g.prefix + ranges[0];
    else
      out += fmt::format("{}[{}]", g.prefix, fmt::join(ranges, ","));
  }
  return out;
}

std::string slurmHostfile(const Plan& plan, int tasksPerHost) {
  if (tasksPerHost < 1)
    RANKMAP_THROW(InvalidInput, "{} tasks per host: expected at least 1", tasksPerHost);
  std::string out;
  for (const auto& h : plan.order)
    for (int k = 0; k < tasksPerHost; ++k) out += h + "\n";
  return out;
}

namespace {

// One switch of Slurm's tree: either hosts (innermost level) or inner switches.
struct SlurmSwitch {
  std::string name;
  std::vector<std::string> nodes;
  std::vector<std::string> switches;
};

// The switches of the tree topology for `levels` (innermost first), innermost switches first and
// the root (named "root", over the outermost level's switches, or over every host without levels)
// last when the outermost level has more than one group.
std::vector<SlurmSwitch> slurmSwitches(const std::vector<std::string>& hosts,
                                       const std::vector<HierarchyLevel>& levels,
                                       std::string_view source) {
  if (levels.empty()) return {{"root", hosts, {}}};
  std::vector<SlurmSwitch> out;
  std::set<std::string> used;
  std::vector<std::vector<std::string>> switchNames(levels.size());
  for (size_t j = 0; j < levels.size(); ++j) {
    std::string base = sanitize(levels[j].name);
    if (used.count(base) || base == "root") base += "L" + std::to_string(j);
    used.insert(base);
    for (size_t g = 0; g < levels[j].groups.size(); ++g)
      switchNames[j].push_back(base + std::to_string(g));
  }
  // Innermost level: nodes.
  for (size_t g = 0; g < levels[0].groups.size(); ++g)
    out.push_back({switchNames[0][g], levels[0].groups[g], {}});
  // Outer levels: the inner switches whose hosts they hold.
  for (size_t j = 1; j < levels.size(); ++j) {
    std::map<std::string, size_t> outerOf;
    for (size_t g = 0; g < levels[j].groups.size(); ++g)
      for (const auto& h : levels[j].groups[g]) outerOf[h] = g;
    std::vector<std::vector<std::string>> children(levels[j].groups.size());
    for (size_t g = 0; g < levels[j - 1].groups.size(); ++g) {
      std::set<size_t> outer;
      for (const auto& h : levels[j - 1].groups[g]) {
        auto it = outerOf.find(h);
        if (it == outerOf.end())
          RANKMAP_THROW(InvalidInput, "{}: host {:?} of level {:?} is in no group of level {:?}",
                        source, h, levels[j - 1].name, levels[j].name);
        outer.insert(it->second);
      }
      if (outer.size() != 1)
        RANKMAP_THROW(InvalidInput,
                      "{}: group {} of level {:?} spans {} groups of level {:?} "
                      "(the levels do not nest)",
                      source, g, levels[j - 1].name, outer.size(), levels[j].name);
      children[*outer.begin()].push_back(switchNames[j - 1][g]);
    }
    for (size_t g = 0; g < levels[j].groups.size(); ++g)
      out.push_back({switchNames[j][g], {}, children[g]});
  }
  if (levels.back().groups.size() > 1) out.push_back({"root", {}, switchNames.back()});
  return out;
}

// A YAML double-quoted scalar (JSON's escapes are valid YAML).
std::string yamlQuote(const std::string& s) { return Json(s).dump(); }

}  // namespace

std::string slurmTopologyConf(const std::vector<std::string>& hosts,
                              const std::vector<HierarchyLevel>& levels, std::string_view source) {
  std::string out = fmt::format(
      "# Slurm topology.conf (topology/tree plugin) written by `rankmap export --slurm-topology`\n"
      "# from {}: {} host(s), {} inferred level(s){}.\n",
      source, hosts.size(), levels.size(), levels.empty() ? " (none: one switch)" : "");
  for (const auto& sw : slurmSwitches(hosts, levels, source)) {
    if (!sw.nodes.empty())
      out += fmt::format("SwitchName={} Nodes={}\n", sw.name, compressHostlist(sw.nodes));
    else
      out += fmt::format("SwitchName={} Switches={}\n", sw.name, compressHostlist(sw.switches));
  }
  return out;
}

std::string slurmTopologyYaml(const std::vector<std::string>& hosts,
                              const std::vector<HierarchyLevel>& levels, std::string_view source) {
  auto switches = slurmSwitches(hosts, levels, source);  // checks that the levels nest
  std::string out = fmt::format(
      "# Slurm topology.yaml (Slurm 25.05+) written by `rankmap export --slurm-topology`\n"
      "# from {}: {} host(s), {} inferred level(s).\n"
      "# Two topologies: {} (topology/tree, the cluster default) and {} (topology/block,\n"
      "# one block per innermost group).\n",
      source, hosts.size(), levels.size(), kSlurmTreeTopology, kSlurmBlockTopology);
  out += fmt::format("- topology: {}\n  cluster_default: true\n  tree:\n    switches:\n",
                     kSlurmTreeTopology);
  for (const auto& sw : switches) {
    out += fmt::format("      - switch: {}\n", yamlQuote(sw.name));
    if (!sw.nodes.empty())
      out += fmt::format("        nodes: {}\n", yamlQuote(compressHostlist(sw.nodes)));
    else
      out += fmt::format("        children: {}\n", yamlQuote(compressHostlist(sw.switches)));
  }
  // Blocks: the innermost groups (or one block of every host). The base block size is the
  // smallest block, so that every block holds at least one base block.
  std::vector<std::pair<std::string, std::vector<std::string>>> blocks;
  if (levels.empty()) {
    blocks.push_back({"block0", hosts});
  } else {
    for (size_t g = 0; g < levels[0].groups.size(); ++g)
      blocks.push_back({switches[g].name, levels[0].groups[g]});
  }
  size_t base = hosts.size();
  for (const auto& b : blocks) base = std::min(base, b.second.size());
  out += fmt::format("- topology: {}\n  cluster_default: false\n  block:\n", kSlurmBlockTopology);
  out += fmt::format("    block_sizes:\n      - {}\n    blocks:\n", std::max<size_t>(base, 1));
  for (const auto& [name, nodes] : blocks)
    out += fmt::format("      - block: {}\n        nodes: {}\n", yamlQuote(name),
                       yamlQuote(compressHostlist(nodes)));
  return out;
}

bool isSrun(const std::string& argv0) {
  auto slash = argv0.rfind('/');
  return (slash == std::string::npos ? argv0 : argv0.substr(slash + 1)) == "srun";
}

std::unique_ptr<SrunCommand> SrunCommand::parse(const std::vector<std::string>& argv,
                                                EnvLookup env) {
  if (argv.empty() || !isSrun(argv[0])) RANKMAP_THROW(NotSupported, "not srun");
  if (!env) env = processEnv;
  std::unique_ptr<SrunCommand> c(new SrunCommand());
  c->argv_ = argv;
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& w = argv[i];
    if (w.size() < 2 || w[0] != '-') break;
    if (w == "--") RANKMAP_THROW(NotSupported, "'--' before the program");
    Item item;
    item.index = i;
    const Spec* spec = nullptr;
    std::optional<std::string> attached;
    if (w.rfind("--", 0) == 0) {
      LongOption o = splitLongOption(w);
      attached = std::move(o.value);
      spec = findLong(o.name);
      if (!spec) RANKMAP_THROW(NotSupported, "unknown srun option {:?}", w);
    } else {
      if (w.size() > 2 && findShort(w[1]) && findShort(w[1])->arg == Arg::kNone)
        RANKMAP_THROW(NotSupported, "combined srun flags {:?}", w);
      spec = findShort(w[1]);
      if (!spec) RANKMAP_THROW(NotSupported, "unknown srun option {:?}", w);
      if (w.size() > 2) attached = w.substr(w[2] == '=' ? 3 : 2);
    }
    item.name = std::string(spec->name);
    if (spec->arg == Arg::kNone && attached)
      RANKMAP_THROW(NotSupported, "srun flag {:?} takes no value", w);
    if (spec->arg == Arg::kRequired) {
      if (attached) {
        item.value = attached;
      } else {
        if (i + 1 >= argv.size()) RANKMAP_THROW(NotSupported, "srun option {} lacks its value", w);
        item.value = argv[++i];
        item.words = 2;
      }
    } else if (attached) {
      item.value = attached;
    }
    if (spec->kind == Kind::kRefuse)
      RANKMAP_THROW(NotSupported, "srun option {} places tasks in a way rankmap run does not model",
                    w);
    c->items_.push_back(std::move(item));
  }
  if (i >= argv.size()) RANKMAP_THROW(NotSupported, "no program after srun's options");
  c->program_ = i;

  auto last = [&](std::string_view name) -> std::optional<std::string> {
    std::optional<std::string> v;
    for (const auto& it : c->items_)
      if (it.name == name) v = it.value;
    return v;
  };
  if (auto m = last("distribution")) {
    std::string first = m->substr(0, m->find_first_of(":,"));
    if (first != "block" && first != "*")
      RANKMAP_THROW(NotSupported, "srun --distribution={}: only block (the default) is modelled",
                    *m);
  }
  std::vector<std::string> nodes;
  if (auto w = last("nodelist")) {
    if (w->find('/') != std::string::npos)
      RANKMAP_THROW(NotSupported, "srun --nodelist {:?}: a file, not a hostlist", *w);
    nodes = expandHostlist(*w);
  } else if (auto n = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST")
                                                 : env("SLURM_JOB_NODELIST")) {
    nodes = expandHostlist(*n);
  } else {
    RANKMAP_THROW(NotSupported,
                  "srun outside an allocation (no SLURM_JOB_NODELIST) and without "
                  "--nodelist: the nodes are unknown");
  }
  {
    std::set<std::string> seen;
    for (const auto& n : nodes)
      if (!seen.insert(n).second) RANKMAP_THROW(NotSupported, "node {} listed twice", n);
  }
  if (auto nn = last("nodes")) {
    if (nn->find('-') != std::string::npos)
      RANKMAP_THROW(NotSupported, "srun --nodes {}: a node range is not modelled", *nn);
    int n = parseCount(*nn, "--nodes");
    if (static_cast<size_t>(n) > nodes.size())
      RANKMAP_THROW(InvalidInput, "srun --nodes {}: the allocation has {} nodes", n, nodes.size());
    nodes.resize(static_cast<size_t>(n));
  }
  int hostsN = static_cast<int>(nodes.size());
  std::optional<int> perNode, ntasks;
  if (auto v = last("ntasks-per-node")) perNode = parseCount(*v, "--ntasks-per-node");
  if (auto v = last("ntasks")) ntasks = parseCount(*v, "--ntasks");
  if (!ntasks && !perNode) {
    if (auto v = env("SLURM_NTASKS_PER_NODE");
        v && v->find_first_not_of("0123456789") == std::string::npos)
      perNode = parseCount(*v, "SLURM_NTASKS_PER_NODE");
    else if (auto t = env("SLURM_NTASKS"))
      ntasks = parseCount(*t, "SLURM_NTASKS");
  }
  const int64_t tasks = ntasks ? *ntasks : int64_t{perNode ? *perNode : 1} * hostsN;
  if (tasks > kMaxJobRanks)
    RANKMAP_THROW(NotSupported, "{} tasks: rankmap run reorders jobs of at most {} ranks", tasks,
                  kMaxJobRanks);
  const int total = static_cast<int>(tasks);
  if (total % hostsN != 0)
    RANKMAP_THROW(NotSupported, "{} tasks on {} nodes: uneven block placement is not modelled",
                  total, hostsN);
  if (perNode && int64_t{*perNode} * hostsN != total)
    RANKMAP_THROW(NotSupported, "--ntasks {} and --ntasks-per-node {} on {} nodes disagree", total,
                  *perNode, hostsN);
  for (const auto& n : nodes) c->job_.hosts.push_back({n, total / hostsN});
  return c;
}

std::vector<std::string> SrunCommand::rebuild(const std::vector<std::string>& dropNames,
                                              const std::vector<std::string>& insert) const {
  std::vector<WordSpan> spans;
  for (const auto& it : items_)
    if (std::find(dropNames.begin(), dropNames.end(), it.name) != dropNames.end())
      spans.push_back({it.index, it.words});
  return rebuildCommandLine(argv_, spans, insert);
}

Command SrunCommand::launchInOrder(const std::vector<JobHost>& ordered,
                                   const std::string& dir) const {
  std::string hostfile = sequentialHostfile(ordered, job_.worldSize(),
                                            "tasks in the reordered SLURM_HOSTFILE vs the job");
  const int world = job_.worldSize();
  std::string path = dir + "/slurm-hostfile";
  Command cmd;
  auto srun = rebuild({"nodelist", "distribution", "ntasks", "ntasks-per-node"},
                      {"--distribution=arbitrary", "--ntasks=" + std::to_string(world)});
  cmd.argv = {"env", "SLURM_HOSTFILE=" + path};
  cmd.argv.insert(cmd.argv.end(), srun.begin(), srun.end());
  cmd.files.emplace_back(path, std::move(hostfile));
  return cmd;
}

Command SrunCommand::withShim(const std::string& shimLib, const ShimEnv& env) const {
  std::optional<std::string> exp;
  for (const auto& it : items_)
    if (it.name == "export") exp = it.value;
  std::string preload = shimLib;
  if (const char* p = std::getenv("LD_PRELOAD"); p && *p) preload += std::string(":") + p;
  std::string base = !exp || *exp == "NONE" ? std::string(exp ? "" : "ALL,") : *exp + ",";
  Command cmd;
  std::string exports = "--export=" + base + "LD_PRELOAD=" + preload;
  for (const auto& [name, value] : env) exports += "," + name + "=" + value;
  cmd.argv = rebuild({"export"}, {exports});
  return cmd;
}

}  // namespace rankmap::launch
