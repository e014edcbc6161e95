#include "launch/elf.h"

#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <set>

#include "common/error.h"

namespace rankmap::launch {
namespace {

// A read-only mapping of a whole file.
class Mapped {
 public:
  explicit Mapped(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) RANKMAP_THROW(IoError, "{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      RANKMAP_THROW(InvalidInput, "{}: not a regular file", path);
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (data_ == MAP_FAILED)
      RANKMAP_THROW(IoError, "{}: cannot map: {}", path, std::strerror(errno));
  }
  ~Mapped() {
    if (data_ != nullptr && data_ != MAP_FAILED) ::munmap(data_, size_);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  const unsigned char* data() const { return static_cast<const unsigned char*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Bounds-checked view of a struct at `off`; nullptr when it does not fit.
template <typename T>
const T* at(const Mapped& m, uint64_t off) {
  if (off > m.size() || m.size() - off < sizeof(T)) return nullptr;
  return reinterpret_cast<const T*>(m.data() + off);
}

std::string cstr(const Mapped& m, uint64_t tableOff, uint64_t tableSize, uint64_t idx) {
  if (idx >= tableSize || tableOff > m.size() || m.size() - tableOff < tableSize) return "";
  const char* s = reinterpret_cast<const char*>(m.data() + tableOff + idx);
  size_t max = tableSize - idx;
  return std::string(s, strnlen(s, max));
}

std::string versionString(const Mapped& m) {
  static const char kTag[] = "NCCL version ";
  const size_t tagLen = sizeof(kTag) - 1;
  const unsigned char* p = m.data();
  const unsigned char* end = p + m.size();
  while (p < end) {
    auto* hit =
        static_cast<const unsigned char*>(memmem(p, static_cast<size_t>(end - p), kTag, tagLen));
    if (hit == nullptr) break;
    const unsigned char* v = hit + tagLen;
    std::string out;
    while (v < end && (std::isdigit(*v) || *v == '.') && out.size() < 16)
      out += static_cast<char>(*v++);
    if (!out.empty() && std::isdigit(static_cast<unsigned char>(out[0])) &&
        out.find('.') != std::string::npos)
      return out;
    p = hit + 1;
  }
  return "";
}

// The directories of a colon-separated list (DT_RUNPATH, DT_RPATH, LD_LIBRARY_PATH), empty
// entries left out, appended to `out`.
void appendPathList(const std::string& list, std::vector<std::string>& out) {
  size_t b = 0;
  while (b <= list.size()) {
    size_t e = list.find(':', b);
    if (e == std::string::npos) e = list.size();
    if (e > b) out.push_back(list.substr(b, e - b));
    b = e + 1;
  }
}

std::string dirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
}

// The loader's default directories: /etc/ld.so.conf (with its includes), then the system ones.
std::vector<std::string> systemLibraryDirs() {
  std::vector<std::string> dirs;
  std::deque<std::string> files{"/etc/ld.so.conf"};
  std::set<std::string> seen;
  while (!files.empty() && seen.size() < 64) {
    std::string file = files.front();
    files.pop_front();
    if (!seen.insert(file).second) continue;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      line = line.substr(0, line.find('#'));
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
        line.pop_back();
      size_t b = line.find_first_not_of(" \t");
      if (b == std::string::npos) continue;
      line = line.substr(b);
      if (line.rfind("include", 0) == 0) {
        std::string pattern = line.substr(7);
        pattern = pattern.substr(pattern.find_first_not_of(" \t"));
        if (pattern[0] != '/') pattern = dirOf(file) + "/" + pattern;
        glob_t g{};
        if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
          for (size_t i = 0; i < g.gl_pathc; ++i) files.push_back(g.gl_pathv[i]);
        ::globfree(&g);
      } else {
        dirs.push_back(line);
      }
    }
  }
  for (const char* d : {"/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu",
                        "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"})
    dirs.push_back(d);
  return dirs;
}

}  // namespace

bool readable(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

std::string realPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) != nullptr ? std::string(buf) : p;
}

ElfFacts readElf(const std::string& path) {
  Mapped m(path);
  ElfFacts f;
  f.path = path;
  const auto* eh = at<Elf64_Ehdr>(m, 0);
  if (eh == nullptr || std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
    RANKMAP_THROW(InvalidInput, "{}: not an ELF file", path);
  if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB)
    RANKMAP_THROW(InvalidInput, "{}: not a 64-bit little-endian ELF file", path);
  bool interp = false;
  for (uint16_t i = 0; i < eh->e_phnum; ++i) {
    const auto* ph = at<Elf64_Phdr>(m, eh->e_phoff + uint64_t{i} * eh->e_phentsize);
    if (ph != nullptr && ph->p_type == PT_INTERP) interp = true;
  }
  f.executable = eh->e_type == ET_EXEC || (eh->e_type == ET_DYN && interp);

  std::vector<const Elf64_Shdr*> sections;
  for (uint16_t i = 0; i < eh->e_shnum; ++i)
    sections.push_back(at<Elf64_Shdr>(m, eh->e_shoff + uint64_t{i} * eh->e_shentsize));
  auto section = [&](uint32_t idx) -> const Elf64_Shdr* {
    return idx < sections.size() ? sections[idx] : nullptr;
  };
  std::vector<std::string> rpath;
  for (const auto* sh : sections) {
    if (sh == nullptr) continue;
    if (sh->sh_type == SHT_DYNAMIC) {
      const auto* strtab = section(sh->sh_link);
      if (strtab == nullptr) continue;
      for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= sh->sh_size; off += sizeof(Elf64_Dyn)) {
        const auto* d = at<Elf64_Dyn>(m, sh->sh_offset + off);
        if (d == nullptr || d->d_tag == DT_NULL) break;
        std::string s = cstr(m, strtab->sh_offset, strtab->sh_size, d->d_un.d_val);
        if (d->d_tag == DT_NEEDED) f.needed.push_back(s);
        if (d->d_tag == DT_SONAME) f.soname = s;
        if (d->d_tag == DT_RUNPATH) appendPathList(s, f.runpath);
        if (d->d_tag == DT_RPATH) appendPathList(s, rpath);
      }
    }
    if (sh->sh_type == SHT_DYNSYM || sh->sh_type == SHT_SYMTAB) {
      const auto* strtab = section(sh->sh_link);
      if (strtab == nullptr || sh->sh_entsize != sizeof(Elf64_Sym)) continue;
      for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= sh->sh_size; off += sizeof(Elf64_Sym)) {
        const auto* sym = at<Elf64_Sym>(m, sh->sh_offset + off);
        if (sym == nullptr) break;
        if (cstr(m, strtab->sh_offset, strtab->sh_size, sym->st_name) != "ncclCommInitRank")
          continue;
        const bool defined = sym->st_shndx != SHN_UNDEF;
        const bool visible = ELF64_ST_VISIBILITY(sym->st_other) == STV_DEFAULT &&
                             ELF64_ST_BIND(sym->st_info) != STB_LOCAL;
        if (sh->sh_type == SHT_DYNSYM) {
          if (defined && visible) f.ncclExported = true;
          if (!defined) f.ncclImported = true;
        } else if (defined && !visible) {
          f.ncclStaticOnly = true;
        } else if (defined && f.executable) {
          f.ncclStaticOnly = true;  // an executable's own calls are direct
        }
      }
    }
  }
  if (f.runpath.empty()) f.runpath = rpath;
  if (f.ncclExported && f.executable) f.ncclStaticOnly = true;
  if (f.ncclExported || f.ncclStaticOnly) f.ncclVersion = versionString(m);
  return f;
}

