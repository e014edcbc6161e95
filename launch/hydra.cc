#include "launch/hydra.h"

#include <map>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"

namespace rankmap::launch {
namespace {

// How rankmap run treats a Hydra option.
enum class HydraOptKind {
  kPlain,      // no effect on placement; kept as is
  kNp,         // -n N
  kHostfile,   // -f FILE
  kHosts,      // -hosts LIST
  kPpn,        // -ppn N
  kEnv,        // -genv/-env NAME VALUE
  kPlacement,  // places ranks in a way rankmap run does not model: refuse
};

using HydraOptSpec = LauncherOption<HydraOptKind>;

// MPICH 4.0's mpiexec.hydra options (`mpiexec.hydra -h`, and the aliases its parser takes). An
// option not listed here is unknown: its word count is unknown, so the program cannot be found.
constexpr HydraOptSpec kHydraOptions[] = {
    {"n", 1, HydraOptKind::kNp},
    {"np", 1, HydraOptKind::kNp},
    {"f", 1, HydraOptKind::kHostfile},
    {"hostfile", 1, HydraOptKind::kHostfile},
    {"machinefile", 1, HydraOptKind::kHostfile},
    {"hosts", 1, HydraOptKind::kHosts},
    {"host", 1, HydraOptKind::kHosts},
    {"ppn", 1, HydraOptKind::kPpn},
    {"genv", 2, HydraOptKind::kEnv},
    {"env", 2, HydraOptKind::kEnv},
    // Placement we do not model.
    {"configfile", 1, HydraOptKind::kPlacement},
    {"rmk", 1, HydraOptKind::kPlacement},
    {"order-nodes", 1, HydraOptKind::kPlacement},
    {"skip-launch-node", 0, HydraOptKind::kPlacement},
    {"map-by", 1, HydraOptKind::kPlacement},
    {"ranks-per-proc", 1, HydraOptKind::kPlacement},
    {"h", 0, HydraOptKind::kPlacement},
    {"help", 0, HydraOptKind::kPlacement},
    {"info", 0, HydraOptKind::kPlacement},
    {"version", 0, HydraOptKind::kPlacement},
    // No effect on placement, with a value.
    {"genvlist", 1, HydraOptKind::kPlain},
    {"envlist", 1, HydraOptKind::kPlain},
    {"wdir", 1, HydraOptKind::kPlain},
    {"launcher", 1, HydraOptKind::kPlain},
    {"bootstrap", 1, HydraOptKind::kPlain},
    {"launcher-exec", 1, HydraOptKind::kPlain},
    {"bootstrap-exec", 1, HydraOptKind::kPlain},
    {"topolib", 1, HydraOptKind::kPlain},
    {"bind-to", 1, HydraOptKind::kPlain},
    {"binding", 1, HydraOptKind::kPlain},
    {"membind", 1, HydraOptKind::kPlain},
    {"demux", 1, HydraOptKind::kPlain},
    {"iface", 1, HydraOptKind::kPlain},
    {"prepend-pattern", 1, HydraOptKind::kPlain},
    {"outfile-pattern", 1, HydraOptKind::kPlain},
    {"errfile-pattern", 1, HydraOptKind::kPlain},
    {"nameserver", 1, HydraOptKind::kPlain},
    {"localhost", 1, HydraOptKind::kPlain},
    {"usize", 1, HydraOptKind::kPlain},
    {"gpus-per-proc", 1, HydraOptKind::kPlain},
    // No effect on placement, no value.
    {"genvnone", 0, HydraOptKind::kPlain},
    {"genvall", 0, HydraOptKind::kPlain},
    {"envnone", 0, HydraOptKind::kPlain},
    {"envall", 0, HydraOptKind::kPlain},
    {"enable-x", 0, HydraOptKind::kPlain},
    {"disable-x", 0, HydraOptKind::kPlain},
    {"verbose", 0, HydraOptKind::kPlain},
    {"v", 0, HydraOptKind::kPlain},
    {"print-all-exitcodes", 0, HydraOptKind::kPlain},
    {"profile", 0, HydraOptKind::kPlain},
    {"prepend-rank", 0, HydraOptKind::kPlain},
    {"l", 0, HydraOptKind::kPlain},
    {"disable-auto-cleanup", 0, HydraOptKind::kPlain},
    {"disable-hostname-propagation", 0, HydraOptKind::kPlain},
    {"pmi-port", 0, HydraOptKind::kPlain},
};

// One `host[:N]` (hostfile word or list item).
HostEntry parseEntry(std::string_view item, const std::string& where) {
  HostEntry e;
  auto colon = item.find(':');
  if (colon != std::string_view::npos) {
    e.slots = parsePositiveInt(item.substr(colon + 1), fmt::format("{} {}", where, item));
    item = item.substr(0, colon);
  }
  if (item.empty()) RANKMAP_THROW(NotSupported, "{}: empty host name", where);
  e.spelling = std::string(item);
  return e;
}

}  // namespace

std::vector<HostEntry> parseHydraHostfile(std::string_view text, std::string_view source) {
  std::vector<HostEntry> out;
  forEachHostfileLine(text, [&](size_t lineNo, const std::vector<std::string_view>& words) {
    if (words.size() == 2 && words[1].find('=') == std::string_view::npos)
      refuseRankmapHostsLine(source, lineNo, words[0], words[1],
                             "MPICH's hostfile (`host[:N]` per line)", "mpiexec",
                             std::string(words[0]) + ":1");
    if (words.size() > 1)
      RANKMAP_THROW(NotSupported,
                    "{}:{}: hostfile token {:?} not understood (rankmap run knows host[:N])",
                    source, lineNo, std::string(words[1]));
    out.push_back(parseEntry(words[0], fmt::format("{}:{}:", source, lineNo)));
  });
  return out;
}

std::vector<HostEntry> parseHydraHostList(std::string_view list) {
  std::vector<HostEntry> out;
  while (true) {
    auto comma = list.find(',');
    out.push_back(parseEntry(list.substr(0, comma), "-hosts"));
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);
  }
  return out;
}

