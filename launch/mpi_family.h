// Which MPI a launcher or a library belongs to: Open MPI, or the MPICH family (MPICH, Intel MPI,
// MVAPICH, Cray MPICH: one ABI, one launcher, Hydra). `mpirun` and `mpiexec` are names both
// families install (Debian switches them through the alternatives system), so rankmap run asks:
//   1. the launcher's real name: argv[0] looked up on PATH and its symbolic links resolved
//      (/usr/bin/mpirun -> /etc/alternatives/mpirun -> orterun or mpirun.mpich);
//   2. when that name says nothing (a bare `mpiexec` of a source install), the launcher's own
//      `--version` text, bounded by a deadline ("Open MPI" / "HYDRA build details").
// A shim must match the program's libmpi, not the launcher: mpiFamilyOfLibrary() reads a
// library's file name or soname (libmpi.so.40: Open MPI 3-5; libmpich.so.12 and libmpi.so.12:
// the MPICH ABI).
#pragma once

#include <string>
#include <string_view>

#include "common/deadline.h"

namespace rankmap::launch {

enum class MpiFamily { kUnknown, kOpenMpi, kMpich };
const char* mpiFamilyName(MpiFamily f);  // "unknown", "Open MPI", "MPICH"

// From a launcher's file name (no directory): orterun, prterun, mpirun.openmpi, mpiexec.openmpi
// -> Open MPI; mpiexec.hydra, mpiexec.mpich, mpirun.mpich -> MPICH; anything else unknown.
MpiFamily mpiFamilyOfLauncherName(std::string_view name);
// From a launcher's `--version` output.
MpiFamily mpiFamilyOfVersionText(std::string_view text);
// From a library's file name or soname (a directory is ignored).
MpiFamily mpiFamilyOfLibrary(std::string_view nameOrPath);

// The family of the launcher `argv0` (steps 1 and 2 above); `--version` runs at most until
// `deadline`. kUnknown when neither step tells.
MpiFamily launcherFamily(const std::string& argv0, Deadline deadline);

}  // namespace rankmap::launch
