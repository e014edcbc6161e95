#include "launch/launch.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/plan_agreement.h"
#include "launch/mpi_family.h"
#include "launch/ompi_rules.h"
#include "reorder/mesh.h"

namespace rankmap::launch {
namespace {

std::string describeCounts(const Job& job) {
  if (auto k = job.uniformRanksPerHost())
    return fmt::format("{} host(s) x {} rank(s)", job.hosts.size(), *k);
  std::string s;
  for (const auto& h : job.hosts) s += (s.empty() ? "" : ",") + std::to_string(h.ranks);
  return fmt::format("{} host(s) with {} rank(s)", job.hosts.size(), s);
}

std::string prediction(const Plan& plan, bool inputIsJobOrder) {
  // A plan for a job's mesh is judged by the step of all its groups, not by the world ring.
  if (plan.mesh && plan.mesh->stepUs > 0) {
    std::string dims = reorder::meshText(plan.mesh->dims);
    return fmt::format(
        "predicted step {:.2f}x faster for mesh {} than {} ({:.2f}x than the "
        "world ring's plan)",
        plan.mesh->inputStepUs / plan.mesh->stepUs, dims,
        inputIsJobOrder ? "the launcher's order" : "the plan's input order",
        plan.mesh->worldRingStepUs / plan.mesh->stepUs);
  }
  if (plan.predicted.speedup <= 0 || plan.predicted.basis.empty())
    return "the plan carries no prediction";
  return fmt::format("predicted {:.2f}x faster for {} than {}", plan.predicted.speedup,
                     plan.predicted.basis,
                     inputIsJobOrder ? "the launcher's order" : "the plan's input order");
}

std::string stripUser(const std::string& spelling) {
  auto at = spelling.find('@');
  return at == std::string::npos ? spelling : spelling.substr(at + 1);
}

// Hands Open MPI the plan's coll_tuned rules in `d` (whose command starts the job in plan order,
// or keeps the launcher's order when the plan does): when the setting allows, the launcher runs
// Open MPI, the plan holds rules for the job's world and no setting of the user's decides
// coll_tuned (then one line in d.notes says which). Returns the words for the main message:
// the rules file, or that the plan has no decision for the job; "" when there is nothing to say.
std::string addCollRules(const LaunchCommand& cmd, const Plan& p, const RunOptions& opts,
                         RunDecision& d) {
  if (opts.rules == RulesMode::kOff) return "";
  auto onCommandLine = cmd.collTunedOnCommandLine();
  if (!onCommandLine) {  // not an Open MPI launcher
    return cmd.mpiFamily() == MpiFamily::kMpich
               ? ", MPICH's own algorithms (Open MPI's coll_tuned rules from the plan do not apply)"
               : "";
  }
  std::string user = !onCommandLine->empty() ? *onCommandLine : opts.userCollTuned.value_or("");
  if (!user.empty()) {
    d.notes.push_back(
        fmt::format("rankmap run: Open MPI's coll_tuned rules from the plan not "
                    "added: your setting decides ({})",
                    user));
    return "";
  }
  std::string content = collTunedRules(p);
  if (content.empty())
    return fmt::format(
        ", Open MPI's own algorithms (the plan has no Open MPI decision for {} ranks)",
        p.worldSize());
  RulesDecision r;
  r.kept = !opts.rulesPath.empty();
  r.path = r.kept ? opts.rulesPath : opts.dir + "/coll_tuned_rules.conf";
  r.content = std::move(content);
  r.withoutRules = d.command.argv;
  if (opts.rules == RulesMode::kAuto) r.check = cmd.everyHostReads(r.path, opts.dir);
  d.command.argv = cmd.withCollRules(d.command.argv, r.path);
  if (!r.kept) d.command.files.emplace_back(r.path, r.content);
  std::string text = fmt::format(", Open MPI's algorithms from the plan (coll_tuned rules {}{})",
                                 r.path, r.check.argv.empty() ? "" : ", if every host reads them");
  d.rules = std::move(r);
  return text;
}

// The advice compares the engine with Open MPI's algorithms: said to Open MPI jobs only.
void addEngineAdvice(const LaunchCommand& cmd, const Plan& p, const RunOptions& opts,
                     RunDecision& d) {
  if (opts.engineRouting || cmd.mpiFamily() == MpiFamily::kMpich) return;
  if (auto advice = engineAdvice(p)) d.notes.push_back(*advice);
}

}  // namespace

RulesMode parseRulesMode(const std::string& text) {
  if (text == "0" || text == "off") return RulesMode::kOff;
  if (text == "auto") return RulesMode::kAuto;
  if (text == "1" || text == "on") return RulesMode::kOn;
  RANKMAP_THROW(InvalidInput, "RANKMAP_MPI_RULES={:?}: expected auto, 1 (on) or 0 (off)", text);
}

int Job::worldSize() const {
  int n = 0;
  for (const auto& h : hosts) n += h.ranks;
  return n;
}

std::optional<int> Job::uniformRanksPerHost() const {
  if (hosts.empty()) return std::nullopt;
  for (const auto& h : hosts)
    if (h.ranks != hosts[0].ranks) return std::nullopt;
  return hosts[0].ranks;
}

Mode parseMode(const std::string& text) {
  if (text == "launch") return Mode::kLaunch;
  if (text == "shim") return Mode::kShim;
  if (text == "auto") return Mode::kAuto;
  RANKMAP_THROW(InvalidInput, "--mode {:?}: expected launch, shim or auto", text);
}

const char* modeName(Mode m) {
  switch (m) {
    case Mode::kLaunch:
      return "launch";
    case Mode::kShim:
      return "shim";
    case Mode::kAuto:
      return "auto";
  }
  return "?";
}

std::vector<std::string> matchHosts(const std::vector<JobHost>& hosts,
                                    const std::vector<std::string>& planHosts,
                                    const std::vector<Host>& known) {
  std::set<std::string> inPlan(planHosts.begin(), planHosts.end());
  std::map<std::string, std::string> byAddress;
  for (const auto& h : known)
    if (!h.address.empty()) byAddress[h.ip()] = h.name;
  std::vector<std::string> names;
  std::map<std::string, std::string> seen;  // plan name -> spelling
  for (const auto& h : hosts) {
    std::string s = stripUser(h.spelling);
    std::string name;
    if (inPlan.count(s)) {
      name = s;
    } else if (auto it = byAddress.find(s); it != byAddress.end() && inPlan.count(it->second)) {
      name = it->second;
    } else {
      RANKMAP_THROW(InvalidInput, "job host {} is not in the plan ({} host(s): {}{})", h.spelling,
                    planHosts.size(),
                    fmt::join(planHosts.begin(),
                              planHosts.begin() + std::min<size_t>(4, planHosts.size()), ","),
                    planHosts.size() > 4 ? ",..." : "");
    }
    auto [it, fresh] = seen.emplace(name, h.spelling);
    if (!fresh)
      RANKMAP_THROW(InvalidInput, "job hosts {} and {} are both plan host {}", it->second,
                    h.spelling, name);
    names.push_back(name);
  }
  for (const auto& p : planHosts)
    if (!seen.count(p))
      RANKMAP_THROW(InvalidInput,
                    "plan host {} is not a host of the job (plan for {} hosts, job "
                    "on {})",
                    p, planHosts.size(), hosts.size());
  return names;
}

Plan adaptPlan(const Plan& plan, const std::vector<std::string>& hostsInJobOrder,
               int ranksPerHost) {
  Plan p = plan;
  p.hosts = hostsInJobOrder;
  // Open MPI's decision was modelled for the plan's world size: not for another one.
  if (ranksPerHost != p.ranksPerHost) p.openMpi.clear();
  p.ranksPerHost = ranksPerHost;
  p.derivePermutation();
  p.seal();
  return p;
}

RunDecision unchanged(const std::vector<std::string>& argv, const std::string& why) {
  RunDecision d;
  d.command.argv = argv;
  d.message = "rankmap run: running the original command unchanged: " + why;
  return d;
}

RunDecision prepareRun(const LaunchCommand& cmd, const std::optional<Plan>& plan,
                       const std::string& planError, const PlanSource& source,
                       const std::vector<Host>& known, const RunOptions& opts) {
  const auto& argv = cmd.argv();
  if (!plan)
    return unchanged(argv, fmt::format("no plan from {}: {}", source.description, planError));
  const Job& job = cmd.job();
  std::vector<std::string> names;
  try {
    names = matchHosts(job.hosts, plan->hosts, known);
  } catch (const Error& e) {
    return unchanged(argv, fmt::format("plan {} from {} does not cover the job: {}",
                                       shortPlanHash(plan->hash), source.description, e.what()));
  }
  Mode mode = opts.mode == Mode::kAuto ? Mode::kLaunch : opts.mode;
  Plan p = *plan;
  std::string notes;
  auto k = job.uniformRanksPerHost();
  if (k && *k != p.ranksPerHost) {
    if (!source.madeForJob)
      return unchanged(argv, fmt::format("plan {} from {} is for {} rank(s) per host ({} ranks); "
                                         "the job runs {} per host ({} ranks)",
                                         shortPlanHash(p.hash), source.description, p.ranksPerHost,
                                         p.worldSize(), *k, job.worldSize()));
    p = adaptPlan(p, p.hosts, *k);
    notes += fmt::format(", adapted to {} rank(s) per host", *k);
  }
  bool inputIsJobOrder = p.hosts == names;

  if (mode == Mode::kShim) {
    if (!k)
      return unchanged(argv, fmt::format("shim mode needs the same number of ranks on every "
                                         "host; the job runs {}",
                                         describeCounts(job)));
    if (!job.contiguous)
      return unchanged(argv,
                       "shim mode needs each host's ranks contiguous in the launcher's order");
    if (opts.shimLib.empty()) return unchanged(argv, "shim mode: " + opts.shimMissing);
    std::string planPath = opts.planPath;
    RunDecision d;
    if (!inputIsJobOrder) {
      p = adaptPlan(p, names, *k);
      notes += ", adapted to the launcher's host order";
      planPath.clear();
    }
    if (planPath.empty() || p.hash != plan->hash) {
      planPath = opts.dir + "/plan.json";
      d.command.files.emplace_back(planPath, p.dump());
    }
    ShimEnv env{{"RANKMAP_PLAN", planPath}};
    if (!opts.profileOut.empty()) env.emplace_back("RANKMAP_PROFILE_OUT", opts.profileOut);
    Command c = cmd.withShim(opts.shimLib, env);
    d.command.argv = std::move(c.argv);
    d.command.files.insert(d.command.files.end(), c.files.begin(), c.files.end());
    d.applied = true;
    std::string rules = addCollRules(cmd, p, opts, d);
    d.message = fmt::format(
        "rankmap run: shim mode: plan {} from {}{}: every rank preloads {} "
        "and reorders MPI_COMM_WORLD ({}){}; {}",
        shortPlanHash(p.hash), source.description, notes, opts.shimLib, describeCounts(job), rules,
        prediction(p, true));
    addEngineAdvice(cmd, p, opts, d);
    d.plan = std::move(p);
    return d;
  }

  // Launch mode: the job's hosts (with their rank counts) in plan order.
  std::map<std::string, size_t> pos;
  for (size_t i = 0; i < p.order.size(); ++i) pos[p.order[i]] = i;
  std::vector<size_t> idx(job.hosts.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return pos.at(names[a]) < pos.at(names[b]); });
  std::vector<JobHost> ordered;
  bool same = job.contiguous;
  for (size_t i = 0; i < idx.size(); ++i) {
    ordered.push_back(job.hosts[idx[i]]);
    same = same && idx[i] == i;
  }
  if (same) {
    // The launcher's order is the plan's: only Open MPI's algorithms can change.
    RunDecision d;
    d.command.argv = argv;
    std::string rules = addCollRules(cmd, p, opts, d);
    if (d.rules) {
      d.applied = true;
      d.message = fmt::format(
          "rankmap run: launch mode: plan {} from {}{} keeps the launcher's "
          "host order{}",
          shortPlanHash(p.hash), source.description, notes, rules);
    } else {
      std::vector<std::string> kept = std::move(d.notes);
      d = unchanged(argv, fmt::format("plan {} from {} keeps the launcher's host order{}",
                                      shortPlanHash(p.hash), source.description, rules));
      d.notes = std::move(kept);
    }
    addEngineAdvice(cmd, p, opts, d);
    d.plan = std::move(p);
    return d;
  }
  RunDecision d;
  d.command = cmd.launchInOrder(ordered, opts.dir);
  d.applied = true;
  std::string hostfile =
      d.command.files.empty() ? std::string("hostfile") : d.command.files[0].first;
  std::string rules = addCollRules(cmd, p, opts, d);
  d.message =
      fmt::format("rankmap run: launch mode: plan {} from {}{}: {} in plan order ({} {}){}; {}",
                  shortPlanHash(p.hash), source.description, notes, describeCounts(job), hostfile,
                  cmd.orderedLaunchHow(), rules, prediction(p, inputIsJobOrder));
  addEngineAdvice(cmd, p, opts, d);
  d.plan = std::move(p);
  return d;
}

