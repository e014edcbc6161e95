#include "launch/torchrun.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/deadline.h"
#include "common/error.h"
#include "common/files.h"
#include "common/net.h"
#include "common/plan_agreement.h"
#include "launch/plan_source.h"
#include "launch/process.h"

namespace rankmap::launch {
namespace {

// torchrun's options, canonical names ('-' -> '_'), and whether each takes a value: torch 1.13's
// (run here) and those that current torch/distributed/run.py adds (read in PyTorch's source, not
// run: --local_addr, --logs_specs, --local_ranks_filter, --event_log_handler, --numa_binding,
// --signals_to_handle, --duplicate_std{out,err}_filters, --shutdown_timeout,
// --virtual_local_rank). None of the added ones changes how node ranks are decided.
// Single-dash aliases: -r (redirects), -t (tee), -m (module), -h (help).
const std::map<std::string, bool>& knownOptions() {
  static const std::map<std::string, bool> kOptions = {
      {"nnodes", true},
      {"nproc_per_node", true},
      {"rdzv_backend", true},
      {"rdzv_endpoint", true},
      {"rdzv_id", true},
      {"rdzv_conf", true},
      {"standalone", false},
      {"max_restarts", true},
      {"monitor_interval", true},
      {"start_method", true},
      {"role", true},
      {"module", false},
      {"no_python", false},
      {"run_path", false},
      {"log_dir", true},
      {"redirects", true},
      {"tee", true},
      {"node_rank", true},
      {"master_addr", true},
      {"master_port", true},
      {"local_addr", true},
      {"logs_specs", true},
      {"local_ranks_filter", true},
      {"event_log_handler", true},
      {"numa_binding", true},
      {"signals_to_handle", true},
      {"duplicate_stdout_filters", true},
      {"duplicate_stderr_filters", true},
      {"shutdown_timeout", true},
      {"virtual_local_rank", false},
  };
  return kOptions;
}

// torchrun's defaults for the options this file reads.
const std::map<std::string, std::string>& defaults() {
  static const std::map<std::string, std::string> kDefaults = {
      {"nnodes", "1:1"},  {"rdzv_backend", "static"},   {"redirects", "0"},
      {"tee", "0"},       {"master_addr", "127.0.0.1"}, {"master_port", "29500"},
      {"node_rank", "0"},
  };
  return kDefaults;
}

std::string canonical(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool isIpv4(const std::string& text) {
  in_addr a{};
  return inet_pton(AF_INET, text.c_str(), &a) == 1;
}

// The address of plan host `name`: from a topology host, or the name itself when it is an
// address; nullopt otherwise.
std::optional<std::string> addressOf(const std::string& name, const std::vector<Host>& known) {
  for (const auto& h : known)
    if (h.name == name && !h.address.empty()) return h.ip();
  if (isIpv4(name)) return name;
  return std::nullopt;
}

// Whether a --redirects/--tee value makes torch 1.13 on Python 3.11 crash: a number, or a
// mapping "i:v,...", any of whose values is 0 or 3 (not a single-bit Std member).
bool crashesOnPython311(const std::string& value) {
  std::vector<std::string> vals;
  std::stringstream ss(value);
  std::string part;
  while (std::getline(ss, part, ',')) {
    auto colon = part.find(':');
    vals.push_back(colon == std::string::npos ? part : part.substr(colon + 1));
  }
  for (const auto& v : vals)
    if (v == "0" || v == "3") return true;
  return false;
}

// Reads torch's version, Python's version and torchrun's --local_addr spelling without
// importing torch (which takes seconds).
constexpr const char* kProbeSnippet = R"PY(
import importlib.util, os, re, sys
spec = importlib.util.find_spec("torch")
d = os.path.dirname(spec.origin)
v = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", open(os.path.join(d, "version.py")).read())
run = open(os.path.join(d, "distributed", "run.py")).read()
opt = next((o for o in ("--local_addr", "--local-addr") if '"%s"' % o in run), "")
print(sys.version_info[0], sys.version_info[1], v.group(1) if v else "?", opt)
)PY";

}  // namespace

bool isTorchrun(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  if (fileNameOf(argv[0]) == "torchrun") return true;
  return argv.size() >= 3 && fileNameOf(argv[0]).rfind("python", 0) == 0 && argv[1] == "-m" &&
         argv[2] == "torch.distributed.run";
}

TorchrunCommand TorchrunCommand::parse(const std::vector<std::string>& argv, EnvLookup env) {
  if (!isTorchrun(argv))
    RANKMAP_THROW(NotSupported, "{}: not torchrun or python -m torch.distributed.run",
                  argv.empty() ? std::string("(empty)") : argv[0]);
  TorchrunCommand c;
  c.argv_ = argv;
  c.env_ = std::move(env);
  c.launcherWords_ = fileNameOf(argv[0]) == "torchrun" ? 1 : 3;
  const auto& known = knownOptions();
  size_t i = c.launcherWords_;
  for (; i < argv.size(); ++i) {
    const std::string& w = argv[i];
    if (w.empty() || w[0] != '-' || w == "-") break;  // the training script
    if (w == "-h" || w == "--help") RANKMAP_THROW(NotSupported, "{}: help, not a job", w);
    if (w == "--") RANKMAP_THROW(NotSupported, "'--' before the training script");
    Item item;
    item.index = i;
    std::optional<std::string> attached;
    if (w.rfind("--", 0) == 0) {
      LongOption o = splitLongOption(w);
      attached = std::move(o.value);
      item.name = canonical(std::move(o.name));
    } else {
      // Single-dash aliases, with an attached value as argparse allows ("-r3").
      char f = w.size() >= 2 ? w[1] : '\0';
      if (f == 'r')
        item.name = "redirects";
      else if (f == 't')
        item.name = "tee";
      else if (f == 'm')
        item.name = "module";
      else
        RANKMAP_THROW(NotSupported, "unknown torchrun option {:?}", w);
      if (w.size() > 2) attached = w.substr(2);
    }
    auto it = known.find(item.name);
    if (it == known.end())
      RANKMAP_THROW(NotSupported, "unknown torchrun option {:?} (abbreviations are not read)", w);
    bool takesValue = it->second;
    if (!takesValue) {
      if (attached) RANKMAP_THROW(NotSupported, "torchrun flag {:?} takes no value", w);
    } else if (attached) {
      item.value = *attached;
    } else {
      if (i + 1 >= argv.size())
        RANKMAP_THROW(NotSupported, "torchrun option {} lacks its value", w);
      item.value = argv[i + 1];
      item.words = 2;
      ++i;
    }
    if (item.name == "standalone") c.standalone_ = true;
    c.items_.push_back(std::move(item));
  }
  if (i >= argv.size()) RANKMAP_THROW(NotSupported, "no training script after torchrun's options");
  c.script_ = i;
  if (!c.standalone_ && c.env_) {
    if (auto v = c.env_("PET_STANDALONE")) c.standalone_ = !v->empty();
  }
  return c;
}

bool TorchrunCommand::userSet(const std::string& option) const {
  for (const auto& it : items_)
    if (it.name == option) return true;
  return env_ && env_("PET_" + upper(option)).has_value();
}

std::optional<std::string> TorchrunCommand::value(const std::string& option) const {
  std::optional<std::string> v;
  for (const auto& it : items_)
    if (it.name == option) v = it.value;  // argparse keeps the last occurrence
  if (v) return v;
  if (env_)
    if (auto e = env_("PET_" + upper(option))) return e;
  auto d = defaults().find(option);
  if (d != defaults().end()) return d->second;
  return std::nullopt;
}

std::string TorchrunCommand::rdzvBackend() const {
  return value("rdzv_backend").value_or("static");
}

std::optional<int> TorchrunCommand::procsPerNode() const {
  const std::string text = value("nproc_per_node").value_or("1");
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1) return std::nullopt;
  return v;
}

