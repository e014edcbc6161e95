// Which file a tuner plugin setting names, by NCCL's rule, shared by the chain
// (RANKMAP_NCCL_TUNER_CHAIN accepts what NCCL_TUNER_PLUGIN accepts, so the value a cloud image
// set can be moved over unchanged) and by `rankmap doctor` (does NCCL_TUNER_PLUGIN name ours?).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rankmap::nccl_tuner {

// The file name of rankmap's tuner plugin.
inline constexpr std::string_view kTunerLibrary = "librankmap_nccl_tuner.so";

// The names NCCL's plugin loader passes to dlopen for NCCL_TUNER_PLUGIN=`value`, in order (read
// from NVIDIA/nccl, src/plugin/plugin_open.cc, 2.30): the value itself, then, for a value that
// contains no '/' and is not already "lib...so", "libnccl-tuner-<value>.so". An empty value
// means "libnccl-tuner.so" (after which NCCL also looks in its network plugin's library, which
// this rule cannot name).
std::vector<std::string> tunerLibraryCandidates(std::string_view value);

// Whether `path` (a file name or path; symbolic links followed) is rankmap's tuner plugin.
bool isRankmapTuner(const std::string& path);

}  // namespace rankmap::nccl_tuner
