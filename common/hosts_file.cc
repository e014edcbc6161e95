#include "common/hosts_file.h"

#include <map>

#include "common/error.h"
#include "common/files.h"

namespace rankmap {
namespace {

bool validName(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

std::vector<std::string_view> fields(std::string_view line) {
  line = line.substr(0, line.find('#'));
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t j = i;
    while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

std::vector<HostsEntry> parseHostsFile(std::string_view text, std::string_view source,
                                       HostAddress address) {
  const char* expected =
      address == HostAddress::kRequired ? "'NAME ADDRESS[:PORT]'" : "'NAME [ADDRESS[:PORT]]'";
  std::vector<HostsEntry> hosts;
  std::map<std::string, int, std::less<>> nameLine;
  int lineNo = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++lineNo;
    auto f = fields(line);
    if (f.empty()) continue;
    auto where = [&] { return fmt::format("{}:{}", source, lineNo); };
    if (f.size() > 2)
      throw InvalidInput(fmt::format("{}: expected {}, got extra field {:?}", where(), expected,
                                     std::string(f[2])));
    if (f.size() < 2 && address == HostAddress::kRequired)
      throw InvalidInput(
          fmt::format("{}: expected {}, got only {:?}", where(), expected, std::string(f[0])));
    if (!validName(f[0]))
      throw InvalidInput(
          fmt::format("{}: host name {:?}: expected 1..64 characters of "
                      "[A-Za-z0-9._-]",
                      where(), std::string(f[0])));
    if (auto it = nameLine.find(f[0]); it != nameLine.end())
      throw InvalidInput(fmt::format("{}: duplicate host {:?} (first on line {})", where(),
                                     std::string(f[0]), it->second));
    if (hosts.size() >= kMaxHosts)
      throw InvalidInput(fmt::format("{}: more than {} hosts", where(), kMaxHosts));
    nameLine.emplace(std::string(f[0]), lineNo);
    hosts.push_back({std::string(f[0]), f.size() > 1 ? std::string(f[1]) : "", lineNo});
  }
  if (hosts.empty())
    throw InvalidInput(fmt::format("{}: no hosts (expected {} lines)", source, expected));
  return hosts;
}

std::vector<HostsEntry> readHostsFile(const std::string& path, HostAddress address) {
  return parseHostsFile(readFile(path, kMaxHostsFileBytes), path, address);
}

}  // namespace rankmap