std::string resolveLibrary(const std::string& name, const ElfFacts& from) {
  if (name.find('/') != std::string::npos) return readable(name) ? name : "";
  std::vector<std::string> dirs;
  for (std::string d : from.runpath) {
    for (const char* origin : {"$ORIGIN", "${ORIGIN}"}) {
      size_t p = d.find(origin);
      if (p != std::string::npos) d.replace(p, std::strlen(origin), dirOf(realPath(from.path)));
    }
    dirs.push_back(d);
  }
  // LD_LIBRARY_PATH is the environment's business, not a RANKMAP_* setting: the loader reads it.
  if (const char* llp = std::getenv("LD_LIBRARY_PATH")) appendPathList(llp, dirs);
  static const std::vector<std::string> system = systemLibraryDirs();
  dirs.insert(dirs.end(), system.begin(), system.end());
  for (const auto& d : dirs) {
    std::string p = d + "/" + name;
    if (readable(p)) return p;
  }
  return "";
}

std::string ncclVersionOfFile(const std::string& path) {
  std::string base = realPath(path);
  base = base.substr(base.rfind('/') + 1);
  const std::string prefix = "libnccl.so.";
  if (base.rfind(prefix, 0) == 0 && std::count(base.begin(), base.end(), '.') >= 4)
    return base.substr(prefix.size());
  try {
    Mapped m(path);
    return versionString(m);
  } catch (const Error&) {
    return "";
  }
}

void walkDependencies(
    const std::vector<std::string>& roots, bool rootsMustBeElf,
    const std::function<bool(const std::string& path, const ElfFacts& facts)>& file,
    const std::function<Needed(const std::string& name, const std::string& resolved,
                               const std::string& by)>& needed) {
  std::deque<std::pair<std::string, int>> queue;
  for (const auto& r : roots) queue.push_back({r, 0});
  std::set<std::string> seen;
  while (!queue.empty() && seen.size() < 256) {
    auto [path, depth] = queue.front();
    queue.pop_front();
    if (!seen.insert(realPath(path)).second) continue;
    ElfFacts f;
    try {
      f = readElf(path);
    } catch (const Error&) {
      if (depth == 0 && rootsMustBeElf) throw;
      continue;  // not ELF (a script): nothing to say
    }
    if (!file(path, f)) continue;
    for (const auto& n : f.needed) {
      std::string r = resolveLibrary(n, f);
      Needed what = needed(n, r, path);
      if (what == Needed::kStop) return;
      if (what == Needed::kFollow && !r.empty() && depth < 6) queue.push_back({r, depth + 1});
    }
  }
}

ProgramMpi programMpi(const std::string& path) {
  ProgramMpi out;
  walkDependencies(
      {path}, false, [](const std::string&, const ElfFacts&) { return true; },
      [&](const std::string& name, const std::string& resolved, const std::string& by) {
        auto family = mpiFamilyOfLibrary(name);
        if (family == MpiFamily::kUnknown) return Needed::kFollow;
        out.family = family;
        out.library = resolved.empty() ? name : resolved;
        out.neededBy = by;
        return Needed::kStop;
      });
  return out;
}

}  // namespace rankmap::launch
