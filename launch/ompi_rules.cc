#include "launch/ompi_rules.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/openmpi.h"
#include "reorder/cost_model.h"
#include "reorder/report.h"

namespace rankmap::launch {
namespace {

std::string trim(std::string_view s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string_view::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return std::string(s.substr(a, b - a + 1));
}

std::string rangeText(const OmpiRange& r) {
  if (r.maxBytes == AlgoRange::kUnbounded)
    return fmt::format(">= {}", reorder::sizeText(r.minBytes));
  return fmt::format("{} .. {}", reorder::sizeText(r.minBytes), reorder::sizeText(r.maxBytes));
}

}  // namespace

std::string collTunedRules(const Plan& plan) {
  std::vector<std::pair<const OmpiCollective*, const std::vector<OmpiRange>*>> colls;
  for (const auto& [name, ranges] : plan.openMpi) {
    const OmpiCollective* c = findOmpiCollective(name);
    if (c && !ranges.empty()) colls.emplace_back(c, &ranges);
  }
  size_t world = plan.worldSize();
  if (colls.empty() || world < 2) return "";
  std::string out = fmt::format(
      "# Open MPI coll_tuned dynamic rules written by rankmap run from plan {}\n"
      "# for communicators of {} ranks in plan order; other sizes keep Open MPI's own decision\n"
      "# (algorithm 0). Format: Open MPI 4.1 coll_tuned_dynamic_file.c.\n"
      "{} # collectives\n",
      plan.hash, world, colls.size());
  for (const auto& [c, ranges] : colls) {
    out += fmt::format("{} # {}\n3 # communicator sizes\n", c->collId, c->name);
    out += "0 1 # smaller communicators: Open MPI's decision\n0 0 0 0\n";
    out += fmt::format("{} {} # the plan's world\n", world, ranges->size());
    for (const auto& r : *ranges) {
      const OmpiAlgorithm* a = findOmpiAlgorithm(*c, r.algorithm);
      out += fmt::format("{} {} {} {} # {}: {}{} (predicted {})\n", r.minBytes, r.algorithm,
                         r.faninout, r.segsize, rangeText(r), a ? a->name : "?",
                         r.segsize ? " seg " + reorder::sizeText(r.segsize) : std::string(),
                         reorder::timeText(r.predictedUs));
    }
    out += fmt::format("{} 1 # larger communicators: Open MPI's decision\n0 0 0 0\n", world + 1);
  }
  return out;
}

std::vector<std::string> collTunedOptions(const std::string& rulesPath) {
  return {"--mca", "coll_tuned_use_dynamic_rules",      "1",
          "--mca", "coll_tuned_dynamic_rules_filename", rulesPath};
}

bool decidesCollTuned(std::string_view name, std::string_view value) {
  if (name.rfind("coll_tuned_", 0) == 0) return true;
  if (name != "coll") return false;
  // A component list: "^a,b" excludes a and b, "a,b" selects only them.
  bool exclude = !value.empty() && value[0] == '^';
  if (exclude) value.remove_prefix(1);
  bool listed = false;
  while (!value.empty()) {
    size_t comma = value.find(',');
    if (trim(value.substr(0, comma)) == "tuned") listed = true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return exclude ? listed : !listed;
}

std::optional<std::string> userCollTunedOutside(const CollTunedSources& src) {
  constexpr std::string_view kPrefix = "OMPI_MCA_";
  for (const auto& entry : src.environment) {
    if (entry.rfind(kPrefix, 0) != 0) continue;
    size_t eq = entry.find('=');
    std::string name = entry.substr(
        kPrefix.size(), eq == std::string::npos ? std::string::npos : eq - kPrefix.size());
    std::string value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    if (decidesCollTuned(name, value))
      return fmt::format("{}{}={} in the environment", kPrefix, name, value);
  }
  std::vector<std::string> files;
  auto get = [&](const char* n) { return src.env ? src.env(n) : std::nullopt; };
  if (auto list = get("OMPI_MCA_mca_base_param_files")) {
    std::string_view rest = *list;
    while (!rest.empty()) {
      size_t colon = rest.find(':');
      std::string f = trim(rest.substr(0, colon));
      if (!f.empty()) files.push_back(f);
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  } else {
    if (auto home = get("HOME")) files.push_back(*home + "/.openmpi/mca-params.conf");
    if (auto prefix = get("OPAL_PREFIX")) files.push_back(*prefix + "/etc/openmpi-mca-params.conf");
    files.push_back("/etc/openmpi/openmpi-mca-params.conf");
  }
  for (const auto& f : files) {
    auto text = src.read ? src.read(f) : std::nullopt;
    if (!text) continue;
    std::string_view rest = *text;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
      line = line.substr(0, line.find('#'));
      size_t eq = line.find('=');
      if (eq == std::string_view::npos) continue;
      std::string name = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
      if (decidesCollTuned(name, value)) return fmt::format("{} = {} in {}", name, value, f);
    }
  }
  return std::nullopt;
}

std::optional<std::string> engineAdvice(const Plan& plan) {
  std::string parts;
  double best = 0;
  for (std::string_view coll : {"allreduce", "bcast", "allgather"}) {
    auto it = plan.openMpi.find(std::string(coll));
    if (it == plan.openMpi.end()) continue;
    std::string spans;
    const OmpiRange* open = nullptr;  // the first range of the span being built
    const OmpiRange* last = nullptr;
    auto close = [&] {
      if (!open) return;
      OmpiRange span{open->minBytes, last->maxBytes};
      spans += (spans.empty() ? "" : ", ") + rangeText(span);
      open = nullptr;
    };
    for (const auto& r : it->second) {
      bool faster = r.engineUs > 0 && r.engineUs * reorder::kEngineAdviceRatio < r.predictedUs;
      if (faster) {
        best = std::max(best, r.predictedUs / r.engineUs);
        if (!open) open = &r;
        last = &r;
      } else {
        close();
      }
    }
    close();
    if (!spans.empty()) parts += fmt::format("{}{} at {}", parts.empty() ? "" : "; ", coll, spans);
  }
  if (parts.empty()) return std::nullopt;
  return fmt::format(
      "rankmap run: the included engine is predicted faster than every Open MPI "
      "algorithm for {} (up to {:.2f}x): run with --mode shim and mpirun -x "
      "RANKMAP_MPI_ENGINE=1 to use it (docs/mpi.md)",
      parts, best);
}

}  // namespace rankmap::launch
