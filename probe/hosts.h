// Hosts files: the agents of a job, one `name address` or `name address:port` per line.
//
// Blank lines and lines starting with '#' are ignored. Names are 1..64 characters of
// [A-Za-z0-9._-]; addresses are numeric IPv4/IPv6 literals (see probe/socket.h); the port
// defaults to the probe port. Names and endpoints must be unique.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/topology.h"
#include "probe/socket.h"

namespace rankmap::probe {

inline constexpr size_t kMaxHosts = 4096;

// Throws InvalidInput naming `source`, the line and what was expected.
std::vector<Host> parseHosts(std::string_view text, std::string_view source);
std::vector<Host> loadHostsFile(const std::string& path);
// Validates a list that came from elsewhere (a JSON request): same rules as the file.
void validateHosts(const std::vector<Host>& hosts, std::string_view source);
// The probe endpoint of a host (address with the default port filled in).
Endpoint hostEndpoint(const Host& h, uint16_t defaultPort = kDefaultProbePort);

}  // namespace rankmap::probe
