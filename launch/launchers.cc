#include "launch/launchers.h"

#include <fmt/format.h>

#include "common/deadline.h"
#include "common/error.h"
#include "launch/hydra.h"
#include "launch/mpi_family.h"
#include "launch/mpirun.h"
#include "launch/slurm.h"
#include "launch/torchrun.h"

namespace rankmap::launch {
namespace {

bool argv0Is(const std::vector<std::string>& argv, bool (*is)(const std::string&)) {
  return !argv.empty() && is(argv[0]);
}

// mpirun/mpiexec are Open MPI's or MPICH's (Hydra) by the alternatives in force: the real name,
// else the launcher's --version (launch/mpi_family.h). Unknown goes to Open MPI's parser (the row
// after Hydra's), which refuses what it does not know.
bool isHydra(const std::vector<std::string>& argv) {
  return argv0Is(argv, isMpirun) &&
         launcherFamily(argv[0], Deadline::after(kLauncherVersionTimeout)) == MpiFamily::kMpich;
}

template <typename T>
std::unique_ptr<LaunchCommand> parseWith(const std::vector<std::string>& argv) {
  return T::parse(argv);
}

constexpr Launcher kLaunchers[] = {
    {"srun", "srun", [](const std::vector<std::string>& a) { return argv0Is(a, isSrun); },
     parseWith<SrunCommand>},
    {"torchrun", "torchrun, python -m torch.distributed.run", isTorchrun, nullptr},
    {"mpiexec (MPICH Hydra)", "mpiexec.hydra, and mpiexec or mpirun where MPICH owns them", isHydra,
     parseWith<HydraCommand>},
    {"mpirun", "mpirun, mpiexec, orterun",
     [](const std::vector<std::string>& a) { return argv0Is(a, isMpirun); },
     parseWith<MpirunCommand>},
};

}  // namespace

std::span<const Launcher> launchers() { return kLaunchers; }

const Launcher* findLauncher(const std::vector<std::string>& argv) {
  for (const auto& l : kLaunchers)
    if (l.recognises(argv)) return &l;
  return nullptr;
}

std::unique_ptr<LaunchCommand> parseLaunchCommand(const std::vector<std::string>& argv,
                                                  std::string& why) {
  return parseLaunchCommand(findLauncher(argv), argv, why);
}

std::unique_ptr<LaunchCommand> parseLaunchCommand(const Launcher* l,
                                                  const std::vector<std::string>& argv,
                                                  std::string& why) {
  if (argv.empty()) {
    why = "no command given";
    return nullptr;
  }
  if (!l) {
    std::string known;
    for (const auto& k : kLaunchers) known += (known.empty() ? "" : "; ") + std::string(k.programs);
    why = fmt::format("{} is not a launcher rankmap run knows ({})", argv[0], known);
    return nullptr;
  }
  if (!l->parse) {
    why = fmt::format("{} has no launcher command line to rewrite (rankmap run handles it apart)",
                      l->name);
    return nullptr;
  }
  try {
    return l->parse(argv);
  } catch (const Error& e) {
    why = fmt::format("{} arguments not understood: {}", l->name, e.what());
    return nullptr;
  }
}

}  // namespace rankmap::launch
