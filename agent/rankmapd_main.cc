// rankmapd: the per-VM agent (agent/daemon.h). `rankmapd --config FILE [overrides]`.
// Exit status: 0 after SIGTERM/SIGINT, 1 on a runtime failure, 2 on bad configuration.
// SIGHUP reloads the hosts file (Daemon::reloadHosts). Under systemd (Type=notify) it reports
// READY=1 once serving, RELOADING=1 and READY=1 around a reload, STOPPING=1 when stopping.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <CLI/CLI.hpp>

#include "agent/daemon.h"
#include "common/build_config.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

namespace {

// systemd's readiness protocol (sd_notify(3), Type=notify): `state` as one datagram to the
// socket NOTIFY_SOCKET names (a path, or '@' for the abstract namespace); nothing without it.
// Best effort: the service runs the same whether or not systemd hears it.
void notifySystemd(const char* state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t len = std::strlen(path);
  if (len >= sizeof(addr.sun_path)) return;
  std::memcpy(addr.sun_path, path, len);
  if (path[0] == '@') addr.sun_path[0] = '\0';
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)::sendto(fd, state, std::strlen(state), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
                 static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len));
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rankmap;
  CLI::App app{"rankmapd: measures the network between a job's VMs and serves topology.json"};
  app.name("rankmapd");  // usage lines say "rankmapd", not the path it was started by
  app.set_version_flag("--version", RANKMAP_VERSION);
  std::string configFile, listen, probeListen, metricsListen, hosts, stateDir, tokenFile, keyFile,
      name, coordinator, interval;
  bool verbose = false;
  app.add_option("--config", configFile, "rankmapd.json (JSON with // comments)");
  app.add_option("--listen", listen, "HTTP API address ADDR:PORT (default 127.0.0.1:7410)");
  app.add_option("--probe-listen", probeListen, "Probe address ADDR:PORT (default 0.0.0.0:7411)");
  app.add_option("--metrics-listen", metricsListen,
                 "Also serve GET /metrics alone, without the token, on ADDR[:PORT] (port 7412 by "
                 "default; default: only on the API)");
  app.add_option("--hosts", hosts, "Hosts file: one `name address[:port]` per line");
  app.add_option("--state-dir", stateDir,
                 "Directory of the SQLite store (default /var/lib/rankmapd)");
  app.add_option("--token-file", tokenFile, "Bearer token for write calls (POST /v1/probe)");
  app.add_option("--key-file", keyFile, "Probe key shared by the job's agents");
  app.add_option("--name", name, "This agent's name in the hosts file (default: host name)");
  app.add_option("--coordinator", coordinator,
                 "Name of the coordinator (default: first live host)");
  app.add_option("--interval", interval, "Periodic re-probe interval, e.g. 10m (0 = off)");
  app.add_flag("-v,--verbose", verbose, "Log at debug level");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help and --version 0; a usage error 2, as rankmap's
  }

  agent::AgentConfig cfg;
  try {
    log::configure(Config::load());
    if (verbose) log::setLevel(log::Level::Debug);
    if (!configFile.empty()) cfg = agent::AgentConfig::load(configFile);
    if (!listen.empty()) cfg.listen = probe::parseEndpoint(listen, 7410, "--listen");
    if (!metricsListen.empty())
      cfg.metricsListen =
          probe::parseEndpoint(metricsListen, agent::kDefaultMetricsPort, "--metrics-listen");
    if (!probeListen.empty())
      cfg.probeListen =
          probe::parseEndpoint(probeListen, probe::kDefaultProbePort, "--probe-listen");
    if (!hosts.empty()) cfg.hostsFile = hosts;
    if (!stateDir.empty()) cfg.stateDir = stateDir;
    if (!tokenFile.empty()) cfg.tokenFile = tokenFile;
    if (!keyFile.empty()) cfg.keyFile = keyFile;
    if (!name.empty()) cfg.name = name;
    if (!coordinator.empty()) cfg.coordinator = coordinator;
    if (!interval.empty()) {
      auto d = parseDuration(interval);
      if (!d)
        throw InvalidInput(
            fmt::format("--interval '{}': expected a duration such as 10m", interval));
      cfg.reprobe.interval = *d;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rankmapd: %s\n",
                 describe(e, log::enabled(log::Subsys::Agent, log::Level::Debug)).c_str());
    return 2;
  }

  // Signals are taken by one thread with sigwait(); every other thread inherits the mask.
  // SIGHUP reloads the hosts file; SIGINT and SIGTERM stop.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  try {
    agent::Daemon daemon(cfg);
    daemon.start();
    notifySystemd("READY=1");
    std::thread signals([&] {
      for (;;) {
        int sig = 0;
        sigwait(&set, &sig);
        if (sig == SIGHUP) {
          notifySystemd("RELOADING=1");
          daemon.reloadHosts();
          notifySystemd("READY=1");
          continue;
        }
        RANKMAP_INFO(Agent, "agent {}: signal {}, stopping", daemon.name(), sig);
        notifySystemd("STOPPING=1");
        daemon.requestStop();
        return;
      }
    });
    daemon.wait();
    daemon.stop();
    // The signal thread may still be waiting if stop came from elsewhere: wake it.
    pthread_kill(signals.native_handle(), SIGTERM);
    signals.join();
    return 0;
  } catch (const InvalidInput& e) {
    std::fprintf(stderr, "rankmapd: %s\n",
                 describe(e, log::enabled(log::Subsys::Agent, log::Level::Debug)).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rankmapd: %s\n",
                 describe(e, log::enabled(log::Subsys::Agent, log::Level::Debug)).c_str());
    return 1;
  }
}
