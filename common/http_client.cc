#include "common/http_client.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "common/error.h"
#include "common/json.h"
#include "common/net.h"

namespace rankmap {
namespace {

// Bounds on an answer's head (status line and headers, and a chunked body's trailers): rankmapd
// sends a handful of short headers.
constexpr size_t kMaxHeadBytes = 64u << 10;
constexpr size_t kMaxHeaderLines = 100;
// A chunk-size line: hex digits and perhaps an extension.
constexpr size_t kMaxChunkLine = 1024;

bool hasControl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// HTTP's optional whitespace (RFC 9110 OWS: spaces and tabs) off both ends.
std::string_view trimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// At most 80 characters of what the server sent, control characters escaped, for messages.
std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 80)) {
    if (c < 0x20 || c >= 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  return s.size() > 80 ? out + "..." : out;
}

// Reads an answer off one connection before one deadline. `what` is "METHOD URL"; every IoError
// it throws starts with it. Net errors (PeerError, TimeoutError) pass through to perform(),
// which names the URL in them.
class AnswerReader {
 public:
  AnswerReader(Socket& s, Deadline d, const std::string& what) : s_(s), d_(d), what_(what) {}

  // One line without its CRLF (a bare LF is accepted too). IoError when the line is longer than
  // `max` or the connection ends before its end; `expected` says what the line should be.
  std::string line(size_t max, std::string_view expected) {
    for (size_t scanned = 0;;) {
      size_t nl = buf_.find('\n', pos_ + scanned);
      if (nl != std::string::npos && nl - pos_ <= max + 1) {
        std::string out = buf_.substr(pos_, nl - pos_);
        pos_ = nl + 1;
        if (!out.empty() && out.back() == '\r') out.pop_back();
        return out;
      }
      if (buf_.size() - pos_ > max + 1)
        RANKMAP_THROW(IoError, "{}: {} longer than {} bytes", what_, expected, max);
      scanned = buf_.size() - pos_;
      if (!fill())
        RANKMAP_THROW(IoError, "{}: connection closed while reading {}", what_, expected);
    }
  }

  // Appends exactly `n` bytes to `out`. IoError naming `expected` when the connection ends first.
  void exactly(size_t n, std::string& out, std::string_view expected) {
    while (n > 0) {
      if (pos_ == buf_.size() && !fill())
        RANKMAP_THROW(IoError, "{}: connection closed {} bytes before the end of {}", what_, n,
                      expected);
      size_t k = std::min(n, buf_.size() - pos_);
      out.append(buf_, pos_, k);
      pos_ += k;
      n -= k;
    }
  }

  // Appends everything until the server closes; IoError once `out` would exceed `max`.
  void untilClose(std::string& out, size_t max) {
    for (;;) {
      if (pos_ == buf_.size() && !fill()) return;
      if (out.size() + (buf_.size() - pos_) > max)
        RANKMAP_THROW(IoError, "{}: answer larger than {} bytes", what_, max);
      out.append(buf_, pos_, std::string::npos);
      pos_ = buf_.size();
    }
  }

 private:
  // Reads what the server sent next; false at end-of-file.
  bool fill() {
    buf_.erase(0, pos_);  // what was consumed
    pos_ = 0;
    char tmp[16384];
    size_t k = s_.recvSome(tmp, sizeof tmp, d_, "receive the answer");
    buf_.append(tmp, k);
    return k > 0;
  }

  Socket& s_;
  Deadline d_;
  const std::string& what_;
  std::string buf_;
  size_t pos_ = 0;
};

struct Head {
  long status = 0;
  std::optional<uint64_t> contentLength;
  bool chunked = false;
};

// Reads header lines up to the empty line, within the head's bounds (`bytes` and `lines` count
// what was read already). `head` is null for a chunked body's trailers, which are skipped.
void readHeaders(AnswerReader& in, const std::string& what, size_t& bytes, size_t& lines,
                 Head* head) {
  for (;;) {
    if (++lines > kMaxHeaderLines)
      RANKMAP_THROW(IoError, "{}: answer head has more than {} lines", what, kMaxHeaderLines);
    std::string l = in.line(kMaxHeadBytes - std::min(bytes, kMaxHeadBytes), "the answer's head");
    bytes += l.size() + 2;
    if (l.empty()) return;
    if (head == nullptr || l.front() == ' ' || l.front() == '\t') continue;
    size_t colon = l.find(':');
    if (colon == std::string::npos)
      RANKMAP_THROW(IoError, "{}: expected a 'Name: value' header, got '{}'", what, printable(l));
    std::string_view name = trimOws(std::string_view(l).substr(0, colon));
    std::string_view value = trimOws(std::string_view(l).substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      uint64_t n = 0;
      if (value.empty() || value.size() > 19 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        RANKMAP_THROW(IoError, "{}: expected a decimal Content-Length, got '{}'", what,
                      printable(value));
      for (char c : value) n = n * 10 + static_cast<uint64_t>(c - '0');
      if (head->contentLength && *head->contentLength != n)
        RANKMAP_THROW(IoError, "{}: two different Content-Length headers", what);
      head->contentLength = n;
    } else if (iequals(name, "Transfer-Encoding")) {
      // Only "chunked" (perhaps after "identity") is sent by an HTTP/1.1 server that was not
      // asked for compression.
      std::string_view last =
          value.substr(value.rfind(',') == std::string_view::npos ? 0 : value.rfind(',') + 1);
      if (iequals(trimOws(last), "chunked"))
        head->chunked = true;
      else if (!iequals(trimOws(last), "identity"))
        RANKMAP_THROW(IoError, "{}: unsupported Transfer-Encoding '{}' (expected chunked)", what,
                      printable(value));
    }
  }
}

// The status line and headers of the final answer (1xx interim answers are skipped).
Head readHead(AnswerReader& in, const std::string& what) {
  size_t bytes = 0;
  size_t lines = 0;
  for (;;) {
    std::string l = in.line(kMaxHeadBytes, "the status line");
    bytes += l.size() + 2;
    ++lines;
    // "HTTP/1.1 200 OK": version, a space, three digits, then a space and a reason or nothing.
    bool ok =
        l.size() >= 12 && l.compare(0, 7, "HTTP/1.") == 0 &&
        std::isdigit(static_cast<unsigned char>(l[7])) && l[8] == ' ' &&
        std::all_of(l.begin() + 9, l.begin() + 12, [](char c) { return c >= '0' && c <= '9'; }) &&
        (l.size() == 12 || l[12] == ' ');
    if (!ok)
      RANKMAP_THROW(IoError, "{}: expected an 'HTTP/1.x NNN' status line, got '{}'", what,
                    printable(l));
    Head h;
    h.status = std::stol(l.substr(9, 3));
    readHeaders(in, what, bytes, lines, &h);
    if (h.status >= 100 && h.status < 200) continue;
    return h;
  }
}

// The body as the head announces it, at most `maxBody` bytes.
std::string readBody(AnswerReader& in, const Head& h, const std::string& what, size_t maxBody) {
  std::string body;
  // GET and POST answers carry a body unless the status says they have none.
  if (h.status == 204 || h.status == 304) return body;
  if (h.chunked) {
    size_t bytes = 0;
    size_t lines = 0;
    for (;;) {
      std::string l = in.line(kMaxChunkLine, "a chunk size");
      std::string_view hex = trimOws(std::string_view(l).substr(0, l.find(';')));
      uint64_t n = 0;
      if (hex.empty() || hex.size() > 15 || !std::all_of(hex.begin(), hex.end(), [](char c) {
            return std::isxdigit(static_cast<unsigned char>(c));
          }))
        RANKMAP_THROW(IoError, "{}: expected a hexadecimal chunk size, got '{}'", what,
                      printable(l));
      for (char c : hex) {
        int v = std::isdigit(static_cast<unsigned char>(c))
                    ? c - '0'
                    : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
        n = n * 16 + static_cast<uint64_t>(v);
      }
      if (n == 0) break;
      if (n > maxBody - body.size())
        RANKMAP_THROW(IoError, "{}: answer larger than {} bytes", what, maxBody);
      in.exactly(static_cast<size_t>(n), body, "a chunk");
      if (!in.line(2, "the end of a chunk").empty())
        RANKMAP_THROW(IoError, "{}: expected CRLF after a chunk's data", what);
    }
    readHeaders(in, what, bytes, lines, nullptr);  // trailers
    return body;
  }
  if (h.contentLength) {
    if (*h.contentLength > maxBody)
      RANKMAP_THROW(IoError, "{}: answer larger than {} bytes (Content-Length {})", what, maxBody,
                    *h.contentLength);
    body.reserve(static_cast<size_t>(*h.contentLength));
    in.exactly(static_cast<size_t>(*h.contentLength), body, "the body (Content-Length)");
    return body;
  }
  in.untilClose(body, maxBody);
  return body;
}

struct BaseUrl {
  std::string host;
  uint16_t port = 80;
};

// `url` without its trailing slashes; messages show `given`, the URL as the user wrote it.
BaseUrl parseBaseUrl(const std::string& url, const std::string& given) {
  constexpr std::string_view kScheme = "http://";
  auto bad = [&](std::string_view why) {
    return InvalidInput(fmt::format("agent URL '{}': expected http://HOST:PORT{}", given,
                                    why.empty() ? std::string() : fmt::format(" ({})", why)));
  };
  if (url.size() >= 8 && iequals(std::string_view(url).substr(0, 8), "https://"))
    throw InvalidInput(fmt::format(
        "agent URL '{}': https is not supported: rankmapd serves plain HTTP (use http://)", given));
  if (url.size() < kScheme.size() || !iequals(std::string_view(url).substr(0, 7), kScheme))
    throw bad("");
  std::string_view authority = std::string_view(url).substr(kScheme.size());
  if (authority.find_first_of("/?#@") != std::string_view::npos)
    throw bad("no path, query or user part");
  if (hasControl(authority) || authority.find(' ') != std::string_view::npos)
    throw bad("spaces or control characters");
  // An IPv6 literal must be bracketed here: "http://::1" does not say where the port starts.
  if (!authority.empty() && authority.front() != '[' &&
      std::count(authority.begin(), authority.end(), ':') > 1)
    throw bad("an IPv6 address in brackets, http://[::1]:7410");
  try {
    HostPort hp = parseHostPort(authority, "host and port", {.defaultPort = 80});
    return {hp.host, hp.port};
  } catch (const InvalidInput& e) {
    throw bad(e.what());
  }
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

std::string agentPlanPath(const std::vector<std::string>& hosts, std::optional<int> ranksPerHost,
                          const std::string& mesh, const std::string& traffic) {
  std::string path = "/v1/plan?hosts=";
  for (size_t h = 0; h < hosts.size(); ++h) path += (h ? "," : "") + urlEncode(hosts[h]);
  if (ranksPerHost) path += fmt::format("&ranks_per_host={}", *ranksPerHost);
  if (!mesh.empty()) path += "&mesh=" + urlEncode(mesh);
  if (!traffic.empty()) path += "&traffic=" + urlEncode(traffic);
  return path;
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
    : base_(baseUrl), token_(std::move(token)) {
  while (!base_.empty() && base_.back() == '/') base_.pop_back();
  BaseUrl u = parseBaseUrl(base_, baseUrl);
  host_ = std::move(u.host);
  port_ = u.port;
  // The token goes into a header line; it is a secret, so the message does not show it.
  if (hasControl(token_))
    throw InvalidInput(
        fmt::format("bearer token for agent {}: contains control characters", base_));
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
  const std::string url = base_ + std::string(path);
  const std::string what = fmt::format("{} {}", method, url);
  if (path.empty() || path.front() != '/' || hasControl(path) ||
      path.find(' ') != std::string_view::npos)
    throw InvalidInput(fmt::format(
        "{}: expected a path starting with '/' without spaces or control characters", what));
  if (d.expired()) throw TimeoutError(fmt::format("{}: deadline passed before the request", what));

  std::string request = fmt::format("{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n", method,
                                    path, hostPortText(host_, port_));
  if (!token_.empty()) request += fmt::format("Authorization: Bearer {}\r\n", token_);
  request += "Content-Type: application/json\r\n";
  if (method != "GET" || !body.empty())
    request += fmt::format("Content-Length: {}\r\n", body.size());
  request += "\r\n";
  request.append(body);

  try {
    SockAddr addr;
    try {
      addr = resolve(host_, port_, Lookup::kNames);
    } catch (const InvalidInput& e) {
      throw IoError(fmt::format("{}: {}", what, e.what()));
    }
    Socket s = Socket::connect(addr, d, hostPortText(host_, port_));
    std::optional<PeerError> sendFailed;
    try {
      s.sendAll(request.data(), request.size(), d, "send the request");
    } catch (const PeerError& e) {
      // The server may have answered and closed before reading everything (an early 413 or
      // 401): its answer, if it is there, says more than the broken send.
      sendFailed = e;
    }
    HttpResponse r;
    try {
      AnswerReader in(s, d, what);
      Head h = readHead(in, what);
      r.status = h.status;
      r.body = readBody(in, h, what, maxBody);
    } catch (const Error&) {
      if (sendFailed) throw *sendFailed;
      throw;
    }
    return r;
  } catch (const TimeoutError& e) {
    throw TimeoutError(
        fmt::format("{}: no answer within the deadline ({})", what, e.what()));
  } catch (const PeerError& e) {
    throw IoError(fmt::format("{}: {}", what, e.what()));
  } catch (const SystemError& e) {
    throw IoError(fmt::format("{}: {}", what, e.what()));
  }
}

}  // namespace rankmap
