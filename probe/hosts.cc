#include "probe/hosts.h"

#include <map>
#include <sstream>

#include "common/error.h"
#include "common/files.h"

namespace rankmap::probe {
namespace {

bool validName(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

}  // namespace

std::vector<Host> parseHosts(std::string_view text, std::string_view source) {
  std::vector<Host> hosts;
  std::map<std::string, size_t> nameLine, endpointLine;
  size_t lineNo = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++lineNo;
    std::istringstream in{std::string(line)};
    std::string name, address, extra;
    if (!(in >> name) || name[0] == '#') continue;
    auto where = [&] { return fmt::format("{}:{}", source, lineNo); };
    if (!(in >> address))
      throw InvalidInput(
          fmt::format("{}: expected 'NAME ADDRESS[:PORT]', got only '{}'", where(), name));
    if (in >> extra && extra[0] != '#')
      throw InvalidInput(
          fmt::format("{}: expected 'NAME ADDRESS[:PORT]', got extra field '{}'", where(), extra));
    if (!validName(name))
      throw InvalidInput(
          fmt::format("{}: host name '{}': expected 1..64 characters of "
                      "[A-Za-z0-9._-]",
                      where(), name));
    Endpoint ep = parseEndpoint(address, kDefaultProbePort, where());
    if (auto it = nameLine.find(name); it != nameLine.end())
      throw InvalidInput(
          fmt::format("{}: duplicate host '{}' (first on line {})", where(), name, it->second));
    if (auto it = endpointLine.find(ep.text()); it != endpointLine.end())
      throw InvalidInput(fmt::format("{}: duplicate address {} (first on line {})", where(),
                                     ep.text(), it->second));
    nameLine[name] = lineNo;
    endpointLine[ep.text()] = lineNo;
    if (hosts.size() >= kMaxHosts)
      throw InvalidInput(fmt::format("{}: more than {} hosts", where(), kMaxHosts));
    hosts.push_back(Host{name, address});
  }
  if (hosts.empty())
    throw InvalidInput(fmt::format("{}: no hosts (expected NAME ADDRESS lines)", source));
  return hosts;
}

std::vector<Host> loadHostsFile(const std::string& path) {
  return parseHosts(readFile(path, 16u << 20), path);
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
