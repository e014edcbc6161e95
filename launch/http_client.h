// The one HTTP client, on libcurl, for talking to rankmapd's HTTP API: `rankmap run --agent`
// (plan_source.h), `rankmap probe` (cli/) and the daemon's tests. rankmapd itself serves HTTP and
// never calls out over it. It lives here rather than in common/ because the shims link common/
// statically and must not pull in libcurl.
//
// Contract: every call has a deadline (connect and total), the answer body is bounded by
// `maxBody` (larger answers are an IoError, not a truncation), proxies are never used, and
// redirects are not followed. A transport failure throws IoError/TimeoutError naming the URL;
// an HTTP error status is returned, not thrown, so callers can read the agent's message.
#pragma once

#include <string>
#include <string_view>

#include "common/deadline.h"

namespace rankmap::launch {

struct HttpResponse {
  long status = 0;
  std::string body;
  // The "error" member of a JSON error body, or the body's first line.
  std::string errorText() const;
};

class HttpClient {
 public:
  explicit HttpClient(std::string baseUrl, std::string token = "");
  HttpResponse get(std::string_view path, Deadline d, size_t maxBody = 256u << 20) const;
  HttpResponse post(std::string_view path, std::string_view body, Deadline d,
                    size_t maxBody = 16u << 20) const;
  const std::string& baseUrl() const { return base_; }

 private:
  HttpResponse perform(std::string_view method, std::string_view path, std::string_view body,
                       Deadline d, size_t maxBody) const;
  std::string base_;
  std::string token_;
};

// Percent-encodes one URL query value (RFC 3986 unreserved characters kept).
std::string urlEncode(const std::string& text);

}  // namespace rankmap::launch
