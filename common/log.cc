#include "common/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "common/config.h"
#include "common/error.h"

namespace rankmap::log {
namespace {

constexpr std::pair<Subsys, std::string_view> kSubsysNames[] = {
    {Subsys::Common, "common"}, {Subsys::Probe, "probe"}, {Subsys::Reorder, "reorder"},
    {Subsys::Coll, "coll"},     {Subsys::Net, "net"},     {Subsys::Agent, "agent"},
    {Subsys::Shim, "shim"},     {Subsys::Cli, "cli"},     {Subsys::Cuda, "cuda"},
};

std::atomic<int> gLevel{static_cast<int>(Level::Info)};
std::atomic<uint32_t> gMask{~0u};
std::atomic<bool> gJson{false};
std::atomic<bool> gStamp{true};  // text lines start with the time (not where journald adds it)
std::mutex gMu;
std::shared_ptr<spdlog::logger> gLogger;  // guarded by gMu for replacement

std::shared_ptr<spdlog::logger> logger() {
  std::lock_guard<std::mutex> lk(gMu);
  if (!gLogger) {
    gLogger = std::make_shared<spdlog::logger>("rankmap",
                                               std::make_shared<spdlog::sinks::stderr_sink_mt>());
    gLogger->set_pattern("%v");  // We format the whole line ourselves (text or JSON).
    gLogger->set_level(spdlog::level::trace);
  }
  return gLogger;
}

Level parseLevel(const std::string& s) {
  if (s == "trace") return Level::Trace;
  if (s == "debug") return Level::Debug;
  if (s == "info") return Level::Info;
  if (s == "warn" || s == "warning") return Level::Warn;
  if (s == "error") return Level::Error;
  if (s == "off" || s == "none") return Level::Off;
  throw InvalidInput(fmt::format(
      "setting RANKMAP_LOG={:?}: expected trace, debug, info, warn, error or off", s));
}

std::string_view levelName(Level l) {
  static constexpr std::string_view names[] = {"trace", "debug", "info", "warn", "error", "off"};
  return names[static_cast<int>(l)];
}

uint32_t parseMask(const std::string& s) {
  std::string_view v(s);
  bool exclude = !v.empty() && v.front() == '^';
  if (exclude) v.remove_prefix(1);
  uint32_t mask = 0;
  while (!v.empty()) {
    auto comma = v.find(',');
    auto item = v.substr(0, comma);
    v = comma == std::string_view::npos ? std::string_view{} : v.substr(comma + 1);
    if (item.empty()) continue;
    if (item == "all") { mask = ~0u; continue; }
    bool found = false;
    for (auto [bit, name] : kSubsysNames) {
      if (name == item) { mask |= static_cast<uint32_t>(bit); found = true; }
    }
    if (!found)
      throw InvalidInput(fmt::format(
          "setting RANKMAP_LOG_SUBSYS={:?}: unknown subsystem {:?}; expected a comma-separated "
          "list of common,probe,reorder,coll,net,agent,shim,cli,cuda or all",
          s, std::string(item)));
  }
  return exclude ? ~mask : mask;
}

std::string expandFileName(std::string pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') {
        char host[256] = {0};
        gethostname(host, sizeof(host) - 1);
        out += host;
      } else if (c == 'p') {
        out += std::to_string(getpid());
      } else {
        out += '%';
        out += c;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// Whether stderr is the journal's stream (systemd sets JOURNAL_STREAM to its "device:inode"),
// which stamps every line itself.
bool stderrIsJournal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  struct stat st {};
  if (!js || ::fstat(STDERR_FILENO, &st) != 0) return false;
  return fmt::format("{}:{}", st.st_dev, st.st_ino) == js;
}

// UTC, to the millisecond: 2026-12-03T03:21:04.123Z.
std::string utcStamp(std::chrono::system_clock::time_point now) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ms.count() / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms.count() % 1000);
}

}  // namespace

std::string_view subsysName(Subsys s) {
  for (auto [bit, name] : kSubsysNames)
    if (bit == s) return name;
  return "?";
}

void configure(const Config& cfg) {
  Level level = parseLevel(cfg.get(settings::kLog));
  uint32_t mask = parseMask(cfg.get(settings::kLogSubsys));
  const auto& format = cfg.get(settings::kLogFormat);
  if (format != "text" && format != "json")
    throw InvalidInput(fmt::format("setting RANKMAP_LOG_FORMAT={:?}: expected text or json", format));
  const auto& file = cfg.get(settings::kLogFile);
  if (file.empty()) {
    std::lock_guard<std::mutex> lk(gMu);
    gLogger.reset();  // stderr again (logger() makes it), also after a file
  } else {
    std::shared_ptr<spdlog::logger> l;
    try {
      l = std::make_shared<spdlog::logger>(
          "rankmap", std::make_shared<spdlog::sinks::basic_file_sink_mt>(expandFileName(file)));
    } catch (const spdlog::spdlog_ex& e) {
      throw IoError(fmt::format("setting RANKMAP_LOG_FILE={:?}: cannot open: {}", file, e.what()));
    }
    l->set_pattern("%v");
    l->set_level(spdlog::level::trace);
    l->flush_on(spdlog::level::trace);
    std::lock_guard<std::mutex> lk(gMu);
    gLogger = l;
  }
  gLevel = static_cast<int>(level);
  gMask = mask;
  gJson = format == "json";
  gStamp = !file.empty() || !stderrIsJournal();
}

void setLevel(Level level) { gLevel = static_cast<int>(level); }

bool enabled(Subsys s, Level level) {
  return static_cast<int>(level) >= gLevel.load(std::memory_order_relaxed) &&
         level != Level::Off && (gMask.load(std::memory_order_relaxed) & static_cast<uint32_t>(s));
}

void write(Subsys s, Level level, std::string_view msg) {
  auto now = std::chrono::system_clock::now();
  std::string line;
  if (gJson) {
    nlohmann::json j;
    j["ts"] = std::chrono::duration<double>(now.time_since_epoch()).count();
    j["time"] = utcStamp(now);
    j["level"] = levelName(level);
    j["subsys"] = subsysName(s);
    j["pid"] = getpid();
    // Invalid UTF-8 in a message must not make the line invalid JSON: replace it.
    j["msg"] = std::string(msg);
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = fmt::format("{}rankmap {} [{}] {}", gStamp ? utcStamp(now) + " " : std::string(),
                       levelName(level), subsysName(s), msg);
  }
  logger()->log(spdlog::level::info, line);
}

bool RateLimit::allow(uint64_t& left) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lk(mu_);
  if (last_ && now - *last_ < interval_) {
    ++left_;
    return false;
  }
  last_ = now;
  left = left_;
  left_ = 0;
  return true;
}

}  // namespace rankmap::log
