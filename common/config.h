// Typed registry of RANKMAP_* settings and the immutable Config read from it.
//
// Every setting is declared once in common/settings.def. Config::load() reads them with this
// precedence: command line > RANKMAP_* environment > user file > system file > default.
// A Config is immutable after load and safe to share between threads; library code receives
// it (or values from it) rather than calling getenv.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace rankmap {

enum class SettingType { Bool, Int, Double, String, Duration, Size };

enum class SettingId : size_t {
#define RANKMAP_SETTING(id, name, type, def, doc) id,
#include "common/settings.def"
#undef RANKMAP_SETTING
  kCount
};

struct SettingInfo {
  SettingId id;
  std::string_view name;
  SettingType type;
  std::string_view defaultValue;
  std::string_view doc;
  // Int settings with a RANKMAP_RANGE: the whole numbers taken (inclusive).
  std::optional<std::pair<int64_t, int64_t>> range;
};

template <SettingType T> struct SettingValueType;
template <> struct SettingValueType<SettingType::Bool> { using type = bool; };
template <> struct SettingValueType<SettingType::Int> { using type = int64_t; };
template <> struct SettingValueType<SettingType::Double> { using type = double; };
template <> struct SettingValueType<SettingType::String> { using type = std::string; };
template <> struct SettingValueType<SettingType::Duration> { using type = std::chrono::milliseconds; };
// Size values are bytes.
template <> struct SettingValueType<SettingType::Size> { using type = uint64_t; };

// A typed handle on one registered setting.
template <typename T>
struct SettingKey {
  SettingId id;
};

namespace settings {
#define RANKMAP_SETTING(id_, name_, type_, def_, doc_) \
  inline constexpr SettingKey<SettingValueType<SettingType::type_>::type> id_{SettingId::id_};
#include "common/settings.def"
#undef RANKMAP_SETTING
}  // namespace settings

const std::vector<SettingInfo>& settingRegistry();
const SettingInfo& settingInfo(SettingId id);
const SettingInfo* findSetting(std::string_view name);
std::string_view settingTypeName(SettingType t);

// Parses `text` as a value of `info`'s type; throws InvalidInput naming `source`, the setting and
// what was expected.
using SettingValue = std::variant<bool, int64_t, double, std::string, std::chrono::milliseconds, uint64_t>;
SettingValue parseSettingValue(const SettingInfo& info, std::string_view text, std::string_view source);

// Parses "250ms", "5s", "2m", "1h", "1500us"; a bare number is seconds.
std::optional<std::chrono::milliseconds> parseDuration(std::string_view text);
// Parses "64", "64K", "16M", "1G", "4KiB", "2MB" (1024-based).
std::optional<uint64_t> parseSize(std::string_view text);

class Config {
 public:
  enum class Origin { Default, SystemFile, UserFile, Environment, CommandLine };

  struct LoadOptions {
    // Environment to read; nullopt = the process environment.
    std::optional<std::map<std::string, std::string>> env;
    std::string systemFile = "/etc/rankmap.conf";
    // User file; nullopt = RANKMAP_CONF_FILE (env) or its default. Missing files are skipped.
    std::optional<std::string> userFile;
    // NAME=VALUE pairs from the command line (highest precedence), with where they came from.
    std::vector<std::pair<std::string, std::string>> overrides;
  };

  // Defaults only; never throws.
  Config();
  // Throws InvalidInput naming the source (file:line or variable) on a bad value.
  static Config load(const LoadOptions& opts);
  static Config load() { return load(LoadOptions{}); }

  template <typename T>
  const T& get(SettingKey<T> key) const {
    return std::get<T>(values_[static_cast<size_t>(key.id)]);
  }
  Origin origin(SettingId id) const { return origins_[static_cast<size_t>(id)]; }
  // Where the value came from, e.g. "environment", "/etc/rankmap.conf:3", "default".
  const std::string& originText(SettingId id) const { return originText_[static_cast<size_t>(id)]; }
  // The value as text (durations in ms with unit, sizes in bytes).
  std::string valueText(SettingId id) const;
  // RANKMAP_* names seen in the environment or files that are not registered (likely typos).
  const std::vector<std::string>& unknownNames() const { return unknown_; }

 private:
  void set(const SettingInfo& info, std::string_view text, Origin origin, std::string originText);

  std::vector<SettingValue> values_;
  std::vector<Origin> origins_;
  std::vector<std::string> originText_;
  std::vector<std::string> unknown_;
};

}  // namespace rankmap
