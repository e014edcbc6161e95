// The one HTTP client, for talking to rankmapd's HTTP API (plain HTTP, normally on loopback):
// `rankmap run --agent` (launch/plan_source.h, launch/stale_plan.h), `rankmap probe` (cli/), the
// collective engine and the daemon's tests. rankmapd itself serves HTTP (agent/api_server.h) and
// never calls out over it. It is written on common/net.h, with no HTTP library, so that
// everything linking common/, the shims included, can use it.
//
// Contract:
// - Base URL: `http://HOST[:PORT]` (port 80 by default; an IPv6 literal in brackets,
//   `http://[::1]:7410`); trailing slashes are dropped. `https://` is refused with InvalidInput
//   (rankmapd serves plain HTTP), as is anything else ("agent URL '<url>': expected
//   http://HOST:PORT"). The URL is checked by the constructor; nothing is resolved there.
// - A host name is resolved at each request with Lookup::kNames (the first address getaddrinfo
//   gives), which may wait on DNS beyond the deadline; numeric addresses and localhost, the normal
//   case, never wait.
// - Every call is bounded by its Deadline: the connect and the whole exchange. When it passes,
//   TimeoutError naming the method and the URL.
// - The answer body is bounded by `maxBody`: a larger answer is an IoError, never a truncation.
// - No proxies are used (the environment is not read) and redirects are not followed: a 3xx is
//   returned like any other status.
// - A transport failure (refused, reset, closed early, an answer that is not HTTP/1.x) throws
//   IoError or TimeoutError naming the method and URL; an HTTP error status is returned, not
//   thrown, so callers can read the agent's message.
// - Requests are HTTP/1.1 with `Connection: close` (one connection per call), `Content-Type:
//   application/json`, and `Authorization: Bearer TOKEN` when a token is set. Answers may carry
//   their body by Content-Length, chunked transfer-encoding, or until the server closes.
// - A client holds no connection between calls; its const calls may run on several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/deadline.h"

namespace rankmap {

struct HttpResponse {
  long status = 0;
  std::string body;
  // The "error" member of a JSON error body, or the body's first line.
  std::string errorText() const;
};

class HttpClient {
 public:
  // `baseUrl` as above; `token` empty = no Authorization header. InvalidInput for a URL that is
  // not http://HOST[:PORT] or a token with control characters.
  explicit HttpClient(std::string baseUrl, std::string token = "");
  // `path` starts with '/' and may carry a query (values through urlEncode()).
  HttpResponse get(std::string_view path, Deadline d, size_t maxBody = 256u << 20) const;
  HttpResponse post(std::string_view path, std::string_view body, Deadline d,
                    size_t maxBody = 16u << 20) const;
  const std::string& baseUrl() const { return base_; }

 private:
  HttpResponse perform(std::string_view method, std::string_view path, std::string_view body,
                       Deadline d, size_t maxBody) const;
  std::string base_;
  std::string host_;  // without brackets
  uint16_t port_ = 80;
  std::string token_;
};

// Percent-encodes one URL query value (RFC 3986 unreserved characters kept).
std::string urlEncode(const std::string& text);

// The path of rankmapd's GET /v1/plan for `hosts` in this order (each URL-encoded), with
// ranks_per_host when given (agent/http_api.cc).
// With a job's mesh (reorder/mesh.h meshText, meshTrafficText) also &mesh=...&traffic=....
std::string agentPlanPath(const std::vector<std::string>& hosts,
                          std::optional<int> ranksPerHost = std::nullopt,
                          const std::string& mesh = "", const std::string& traffic = "");

}  // namespace rankmap
