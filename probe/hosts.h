// The probe's reading of rankmap's hosts file (common/hosts_file.h): every line needs its
// address, a numeric IPv4/IPv6 literal (probe/socket.h) with the port defaulting to the probe
// port, and endpoints are unique too.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/hosts_file.h"
#include "common/topology.h"
#include "probe/socket.h"

namespace rankmap::probe {

// Throws InvalidInput naming `source`, the line and what was expected.
std::vector<Host> parseHosts(std::string_view text, std::string_view source);
std::vector<Host> loadHostsFile(const std::string& path);
// Validates a list that came from elsewhere (a JSON request): same rules as the file.
void validateHosts(const std::vector<Host>& hosts, std::string_view source);
// The probe endpoint of a host (address with the default port filled in).
Endpoint hostEndpoint(const Host& h, uint16_t defaultPort = kDefaultProbePort);

}  // namespace rankmap::probe
