// Every launcher `rankmap run` knows, in one table: its name, how it is recognised on the command
// line, and what reads it. The launchers rewritten through launch.h's one decision (srun, MPICH's
// Hydra, Open MPI's mpirun) have a parser that gives a LaunchCommand; a framework with a flow of
// its own (torchrun, torchrun.h) has none, and run.cc takes it from there. launch.cc decides for
// any LaunchCommand without knowing which launcher made it.
//
// To add a launcher: its parser (launch/<name>.h) and one row in launchers.cc, before any row
// that would also recognise its command line.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "launch/launch.h"

namespace rankmap::launch {

struct Launcher {
  std::string_view name;      // as messages name it, e.g. "mpiexec (MPICH Hydra)"
  std::string_view programs;  // the commands it answers to, for messages
  // Whether argv is this launcher's command line. May run the launcher's --version (within
  // kLauncherVersionTimeout) to tell Open MPI's mpirun from MPICH's.
  bool (*recognises)(const std::vector<std::string>& argv);
  // Reads argv (throws NotSupported or InvalidInput naming what it does not understand); null
  // for a framework with its own flow.
  std::unique_ptr<LaunchCommand> (*parse)(const std::vector<std::string>& argv);
};

// The table, in the order it is consulted.
std::span<const Launcher> launchers();

// The first launcher that recognises argv; nullptr when none does.
const Launcher* findLauncher(const std::vector<std::string>& argv);

// Reads argv with the launcher that recognises it, when that one has a parser. Returns nullptr
// with `why` set when none does, or when it does not understand the command line (an unknown
// option, an unsupported form); `why` then names the word or the reason. May read files named on
// the command line (hostfiles) and the process environment (the launcher's own variables).
std::unique_ptr<LaunchCommand> parseLaunchCommand(const std::vector<std::string>& argv,
                                                  std::string& why);
// The same with the launcher already found (findLauncher; nullptr: none recognised argv).
std::unique_ptr<LaunchCommand> parseLaunchCommand(const Launcher* launcher,
                                                  const std::vector<std::string>& argv,
                                                  std::string& why);

}  // namespace rankmap::launch
