// The tuner plugin that rankmap's tuner chains to (RANKMAP_NCCL_TUNER_CHAIN): typically the one a
// cloud image configured through NCCL_TUNER_PLUGIN, which NCCL would otherwise have loaded
// itself. rankmap's tuner calls it first, with NCCL's table, and adjusts what it leaves; init and
// finalize are forwarded one for one.
//
// Version: the chained plugin is called through the newest struct it exports that is no newer
// than the one NCCL called rankmap's tuner through: the struct that NCCL would have picked had it
// loaded the plugin itself (a newer one would need arguments this NCCL does not pass).
//
// Thread safety: load() may be called from several threads; a ChainPlugin is immutable, and its
// calls are the plugin's (NCCL's own rules: one communicator's calls never overlap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "nccl_tuner/tuner_abi.h"

namespace rankmap::nccl_tuner {

class ChainPlugin {
 public:
  // Opens the library that `setting` names (the names NCCL would try, plugin_names.h), once per
  // process and name, and picks its struct for a caller at version `hostVersion`. Throws IoError
  // naming the setting, every name tried and the loader's message; NotSupported when it exports
  // no struct of version 3..hostVersion; InvalidInput when it is rankmap's tuner itself (it would
  // call itself).
  static std::shared_ptr<const ChainPlugin> load(const std::string& setting, int hostVersion);

  int version() const { return version_; }
  const std::string& name() const { return name_; }  // the plugin's own name field
  const std::string& path() const;                   // the file the loader opened

  struct InitArgs {
    size_t nRanks = 0;
    size_t nNodes = 0;
    abi::Logger logFunction = nullptr;
    uint64_t commId = 0;                          // v5+
    abi::NvlDomainInfo* nvlDomainInfo = nullptr;  // v5+
    abi::TunerConstants* constants = nullptr;     // v5+
  };
  abi::Result init(const InitArgs& args, void** context) const;
  // regBuff is dropped for a v3 plugin.
  abi::Result getCollInfo(void* context, abi::Func collType, size_t nBytes, int numPipeOps,
                          float** table, int numAlgo, int numProto, int regBuff,
                          int* nChannels) const;
  abi::Result finalize(void* context) const;  // destroy before v5
  // Only v6 plugins that set it have one; without it NCCL's chunk size stands.
  bool hasChunkSize() const;
  abi::Result getChunkSize(void* context, abi::Func collType, size_t nBytes, int algo, int proto,
                           int nChannels, size_t* chunkSize) const;

  struct Library;  // the dlopen handle, shared by every ChainPlugin of one library

 private:
  ChainPlugin(std::shared_ptr<const Library> lib, int version, const void* plugin);

  std::shared_ptr<const Library> lib_;
  int version_ = 0;
  const void* plugin_ = nullptr;  // abi::TunerV<version_>
  std::string name_;
};

}  // namespace rankmap::nccl_tuner
