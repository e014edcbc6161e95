// `rankmap`: the user-facing command line. Subcommands are registered from kCommands.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.h"
#include "common/build_config.h"
#include "common/error.h"
#include "common/log.h"

namespace {

// Every subcommand, in the order `rankmap --help` lists them.
constexpr rankmap::cli::CommandRegistrar kCommands[] = {
    rankmap::cli::registerConfigCommand, rankmap::cli::registerRunCommand,
    rankmap::cli::registerExportCommand, rankmap::cli::registerProbeCommand,
    rankmap::cli::registerPlanCommand,   rankmap::cli::registerShowCommand,
    rankmap::cli::registerBenchCommand,  rankmap::cli::registerHostsCommand,
    rankmap::cli::registerDoctorCommand, rankmap::cli::registerCompletionCommand,
};

// Edit distance between two words (insertions, deletions, substitutions).
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1u : 0u)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// git's answer to a word that names no subcommand: the message, with "Did you mean" for the
// nearest names within two edits; empty when `argv` names a subcommand first (or none at all:
// CLI11 then says one is required). Only global flags, which take no value, may come first.
std::string unknownCommand(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view word = argv[i];
    if (word == "--") return "";
    if (!word.empty() && word[0] == '-') continue;
    std::vector<std::string> names;
    for (const auto* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), word) != names.end()) return "";
    std::string msg = "rankmap: '" + std::string(word) + "' is not a rankmap command.";
    size_t best = 2;  // at most two edits away
    std::vector<std::string> near;
    for (const auto& n : names) {
      size_t d = editDistance(word, n);
      if (d > best) continue;
      if (d < best) {
        best = d;
        near.clear();
      }
      if (d == best) near.push_back(n);
    }
    if (!near.empty()) {
      msg += near.size() == 1 ? "\n\nThe most similar command is\n" : "\n\nThe most similar commands are\n";
      for (const auto& n : near) msg += "\t" + n + "\n";
    } else {
      msg += "\n";
    }
    return msg + "See 'rankmap --help'.";
  }
  return "";
}

// `rankmap bench` takes nccl-tests' letters but -o, which is an output file in every other
// subcommand: the hint for a user who typed nccl-tests' `-o sum`; "" otherwise.
std::string ncclTestsHint(const CLI::App& app, int argc, char** argv) {
  bool bench = false;
  for (const auto* sub : app.get_subcommands()) bench |= sub->get_name() == "bench";
  for (int i = 1; bench && i < argc; ++i)
    if (std::string_view(argv[i]) == "-o")
      return "rankmap bench: the reduction is --op (nccl-tests' -o); -o is an output file in "
             "rankmap's other subcommands";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rankmap;
  CLI::App app{"rankmap: puts ranks in the right order for collectives in public clouds"};
  app.name("rankmap");  // usage lines say "rankmap", not the path it was started by
  app.set_version_flag("--version", RANKMAP_VERSION);
  app.require_subcommand(1);
  // Global flags anywhere on the line (`rankmap plan -v`): a subcommand hands what it does not
  // know to this parser. Subcommands inherit the setting when added, so it comes first.
  app.fallthrough();
  cli::CliContext ctx;
  app.add_flag("-v,--verbose", ctx.verbose, "Log at debug level");
  cli::CommandRunner run;
  for (auto reg : kCommands) reg(app, ctx, run);

  std::string cmdName = "rankmap";
  try {
    ctx.config = Config::load();
    log::configure(ctx.config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rankmap: configuration: %s\n",
                 describe(e, log::enabled(log::Subsys::Cli, log::Level::Debug)).c_str());
    return 2;
  }
  if (std::string msg = unknownCommand(app, argc, argv); !msg.empty()) {
    std::fprintf(stderr, "%s\n", msg.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end here with 0; every usage error exits 2 (as git, kubectl and the
    // docs say), not CLI11's own codes.
    if (app.exit(e) == 0) return 0;
    std::string hint = ncclTestsHint(app, argc, argv);
    if (!hint.empty()) std::fprintf(stderr, "%s\n", hint.c_str());
    return 2;
  }
  if (ctx.verbose) log::setLevel(log::Level::Debug);
  for (auto* sub : app.get_subcommands()) cmdName = "rankmap " + sub->get_name();
  try {
    return run ? run() : 0;
  } catch (const InvalidInput& e) {
    std::fprintf(stderr, "%s: %s\n", cmdName.c_str(),
                 describe(e, log::enabled(log::Subsys::Cli, log::Level::Debug)).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", cmdName.c_str(),
                 describe(e, log::enabled(log::Subsys::Cli, log::Level::Debug)).c_str());
    return 1;
  }
}
