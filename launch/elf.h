// Reading ELF files, never running them: what `rankmap run` and `rankmap doctor` learn about a
// program (which MPI it uses, whether NCCL reaches it through the dynamic linker) from its
// dynamic section (DT_NEEDED, DT_RUNPATH/DT_RPATH, DT_SONAME) and symbol tables, resolving
// libraries as the loader would (RUNPATH/RPATH with $ORIGIN, LD_LIBRARY_PATH, /etc/ld.so.conf and
// the system directories). 64-bit little-endian ELF only.
#pragma once

#include <functional>
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

// What walkDependencies does with one library a file needs.
enum class Needed { kFollow, kSkip, kStop };

// Walks the ELF files `roots` and what they need, breadth first, each library found as the loader
// would (resolveLibrary), each file once: at most 256 files, 6 levels below the roots. For each
// file read, `file(path, facts)` says whether to look at the libraries it needs; for each of those,
// `needed(name, resolved, by)` ("" resolved: not found, never walked into) says whether to follow
// it, skip it or end the walk. A file that is not ELF is passed over, a root too unless
// `rootsMustBeElf` (its InvalidInput or IoError then escapes).
void walkDependencies(
    const std::vector<std::string>& roots, bool rootsMustBeElf,
    const std::function<bool(const std::string& path, const ElfFacts& facts)>& file,
    const std::function<Needed(const std::string& name, const std::string& resolved,
                               const std::string& by)>& needed);

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
