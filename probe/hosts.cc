#include "probe/hosts.h"

#include <map>

#include "common/error.h"
#include "common/files.h"
#include "common/hosts_file.h"

namespace rankmap::probe {

std::vector<Host> parseHosts(std::string_view text, std::string_view source) {
  std::vector<Host> hosts;
  std::map<std::string, int> endpointLine;
  for (auto& e : parseHostsFile(text, source, HostAddress::kRequired)) {
    std::string where = fmt::format("{}:{}", source, e.line);
    Endpoint ep = parseEndpoint(e.address, kDefaultProbePort, where);
    if (auto [it, fresh] = endpointLine.emplace(ep.text(), e.line); !fresh)
      throw InvalidInput(
          fmt::format("{}: duplicate address {} (first on line {})", where, ep.text(), it->second));
    hosts.push_back(Host{std::move(e.name), std::move(e.address)});
  }
  return hosts;
}

std::vector<Host> loadHostsFile(const std::string& path) {
  return parseHosts(readFile(path, kMaxHostsFileBytes), path);
}

void validateHosts(const std::vector<Host>& hosts, std::string_view source) {
  std::string text;
  for (const auto& h : hosts) {
    if (h.name.find_first_of(" \t\n#") != std::string::npos || h.name.empty() ||
        h.address.find_first_of(" \t\n#") != std::string::npos || h.address.empty())
      throw InvalidInput(
          fmt::format("{}: host '{}' address '{}': expected a name and an address "
                      "without blanks",
                      source, h.name, h.address));
    text += h.name + " " + h.address + "\n";
  }
  parseHosts(text, source);
}

Endpoint hostEndpoint(const Host& h, uint16_t defaultPort) {
  return parseEndpoint(h.address, defaultPort, fmt::format("host {}", h.name));
}

}  // namespace rankmap::probe