std::unique_ptr<HydraCommand> HydraCommand::parse(const std::vector<std::string>& argv,
                                                  FileReader read, EnvLookup env) {
  if (!read) read = [](const std::string& p) { return readFile(p, 64u << 20); };
  if (!env) env = processEnv;
  if (argv.empty()) RANKMAP_THROW(NotSupported, "no command");
  std::unique_ptr<HydraCommand> c(new HydraCommand);
  c->argv_ = argv;
  std::vector<std::string> hostfiles;
  std::vector<HostEntry> hostList;
  std::optional<int> ppn;
  bool envNone = false;
  std::optional<std::string> preload;
  auto walk = walkOptions<HydraOptKind>(argv, kHydraOptions, HydraOptKind::kPlacement);
  for (const auto& [item, spec] : walk.options) {
    const size_t i = item.index;
    const std::string& w = argv[i];
    const std::string_view name = item.name;
    size_t idx = c->items_.size();
    c->items_.push_back(item);
    switch (spec->kind) {
      case HydraOptKind::kNp:
        c->np_ = parsePositiveInt(argv[i + 1], w);
        c->placementItems_.push_back(idx);
        break;
      case HydraOptKind::kHostfile:
        hostfiles.push_back(argv[i + 1]);
        c->placementItems_.push_back(idx);
        break;
      case HydraOptKind::kHosts: {
        auto entries = parseHydraHostList(argv[i + 1]);
        hostList.insert(hostList.end(), entries.begin(), entries.end());
        c->placementItems_.push_back(idx);
        break;
      }
      case HydraOptKind::kPpn:
        ppn = parsePositiveInt(argv[i + 1], w);
        c->placementItems_.push_back(idx);
        break;
      case HydraOptKind::kEnv:
        if (argv[i + 1] == "LD_PRELOAD") {
          preload = argv[i + 2];
          c->shimItems_.push_back(idx);
        } else if (argv[i + 1] == "RANKMAP_PLAN") {
          c->shimItems_.push_back(idx);
        }
        break;
      case HydraOptKind::kPlain:
        envNone |= name == "genvnone" || name == "envnone";
        break;
      case HydraOptKind::kPlacement:
        break;
    }
  }
  c->program_ = walk.program;
  // Hydra passes the launching environment to the ranks unless told not to: an LD_PRELOAD there
  // reaches them, and shim mode keeps it after the shim.
  if (!preload && !envNone) preload = env("LD_PRELOAD");
  c->ldPreload_ = preload.value_or("");

  if (hostfiles.size() > 1) RANKMAP_THROW(NotSupported, "more than one -f");
  if (!hostfiles.empty() && !hostList.empty()) RANKMAP_THROW(NotSupported, "both -f and -hosts");
  if (hostfiles.empty() && hostList.empty()) {
    // Hydra's default hostfile.
    if (auto f = env("HYDRA_HOST_FILE"); f && !f->empty()) {
      hostfiles.push_back(*f);
    } else {
      RANKMAP_THROW(NotSupported,
                    "no -f or -hosts (and no HYDRA_HOST_FILE): the hosts come from the resource "
                    "manager or the local machine, which rankmap run does not read");
    }
  }
  std::vector<HostEntry> entries;
  if (!hostfiles.empty()) {
    entries = parseHydraHostfile(read(hostfiles[0]), hostfiles[0]);
    if (entries.empty()) RANKMAP_THROW(InvalidInput, "hostfile {} lists no host", hostfiles[0]);
  } else {
    entries = hostList;
  }
  // Rounds over the entries, each giving its N ranks, until np ranks are placed.
  int perRound = 0;
  for (const auto& e : entries)
    perRound = addRanks(perRound, ppn.value_or(e.slots.value_or(1)), "ranks per round of hosts");
  const int np = c->np_.value_or(perRound);
  std::vector<const std::string*> rankHost;
  rankHost.reserve(static_cast<size_t>(np));
  while (static_cast<int>(rankHost.size()) < np)
    for (const auto& e : entries)
      for (int k = ppn.value_or(e.slots.value_or(1));
           k > 0 && static_cast<int>(rankHost.size()) < np; --k)
        rankHost.push_back(&e.spelling);
  Job job;
  std::map<std::string, size_t> where;
  for (size_t r = 0; r < rankHost.size(); ++r) {
    const std::string& host = *rankHost[r];
    auto it = where.find(host);
    if (it == where.end()) {
      where[host] = job.hosts.size();
      job.hosts.push_back({host, 1});
    } else {
      if (*rankHost[r - 1] != host) job.contiguous = false;
      job.hosts[it->second].ranks += 1;
    }
  }
  c->job_ = std::move(job);
  return c;
}

