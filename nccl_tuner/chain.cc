#include "nccl_tuner/chain.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "common/error.h"
#include "nccl_tuner/plugin_names.h"

namespace rankmap::nccl_tuner {

struct ChainPlugin::Library {
  void* handle = nullptr;
  std::string path;
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
};

namespace {

// An address inside this object (the tuner library, or a test program linking the core).
void selfAnchor() {}

const void* objectBase(const void* address) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0) return nullptr;
  return info.dli_fbase;
}

// Any tuner plugin struct the library exports (v2 included), or null.
const void* anyPluginSymbol(void* handle) {
  for (int v = abi::kNewestVersion; v >= abi::kOldestVersion; --v)
    if (const void* s = dlsym(handle, abi::symbolName(v))) return s;
  return dlsym(handle, "ncclTunerPlugin_v2");
}

// The file the loader opened for `handle`, found through one of its symbols.
std::string loadedPath(void* handle, const std::string& fallback) {
  Dl_info info{};
  const void* sym = anyPluginSymbol(handle);
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) return info.dli_fname;
  return fallback;
}

// One open library per setting value for the life of the process (or of this library: the cache
// is destroyed, and the handles closed, when NCCL unloads rankmap's tuner).
std::shared_ptr<const ChainPlugin::Library> openLibrary(const std::string& setting) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const ChainPlugin::Library>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(setting); it != cache.end()) return it->second;
  std::string tried, errors;
  for (const auto& name : tunerLibraryCandidates(setting)) {
    // RTLD_LOCAL as NCCL opens plugins: the chained plugin's symbols stay its own.
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      auto lib = std::make_shared<ChainPlugin::Library>();
      lib->handle = h;
      lib->path = loadedPath(h, name);
      cache[setting] = lib;
      return lib;
    }
    const char* err = dlerror();
    tried += (tried.empty() ? "" : ", ") + name;
    errors += fmt::format("{}{}", errors.empty() ? "" : "; ", err ? err : "not found");
  }
  RANKMAP_THROW(IoError, "RANKMAP_NCCL_TUNER_CHAIN={}: cannot open a tuner plugin (tried {}): {}",
                setting, tried, errors);
}

}  // namespace

ChainPlugin::ChainPlugin(std::shared_ptr<const Library> lib, int version, const void* plugin)
    : lib_(std::move(lib)), version_(version), plugin_(plugin) {
  // Every version's struct starts with the name.
  const char* n = static_cast<const abi::TunerV3*>(plugin_)->name;
  name_ = n != nullptr ? n : "(unnamed)";
}

std::shared_ptr<const ChainPlugin> ChainPlugin::load(const std::string& setting, int hostVersion) {
  auto lib = openLibrary(setting);
  const void* any = anyPluginSymbol(lib->handle);
  const bool self =
      isRankmapTuner(lib->path) ||
      (any != nullptr && objectBase(any) == objectBase(reinterpret_cast<const void*>(&selfAnchor)));
  if (self)
    RANKMAP_THROW(InvalidInput,
                  "RANKMAP_NCCL_TUNER_CHAIN={}: {} is rankmap's tuner itself (it would call "
                  "itself); name the plugin it should call instead",
                  setting, lib->path);
  for (int v = std::min(hostVersion, abi::kNewestVersion); v >= abi::kOldestVersion; --v) {
    if (const void* p = dlsym(lib->handle, abi::symbolName(v)))
      return std::shared_ptr<const ChainPlugin>(new ChainPlugin(lib, v, p));
  }
  RANKMAP_THROW(NotSupported,
                "RANKMAP_NCCL_TUNER_CHAIN={}: {} exports no tuner plugin of version 3 to {} "
                "(ncclTunerPlugin_v3..v{}; v2 has no cost table to chain)",
                setting, lib->path, hostVersion, hostVersion);
}

const std::string& ChainPlugin::path() const { return lib_->path; }

abi::Result ChainPlugin::init(const InitArgs& a, void** context) const {
  switch (version_) {
    case 3:
      return static_cast<const abi::TunerV3*>(plugin_)->init(a.nRanks, a.nNodes, a.logFunction,
                                                             context);
    case 4:
      return static_cast<const abi::TunerV4*>(plugin_)->init(a.nRanks, a.nNodes, a.logFunction,
                                                             context);
    case 5:
      return static_cast<const abi::TunerV5*>(plugin_)->init(
          context, a.commId, a.nRanks, a.nNodes, a.logFunction, a.nvlDomainInfo, a.constants);
    default:
      return static_cast<const abi::TunerV6*>(plugin_)->init(
          context, a.commId, a.nRanks, a.nNodes, a.logFunction, a.nvlDomainInfo, a.constants);
  }
}

abi::Result ChainPlugin::getCollInfo(void* context, abi::Func collType, size_t nBytes,
                                     int numPipeOps, float** table, int numAlgo, int numProto,
                                     int regBuff, int* nChannels) const {
  switch (version_) {
    case 3:
      return static_cast<const abi::TunerV3*>(plugin_)->getCollInfo(
          context, collType, nBytes, numPipeOps, table, numAlgo, numProto, nChannels);
    case 4:
      return static_cast<const abi::TunerV4*>(plugin_)->getCollInfo(
          context, collType, nBytes, numPipeOps, table, numAlgo, numProto, regBuff, nChannels);
    case 5:
      return static_cast<const abi::TunerV5*>(plugin_)->getCollInfo(
          context, collType, nBytes, numPipeOps, table, numAlgo, numProto, regBuff, nChannels);
    default:
      return static_cast<const abi::TunerV6*>(plugin_)->getCollInfo(
          context, collType, nBytes, numPipeOps, table, numAlgo, numProto, regBuff, nChannels);
  }
}

abi::Result ChainPlugin::finalize(void* context) const {
  switch (version_) {
    case 3:
      return static_cast<const abi::TunerV3*>(plugin_)->destroy(context);
    case 4:
      return static_cast<const abi::TunerV4*>(plugin_)->destroy(context);
    case 5:
      return static_cast<const abi::TunerV5*>(plugin_)->finalize(context);
    default:
      return static_cast<const abi::TunerV6*>(plugin_)->finalize(context);
  }
}

bool ChainPlugin::hasChunkSize() const {
  return version_ >= 6 && static_cast<const abi::TunerV6*>(plugin_)->getChunkSize != nullptr;
}

abi::Result ChainPlugin::getChunkSize(void* context, abi::Func collType, size_t nBytes, int algo,
                                      int proto, int nChannels, size_t* chunkSize) const {
  if (!hasChunkSize()) return abi::Result::kSuccess;
  return static_cast<const abi::TunerV6*>(plugin_)->getChunkSize(context, collType, nBytes, algo,
                                                                 proto, nChannels, chunkSize);
}

}  // namespace rankmap::nccl_tuner
