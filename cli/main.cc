// `rankmap`: the user-facing command line. Subcommands are registered from kCommands.
#include <cstdio>
#include <exception>

#include "cli/command.h"
#include "common/build_config.h"
#include "common/error.h"
#include "common/log.h"

namespace {

// Every subcommand, in the order `rankmap --help` lists them.
constexpr rankmap::cli::CommandRegistrar kCommands[] = {
    rankmap::cli::registerConfigCommand,
    rankmap::cli::registerRunCommand,
    rankmap::cli::registerExportCommand,
    rankmap::cli::registerProbeCommand,
    rankmap::cli::registerPlanCommand,
    rankmap::cli::registerShowCommand,
    rankmap::cli::registerBenchCommand,
    rankmap::cli::registerDoctorCommand,
};

}  // namespace

int main(int argc, char** argv) {
  using namespace rankmap;
  CLI::App app{"rankmap: puts ranks in the right order for collectives in public clouds"};
  app.set_version_flag("--version", RANKMAP_VERSION);
  app.require_subcommand(1);
  cli::CliContext ctx;
  app.add_flag("-v,--verbose", ctx.verbose, "Log at debug level");
  cli::CommandRunner run;
  for (auto reg : kCommands) reg(app, ctx, run);

  std::string cmdName = "rankmap";
  try {
    ctx.config = Config::load();
    log::configure(ctx.config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rankmap: configuration: %s\n", e.what());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (ctx.verbose) log::setLevel(log::Level::Debug);
  for (auto* sub : app.get_subcommands()) cmdName = "rankmap " + sub->get_name();
  try {
    return run ? run() : 0;
  } catch (const InvalidInput& e) {
    std::fprintf(stderr, "%s: %s\n", cmdName.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", cmdName.c_str(), e.what());
    return 1;
  }
}
