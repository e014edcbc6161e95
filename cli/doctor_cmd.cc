// `rankmap doctor [PROGRAM | --python PY]`: can librankmap_nccl.so be applied to this program or
// Python environment, which MPI the program uses (Open MPI or the MPICH ABI, and so which MPI
// shim matches it: programMpi()), what would `rankmap run` do, and would NCCL load rankmap's tuner
// plugin (NCCL_TUNER_PLUGIN; nccl_tuner/) and what does it chain to?
//
// The shim works by symbol interposition (LD_PRELOAD): it applies when the program reaches NCCL
// through the dynamic symbol table, i.e. NCCL is a shared library (libnccl.so.2, whether the
// program links it directly, a dependency does, or PyTorch loads it from the nvidia-nccl wheel).
// It cannot apply when NCCL is linked statically into the program or into a library and called
// there directly (old PyTorch builds, some vendor binaries): then only launch-time reordering
// works. The answer comes from reading ELF files (DT_NEEDED, RUNPATH, dynamic and static symbol
// tables), never from running the program; for --python the interpreter runs a short
// standard-library snippet (find_spec, metadata: torch is not imported).
//
// Exit status: 0 the shim can apply, 1 it cannot (or there is no NCCL), 2 bad input.
#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/deadline.h"
#include "common/error.h"
#include "launch/elf.h"
#include "launch/mpi_family.h"
#include "launch/process.h"
#include "nccl_tuner/plugin_names.h"

