// An MPI launcher's command line read against the table of its options: one walk for Open MPI's
// mpirun (mpirun.h) and MPICH's Hydra (hydra.h). A table row is an option's name (without dashes:
// both launchers take one or two), how many words follow it, and what rankmap run makes of it
// (the launcher's own kinds). An option not in the table has an unknown word count, so the
// program cannot be found after it: the walk refuses it rather than guess.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace rankmap::launch {

template <typename Kind>
struct LauncherOption {
  std::string_view name;  // without leading dashes
  int args;               // words after the option
  Kind kind;
};

// One option as it stands on the command line.
struct OptionItem {
  size_t index = 0;  // its first word
  size_t words = 1;  // with its values
  std::string name;  // without leading dashes
};

template <typename Kind>
struct OptionWalk {
  std::vector<std::pair<OptionItem, const LauncherOption<Kind>*>> options;  // in order
  size_t program = 0;                                                       // the program's word
};

// Reads argv[1..] up to the program, the first word that does not start with '-' (or is "-").
// Throws NotSupported naming the word: the MPMD form (':' anywhere), an option not in `table`, an
// option of kind `refuse` (it places ranks in a way rankmap run does not model), an option
// without all its values, or no program at all.
template <typename Kind>
OptionWalk<Kind> walkOptions(const std::vector<std::string>& argv,
                             std::span<const LauncherOption<Kind>> table, Kind refuse) {
  OptionWalk<Kind> walk;
  size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& w = argv[i];
    if (w == ":") RANKMAP_THROW(NotSupported, "MPMD form (':' between programs)");
    if (w.size() < 2 || w[0] != '-') break;  // the program
    std::string_view name(w);
    name.remove_prefix(name.substr(0, 2) == "--" ? 2 : 1);
    const LauncherOption<Kind>* spec = nullptr;
    for (const auto& o : table)
      if (o.name == name) spec = &o;
    if (!spec) RANKMAP_THROW(NotSupported, "option {:?} not understood", w);
    if (spec->kind == refuse)
      RANKMAP_THROW(NotSupported, "option {} places ranks in a way rankmap run does not model", w);
    if (i + static_cast<size_t>(spec->args) >= argv.size())
      RANKMAP_THROW(NotSupported, "option {} expects {} value(s)", w, spec->args);
    walk.options.push_back(
        {OptionItem{i, static_cast<size_t>(1 + spec->args), std::string(name)}, spec});
    i += static_cast<size_t>(spec->args);
  }
  if (i >= argv.size()) RANKMAP_THROW(NotSupported, "no program to run");
  walk.program = i;
  for (size_t k = i; k < argv.size(); ++k)
    if (argv[k] == ":") RANKMAP_THROW(NotSupported, "MPMD form (':' between programs)");
  return walk;
}

}  // namespace rankmap::launch
