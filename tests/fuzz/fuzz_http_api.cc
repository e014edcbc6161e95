// Fuzz target for rankmapd's HTTP API: the input is the raw bytes of one request (request line,
// path and query, headers, body) as a client would send them to 127.0.0.1:7410. They go through
// cpp-httplib's request processing on an httplib::Server with exactly the routes, limits and
// handlers rankmapd installs (agent::installApi), over an in-memory stream instead of a socket.
//
// The daemon behind the routes is a real Daemon (store in a temporary directory holding one
// synthetic 8-host topology, a probe key, the bearer token "fuzz-token-0123456789abcdef"), built
// but not started and asked to stop: a POST /v1/probe with the token is parsed and validated in
// full, then refused with "agent is stopping" instead of starting a round, so no input makes
// network traffic.
//
// Findings: a crash or sanitizer report, a response that is not HTTP, a 500 (a handler threw:
// every bad input must be a 4xx naming what is wrong), or a body that is not the JSON the API
// promises.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "agent/daemon.h"
#include "agent/http_api.h"
#include "common/files.h"
#include "common/json.h"
#include "common/log.h"
#include "reorder/synthetic.h"

namespace {

using namespace rankmap;

[[noreturn]] void finding(const std::string& what, const std::string& response) {
  std::fprintf(stderr, "fuzz_http_api: %s\n--- response ---\n%.2000s\n", what.c_str(),
               response.c_str());
  std::abort();
}

// One request's bytes in, the response's bytes out.
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view in) : in_(in) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    size_t n = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 7410;
  }
  socket_t socket() const override { return INVALID_SOCKET; }
  const std::string& out() const { return out_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::string out_;
};

// httplib::Server's own request processing (a protected member), for one request that closes
// the connection.
class InMemoryServer final : public httplib::Server {
 public:
  void serve(httplib::Stream& s) {
    bool closed = false;
    process_request(s, true, closed, [](httplib::Request&) {});
  }
};

struct World {
  std::string dir;
  std::unique_ptr<agent::Daemon> daemon;
  InMemoryServer server;

  World() {
    log::setLevel(log::Level::Off);
    // One directory per process, named by its pid: a run that crashed (no destructors) leaves
    // its directory behind, and the next run removes those of processes that are gone.
    std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    const std::string prefix = "rankmap-fuzz-http-";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
      std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) != 0) continue;
      pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + prefix.size()));
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)
        std::filesystem::remove_all(e.path(), ec);
    }
    dir = (base / (prefix + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir);
    writeFileAtomic(dir + "/key", std::string(64, 'k') + "\n", 0600);
    writeFileAtomic(dir + "/token", "fuzz-token-0123456789abcdef\n", 0600);
    agent::AgentConfig c;
    c.name = "fuzz";
    c.stateDir = dir + "/state";
    c.keyFile = dir + "/key";
    c.tokenFile = dir + "/token";
    c.maxBodyBytes = 64 << 10;
    daemon = std::make_unique<agent::Daemon>(c);
    reorder::SyntheticSpec spec;  // 8 hosts h0000..h0007 in 2 racks
    spec.output = reorder::Output::kLinks;
    Topology t = reorder::makeSynthetic(spec).topology;
    daemon->store().addTopology(t, std::nullopt);
    daemon->requestStop();  // POST /v1/probe stops before starting a round
    agent::installApi(server, *daemon);
  }
  ~World() {
    daemon.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

World& world() {
  static World w;
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  MemoryStream s(std::string_view(reinterpret_cast<const char*>(data), size));
  w.server.serve(s);
  const std::string& out = s.out();
  if (out.empty()) return 0;  // httplib closes without answering bytes it cannot read at all
  int status = 0;
  if (std::sscanf(out.c_str(), "HTTP/1.1 %3d ", &status) != 1) finding("not an HTTP response", out);
  if (status >= 500) finding("server error", out);
  size_t headerEnd = out.find("\r\n\r\n");
  if (headerEnd == std::string::npos) finding("response without the end of its headers", out);
  std::string_view head(out.data(), headerEnd);
  std::string_view body(out.data() + headerEnd + 4, out.size() - headerEnd - 4);
  if (head.find("Content-Type: application/json") != std::string_view::npos && !body.empty()) {
    try {
      parseJson(body, "response");
    } catch (const InvalidInput& e) {
      finding(std::string("response body is not JSON: ") + e.what(), out);
    }
  }
  return 0;
}