namespace rankmap::cli {
namespace {

using launch::ElfFacts;
using launch::ProgramMpi;
using launch::programMpi;
using launch::readable;

bool isNcclLibrary(const std::string& nameOrPath) {
  std::string base = nameOrPath.substr(nameOrPath.rfind('/') + 1);
  return base.rfind("libnccl.so", 0) == 0;
}

struct Verdict {
  std::string target;
  std::string linkage = "none";  // dynamic, static, none
  std::string library;           // the NCCL shared library, or the object with NCCL inside
  std::string neededBy;          // which object needs libnccl (dynamic)
  std::string version;
  bool shimmable = false;
  std::string reason;
};

// Walks the dependency graph from `roots` (breadth first, bounded) looking for NCCL.
Verdict inspect(const std::string& target, const std::vector<std::string>& roots) {
  Verdict v;
  v.target = target;
  std::string staticIn, exportedIn;
  std::string staticVersion;
  launch::walkDependencies(
      roots, true,
      [&](const std::string& path, const ElfFacts& f) {
        if (isNcclLibrary(f.soname.empty() ? path : f.soname)) return false;  // via a parent
        if (f.ncclStaticOnly && staticIn.empty()) {
          staticIn = path;
          staticVersion = f.ncclVersion;
        }
        if (f.ncclExported && !f.executable && exportedIn.empty()) {
          exportedIn = path;
          if (staticVersion.empty()) staticVersion = f.ncclVersion;
        }
        return true;
      },
      [&](const std::string& name, const std::string& resolved, const std::string& by) {
        if (!isNcclLibrary(name)) return launch::Needed::kFollow;
        if (v.linkage != "dynamic") {
          v.linkage = "dynamic";
          v.library = resolved.empty() ? name : resolved;
          v.neededBy = by;
          if (!resolved.empty()) v.version = launch::ncclVersionOfFile(resolved);
        }
        return launch::Needed::kSkip;
      });
  if (v.linkage == "dynamic") {
    v.shimmable = v.library.find('/') != std::string::npos;
    v.reason = v.shimmable ? fmt::format(
                                 "NCCL is the shared library {} (needed by {}): LD_PRELOAD "
                                 "interposes its calls",
                                 v.library, v.neededBy)
                           : fmt::format("{} needs {} but the loader would not find it here",
                                         v.neededBy, v.library);
    if (!staticIn.empty())
      v.reason += fmt::format("; note: {} also contains NCCL linked statically", staticIn);
    return v;
  }
  if (!staticIn.empty() || !exportedIn.empty()) {
    v.linkage = "static";
    v.library = staticIn.empty() ? exportedIn : staticIn;
    v.version = staticVersion;
    v.shimmable = false;
    v.reason = staticIn.empty()
                   ? fmt::format(
                         "NCCL is linked into {} and exported, but calls inside that "
                         "library bind directly: the shim would see only some of them",
                         v.library)
                   : fmt::format(
                         "NCCL is linked statically into {} (its calls never reach the "
                         "dynamic linker): the shim cannot interpose them",
                         v.library);
    return v;
  }
  v.reason = "no NCCL found (no libnccl dependency, no NCCL symbols)";
  return v;
}

}  // namespace

namespace {

constexpr char kPythonProbe[] = R"(import importlib.util, json, sys
out = {"python": sys.version.split()[0], "torch_dir": None, "torch_version": None, "nccl_wheels": {}}
spec = importlib.util.find_spec("torch")
if spec is not None and spec.submodule_search_locations:
    out["torch_dir"] = list(spec.submodule_search_locations)[0]
try:
    import importlib.metadata as md
    try:
        out["torch_version"] = md.version("torch")
    except Exception:
        pass
    for name in ("nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13"):
        try:
            out["nccl_wheels"][name] = md.version(name)
        except Exception:
            pass
except Exception:
    pass
print(json.dumps(out))
)";

std::string findNcclShim() { return launch::findOurLibrary("shim_nccl", "librankmap_nccl.so"); }

// Whether NCCL would load rankmap's tuner plugin (NCCL_TUNER_PLUGIN), and what it chains to.
struct TunerReport {
  std::optional<std::string> setting;  // NCCL_TUNER_PLUGIN, when set
  bool active = false;                 // it names rankmap's tuner
  std::string library;                 // librankmap_nccl_tuner.so beside this rankmap
  std::string chain;                   // RANKMAP_NCCL_TUNER_CHAIN
  bool adjusts = true;                 // RANKMAP_NCCL_TUNER
  std::string note;
};

TunerReport tunerReport(const Config& config) {
  TunerReport t;
  t.library = launch::findOurLibrary("nccl_tuner", std::string(nccl_tuner::kTunerLibrary));
  t.chain = config.get(settings::kNcclTunerChain);
  t.adjusts = config.get(settings::kNcclTuner);
  // NCCL's variable, not a RANKMAP_* setting: read where it is judged.
  if (const char* v = std::getenv("NCCL_TUNER_PLUGIN")) t.setting = v;
  const std::string lib = t.library.empty() ? "<lib>/librankmap_nccl_tuner.so" : t.library;
  if (t.setting) {
    for (const auto& name : nccl_tuner::tunerLibraryCandidates(*t.setting)) {
      // A bare name is found by the loader's search; beside our library is where ours would be.
      std::string beside =
          t.library.empty() ? ""
                            : std::filesystem::path(t.library).parent_path().string() + "/" + name;
      if (nccl_tuner::isRankmapTuner(name) ||
          (!beside.empty() && readable(beside) && nccl_tuner::isRankmapTuner(beside)))
        t.active = true;
    }
  }
  bool chainIsOurs = false;
  if (!t.chain.empty())
    for (const auto& name : nccl_tuner::tunerLibraryCandidates(t.chain))
      chainIsOurs = chainIsOurs || nccl_tuner::isRankmapTuner(name);
  if (t.active) {
    t.note = t.adjusts ? "NCCL loads rankmap's tuner; it adjusts the costs of communicators "
                         "whose plan agreement librankmap_nccl.so completed (preload it too)"
                       : "NCCL loads rankmap's tuner, but RANKMAP_NCCL_TUNER=0 leaves NCCL's "
                         "costs alone";
    if (chainIsOurs)
      t.note += "; RANKMAP_NCCL_TUNER_CHAIN names rankmap's tuner itself, which it refuses";
    else
      t.note += t.chain.empty() ? "; no tuner chained (RANKMAP_NCCL_TUNER_CHAIN is empty)"
                                : "; it calls " + t.chain + " first (RANKMAP_NCCL_TUNER_CHAIN)";
  } else if (t.setting && !t.setting->empty()) {
    t.note = fmt::format(
        "NCCL loads {} (NCCL_TUNER_PLUGIN), not rankmap's tuner; to use both: "
        "NCCL_TUNER_PLUGIN={} RANKMAP_NCCL_TUNER_CHAIN={}",
        *t.setting, lib, *t.setting);
  } else {
    t.note = fmt::format(
        "NCCL_TUNER_PLUGIN is not set (NCCL looks for libnccl-tuner.so and its network plugin's "
        "tuner); to enable: NCCL_TUNER_PLUGIN={}",
        lib);
  }
  return t;
}

std::string findProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (!readable(name)) RANKMAP_THROW(InvalidInput, "{}: no such readable file", name);
    return name;
  }
  auto path = launch::findOnPath(name);  // where the shell would find it
  if (!path) RANKMAP_THROW(InvalidInput, "{}: not found on PATH", name);
  return *path;
}

