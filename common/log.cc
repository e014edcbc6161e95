#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
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
  if (!file.empty()) {
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
    j["level"] = levelName(level);
    j["subsys"] = subsysName(s);
    j["pid"] = getpid();
    // Invalid UTF-8 in a message must not make the line invalid JSON: replace it.
    j["msg"] = std::string(msg);
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = fmt::format("rankmap {} [{}] {}", levelName(level), subsysName(s), msg);
  }
  logger()->log(spdlog::level::info, line);
}

}  // namespace rankmap::log
