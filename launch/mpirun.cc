#include "launch/mpirun.h"

#include <map>

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "launch/ompi_rules.h"

namespace rankmap::launch {
namespace {

// How rankmap run treats an option.
enum class OptKind {
  kPlain,      // no effect on placement; kept as is
  kLaunch,     // no effect on placement, needed to start processes on the hosts: kept as is,
               // also in the check that every host reads the rules file
  kNp,         // -np N
  kHostfile,   // --hostfile F
  kHosts,      // --host LIST
  kMca,        // --mca KEY VALUE: looked at (rmaps*, hostfile keys)
  kExport,     // -x VAR[=VALUE]
  kPlacement,  // places ranks in a way rankmap run does not model: refuse
};

using OptSpec = LauncherOption<OptKind>;

// Open MPI 4.1 mpirun options (orte/orted/orted_submit.c and schizo/ompi). An option not listed
// here is unknown: its word count is unknown, so the program cannot be found reliably.
constexpr OptSpec kOptions[] = {
    {"np", 1, OptKind::kNp},
    {"n", 1, OptKind::kNp},
    {"c", 1, OptKind::kNp},
    {"hostfile", 1, OptKind::kHostfile},
    {"machinefile", 1, OptKind::kHostfile},
    {"host", 1, OptKind::kHosts},
    {"H", 1, OptKind::kHosts},
    {"mca", 2, OptKind::kMca},
    {"gmca", 2, OptKind::kMca},
    {"omca", 2, OptKind::kMca},
    {"x", 1, OptKind::kExport},
    // Placement we do not model.
    {"default-hostfile", 1, OptKind::kPlacement},
    {"map-by", 1, OptKind::kPlacement},
    {"rank-by", 1, OptKind::kPlacement},
    {"npernode", 1, OptKind::kPlacement},
    {"N", 1, OptKind::kPlacement},
    {"pernode", 0, OptKind::kPlacement},
    {"npersocket", 1, OptKind::kPlacement},
    {"ppr", 1, OptKind::kPlacement},
    {"rankfile", 1, OptKind::kPlacement},
    {"rf", 1, OptKind::kPlacement},
    {"nolocal", 0, OptKind::kPlacement},
    {"bynode", 0, OptKind::kPlacement},
    {"byslot", 0, OptKind::kPlacement},
    {"bysocket", 0, OptKind::kPlacement},
    {"cpus-per-proc", 1, OptKind::kPlacement},
    {"cpus-per-rank", 1, OptKind::kPlacement},
    {"app", 1, OptKind::kPlacement},
    {"am", 1, OptKind::kPlacement},
    {"tune", 1, OptKind::kPlacement},
    {"max-vm-size", 1, OptKind::kPlacement},
    {"novm", 0, OptKind::kPlacement},
    {"dvm", 0, OptKind::kPlacement},
    {"hnp", 1, OptKind::kPlacement},
    {"h", 0, OptKind::kPlacement},
    {"help", 0, OptKind::kPlacement},
    {"V", 0, OptKind::kPlacement},
    {"version", 0, OptKind::kPlacement},
    // No effect on placement, with a value.
    {"bind-to", 1, OptKind::kLaunch},
    {"prefix", 1, OptKind::kLaunch},
    {"wdir", 1, OptKind::kLaunch},
    {"wd", 1, OptKind::kLaunch},
    {"path", 1, OptKind::kLaunch},
    {"preload-files", 1, OptKind::kPlain},
    {"output-filename", 1, OptKind::kPlain},
    {"stdin", 1, OptKind::kPlain},
    {"timeout", 1, OptKind::kPlain},
    {"report-uri", 1, OptKind::kPlain},
    {"report-pid", 1, OptKind::kPlain},
    {"launch-agent", 1, OptKind::kLaunch},
    {"ompi-server", 1, OptKind::kPlain},
    {"server-wait-time", 1, OptKind::kPlain},
    {"max-restarts", 1, OptKind::kPlain},
    {"xterm", 1, OptKind::kPlain},
    {"personality", 1, OptKind::kPlain},
    {"debugger", 1, OptKind::kPlain},
    // No effect on placement, no value.
    {"oversubscribe", 0, OptKind::kLaunch},
    {"nooversubscribe", 0, OptKind::kLaunch},
    {"use-hwthread-cpus", 0, OptKind::kLaunch},
    {"allow-run-as-root", 0, OptKind::kLaunch},
    {"tag-output", 0, OptKind::kPlain},
    {"timestamp-output", 0, OptKind::kPlain},
    {"merge-stderr-to-stdout", 0, OptKind::kPlain},
    {"xml", 0, OptKind::kPlain},
    {"q", 0, OptKind::kPlain},
    {"quiet", 0, OptKind::kPlain},
    {"v", 0, OptKind::kPlain},
    {"verbose", 0, OptKind::kPlain},
    {"report-bindings", 0, OptKind::kPlain},
    {"display-map", 0, OptKind::kPlain},
    {"display-devel-map", 0, OptKind::kPlain},
    {"display-allocation", 0, OptKind::kPlain},
    {"display-devel-allocation", 0, OptKind::kPlain},
    {"report-state-on-timeout", 0, OptKind::kPlain},
    {"get-stack-traces", 0, OptKind::kPlain},
    {"leave-session-attached", 0, OptKind::kPlain},
    {"show-progress", 0, OptKind::kPlain},
    {"d", 0, OptKind::kPlain},
    {"debug-devel", 0, OptKind::kPlain},
    {"debug", 0, OptKind::kPlain},
    {"debug-daemons", 0, OptKind::kPlain},
    {"debug-daemons-file", 0, OptKind::kPlain},
    {"do-not-resolve", 0, OptKind::kPlain},
    {"enable-recovery", 0, OptKind::kPlain},
    {"disable-recovery", 0, OptKind::kPlain},
    {"continuous", 0, OptKind::kPlain},
    {"hetero-nodes", 0, OptKind::kLaunch},
    {"noprefix", 0, OptKind::kLaunch},
    {"wait-for-server", 0, OptKind::kPlain},
    {"preload-binary", 0, OptKind::kPlain},
    {"s", 0, OptKind::kPlain},
    {"set-cwd-to-session-dir", 0, OptKind::kPlain},
    {"index-argv-by-rank", 0, OptKind::kPlain},
    {"output-proctable", 0, OptKind::kPlain},
    {"tv", 0, OptKind::kPlain},
    {"report-child-jobs-separately", 0, OptKind::kPlain},
    {"use-regexp", 0, OptKind::kPlain},
    {"fwd-mpirun-port", 0, OptKind::kPlain},
};

// Slot-count synonyms Open MPI's hostfile lexer accepts.
constexpr std::string_view kSlotKeys[] = {"slots", "slot", "cpu", "cpus", "count"};
constexpr std::string_view kMaxSlotKeys[] = {"max_slots", "max-slots", "max_slot", "max-slot"};

}  // namespace

std::vector<HostEntry> parseOmpiHostfile(std::string_view text, std::string_view source) {
  std::vector<HostEntry> out;
  forEachHostfileLine(text, [&](size_t lineNo, const std::vector<std::string_view>& words) {
    HostEntry e;
    e.spelling = std::string(words[0]);
    if (e.spelling.find('=') != std::string::npos)
      RANKMAP_THROW(NotSupported, "{}:{}: expected a host name first, got {:?}", source, lineNo,
                    e.spelling);
    for (size_t w = 1; w < words.size(); ++w) {
      auto word = words[w];
      auto eq = word.find('=');
      std::string_view key = word.substr(0, eq);
      std::string_view val =
          eq == std::string_view::npos ? std::string_view{} : word.substr(eq + 1);
      bool isSlots = false, isMax = false;
      for (auto k : kSlotKeys) isSlots |= key == k;
      for (auto k : kMaxSlotKeys) isMax |= key == k;
      if (eq == std::string_view::npos && words.size() == 2)
        refuseRankmapHostsLine(source, lineNo, e.spelling, word,
                               "Open MPI's hostfile (`host slots=N` per line)", "mpirun",
                               e.spelling + " slots=1");
      if (eq == std::string_view::npos || (!isSlots && !isMax))
        RANKMAP_THROW(NotSupported,
                      "{}:{}: hostfile token {:?} not understood (rankmap run "
                      "knows slots= and max_slots=)",
                      source, lineNo, std::string(word));
      int v = parsePositiveInt(val, fmt::format("{}:{}: {}", source, lineNo, key));
      if (isSlots) e.slots = addRanks(e.slots.value_or(0), v, fmt::format("{}:{}", source, lineNo));
    }
    out.push_back(std::move(e));
  });
  return out;
}

std::vector<HostEntry> parseOmpiHostList(std::string_view list) {
  std::vector<HostEntry> out;
  while (true) {
    auto comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    if (item.empty()) RANKMAP_THROW(NotSupported, "--host: empty host in {:?}", std::string(list));
    HostEntry e;
    auto colon = item.rfind(':');
    if (colon != std::string_view::npos) {
      auto count = item.substr(colon + 1);
      if (count == "*" || count.empty())
        RANKMAP_THROW(NotSupported, "--host: {:?}: only host or host:N is understood",
                      std::string(item));
      e.slots = parsePositiveInt(count, fmt::format("--host {}", std::string(item)));
      item = item.substr(0, colon);
      if (item.find(':') != std::string_view::npos)
        RANKMAP_THROW(NotSupported, "--host: {:?}: IPv6 addresses are not understood",
                      std::string(item));
    }
    e.spelling = std::string(item);
    out.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);
  }
  return out;
}