std::string shellJoin(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& w : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("-_./=:,+@%").find(c) != std::string_view::npos;
    });
    if (plain) {
      out += w;
    } else {
      out += '\'';
      for (char c : w) {
        if (c == '\'')
          out += "'\\''";
        else
          out += c;
      }
      out += '\'';
    }
  }
  return out;
}

std::vector<std::string> rebuildCommandLine(const std::vector<std::string>& argv,
                                            const std::vector<WordSpan>& drop,
                                            const std::vector<std::string>& insert) {
  std::vector<bool> dropped(argv.size(), false);
  for (const WordSpan& d : drop)
    for (size_t k = d.index; k < d.index + d.words && k < argv.size(); ++k) dropped[k] = true;
  std::vector<std::string> out{argv.at(0)};
  out.insert(out.end(), insert.begin(), insert.end());
  for (size_t k = 1; k < argv.size(); ++k)
    if (!dropped[k]) out.push_back(argv[k]);
  return out;
}

std::string sequentialHostfile(const std::vector<JobHost>& ordered, int worldSize,
                               const std::string& what) {
  std::string hostfile;
  int world = 0;
  for (const auto& h : ordered) {
    for (int k = 0; k < h.ranks; ++k) hostfile += h.spelling + "\n";
    world += h.ranks;
  }
  RANKMAP_ENFORCE_EQ(world, worldSize, what);
  return hostfile;
}

