// Fuzz target for settings from outside: the RANKMAP_* registry's files and environment
// (common/config.h: Config::load) and rankmapd's configuration file (agent/agent_config.h:
// AgentConfig::load, JSON with comments).
//
// The input is used three ways, each through the production entry point:
//   - as the system settings file (NAME=VALUE lines), read by Config::load from a memfd;
//   - as the environment: each line NAME=VALUE (a name without the RANKMAP_ prefix gets it, so
//     that every registered setting is in reach);
//   - as rankmapd's JSON configuration file, read by AgentConfig::load from a memfd.
// Each must load or throw InvalidInput. What loads must round-trip: every setting's valueText
// parses back to the same value, and AgentConfig::fromJson(toJson()) gives the same toJson().
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "agent/agent_config.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

namespace {

using namespace rankmap;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_settings: %s\n", what.c_str());
  std::abort();
}

// A file in memory holding `text`, named by a path any open() reads from its start.
class MemFile {
 public:
  explicit MemFile(std::string_view text) : fd_(::memfd_create("fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) finding("memfd_create failed");
    for (size_t done = 0; done < text.size();) {
      ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n <= 0) finding("write to memfd failed");
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// Every value's text, given back on the command line, reads as the same text.
void roundTrips(const Config& c) {
  Config::LoadOptions again;
  again.env = std::map<std::string, std::string>{};
  again.systemFile = "";
  again.userFile = "";
  for (const auto& info : settingRegistry())
    again.overrides.emplace_back(std::string(info.name), c.valueText(info.id));
  Config c2;
  try {
    c2 = Config::load(again);
  } catch (const InvalidInput& e) {
    finding(std::string("valueText does not parse back: ") + e.what());
  }
  for (const auto& info : settingRegistry())
    if (c2.valueText(info.id) != c.valueText(info.id))
      finding(std::string(info.name) + ": " + c.valueText(info.id) + " reads back as " +
              c2.valueText(info.id));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = (log::setLevel(log::Level::Off), true);
  (void)quiet;
  std::string_view in(reinterpret_cast<const char*>(data), size);

  MemFile file(in);
  Config::LoadOptions asFile;
  asFile.env = std::map<std::string, std::string>{};
  asFile.systemFile = file.path();
  asFile.userFile = "";
  try {
    roundTrips(Config::load(asFile));
  } catch (const InvalidInput&) {
  }

  Config::LoadOptions asEnv;
  asEnv.env = std::map<std::string, std::string>{};
  asEnv.systemFile = "";
  asEnv.userFile = "";
  for (std::string_view s = in; !s.empty();) {
    size_t nl = s.find('\n');
    std::string_view line = s.substr(0, nl);
    s.remove_prefix(nl == std::string_view::npos ? s.size() : nl + 1);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string name(line.substr(0, eq));
    if (name.rfind("RANKMAP_", 0) != 0) name = "RANKMAP_" + name;
    (*asEnv.env)[name] = std::string(line.substr(eq + 1));
  }
  try {
    roundTrips(Config::load(asEnv));
  } catch (const InvalidInput&) {
  }

  try {
    agent::AgentConfig a = agent::AgentConfig::load(file.path());
    Json j = a.toJson();
    agent::AgentConfig b;
    try {
      b = agent::AgentConfig::fromJson(j, "round trip");
    } catch (const InvalidInput& e) {
      finding(std::string("toJson does not load back: ") + e.what() + "\n" + j.dump());
    }
    if (b.toJson() != j)
      finding("toJson round trip differs:\n" + j.dump() + "\n" + b.toJson().dump());
  } catch (const InvalidInput&) {
  }
  return 0;
}