struct DoctorArgs {
  std::string program;
  std::string python;
  bool json = false;
};

int runDoctor(const CliContext& ctx, const DoctorArgs& a) {
  if (a.program.empty() == a.python.empty())
    RANKMAP_THROW(InvalidInput, "expected a PROGRAM or --python PY (one of them)");
  Verdict v;
  Json extra = Json::object();
  ProgramMpi mpi;
  if (!a.program.empty()) {
    std::string path = findProgram(a.program);
    v = inspect(path, {path});
    mpi = programMpi(path);
  } else {
    auto out = launch::captureStdout({a.python, "-c", kPythonProbe},
                                     Deadline::after(std::chrono::seconds(60)));
    if (!out) RANKMAP_THROW(InvalidInput, "{}: could not run it as a Python interpreter", a.python);
    Json info = parseJson(*out, a.python + " probe");
    extra = info;
    if (!info.value("torch_dir", Json()).is_string()) {
      v.target = a.python;
      v.reason = "PyTorch is not installed for this interpreter";
    } else {
      std::string lib = info["torch_dir"].get<std::string>() + "/lib";
      std::vector<std::string> roots;
      for (const char* n : {"libtorch_cuda.so", "libtorch_cuda_cpp.so", "libtorch_cuda_cu.so"})
        if (readable(lib + "/" + n)) roots.push_back(lib + "/" + n);
      if (roots.empty()) {
        v.target = a.python;
        v.reason = "this PyTorch has no CUDA libraries (no libtorch_cuda*.so: a CPU-only build)";
      } else {
        // torch's own preloading of the nvidia wheels goes through this one.
        if (readable(lib + "/libtorch_global_deps.so"))
          roots.push_back(lib + "/libtorch_global_deps.so");
        v = inspect(a.python, roots);
        if (v.version.empty())
          for (const auto& [name, ver] : info["nccl_wheels"].items())
            v.version = ver.get<std::string>();
      }
    }
  }
  const std::string shim = findNcclShim();
  const std::string plan = ctx.config.get(settings::kPlan);
  std::string run;
  if (!a.python.empty() || a.program.find("torchrun") != std::string::npos) {
    run =
        "rankmap run -- torchrun ... reorders at launch: node ranks in plan order, so NCCL's "
        "ranks follow without a shim.";
  } else {
    run =
        "rankmap run -- mpirun ... reorders at launch: the hostfile in plan order, so every "
        "rank (and the NCCL rank a program derives from it) follows without a shim.";
  }
  if (v.shimmable) {
    run += fmt::format(
        " Where the launcher cannot change, preload the shim: LD_PRELOAD={} "
        "RANKMAP_PLAN={} <command> (every rank; NCCL communicators then get the "
        "plan's order, everything the program sees stays as it was).",
        shim.empty() ? "<lib>/librankmap_nccl.so" : shim, plan.empty() ? "<plan.json>" : plan);
  } else if (v.linkage == "static") {
    run += " The NCCL shim cannot apply to this program: only launch-time reordering will.";
  }
  // The MPI the program uses and the MPI shim that matches it (rankmap run --mode shim picks it).
  std::string mpiText = "none found (no MPI library among its dynamic dependencies)";
  std::string mpiShim;
  if (mpi.family != launch::MpiFamily::kUnknown) {
    const bool mpich = mpi.family == launch::MpiFamily::kMpich;
    mpiShim =
        launch::findOurLibrary("shim_mpi", mpich ? "librankmap_mpich.so" : "librankmap_mpi.so");
    mpiText = fmt::format("{} ({}, needed by {}); its shim: {}", launch::mpiFamilyName(mpi.family),
                          mpi.library, mpi.neededBy,
                          !mpiShim.empty() ? mpiShim
                          : mpich          ? "librankmap_mpich.so, not found beside this rankmap"
                                           : "librankmap_mpi.so, not found beside this rankmap");
  }
  const TunerReport tuner = tunerReport(ctx.config);
  if (a.json) {
    Json j = {{"target", v.target},
              {"nccl",
               {{"linkage", v.linkage},
                {"library", v.library.empty() ? Json() : Json(v.library)},
                {"needed_by", v.neededBy.empty() ? Json() : Json(v.neededBy)},
                {"version", v.version.empty() ? Json() : Json(v.version)}}},
              {"shimmable", v.shimmable},
              {"reason", v.reason},
              {"shim_library", shim.empty() ? Json() : Json(shim)},
              {"mpi",
               {{"family", mpi.family == launch::MpiFamily::kUnknown
                               ? Json()
                               : Json(launch::mpiFamilyName(mpi.family))},
                {"library", mpi.library.empty() ? Json() : Json(mpi.library)},
                {"needed_by", mpi.neededBy.empty() ? Json() : Json(mpi.neededBy)},
                {"shim_library", mpiShim.empty() ? Json() : Json(mpiShim)}}},
              {"rankmap_run", run},
              {"tuner",
               {{"active", tuner.active},
                {"nccl_tuner_plugin", tuner.setting ? Json(*tuner.setting) : Json()},
                {"library", tuner.library.empty() ? Json() : Json(tuner.library)},
                {"chain", tuner.chain.empty() ? Json() : Json(tuner.chain)},
                {"adjusts", tuner.adjusts},
                {"note", tuner.note}}}};
    if (!a.python.empty()) j["python"] = extra;
    fmt::print("{}\n", j.dump(1));
  } else {
    fmt::print("rankmap doctor: {}\n", v.target);
    if (!a.python.empty() && extra.is_object())
      fmt::print("  python {}, torch {}\n", extra.value("python", std::string("?")),
                 extra.value("torch_version", Json()).is_string()
                     ? extra["torch_version"].get<std::string>()
                     : std::string("not installed"));
    fmt::print("  NCCL: {}{}{}\n", v.linkage, v.library.empty() ? "" : ", " + v.library,
               v.version.empty() ? "" : " (NCCL " + v.version + ")");
    fmt::print("  shim: {}: {}\n", v.shimmable ? "yes" : "no", v.reason);
    fmt::print("  librankmap_nccl.so: {}\n", shim.empty() ? "not found beside this rankmap" : shim);
    if (!a.program.empty()) fmt::print("  MPI: {}\n", mpiText);
    fmt::print("  rankmap run: {}\n", run);
    fmt::print("  NCCL tuner: {}: {}\n", tuner.active ? "active" : "not active", tuner.note);
    fmt::print("  librankmap_nccl_tuner.so: {}\n",
               tuner.library.empty() ? "not found beside this rankmap" : tuner.library);
  }
  return v.shimmable ? 0 : 1;
}

}  // namespace

void registerDoctorCommand(CLI::App& app, CliContext& ctx, CommandRunner& run) {
  auto* cmd = app.add_subcommand(
      "doctor",
      "Can the NCCL shim apply to a program or a Python environment, which MPI does a program "
      "use (and what would `rankmap run` do)? Exit 0 the NCCL shim applies, 1 no");
  auto a = std::make_shared<DoctorArgs>();
  cmd->add_option("program", a->program, "Program to inspect (path or name on PATH)");
  cmd->add_option("--python", a->python, "Python interpreter whose PyTorch to inspect");
  cmd->add_flag("--json", a->json, "Print the verdict as JSON");
  cmd->callback([&ctx, &run, a] { run = [&ctx, a] { return runDoctor(ctx, *a); }; });
}

}  // namespace rankmap::cli