int parsePositiveInt(std::string_view text, std::string_view what) {
  if (text.empty() || text.size() > 9)
    RANKMAP_THROW(InvalidInput, "{}: expected a positive integer, got {:?}", what,
                  std::string(text));
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      RANKMAP_THROW(InvalidInput, "{}: expected a positive integer, got {:?}", what,
                    std::string(text));
    v = v * 10 + (c - '0');
  }
  if (v < 1)
    RANKMAP_THROW(InvalidInput, "{}: expected a positive integer, got {:?}", what,
                  std::string(text));
  return addRanks(0, v, what);
}

int addRanks(int a, int b, std::string_view what) {
  if (static_cast<int64_t>(a) + b > kMaxJobRanks)
    RANKMAP_THROW(NotSupported,
                  "{}: more than {} ranks (rankmap run reorders jobs up to that size)", what,
                  kMaxJobRanks);
  return a + b;
}

void forEachHostfileLine(
    std::string_view text,
    const std::function<void(size_t lineNo, const std::vector<std::string_view>& words)>& fn) {
  size_t lineNo = 0;
  std::vector<std::string_view> words;
  while (!text.empty()) {
    ++lineNo;
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    words.clear();
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j > i) words.push_back(line.substr(i, j - i));
      i = j;
    }
    if (!words.empty()) fn(lineNo, words);
  }
}

void refuseRankmapHostsLine(std::string_view source, size_t lineNo, std::string_view name,
                            std::string_view address, std::string_view hostfile,
                            std::string_view launcher, std::string_view example) {
  RANKMAP_THROW(NotSupported,
                "{}:{}: {:?} reads as rankmap's hosts file (`name address`), not {}; give {} one "
                "of its own, e.g. `{}`",
                source, lineNo, fmt::format("{} {}", name, address), hostfile, launcher, example);
}

LongOption splitLongOption(const std::string& word) {
  LongOption o{word.substr(2), std::nullopt};
  auto eq = o.name.find('=');
  if (eq != std::string::npos) {
    o.value = o.name.substr(eq + 1);
    o.name.resize(eq);
  }
  return o;
}

std::optional<std::string> processEnv(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

}  // namespace rankmap::launch
