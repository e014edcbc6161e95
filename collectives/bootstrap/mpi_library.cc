#include "collectives/bootstrap/mpi_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll::bootstrap {

// Open MPI's C ABI as far as the rendezvous needs it: handles are pointers to opaque objects.
struct MpiLibrary::Api {
  using Handle = void*;
  int (*initialized)(int* flag) = nullptr;
  int (*finalized)(int* flag) = nullptr;
  int (*init)(int* argc, char*** argv) = nullptr;
  int (*finalize)() = nullptr;
  int (*commRank)(Handle comm, int* rank) = nullptr;
  int (*commSize)(Handle comm, int* size) = nullptr;
  int (*bcast)(void* buffer, int count, Handle type, int root, Handle comm) = nullptr;
  int (*errorString)(int code, char* text, int* length) = nullptr;
  Handle commWorld = nullptr;  // &ompi_mpi_comm_world
  Handle byteType = nullptr;   // &ompi_mpi_byte
};

namespace {

constexpr int kMpiSuccess = 0;        // MPI_SUCCESS, 0 in every MPI
constexpr int kMaxErrorString = 256;  // Open MPI's MPI_MAX_ERROR_STRING
constexpr uint32_t kMaxBroadcast = 1u << 16;

template <typename Fn>
void resolveSymbol(void* lib, const std::string& path, const char* name, Fn& out) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    const char* err = dlerror();
    RANKMAP_THROW(IoError,
                  "MPI library {}: no symbol {} ({}); the rendezvous through MPI handles Open "
                  "MPI's libmpi.so.40 only: set RANKMAP_MPI_LIBRARY to it, or set RANKMAP_ROOT",
                  path, name, err ? err : "not found");
  }
  static_assert(sizeof(Fn) == sizeof(void*));
  std::memcpy(&out, &sym, sizeof(out));  // POSIX: object and function pointers convert
}

}  // namespace

MpiLibrary::MpiLibrary(std::string path, std::unique_ptr<Api> api)
    : path_(std::move(path)), api_(std::move(api)) {}

std::unique_ptr<MpiLibrary> MpiLibrary::open(const std::string& path) {
  // RTLD_GLOBAL: Open MPI's components (loaded by MPI_Init) resolve libmpi's symbols globally.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    RANKMAP_THROW(IoError,
                  "under mpirun but the MPI library {} could not be loaded ({}): install Open "
                  "MPI's library, set RANKMAP_MPI_LIBRARY to its path, or set RANKMAP_ROOT",
                  path, err ? err : "unknown error");
  }
  auto api = std::make_unique<Api>();
  resolveSymbol(lib, path, "MPI_Initialized", api->initialized);
  resolveSymbol(lib, path, "MPI_Finalized", api->finalized);
  resolveSymbol(lib, path, "MPI_Init", api->init);
  resolveSymbol(lib, path, "MPI_Finalize", api->finalize);
  resolveSymbol(lib, path, "MPI_Comm_rank", api->commRank);
  resolveSymbol(lib, path, "MPI_Comm_size", api->commSize);
  resolveSymbol(lib, path, "MPI_Bcast", api->bcast);
  resolveSymbol(lib, path, "MPI_Error_string", api->errorString);
  resolveSymbol(lib, path, "ompi_mpi_comm_world", api->commWorld);
  resolveSymbol(lib, path, "ompi_mpi_byte", api->byteType);

  std::unique_ptr<MpiLibrary> mpi(new MpiLibrary(path, std::move(api)));
  const Api& a = *mpi->api_;
  int initialized = 0, finalized = 0;
  if (a.initialized(&initialized) != kMpiSuccess || a.finalized(&finalized) != kMpiSuccess)
    RANKMAP_THROW(PeerError, "MPI library {}: MPI_Initialized/MPI_Finalized failed", path);
  if (finalized)
    RANKMAP_THROW(InvalidInput, "MPI library {}: MPI is finalized already in this process", path);
  if (!initialized) {
    int rc = a.init(nullptr, nullptr);
    if (rc != kMpiSuccess)
      RANKMAP_THROW(PeerError, "MPI library {}: MPI_Init failed: {}", path, mpi->errorText(rc));
    mpi->initializedHere_ = true;
  }
  int rc = a.commRank(a.commWorld, &mpi->rank_);
  if (rc == kMpiSuccess) rc = a.commSize(a.commWorld, &mpi->size_);
  if (rc != kMpiSuccess)
    RANKMAP_THROW(PeerError, "MPI library {}: MPI_Comm_rank/MPI_Comm_size failed: {}", path,
                  mpi->errorText(rc));
  RANKMAP_DEBUG(Coll, "MPI library {}: rank {} of {}{}", path, mpi->rank_, mpi->size_,
                mpi->initializedHere_ ? " (MPI_Init here)" : " (initialized by the program)");
  return mpi;
}

MpiLibrary::~MpiLibrary() {
  if (!initializedHere_) return;
  int rc = api_->finalize();
  if (rc != kMpiSuccess)
    RANKMAP_WARN(Coll, "MPI library {}: MPI_Finalize failed: {}", path_, errorText(rc));
}

std::string MpiLibrary::errorText(int rc) const {
  char text[kMaxErrorString + 1] = {};
  int len = 0;
  if (api_->errorString(rc, text, &len) != kMpiSuccess) return fmt::format("error code {}", rc);
  return std::string(text, static_cast<size_t>(std::clamp(len, 0, kMaxErrorString)));
}

std::string MpiLibrary::broadcastFromRank0(const std::string& mine, size_t maxBytes) {
  if (maxBytes > kMaxBroadcast)
    RANKMAP_THROW(InvalidInput, "MPI broadcast of {} bytes: at most {}", maxBytes, kMaxBroadcast);
  if (rank_ == 0 && mine.size() > maxBytes)
    RANKMAP_THROW(InvalidInput, "MPI broadcast: {} bytes from rank 0 exceed the {} agreed",
                  mine.size(), maxBytes);
  // A fixed-size message (length word, then the bytes) so that one MPI_Bcast suffices.
  std::string buf(sizeof(uint32_t) + maxBytes, '\0');
  if (rank_ == 0) {
    uint32_t n = static_cast<uint32_t>(mine.size());
    std::memcpy(buf.data(), &n, sizeof(n));
    std::memcpy(buf.data() + sizeof(n), mine.data(), mine.size());
  }
  int rc =
      api_->bcast(buf.data(), static_cast<int>(buf.size()), api_->byteType, 0, api_->commWorld);
  if (rc != kMpiSuccess)
    RANKMAP_THROW(PeerError, "MPI library {}: MPI_Bcast from rank 0 failed: {}", path_,
                  errorText(rc));
  uint32_t n = 0;
  std::memcpy(&n, buf.data(), sizeof(n));
  if (n > maxBytes)
    RANKMAP_THROW(PeerError, "MPI_Bcast from rank 0: length {} exceeds {}", n, maxBytes);
  return buf.substr(sizeof(n), n);
}

}  // namespace rankmap::coll::bootstrap