bool isMpirun(const std::string& argv0) {
  std::string_view base(argv0);
  if (auto slash = base.rfind('/'); slash != std::string_view::npos) base = base.substr(slash + 1);
  for (std::string_view name : {"mpirun", "mpiexec", "orterun"}) {
    if (base == name) return true;
    if (base.size() > name.size() && base.substr(0, name.size()) == name &&
        (base[name.size()] == '.' || base[name.size()] == '-'))
      return true;
  }
  return false;
}

std::unique_ptr<MpirunCommand> MpirunCommand::parse(const std::vector<std::string>& argv,
                                                    FileReader read, EnvLookup env) {
  if (!read) read = [](const std::string& p) { return readFile(p, 64u << 20); };
  // Open MPI's own variables (OMPI_MCA_*), read to learn the job's placement.
  if (!env) env = processEnv;
  if (argv.empty() || !isMpirun(argv[0])) RANKMAP_THROW(NotSupported, "not an mpirun command");
  std::unique_ptr<MpirunCommand> c(new MpirunCommand);
  c->argv_ = argv;

  std::optional<std::string> rmaps = env("OMPI_MCA_rmaps");
  for (const char* v : {"OMPI_MCA_rmaps_base_mapping_policy", "OMPI_MCA_rmaps_base_ranking_policy",
                        "OMPI_MCA_orte_default_hostfile", "OMPI_MCA_rmaps_base_n_pernode"}) {
    if (auto val = env(v); val && !val->empty())
      RANKMAP_THROW(NotSupported, "environment {}={} sets placement", v, *val);
  }
  std::vector<std::string> hostfiles;
  std::vector<HostEntry> hostList;
  auto walk = walkOptions<OptKind>(argv, kOptions, OptKind::kPlacement);
  for (auto& [item, spec] : walk.options) {
    const size_t i = item.index;
    const std::string& w = argv[i];
    size_t idx = c->items_.size();
    switch (spec->kind) {
      case OptKind::kNp:
        c->np_ = parsePositiveInt(argv[i + 1], w);
        c->npItems_.push_back(idx);
        break;
      case OptKind::kHostfile:
        hostfiles.push_back(argv[i + 1]);
        c->hostItems_.push_back(idx);
        break;
      case OptKind::kHosts: {
        auto entries = parseOmpiHostList(argv[i + 1]);
        hostList.insert(hostList.end(), entries.begin(), entries.end());
        c->hostItems_.push_back(idx);
        break;
      }
      case OptKind::kMca: {
        const std::string& key = argv[i + 1];
        const std::string& val = argv[i + 2];
        if (key != "rmaps") c->launchItems_.push_back(idx);  // the check places its own ranks
        if (c->collTunedBy_.empty() && decidesCollTuned(key, val))
          c->collTunedBy_ = fmt::format("{} {} {}", w, key, val);
        if (key == "rmaps") {
          rmaps = val;
          c->rmapsItems_.push_back(idx);
        } else if (key.rfind("rmaps", 0) == 0 || key.find("hostfile") != std::string::npos ||
                   key == "orte_default_hostfile") {
          RANKMAP_THROW(NotSupported, "{} {} {} sets placement", w, key, val);
        }
        break;
      }
      case OptKind::kExport: {
        const std::string& v = argv[i + 1];
        auto eq = v.find('=');
        std::string var = v.substr(0, eq);
        if (var != "LD_PRELOAD") c->launchItems_.push_back(idx);
        if (c->collTunedBy_.empty() && var.rfind("OMPI_MCA_", 0) == 0) {
          std::string value = eq != std::string::npos ? v.substr(eq + 1) : env(var).value_or("");
          if (decidesCollTuned(var.substr(9), value))
            c->collTunedBy_ = fmt::format("{} {}={}", w, var, value);
        }
        if (var == "LD_PRELOAD") {
          if (eq != std::string::npos) {
            c->ldPreload_ = v.substr(eq + 1);
          } else if (auto e = env("LD_PRELOAD")) {
            c->ldPreload_ = *e;
          }
          c->shimItems_.push_back(idx);
        } else if (var == "RANKMAP_PLAN") {
          c->shimItems_.push_back(idx);
        }
        break;
      }
      case OptKind::kLaunch:
        c->launchItems_.push_back(idx);
        break;
      case OptKind::kPlain:
      case OptKind::kPlacement:
        break;
    }
    c->items_.push_back(std::move(item));
  }
  c->program_ = walk.program;

  if (rmaps && *rmaps != "seq")
    RANKMAP_THROW(NotSupported, "--mca rmaps {} (rankmap run models the default mapper and seq)",
                  *rmaps);
  c->sequential_ = rmaps.has_value();
  if (hostfiles.size() > 1) RANKMAP_THROW(NotSupported, "more than one --hostfile");
  if (!hostfiles.empty() && !hostList.empty())
    RANKMAP_THROW(NotSupported,
                  "both --hostfile and --host (Open MPI then filters one by the other)");
  if (hostfiles.empty() && hostList.empty())
    RANKMAP_THROW(NotSupported,
                  "no --hostfile or --host: the hosts come from the resource "
                  "manager or a default hostfile, which rankmap run does not read");

  std::vector<HostEntry> entries;
  if (!hostfiles.empty()) {
    entries = parseOmpiHostfile(read(hostfiles[0]), hostfiles[0]);
    if (entries.empty()) RANKMAP_THROW(InvalidInput, "hostfile {} lists no host", hostfiles[0]);
  } else {
    entries = hostList;
  }

  Job job;
  if (c->sequential_) {
    // Rank i on entry i; the first np entries.
    size_t n = c->np_ ? static_cast<size_t>(*c->np_) : entries.size();
    if (n > entries.size())
      RANKMAP_THROW(NotSupported, "-np {} with rmaps seq and only {} hostfile lines", n,
                    entries.size());
    std::map<std::string, size_t> where;
    for (size_t r = 0; r < n; ++r) {
      const std::string& host = entries[r].spelling;
      auto it = where.find(host);
      if (it == where.end()) {
        where[host] = job.hosts.size();
        job.hosts.push_back({host, 1});
      } else {
        // Seen before: contiguous only if it is the previous line's host.
        if (entries[r - 1].spelling != host) job.contiguous = false;
        job.hosts[it->second].ranks += 1;
      }
    }
  } else {
    // By slot: hosts in order of first appearance, each filled to its slots.
    std::vector<HostEntry> hosts;
    std::map<std::string, size_t> where;
    for (const auto& e : entries) {
      if (!hostfiles.empty() && !e.slots)
        RANKMAP_THROW(NotSupported,
                      "hostfile {}: host {} has no slots= (Open MPI would count its "
                      "cores, which rankmap run cannot see); add slots= or use --mca rmaps seq",
                      hostfiles[0], e.spelling);
      int slots = e.slots.value_or(1);
      auto it = where.find(e.spelling);
      if (it == where.end()) {
        where[e.spelling] = hosts.size();
        hosts.push_back({e.spelling, slots});
      } else {
        *hosts[it->second].slots = addRanks(*hosts[it->second].slots, slots, e.spelling);
      }
    }
    int total = 0;
    for (const auto& h : hosts) total = addRanks(total, *h.slots, "slots of the job's hosts");
    int np = c->np_.value_or(total);
    if (np > total)
      RANKMAP_THROW(NotSupported, "-np {} exceeds the {} slots (oversubscription)", np, total);
    for (const auto& h : hosts) {
      if (np == 0) break;
      int k = std::min(np, *h.slots);
      job.hosts.push_back({h.spelling, k});
      np -= k;
    }
  }
  c->job_ = std::move(job);
  return c;
}

