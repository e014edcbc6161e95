// Logging on spdlog with levels and a subsystem mask.
//
// Contract: logs go to stderr (or RANKMAP_LOG_FILE), never to stdout, because rankmap runs inside
// other people's processes (shims). configure() may be called once at start-up; before that,
// defaults apply (level info, all subsystems, text). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace rankmap {
class Config;

namespace log {

enum class Level { Trace = 0, Debug, Info, Warn, Error, Off };

enum class Subsys : uint32_t {
  Common = 1u << 0,
  Probe = 1u << 1,
  Reorder = 1u << 2,
  Coll = 1u << 3,
  Net = 1u << 4,
  Agent = 1u << 5,
  Shim = 1u << 6,
  Cli = 1u << 7,
  Cuda = 1u << 8,
};

std::string_view subsysName(Subsys s);

// Applies RANKMAP_LOG, RANKMAP_LOG_SUBSYS, RANKMAP_LOG_FORMAT and RANKMAP_LOG_FILE.
// Throws InvalidInput naming the setting on a bad value.
void configure(const Config& cfg);
// Overrides the level (e.g. from a --verbose flag).
void setLevel(Level level);

bool enabled(Subsys s, Level level);
void write(Subsys s, Level level, std::string_view msg);

// For events that can come in floods (refused connections and requests): at most one line per
// interval for one kind of event, which says how many were left out since the line before.
// Thread-safe.
class RateLimit {
 public:
  RateLimit() = default;
  explicit RateLimit(std::chrono::steady_clock::duration interval) : interval_(interval) {}
  // Whether to log this event; if so, `left` is how many events were not logged since the last
  // line.
  bool allow(uint64_t& left);

 private:
  std::chrono::steady_clock::duration interval_ = std::chrono::seconds(10);
  std::mutex mu_;
  std::optional<std::chrono::steady_clock::time_point> last_;
  uint64_t left_ = 0;
};

}  // namespace log
}  // namespace rankmap

#define RANKMAP_LOG(level, subsys, ...)                                                 \
  do {                                                                                  \
    if (::rankmap::log::enabled(::rankmap::log::Subsys::subsys, ::rankmap::log::Level::level)) \
      ::rankmap::log::write(::rankmap::log::Subsys::subsys, ::rankmap::log::Level::level, \
                            fmt::format(__VA_ARGS__));                                  \
  } while (0)

#define RANKMAP_TRACE(subsys, ...) RANKMAP_LOG(Trace, subsys, __VA_ARGS__)
#define RANKMAP_DEBUG(subsys, ...) RANKMAP_LOG(Debug, subsys, __VA_ARGS__)
#define RANKMAP_INFO(subsys, ...) RANKMAP_LOG(Info, subsys, __VA_ARGS__)
#define RANKMAP_WARN(subsys, ...) RANKMAP_LOG(Warn, subsys, __VA_ARGS__)
#define RANKMAP_ERROR(subsys, ...) RANKMAP_LOG(Error, subsys, __VA_ARGS__)
