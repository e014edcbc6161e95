// rankmap's hosts file: the one format of every rankmap command and of rankmapd.
//
// One host per line, `NAME [ADDRESS[:PORT]]`, in the launcher's (the provider's) order; '#'
// starts a comment, blank lines are skipped. Names are 1..64 characters of [A-Za-z0-9._-] and
// unique. Whether a line needs its address is the reader's: the probe needs one to reach the
// host (HostAddress::kRequired, and probe/hosts.h checks it as an endpoint); `rankmap plan
// --hosts` and `rankmap run --xgboost --hosts` take a missing one from the topology.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rankmap {

inline constexpr size_t kMaxHosts = 4096;
inline constexpr size_t kMaxHostsFileBytes = 16u << 20;

struct HostsEntry {
  std::string name;
  std::string address;  // "" when the line has none
  int line = 0;         // 1-based line in the file; 0 for a list built in memory
};

enum class HostAddress { kRequired, kOptional };

// Throws InvalidInput naming `source`, the line and what was expected.
std::vector<HostsEntry> parseHostsFile(std::string_view text, std::string_view source,
                                       HostAddress address);
std::vector<HostsEntry> readHostsFile(const std::string& path, HostAddress address);

}  // namespace rankmap