std::vector<std::string> MpirunCommand::rebuild(const std::vector<size_t>& drop,
                                                const std::vector<std::string>& insert) const {
  std::vector<WordSpan> spans;
  for (size_t d : drop) spans.push_back({items_.at(d).index, items_.at(d).words});
  return rebuildCommandLine(argv_, spans, insert);
}

Command MpirunCommand::launchInOrder(const std::vector<JobHost>& ordered,
                                     const std::string& dir) const {
  std::string hostfile =
      sequentialHostfile(ordered, job_.worldSize(), "ranks in the reordered hostfile vs the job");
  const int world = job_.worldSize();
  std::string path = dir + "/hostfile";
  std::vector<size_t> drop = hostItems_;
  drop.insert(drop.end(), rmapsItems_.begin(), rmapsItems_.end());
  drop.insert(drop.end(), npItems_.begin(), npItems_.end());
  Command cmd;
  cmd.argv =
      rebuild(drop, {"--hostfile", path, "--mca", "rmaps", "seq", "-np", std::to_string(world)});
  cmd.files.emplace_back(path, std::move(hostfile));
  return cmd;
}

std::vector<std::string> MpirunCommand::withCollRules(std::vector<std::string> argv,
                                                      const std::string& path) const {
  // Right after mpirun's name: options may come in any order before the program.
  auto opts = collTunedOptions(path);
  argv.insert(argv.begin() + std::min<size_t>(1, argv.size()), opts.begin(), opts.end());
  return argv;
}