std::optional<int> TorchrunCommand::fixedNodes() const {
  std::string v = value("nnodes").value_or("1:1");
  auto colon = v.find(':');
  std::string lo = colon == std::string::npos ? v : v.substr(0, colon);
  std::string hi = colon == std::string::npos ? v : v.substr(colon + 1);
  if (lo != hi) return std::nullopt;
  try {
    size_t used = 0;
    int n = std::stoi(lo, &used);
    if (used != lo.size() || n < 1) return std::nullopt;
    return n;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<std::string> TorchrunCommand::rewrite(const std::vector<std::string>& drop,
                                                  const std::vector<std::string>& insert) const {
  std::set<size_t> dropped;
  for (const auto& it : items_)
    if (std::find(drop.begin(), drop.end(), it.name) != drop.end())
      for (size_t k = 0; k < it.words; ++k) dropped.insert(it.index + k);
  std::vector<std::string> out;
  for (size_t i = 0; i < argv_.size(); ++i) {
    if (i == script_) out.insert(out.end(), insert.begin(), insert.end());
    if (!dropped.count(i)) out.push_back(argv_[i]);
  }
  return out;
}

NodeIdentity localNodeIdentity() {
  NodeIdentity id;
  char name[HOST_NAME_MAX + 1] = {};
  RANKMAP_CHECK_SYS(gethostname(name, sizeof name - 1));
  id.hostname = name;
  for (const auto& a : interfaceAddresses())
    if (a.address.rfind("127.", 0) != 0) id.addresses.push_back(a.address);
  return id;
}

std::optional<std::string> findSelf(const NodeIdentity& self,
                                    const std::vector<std::string>& planHosts,
                                    const std::vector<Host>& known) {
  std::set<std::string> matches;
  for (const auto& h : planHosts) {
    if (!self.hostname.empty() &&
        (h == self.hostname || shortHostName(h) == shortHostName(self.hostname))) {
      matches.insert(h);
      continue;
    }
    if (auto a = addressOf(h, known))
      if (std::find(self.addresses.begin(), self.addresses.end(), *a) != self.addresses.end())
        matches.insert(h);
  }
  if (matches.size() != 1) return std::nullopt;
  return *matches.begin();
}

bool TorchInstall::redirectsBug() const {
  bool oldTorch = torchVersion.rfind("1.", 0) == 0;
  bool newPython = pythonMajor > 3 || (pythonMajor == 3 && pythonMinor >= 11);
  return oldTorch && newPython;
}

std::optional<std::string> torchrunPython(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  if (fileNameOf(argv[0]) != "torchrun") return argv[0];
  auto path = findOnPath(argv[0]);
  if (!path) return std::nullopt;
  std::ifstream f(*path);
  std::string line;
  if (!f || !std::getline(f, line) || line.rfind("#!", 0) != 0) return std::nullopt;
  std::stringstream words(line.substr(2));
  std::string interp, arg;
  words >> interp;
  if (fileNameOf(interp) == "env" && (words >> arg)) return arg;
  if (interp.empty()) return std::nullopt;
  return interp;
}

std::optional<TorchInstall> probeTorchInstall(const std::string& python) {
  auto out = captureStdout({python, "-c", kProbeSnippet}, Deadline::afterMs(15000));
  if (!out) return std::nullopt;
  std::stringstream ss(*out);
  TorchInstall t;
  if (!(ss >> t.pythonMajor >> t.pythonMinor >> t.torchVersion)) return std::nullopt;
  ss >> t.localAddrOption;
  return t;
}

std::string sortableLocalAddr(size_t position, size_t count, const std::string& address) {
  in_addr a{};
  if (inet_pton(AF_INET, address.c_str(), &a) != 1)
    RANKMAP_THROW(InvalidInput, "local address {:?}: expected an IPv4 address", address);
  if (position >= count)
    RANKMAP_THROW(InvalidInput, "plan position {} of {} hosts", position, count);
  return "0x" + std::string(count - position, '0') + fmt::format("{:x}", ntohl(a.s_addr));
}

RunDecision decideTorchrun(const std::vector<std::string>& argv, const std::optional<Plan>& plan,
                           const std::string& planError, const PlanSource& source,
                           const std::vector<Host>& known, const NodeIdentity& self,
                           const std::optional<TorchInstall>& install,
                           TorchrunCommand::EnvLookup env) {
  std::optional<TorchrunCommand> cmd;
  try {
    cmd = TorchrunCommand::parse(argv, env);
  } catch (const Error& e) {
    std::string why = fmt::format("torchrun arguments not understood: {}", e.what());
    if (install && install->redirectsBug())
      why += fmt::format(
          "; note: torch {} on Python {}.{} fails at start unless --redirects and "
          "--tee are 1 or 2 (see docs/frameworks.md)",
          install->torchVersion, install->pythonMajor, install->pythonMinor);
    return unchanged(argv, why);
  }

  // The Python 3.11 fix applies whatever happens to the order.
  std::vector<std::string> drop, insert;
  std::string fixNote;
  if (install && install->redirectsBug()) {
    bool setR = cmd->userSet("redirects"), setT = cmd->userSet("tee");
    std::string r = cmd->value("redirects").value_or("0"), t = cmd->value("tee").value_or("0");
    std::string bug = fmt::format(
        "torch {} on Python {}.{} fails at start with --redirects or "
        "--tee 0 or 3",
        install->torchVersion, install->pythonMajor, install->pythonMinor);
    if (!setR && !setT) {
      insert = {"--redirects", "1", "--tee", "1"};
      fixNote = "; " + bug + " (their defaults): added --redirects 1 --tee 1";
    } else if (crashesOnPython311(r) || crashesOnPython311(t)) {
      if (!setR && crashesOnPython311(r) && !crashesOnPython311(t)) {
        insert = {"--redirects", "1"};
        fixNote = "; " + bug + ": added --redirects 1";
      } else if (!setT && crashesOnPython311(t) && !crashesOnPython311(r)) {
        insert = {"--tee", "1"};
        fixNote = "; " + bug + ": added --tee 1";
      } else {
        fixNote = fmt::format("; warning: {}: your --redirects {} --tee {} will fail (use 1 or 2)",
                              bug, r, t);
      }
    }
  }
  auto keep = [&](const std::string& why) {
    RunDecision d;
    d.command.argv = insert.empty() ? argv : cmd->rewrite({}, insert);
    d.message = "rankmap run: torchrun: running with the launcher's node order: " + why + fixNote;
    return d;
  };

  if (cmd->standalone()) return keep("--standalone is a single-node job, nothing to reorder");
  if (!plan) return keep(fmt::format("no plan from {}: {}", source.description, planError));
  std::string tag = fmt::format("plan {} from {}", shortPlanHash(plan->hash), source.description);
  auto nodes = cmd->fixedNodes();
  if (nodes && static_cast<size_t>(*nodes) != plan->hosts.size())
    return keep(fmt::format("{} is for {} hosts, the job has --nnodes {}", tag, plan->hosts.size(),
                            *nodes));
  auto me = findSelf(self, plan->order, known);
  if (!me)
    return keep(fmt::format("{} does not hold this node (hostname {}, addresses {}) exactly once",
                            tag, self.hostname.empty() ? "?" : self.hostname,
                            self.addresses.empty()
                                ? std::string("none")
                                : fmt::format("{}", fmt::join(self.addresses, ","))));
  size_t pos = static_cast<size_t>(std::find(plan->order.begin(), plan->order.end(), *me) -
                                   plan->order.begin());
  std::string backend = cmd->rdzvBackend();

  RunDecision d;
  d.plan = plan;
  if (backend == "static") {
    if (!nodes)
      return keep(fmt::format("static rendezvous with a node range --nnodes {}",
                              cmd->value("nnodes").value_or("?")));
    const std::string& first = plan->order[0];
    auto firstAddr = addressOf(first, known);
    std::string master = firstAddr.value_or(first);
    std::string oldRank = cmd->value("node_rank").value_or("0");
    drop = {"node_rank", "master_addr"};
    std::vector<std::string> ours = {"--node_rank", std::to_string(pos)};
    if (cmd->userSet("rdzv_endpoint") && !cmd->value("rdzv_endpoint").value_or("").empty()) {
      // A static --rdzv_endpoint host:port overrides --master_addr: move its host.
      std::string ep = *cmd->value("rdzv_endpoint");
      auto colon = ep.rfind(':');
      std::string port = colon == std::string::npos ? cmd->value("master_port").value_or("29500")
                                                    : ep.substr(colon + 1);
      drop.push_back("rdzv_endpoint");
      ours.insert(ours.end(), {"--rdzv_endpoint", master + ":" + port});
    } else {
      ours.insert(ours.end(), {"--master_addr", master});
    }
    ours.insert(ours.end(), insert.begin(), insert.end());
    d.command.argv = cmd->rewrite(drop, ours);
    d.applied = true;
    d.message = fmt::format(
        "rankmap run: torchrun: {}: this node {} is node rank {} of {} (launcher said {}), "
        "master {}{}{}",
        tag, *me, pos, plan->order.size(), oldRank, first,
        firstAddr ? " at " + *firstAddr : std::string(" (no address in the topology: by name)"),
        fixNote);
    return d;
  }
  if (backend == "c10d" || backend == "etcd" || backend == "etcd-v2") {
    if (!install || install->localAddrOption.empty())
      return keep(
          fmt::format("{} rendezvous ranks nodes by their sorted FQDNs and this torchrun "
                      "(torch {}) has no --local_addr to order them; use the static "
                      "rendezvous (--master_addr/--node_rank) or a torchrun with --local_addr",
                      backend, install ? install->torchVersion : std::string("unknown")));
    auto addr = addressOf(*me, known);
    if (!addr && self.addresses.size() == 1) addr = self.addresses[0];
    if (!addr)
      return keep(
          fmt::format("{}: no single IPv4 address for this node {} to order its "
                      "--local_addr (give a topology with addresses)",
                      tag, *me));
    std::string local = sortableLocalAddr(pos, plan->order.size(), *addr);
    std::vector<std::string> ours = {install->localAddrOption, local};
    ours.insert(ours.end(), insert.begin(), insert.end());
    d.command.argv = cmd->rewrite({"local_addr"}, ours);
    d.applied = true;
    d.message = fmt::format(
        "rankmap run: torchrun: {}: this node {} is node {} of {} in the "
        "{} rendezvous's sorted order ({} {} = {}){}",
        tag, *me, pos, plan->order.size(), backend, install->localAddrOption, local, *addr,
        fixNote);
    return d;
  }
  return keep(
      fmt::format("rendezvous backend {:?} is not one rankmap knows how to order", backend));
}

RunDecision prepareTorchrun(const std::vector<std::string>& argv, const std::string& planPath,
                            const std::string& topologyPath, const PlanChecks& checks,
                            const std::vector<MeshDim>& mesh) {
  // Every host of the topology is a node of the job: torchrun's command line names none. The
  // ranks per node matter only to a mesh (its sizes multiply to nodes x nproc_per_node).
  int perNode = 1;
  if (!mesh.empty()) {
    const TorchrunCommand cmd = TorchrunCommand::parse(argv);
    const std::optional<int> v = cmd.procsPerNode();
    if (!v)
      RANKMAP_THROW(InvalidInput,
                    "--mesh with torchrun: --nproc-per-node {:?} is not a count of processes; "
                    "expected a number (the mesh's sizes multiply to nodes x that number)",
                    cmd.value("nproc_per_node").value_or("1"));
    perNode = *v;
  }
  PlanResult pr = planForFramework(
      planPath, topologyPath,
      [&] {
        Job job;
        for (const auto& h : Topology::load(topologyPath).hosts)
          job.hosts.push_back({h.name, perNode});
        return job;
      },
      "torchrun needs --plan or --topology (RANKMAP_PLAN / RANKMAP_TOPOLOGY)", checks, mesh);
  NodeIdentity self;
  try {
    self = localNodeIdentity();
  } catch (const Error& e) {
    return unchanged(argv, fmt::format("cannot tell which node this is: {}", e.what()));
  }
  std::optional<TorchInstall> install;
  if (auto py = torchrunPython(argv)) install = probeTorchInstall(*py);
  return decideTorchrun(argv, pr.plan, pr.error, pr.source, pr.known, self, install, processEnv);
}

}  // namespace rankmap::launch
