// The `rankmap` command line: one file per subcommand (cli/<name>_cmd.cc), each exposing a
// register function listed in cli/main.cc.
//
// Contract: a subcommand's run function returns the process exit code (0 ok, 1 failure,
// 2 usage/bad input) and reports errors through exceptions from common/error.h, which main()
// prints as one line "rankmap <cmd>: <message>". The Config is loaded once before any command runs.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "common/json.h"
#include "launch/mpi_family.h"
#include "reorder/prior.h"

namespace rankmap::cli {

struct CliContext {
  Config config;
  bool verbose = false;
};

// Adds a subcommand to `app`; `run` is set to the function that executes it when selected.
using CommandRunner = std::function<int()>;
using CommandRegistrar = void (*)(CLI::App& app, CliContext& ctx, CommandRunner& run);

// The declared placement `rankmap plan` and `rankmap show` compare with the measurements: FILE
// (nullopt when empty) with its label keys ("k1,k2", top first; empty = the known families).
// A file that cannot be read or parsed is bad input (InvalidInput) naming `source`, where FILE
// came from (e.g. "--prior", "RANKMAP_PRIOR (environment)"). In plan_cmd.cc.
std::optional<reorder::DeclaredPlacement> readPrior(const std::string& file,
                                                    const std::string& labelKeys,
                                                    const std::string& source = "--prior");

// The help of the options `rankmap plan` and `rankmap run` share: the job's groups.
inline constexpr const char* kMeshHelp =
    "The job's device mesh, outermost first (PyTorch's init_device_mesh order), "
    "NAME=SIZE[,NAME=SIZE...], e.g. pp=2,dp=4,tp=8: the order is chosen for every group's traffic "
    "at once";
inline constexpr const char* kTrafficHelp =
    "Each mesh dimension's traffic per step: DIM=COLLECTIVE:SIZE[,...], e.g. "
    "dp=allreduce:256MiB,pp=sendrecv:8MiB (defaults by name: docs/planner.md)";
inline constexpr const char* kProfileHelp =
    "A job profile recorded by an earlier run of the job (rankmap run --record-profile): plan for "
    "the groups and traffic it recorded, instead of --mesh and --traffic";

void registerConfigCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerRunCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerExportCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerProbeCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerPlanCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerShowCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerBenchCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerHostsCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerDoctorCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);
void registerCompletionCommand(CLI::App& app, CliContext& ctx, CommandRunner& run);

}  // namespace rankmap::cli
