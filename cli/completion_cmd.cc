// `rankmap completion bash`: a bash completion script made from the command line's own
// definition (every subcommand and option as registered in main.cc), so it cannot fall behind.
// Installed as share/bash-completion/completions/rankmap (cli/CMakeLists.txt); by hand:
// `source <(rankmap completion bash)`.
#include <memory>
#include <set>
#include <string>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/build_config.h"
#include "common/error.h"

namespace rankmap::cli {
namespace {

// The options of `app` and of its option groups (CLI11 keeps a group as a subcommand without a
// name), into `words`.
void collectOptions(const CLI::App& app, std::set<std::string>& words) {
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& s : o->get_snames()) words.insert("-" + s);
    for (const auto& l : o->get_lnames()) words.insert("--" + l);
  }
  for (const CLI::App* group : app.get_subcommands({}))
    if (group->get_name().empty()) collectOptions(*group, words);
}

// "-t --topology -o --out ..." for the options of `app` (not its subcommands').
std::string optionWords(const CLI::App& app) {
  std::set<std::string> words;
  collectOptions(app, words);
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// Completes subcommand names first, then the chosen subcommand's options (and the global ones,
// which may stand anywhere); an option's value and a plain word get the shell's file names
// (complete -o default).
std::string bashCompletion(const CLI::App& app) {
  std::string names, cases;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name().empty()) continue;  // an option group: its options are the root's
    names += (names.empty() ? "" : " ") + sub->get_name();
    cases += fmt::format("    {}) words=\"{} $global\" ;;\n", sub->get_name(), optionWords(*sub));
  }
  return fmt::format(R"(# bash completion for rankmap (`rankmap completion bash`, rankmap {version})
_rankmap() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} cmd="" words="" w i
  local global="{global}"
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${{COMP_WORDS[i]}}
    [[ $w == -- ]] && return 0
    case " {names} " in *" $w "*) cmd=$w; break ;; esac
  done
  COMPREPLY=()
  if [[ -z $cmd ]]; then
    if [[ $cur == -* ]]; then words=$global; else words="{names}"; fi
  else
    [[ $cur == -* ]] || return 0
    case $cmd in
{cases}    esac
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _rankmap rankmap
)",
                     fmt::arg("version", RANKMAP_VERSION), fmt::arg("global", optionWords(app)),
                     fmt::arg("names", names), fmt::arg("cases", cases));
}

}  // namespace

void registerCompletionCommand(CLI::App& app, CliContext& /*ctx*/, CommandRunner& run) {
  auto* cmd = app.add_subcommand("completion", "Print a shell completion script (bash)");
  auto shell = std::make_shared<std::string>();
  cmd->add_option("shell", *shell, "The shell: bash")->required();
  cmd->callback([&app, &run, shell] {
    run = [&app, shell] {
      if (*shell != "bash")
        throw InvalidInput(fmt::format("shell '{}': expected bash", *shell));
      fmt::print("{}", bashCompletion(app));
      return 0;
    };
  });
}

}  // namespace rankmap::cli