std::vector<std::string> HydraCommand::rebuild(const std::vector<size_t>& drop,
                                               const std::vector<std::string>& insert) const {
  std::vector<WordSpan> spans;
  for (size_t d : drop) spans.push_back({items_.at(d).index, items_.at(d).words});
  return rebuildCommandLine(argv_, spans, insert);
}

Command HydraCommand::launchInOrder(const std::vector<JobHost>& ordered,
                                    const std::string& dir) const {
  // One `host:K` line per host: one round places every rank, a host's ranks contiguous.
  std::string hostfile;
  int world = 0;
  for (const auto& h : ordered) {
    hostfile += fmt::format("{}:{}\n", h.spelling, h.ranks);
    world += h.ranks;
  }
  RANKMAP_ENFORCE_EQ(world, job_.worldSize(), "ranks in the reordered hostfile vs the job");
  std::string path = dir + "/hostfile";
  Command cmd;
  cmd.argv = rebuild(placementItems_, {"-f", path, "-n", std::to_string(world)});
  cmd.files.emplace_back(path, std::move(hostfile));
  return cmd;
}

Command HydraCommand::withShim(const std::string& shimLib, const ShimEnv& env) const {
  std::string preload = shimLib;
  if (!ldPreload_.empty()) preload += ":" + ldPreload_;
  std::vector<std::string> words{"-genv", "LD_PRELOAD", preload};
  for (const auto& [name, value] : env) words.insert(words.end(), {"-genv", name, value});
  Command cmd;
  cmd.argv = rebuild(shimItems_, words);
  return cmd;
}

}  // namespace rankmap::launch