Command MpirunCommand::everyHostReads(const std::string& path, const std::string& dir) const {
  Command cmd;
  std::string hosts;
  for (const auto& h : job_.hosts) hosts += h.spelling + "\n";
  std::string hostfile = dir + "/hostfile-check";
  cmd.files.emplace_back(hostfile, hosts);
  cmd.argv = {argv_[0]};
  for (size_t idx : launchItems_) {
    const Item& it = items_[idx];
    cmd.argv.insert(cmd.argv.end(), argv_.begin() + static_cast<long>(it.index),
                    argv_.begin() + static_cast<long>(it.index + it.words));
  }
  std::vector<std::string> tail = {"--hostfile",
                                   hostfile,
                                   "--mca",
                                   "rmaps",
                                   "seq",
                                   "-np",
                                   std::to_string(job_.hosts.size()),
                                   "/bin/sh",
                                   "-c",
                                   "test -r \"$0\"",
                                   path};
  cmd.argv.insert(cmd.argv.end(), tail.begin(), tail.end());
  return cmd;
}

Command MpirunCommand::withShim(const std::string& shimLib, const ShimEnv& env) const {
  std::string preload = shimLib;
  if (!ldPreload_.empty()) preload += ":" + ldPreload_;
  std::vector<std::string> words{"-x", "LD_PRELOAD=" + preload};
  for (const auto& [name, value] : env) words.insert(words.end(), {"-x", name + "=" + value});
  Command cmd;
  cmd.argv = rebuild(shimItems_, words);
  return cmd;
}

}  // namespace rankmap::launch
