#include "common/config.h"

#include <cctype>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/error.h"

extern char** environ;

namespace rankmap {
namespace {

const std::vector<SettingInfo> kRegistry = [] {
  std::vector<SettingInfo> r = {
#define RANKMAP_SETTING(id, name, type, def, doc) \
  SettingInfo{SettingId::id, name, SettingType::type, def, doc, std::nullopt},
#include "common/settings.def"
#undef RANKMAP_SETTING
  };
#define RANKMAP_SETTING(id, name, type, def, doc)
#define RANKMAP_RANGE(id, lo, hi) \
  r[static_cast<size_t>(SettingId::id)].range = std::make_pair<int64_t, int64_t>(lo, hi);
#include "common/settings.def"
#undef RANKMAP_RANGE
#undef RANKMAP_SETTING
  return r;
}();

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// Splits "12.5ms" into (12.5, "ms"); nullopt when the number part is not a finite non-negative.
std::optional<std::pair<double, std::string>> numberWithUnit(std::string_view text) {
  text = trim(text);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  std::string num(text.substr(0, i));
  char* end = nullptr;
  double v = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || !std::isfinite(v) || v < 0) return std::nullopt;
  return std::make_pair(v, lower(trim(text.substr(i))));
}

std::string expandHome(const std::string& path) {
  if (path.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    return std::string(home ? home : "") + path.substr(1);
  }
  return path;
}

}  // namespace

const std::vector<SettingInfo>& settingRegistry() { return kRegistry; }

const SettingInfo& settingInfo(SettingId id) { return kRegistry[static_cast<size_t>(id)]; }

const SettingInfo* findSetting(std::string_view name) {
  for (const auto& s : kRegistry)
    if (s.name == name) return &s;
  return nullptr;
}

std::string_view settingTypeName(SettingType t) {
  switch (t) {
    case SettingType::Bool: return "bool";
    case SettingType::Int: return "int";
    case SettingType::Double: return "double";
    case SettingType::String: return "string";
    case SettingType::Duration: return "duration";
    case SettingType::Size: return "size";
  }
  return "?";
}

