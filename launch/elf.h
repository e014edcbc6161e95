// Reading ELF files, never running them: what `rankmap run` and `rankmap doctor` learn about a
// program (which MPI it uses, whether NCCL reaches it through the dynamic linker) from its
// dynamic section (DT_NEEDED, DT_RUNPATH/DT_RPATH, DT_SONAME) and symbol tables, resolving
// libraries as the loader would (RUNPATH/RPATH with $ORIGIN, LD_LIBRARY_PATH, /etc/ld.so.conf and
// the system directories). 64-bit little-endian ELF only.
#pragma once

#include <string>
#include <vector>

#include "launch/mpi_family.h"

namespace rankmap::launch {

// What one ELF file says: its links, and whether it defines or calls NCCL.
struct ElfFacts {
  std::string path;
  bool executable = false;  // ET_EXEC, or ET_DYN with an interpreter (PIE)
  std::string soname;
  std::vector<std::string> needed;
  std::vector<std::string> runpath;  // DT_RUNPATH, else DT_RPATH
  bool ncclExported = false;         // defines ncclCommInitRank in .dynsym (default visibility)
  bool ncclImported = false;         // references ncclCommInitRank in .dynsym
  bool ncclStaticOnly = false;       // defines it in .symtab only (hidden or local)
  std::string ncclVersion;           // from the "NCCL version X.Y.Z" string, when present
};

// Reads the facts of one 64-bit little-endian ELF file. Throws InvalidInput when it is not one,
// IoError when it cannot be read.
ElfFacts readElf(const std::string& path);

// Where the loader would find `name` needed by `from`: RUNPATH/RPATH ($ORIGIN expanded),
// LD_LIBRARY_PATH, the system directories. Empty when not found.
std::string resolveLibrary(const std::string& name, const ElfFacts& from);

// The NCCL version a library carries: from a versioned file name (libnccl.so.2.21.5), else its
// "NCCL version X.Y.Z" string; "" when neither.
std::string ncclVersionOfFile(const std::string& path);

// `path` with symbolic links resolved; `path` itself when it cannot be.
std::string realPath(const std::string& path);
// Whether this process may read `path` (access(2), as the loader's search tries a candidate).
bool readable(const std::string& path);

// Which MPI a program uses: the first MPI library (mpi_family.h) among its dynamic dependencies,
// breadth first (DT_NEEDED resolved as the loader would), read from the ELF files, never by
// running the program. `family` is kUnknown when there is none (a script, Python, a static
// build).
struct ProgramMpi {
  MpiFamily family = MpiFamily::kUnknown;
  std::string library;   // the MPI library, resolved when the loader would find it
  std::string neededBy;  // the ELF file that needs it
};
ProgramMpi programMpi(const std::string& path);

}  // namespace rankmap::launch
