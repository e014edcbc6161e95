#include "launch/mpi_family.h"

#include <climits>
#include <cstdlib>

#include "launch/process.h"

namespace rankmap::launch {
namespace {

std::string_view baseName(std::string_view p) {
  auto slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

const char* mpiFamilyName(MpiFamily f) {
  switch (f) {
    case MpiFamily::kOpenMpi:
      return "Open MPI";
    case MpiFamily::kMpich:
      return "MPICH";
    case MpiFamily::kUnknown:
      break;
  }
  return "unknown";
}

MpiFamily mpiFamilyOfLauncherName(std::string_view name) {
  name = baseName(name);
  for (std::string_view n : {"orterun", "prterun", "mpirun.openmpi", "mpiexec.openmpi"})
    if (name == n) return MpiFamily::kOpenMpi;
  for (std::string_view n : {"mpiexec.hydra", "mpiexec.mpich", "mpirun.mpich", "mpiexec.mpich2"})
    if (name == n) return MpiFamily::kMpich;
  return MpiFamily::kUnknown;
}

MpiFamily mpiFamilyOfVersionText(std::string_view text) {
  for (std::string_view s : {"Open MPI", "OpenRTE", "Open RTE", "PRRTE"})
    if (text.find(s) != std::string_view::npos) return MpiFamily::kOpenMpi;
  for (std::string_view s : {"HYDRA", "MPICH", "Intel(R) MPI", "MVAPICH"})
    if (text.find(s) != std::string_view::npos) return MpiFamily::kMpich;
  return MpiFamily::kUnknown;
}

MpiFamily mpiFamilyOfLibrary(std::string_view nameOrPath) {
  std::string_view name = baseName(nameOrPath);
  // Open MPI: libmpi.so.40 (3.x-5.x) and its Fortran libraries (libmpi_mpifh, libmpi_usempi*).
  if (startsWith(name, "libmpi.so.40") || startsWith(name, "libmpi_mpifh.so") ||
      startsWith(name, "libmpi_usempi"))
    return MpiFamily::kOpenMpi;
  // The MPICH ABI: libmpich.so.12 (MPICH, MVAPICH), libmpi.so.12 (Intel MPI, Cray MPICH),
  // libmpichfort.so.12.
  if (startsWith(name, "libmpich.so") || startsWith(name, "libmpichfort.so") ||
      startsWith(name, "libmpi.so.12"))
    return MpiFamily::kMpich;
  return MpiFamily::kUnknown;
}

MpiFamily launcherFamily(const std::string& argv0, Deadline deadline) {
  auto path = findOnPath(argv0);
  if (!path) return MpiFamily::kUnknown;
  MpiFamily f = mpiFamilyOfLauncherName(*path);
  if (f != MpiFamily::kUnknown) return f;
  char buf[PATH_MAX];
  if (::realpath(path->c_str(), buf) != nullptr) {
    f = mpiFamilyOfLauncherName(buf);
    if (f != MpiFamily::kUnknown) return f;
  }
  if (auto out = captureStdout({*path, "--version"}, deadline, 64u << 10))
    return mpiFamilyOfVersionText(*out);
  return MpiFamily::kUnknown;
}

}  // namespace rankmap::launch