std::optional<std::chrono::milliseconds> parseDuration(std::string_view text) {
  auto nu = numberWithUnit(text);
  if (!nu) return std::nullopt;
  auto [v, unit] = *nu;
  double ms;
  if (unit.empty() || unit == "s") ms = v * 1e3;
  else if (unit == "ms") ms = v;
  else if (unit == "us") ms = v / 1e3;
  else if (unit == "m" || unit == "min") ms = v * 60e3;
  else if (unit == "h") ms = v * 3600e3;
  else if (unit == "d") ms = v * 86400e3;
  else return std::nullopt;
  if (ms > 1e15) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

std::optional<uint64_t> parseSize(std::string_view text) {
  auto nu = numberWithUnit(text);
  if (!nu) return std::nullopt;
  auto [v, unit] = *nu;
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();         // "MB" -> "m"
  if (unit.size() == 2 && unit.back() == 'i') unit.pop_back();      // "Mi" -> "m"
  double mult;
  if (unit.empty()) mult = 1;
  else if (unit == "k") mult = 1024.0;
  else if (unit == "m") mult = 1024.0 * 1024;
  else if (unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  double bytes = v * mult;
  if (bytes > 1.8e19 || bytes != std::floor(bytes)) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

SettingValue parseSettingValue(const SettingInfo& info, std::string_view text,
                               std::string_view source) {
  auto fail = [&](std::string_view expected) -> SettingValue {
    throw InvalidInput(fmt::format("{}: {}={:?}: expected {}", source, info.name, std::string(text),
                                   expected));
  };
  std::string_view t = trim(text);
  switch (info.type) {
    case SettingType::Bool: {
      auto l = lower(t);
      if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
      if (l == "0" || l == "false" || l == "no" || l == "off") return false;
      return fail("a boolean (1/0, true/false, yes/no, on/off)");
    }
    case SettingType::Int: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      const bool whole = ec == std::errc() && p == t.data() + t.size() && !t.empty();
      if (info.range && (!whole || v < info.range->first || v > info.range->second))
        return fail(info.range->second == INT64_MAX
                        ? fmt::format("a whole number of at least {}", info.range->first)
                        : fmt::format("a whole number from {} to {}", info.range->first,
                                      info.range->second));
      if (!whole) return fail("an integer");
      return v;
    }
    case SettingType::Double: {
      std::string s(t);
      char* end = nullptr;
      double v = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
        return fail("a finite number");
      return v;
    }
    case SettingType::String:
      return std::string(text);
    case SettingType::Duration: {
      auto d = parseDuration(t);
      if (!d) return fail("a duration such as 250ms, 5s, 2m, 1h or 7d");
      return *d;
    }
    case SettingType::Size: {
      auto s = parseSize(t);
      if (!s) return fail("a size in bytes such as 4096, 64K, 16M or 1G");
      return *s;
    }
  }
  return fail("a known type");
}

Config::Config() {
  // The defaults are parsed once: every Config starts from them, and Config::load makes one for
  // each call (the shims, every `rankmap` command, tests/fuzz's settings target).
  static const std::vector<SettingValue> defaults = [] {
    std::vector<SettingValue> v;
    v.reserve(kRegistry.size());
    for (const auto& s : kRegistry)
      v.push_back(parseSettingValue(s, s.defaultValue, "built-in default"));
    return v;
  }();
  values_ = defaults;
  origins_.assign(kRegistry.size(), Origin::Default);
  originText_.assign(kRegistry.size(), "default");
}

void Config::set(const SettingInfo& info, std::string_view text, Origin origin,
                 std::string originText) {
  size_t i = static_cast<size_t>(info.id);
  values_[i] = parseSettingValue(info, text, originText);
  origins_[i] = origin;
  originText_[i] = std::move(originText);
}

Config Config::load(const LoadOptions& opts) {
  Config cfg;
  std::map<std::string, std::string> env;
  if (opts.env) {
    env = *opts.env;
  } else {
    for (char** e = environ; e && *e; ++e) {
      std::string_view kv(*e);
      if (kv.rfind("RANKMAP_", 0) != 0) continue;
      auto eq = kv.find('=');
      if (eq == std::string_view::npos) continue;
      env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
    }
  }

  // A missing file is skipped unless the user named it (RANKMAP_CONF_FILE): a setting that
  // points nowhere is a mistake to say, not a default to keep quietly.
  auto readFile = [&](const std::string& path, Origin origin, const char* namedBy = nullptr) {
    std::ifstream in(path);
    if (!in) {
      if (!namedBy) return;
      throw InvalidInput(fmt::format("setting RANKMAP_CONF_FILE={:?} ({}): cannot read it: {}",
                                     path, namedBy, std::strerror(errno)));
    }
    std::string line;
    int lineNo = 0;
    while (std::getline(in, line)) {
      ++lineNo;
      std::string_view l = trim(line);
      if (l.empty() || l.front() == '#') continue;
      auto eq = l.find('=');
      std::string where = fmt::format("{}:{}", path, lineNo);
      if (eq == std::string_view::npos)
        throw InvalidInput(fmt::format("{}: expected NAME=VALUE, got {:?}", where, std::string(l)));
      std::string name(trim(l.substr(0, eq)));
      const SettingInfo* info = findSetting(name);
      if (!info) {
        cfg.unknown_.push_back(fmt::format("{} ({})", name, where));
        continue;
      }
      cfg.set(*info, trim(l.substr(eq + 1)), origin, where);
    }
  };

  readFile(opts.systemFile, Origin::SystemFile);
  std::string userFile;
  const char* namedBy = nullptr;
  if (opts.userFile) {
    userFile = *opts.userFile;
  } else if (auto it = env.find("RANKMAP_CONF_FILE"); it != env.end()) {
    userFile = it->second;
    namedBy = "environment";
  } else {
    userFile = std::string(settingInfo(SettingId::kConfFile).defaultValue);
  }
  if (!userFile.empty()) readFile(expandHome(userFile), Origin::UserFile, namedBy);

  for (const auto& [name, value] : env) {
    if (name.rfind("RANKMAP_", 0) != 0) continue;
    const SettingInfo* info = findSetting(name);
    if (!info) {
      cfg.unknown_.push_back(fmt::format("{} (environment)", name));
      continue;
    }
    cfg.set(*info, value, Origin::Environment, "environment");
  }
  for (const auto& [name, value] : opts.overrides) {
    const SettingInfo* info = findSetting(name);
    if (!info) throw InvalidInput(fmt::format("command line: unknown setting {}", name));
    cfg.set(*info, value, Origin::CommandLine, "command line");
  }
  return cfg;
}

std::string Config::valueText(SettingId id) const {
  const auto& v = values_[static_cast<size_t>(id)];
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>) return x;
        else if constexpr (std::is_same_v<T, std::chrono::milliseconds>)
          return fmt::format("{}ms", x.count());
        else return fmt::format("{}", x);
      },
      v);
}

}  // namespace rankmap
