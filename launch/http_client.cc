#include "launch/http_client.h"

#include <curl/curl.h>

#include <cctype>
#include <memory>
#include <mutex>

#include "common/error.h"
#include "common/json.h"

namespace rankmap::launch {
namespace {

struct Sink {
  std::string* body;
  size_t max;
  bool overflow = false;
};

size_t onData(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  size_t bytes = size * n;
  if (s->body->size() + bytes > s->max) {
    s->overflow = true;
    return 0;  // makes curl fail with CURLE_WRITE_ERROR
  }
  s->body->append(data, bytes);
  return bytes;
}

void globalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

std::string urlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string HttpResponse::errorText() const {
  try {
    Json j = parseJson(body, "response");
    if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"];
  } catch (const std::exception&) {
  }
  return body.substr(0, body.find('\n')).substr(0, 300);
}

HttpClient::HttpClient(std::string baseUrl, std::string token)
    : base_(std::move(baseUrl)), token_(std::move(token)) {
  while (!base_.empty() && base_.back() == '/') base_.pop_back();
  if (base_.rfind("http://", 0) != 0 && base_.rfind("https://", 0) != 0)
    throw InvalidInput(fmt::format("agent URL '{}': expected http://HOST:PORT", base_));
}

HttpResponse HttpClient::get(std::string_view path, Deadline d, size_t maxBody) const {
  return perform("GET", path, {}, d, maxBody);
}

HttpResponse HttpClient::post(std::string_view path, std::string_view body, Deadline d,
                              size_t maxBody) const {
  return perform("POST", path, body, d, maxBody);
}

HttpResponse HttpClient::perform(std::string_view method, std::string_view path,
                                 std::string_view body, Deadline d, size_t maxBody) const {
  globalInit();
  std::string url = base_ + std::string(path);
  long ms = static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(d.remaining()).count());
  if (ms <= 0)
    throw TimeoutError(fmt::format("{} {}: deadline passed before the request", method, url));
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) RANKMAP_THROW(InternalError, "curl_easy_init failed");
  HttpResponse resp;
  Sink sink{&resp.body, maxBody};
  curl_slist* headers = nullptr;
  std::string auth;
  if (!token_.empty()) {
    auth = "Authorization: Bearer " + token_;
    headers = curl_slist_append(headers, auth.c_str());
  }
  headers = curl_slist_append(headers, "Content-Type: application/json");
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> hold(headers, curl_slist_free_all);
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, onData);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  std::string bodyCopy(body);
  if (method == "POST") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, bodyCopy.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(bodyCopy.size()));
  }
  CURLcode rc = curl_easy_perform(c);
  if (sink.overflow)
    throw IoError(fmt::format("{} {}: answer larger than {} bytes", method, url, maxBody));
  if (rc == CURLE_OPERATION_TIMEDOUT)
    throw TimeoutError(fmt::format("{} {}: no answer within the deadline", method, url));
  if (rc != CURLE_OK) throw IoError(fmt::format("{} {}: {}", method, url, curl_easy_strerror(rc)));
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  return resp;
}

}  // namespace rankmap::launch
