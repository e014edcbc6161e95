// `rankmap hosts`: writes rankmap's hosts file (common/hosts_file.h) from what a cluster lists.
//   --from-endpointslices FILE: the EndpointSlices of the agents' headless Service, as
//     `kubectl get endpointslices -l kubernetes.io/service-name=rankmapd -o json` writes them:
//     one host per node, at its address, sorted by name (launch/kubernetes.h). The DaemonSet's
//     `hosts` container runs this every 30 s (deploy/kubernetes).
// Output goes to stdout, or atomically to -o FILE, which is left untouched when it already holds
// that list (an agent watching the file then reads nothing again).
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hosts_file.h"
#include "common/json.h"
#include "launch/kubernetes.h"

namespace rankmap::cli {
namespace {

struct HostsArgs {
  std::string endpointSlices;
  std::string out;
  bool json = false;
};

int runHosts(const HostsArgs& a) {
  std::string text = readFile(a.endpointSlices, kMaxJsonBytes);
  std::vector<Host> hosts =
      launch::hostsFromEndpointSlices(parseJson(text, a.endpointSlices), a.endpointSlices);
  std::string file = fmt::format("# rankmap hosts: {} agents from EndpointSlices {}\n",
                                 hosts.size(), a.endpointSlices);
  for (const auto& h : hosts) file += h.name + " " + h.address + "\n";
  bool written = false;
  if (!a.out.empty()) {
    // What a regular file holds now ("" when there is none, or it cannot be read: written anew);
    // a FIFO or a device is never read back (that could block), only written.
    std::string old;
    std::error_code ec;
    if (std::filesystem::is_regular_file(a.out, ec)) try {
        old = readFile(a.out, kMaxHostsFileBytes);
      } catch (const IoError&) {
      }
    if (old != file) {
      writeFileAtomic(a.out, file);
      written = true;
    }
  }
  if (a.json) {
    Json list = Json::array();
    for (const auto& h : hosts) list.push_back({{"name", h.name}, {"address", h.address}});
    fmt::print("{}\n", Json{{"hosts", list}, {"out", a.out}, {"written", written}}.dump());
  } else if (a.out.empty()) {
    fmt::print("{}", file);
  } else {
    fmt::print(stderr, "rankmap hosts: {} {} hosts{}\n", written ? "wrote" : "kept", hosts.size(),
               written ? " to " + a.out : fmt::format(": {} already lists them", a.out));
  }
  return 0;
}

}  // namespace

void registerHostsCommand(CLI::App& app, CliContext&, CommandRunner& run) {
  auto* cmd = app.add_subcommand(
      "hosts", "Write rankmap's hosts file (`name address` per line) from a cluster's listing");
  auto a = std::make_shared<HostsArgs>();
  cmd->add_option("--from-endpointslices", a->endpointSlices,
                  "The agents' EndpointSlices: kubectl get endpointslices -l "
                  "kubernetes.io/service-name=rankmapd -o json > FILE")
      ->required();
  cmd->add_option("-o,--out", a->out,
                  "Write here (atomically; untouched when it already holds the list) instead of "
                  "stdout");
  cmd->add_flag("--json", a->json, "Print the hosts and what was written as JSON");
  cmd->callback([&run, a] { run = [a] { return runHosts(*a); }; });
}

}  // namespace rankmap::cli
