#include "nccl_tuner/plugin_names.h"

#include <filesystem>
#include <system_error>

namespace rankmap::nccl_tuner {

std::vector<std::string> tunerLibraryCandidates(std::string_view value) {
  if (value.empty()) return {"libnccl-tuner.so"};
  std::vector<std::string> out{std::string(value)};
  const bool libSo = value.starts_with("lib") && value.ends_with(".so");
  if (value.find('/') == std::string_view::npos && !libSo)
    out.push_back("libnccl-tuner-" + std::string(value) + ".so");
  return out;
}

bool isRankmapTuner(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::path(path).filename() == kTunerLibrary) return true;
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  return !ec && real.filename() == kTunerLibrary;
}

}  // namespace rankmap::nccl_tuner
