#include "common/http_client.h"

// common/http_client.h against a server on common/net.h's Listener that the test thread runs,
// answering with canned bytes (the client runs on another thread), and against cpp-httplib, the
// server rankmapd uses (agent/api_server.h).
#include <httplib.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/net.h"

namespace rankmap {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A listener on a loopback address with a free port.
Listener listenOn(const std::string& address) {
  return Listener::bind(resolve(address, 0, Lookup::kNumericOnly));
}

std::string urlOf(const Listener& l) { return "http://" + l.localAddr().str(); }

// Reads one request: the head up to the empty line, then Content-Length bytes of body.
std::string readRequest(Socket& s) {
  Deadline d = Deadline::after(5s);
  std::string req;
  char buf[4096];
  size_t end;
  while ((end = req.find("\r\n\r\n")) == std::string::npos) {
    size_t k = s.recvSome(buf, sizeof buf, d, "test server: request head");
    if (k == 0) throw IoError("test server: the client closed before the end of its request");
    req.append(buf, k);
  }
  size_t want = end + 4;
  if (size_t at = req.find("\r\nContent-Length: "); at != std::string::npos && at < end)
    want += std::stoul(req.substr(at + 18));
  while (req.size() < want) {
    size_t k = s.recvSome(buf, sizeof buf, d, "test server: request body");
    if (k == 0) throw IoError("test server: the client closed before the end of its body");
    req.append(buf, k);
  }
  return req;
}

// Sends `bytes`; a client that has already hung up (it refused the answer) is not an error here.
void sendQuietly(Socket& s, const std::string& bytes) {
  try {
    s.sendAll(bytes.data(), bytes.size(), Deadline::after(5s), "test server: answer");
  } catch (const PeerError&) {
  }
}

// Waits until the client closes its end (or 5 s pass).
void waitForClose(Socket& s) {
  char c;
  try {
    while (s.recvSome(&c, 1, Deadline::after(5s), "test server: wait for close") > 0) {
    }
  } catch (const Error&) {
  }
}

struct Exchange {
  std::string request;               // the bytes the server received
  std::future<HttpResponse> answer;  // what the client returned or threw
};

// Runs `call` on another thread; the test thread accepts its connection, reads its request and
// hands the socket to `serve`, then closes it.
Exchange exchange(Listener& l, std::function<HttpResponse()> call,
                  const std::function<void(Socket&)>& serve) {
  Exchange e;
  e.answer = std::async(std::launch::async, std::move(call));
  std::optional<Socket> s = l.accept(Deadline::after(5s));
  if (!s) {
    ADD_FAILURE() << "the client did not connect";
    return e;
  }
  e.request = readRequest(*s);
  serve(*s);
  return e;
}

// GET `path` from a server whose answer is `bytes`, sent as they are, then a close.
Exchange getAnswered(const std::string& bytes, size_t maxBody = 1 << 20,
                     const std::string& path = "/v1/x") {
  static Listener l = listenOn("127.0.0.1");
  HttpClient client(urlOf(l));
  return exchange(
      l, [client, path, maxBody] { return client.get(path, Deadline::after(5s), maxBody); },
      [&](Socket& s) { sendQuietly(s, bytes); });
}

TEST(HttpClient, ReadsAContentLengthBody) {
  Exchange e = getAnswered("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
  HttpResponse r = e.answer.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello");
}

TEST(HttpClient, ReadsAChunkedBodyWithExtensionsAndTrailers) {
  Exchange e = getAnswered(
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n7;x=1\r\n, world\r\n"
      "0\r\nX-Trailer: y\r\n\r\n");
  HttpResponse r = e.answer.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "hello, world");
}

TEST(HttpClient, ReadsABodyUntilTheServerCloses) {
  Exchange e = getAnswered("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it");
  HttpResponse r = e.answer.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "all of it");
}

TEST(HttpClient, ReadsAnAnswerThatArrivesInPieces) {
  Listener l = listenOn("127.0.0.1");
  HttpClient client(urlOf(l));
  Exchange e = exchange(
      l, [&] { return client.get("/v1/x", Deadline::after(5s)); },
      [](Socket& s) {
        for (std::string piece : {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2", "00 OK\r\nContent-Len",
                                  "gth: 6\r\n\r", "\nabc", "def"}) {
          sendQuietly(s, piece);
          std::this_thread::sleep_for(5ms);
        }
      });
  HttpResponse r = e.answer.get();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "abcdef");
}

TEST(HttpClient, ReturnsErrorStatusesAndRedirectsWithoutFollowing) {
  Exchange e = getAnswered(
      "HTTP/1.1 404 Not Found\r\nContent-Length: 26\r\n\r\n{\"error\":\"no such round\"}\n");
  HttpResponse r = e.answer.get();
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.errorText(), "no such round");
  Exchange moved = getAnswered(
      "HTTP/1.1 302 Found\r\nLocation: http://10.255.255.1/\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(moved.answer.get().status, 302);
}

TEST(HttpClient, AnAnswerLargerThanMaxBodyIsAnIoError) {
  const std::string big(11, 'x');
  for (const std::string& answer :
       {"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + big,
        std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: "
                    "chunked\r\n\r\n6\r\nxxxxxx\r\n5\r\nxxxxx\r\n0\r\n\r\n"),
        "HTTP/1.1 200 OK\r\n\r\n" + big}) {
    Exchange e = getAnswered(answer, 10);
    try {
      e.answer.get();
      ADD_FAILURE() << "no error for " << answer;
    } catch (const IoError& err) {
      EXPECT_TRUE(contains(err.what(), "larger than 10 bytes")) << err.what();
      EXPECT_TRUE(contains(err.what(), "GET http://127.0.0.1:")) << err.what();
    }
  }
  // Exactly maxBody is fine.
  EXPECT_EQ(getAnswered("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + big.substr(1), 10)
                .answer.get()
                .body.size(),
            10u);
}

TEST(HttpClient, AServerThatNeverAnswersTimesOutAtTheDeadline) {
  Listener l = listenOn("127.0.0.1");
  const std::string url = urlOf(l);
  HttpClient client(url);
  auto t0 = Clock::now();
  Exchange e = exchange(
      l, [&] { return client.get("/v1/slow", Deadline::after(300ms)); }, waitForClose);
  try {
    e.answer.get();
    ADD_FAILURE() << "no timeout";
  } catch (const TimeoutError& err) {
    EXPECT_TRUE(contains(err.what(), "GET " + url + "/v1/slow")) << err.what();
  }
  auto took = Clock::now() - t0;
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 300ms + 700ms);
}

TEST(HttpClient, AGarbageStatusLineIsAnIoErrorNamingTheUrl) {
  Exchange e = getAnswered("SSH-2.0-OpenSSH_9.2\r\n\r\n");
  try {
    e.answer.get();
    ADD_FAILURE() << "no error";
  } catch (const IoError& err) {
    EXPECT_TRUE(contains(err.what(), "GET http://127.0.0.1:")) << err.what();
    EXPECT_TRUE(contains(err.what(), "/v1/x")) << err.what();
    EXPECT_TRUE(contains(err.what(), "expected an 'HTTP/1.x NNN' status line")) << err.what();
    EXPECT_TRUE(contains(err.what(), "SSH-2.0")) << err.what();
  }
  EXPECT_THROW(getAnswered("").answer.get(), IoError);  // closed without a word
  EXPECT_THROW(getAnswered("HTTP/1.1 20 OK\r\n\r\n").answer.get(), IoError);
  EXPECT_THROW(getAnswered("HTTP/1.1 200 OK\r\nno colon\r\n\r\n").answer.get(), IoError);
  EXPECT_THROW(getAnswered("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").answer.get(), IoError);
  EXPECT_THROW(getAnswered("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx").answer.get(),
               IoError);
}

TEST(HttpClient, AnswerHeadsAreBounded) {
  std::string many = "HTTP/1.1 200 OK\r\n";
  for (int i = 0; i < 150; ++i) many += "X-A: b\r\n";
  EXPECT_THROW(getAnswered(many + "\r\n").answer.get(), IoError);
  std::string longLine = "HTTP/1.1 200 OK\r\nX-A: " + std::string(70 << 10, 'a') + "\r\n\r\n";
  try {
    getAnswered(longLine).answer.get();
    ADD_FAILURE() << "no error";
  } catch (const IoError& err) {
    EXPECT_TRUE(contains(err.what(), "longer than")) << err.what();
  }
}

TEST(HttpClient, AConnectionClosedMidBodyIsAnIoError) {
  for (const std::string& answer :
       {std::string("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"),
        std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\nshort")}) {
    Exchange e = getAnswered(answer);
    try {
      e.answer.get();
      ADD_FAILURE() << "no error for " << answer;
    } catch (const IoError& err) {
      EXPECT_TRUE(contains(err.what(), "GET http://127.0.0.1:")) << err.what();
      EXPECT_TRUE(contains(err.what(), "connection closed")) << err.what();
    }
  }
}

TEST(HttpClient, PostSendsTheBodyWithItsLengthTypeAndToken) {
  Listener l = listenOn("127.0.0.1");
  const std::string hostPort = l.localAddr().str();
  HttpClient client("http://" + hostPort + "//", "s3cret");
  EXPECT_EQ(client.baseUrl(), "http://" + hostPort);
  const std::string body = R"({"hosts":[{"name":"a"}]})";
  Exchange e = exchange(
      l, [&] { return client.post("/v1/probe", body, Deadline::after(5s)); },
      [](Socket& s) {
        sendQuietly(s, "HTTP/1.1 202 Accepted\r\nContent-Length: 14\r\n\r\n{\"round_id\":7}");
      });
  HttpResponse r = e.answer.get();
  EXPECT_EQ(r.status, 202);
  EXPECT_EQ(r.body, "{\"round_id\":7}");
  const std::string& q = e.request;
  EXPECT_EQ(q.rfind("POST /v1/probe HTTP/1.1\r\n", 0), 0u) << q;
  EXPECT_TRUE(contains(q, "\r\nHost: " + hostPort + "\r\n")) << q;
  EXPECT_TRUE(contains(q, "\r\nConnection: close\r\n")) << q;
  EXPECT_TRUE(contains(q, "\r\nAuthorization: Bearer s3cret\r\n")) << q;
  EXPECT_TRUE(contains(q, "\r\nContent-Type: application/json\r\n")) << q;
  EXPECT_TRUE(contains(q, fmt::format("\r\nContent-Length: {}\r\n", body.size()))) << q;
  EXPECT_EQ(q.substr(q.size() - body.size() - 4), "\r\n\r\n" + body) << q;
}

TEST(HttpClient, GetSendsNoLengthAndNoTokenWhenNoneIsSet) {
  Exchange e = getAnswered("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 1 << 20,
                           "/v1/plan?hosts=" + urlEncode("a b,c"));
  EXPECT_EQ(e.answer.get().status, 200);
  EXPECT_EQ(e.request.rfind("GET /v1/plan?hosts=a%20b%2Cc HTTP/1.1\r\n", 0), 0u) << e.request;
  EXPECT_FALSE(contains(e.request, "Content-Length")) << e.request;
  EXPECT_FALSE(contains(e.request, "Authorization")) << e.request;
  EXPECT_EQ(e.request.substr(e.request.size() - 4), "\r\n\r\n");
}

TEST(HttpClient, RefusesHttpsAndMalformedUrls) {
  try {
    HttpClient("https://127.0.0.1:7410");
    ADD_FAILURE() << "https accepted";
  } catch (const InvalidInput& err) {
    EXPECT_TRUE(contains(err.what(), "'https://127.0.0.1:7410'")) << err.what();
    EXPECT_TRUE(contains(err.what(), "plain HTTP")) << err.what();
  }
  for (const char* bad : {"127.0.0.1:7410", "ftp://h:1", "http://", "http://:80", "http://h:",
                          "http://h:x", "http://h:70000", "http://::1:80", "http://[::1",
                          "http://h:1/prefix", "http://u@h:1", "http://h:1?x=1", "http://h 1:2"}) {
    try {
      HttpClient c(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const InvalidInput& err) {
      EXPECT_TRUE(contains(
          err.what(), fmt::format("agent URL '{}': expected http://HOST:PORT", std::string(bad))))
          << err.what();
    }
  }
  EXPECT_EQ(HttpClient("http://localhost").baseUrl(), "http://localhost");
  EXPECT_EQ(HttpClient("HTTP://[::1]:7410/").baseUrl(), "HTTP://[::1]:7410");
  EXPECT_THROW(HttpClient("http://h:1", "tok\r\nX-Evil: 1"), InvalidInput);
  HttpClient c("http://127.0.0.1:9");
  EXPECT_THROW(c.get("v1/x", Deadline::after(1s)), InvalidInput);
  EXPECT_THROW(c.get("/v1/x y", Deadline::after(1s)), InvalidInput);
  EXPECT_THROW(c.get("/v1/x", Deadline::after(0s)), TimeoutError);
}

TEST(HttpClient, ARefusedConnectionIsAnIoErrorNamingTheUrl) {
  std::string url;
  {
    Listener l = listenOn("127.0.0.1");
    url = urlOf(l);
  }  // closed: connections are refused
  try {
    HttpClient(url).get("/v1/health", Deadline::after(5s));
    ADD_FAILURE() << "no error";
  } catch (const IoError& err) {
    EXPECT_TRUE(contains(err.what(), "GET " + url + "/v1/health")) << err.what();
  }
}

TEST(HttpClient, TalksToAnIpv6Literal) {
  Listener l;
  try {
    l = listenOn("::1");
  } catch (const Error& err) {
    GTEST_SKIP() << "no IPv6 loopback on this machine: " << err.what();
  }
  const std::string url = "http://[::1]:" + std::to_string(l.port());
  EXPECT_EQ(urlOf(l), url);
  Exchange e = exchange(
      l, [&] { return HttpClient(url).get("/v1/health", Deadline::after(5s)); },
      [](Socket& s) { sendQuietly(s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); });
  EXPECT_EQ(e.answer.get().body, "ok");
  EXPECT_TRUE(contains(e.request, "\r\nHost: [::1]:" + std::to_string(l.port()) + "\r\n"))
      << e.request;
}

// cpp-httplib as rankmapd runs it: fixed bodies, chunked bodies, and a POST it echoes back.
TEST(HttpClient, TalksToCppHttplib) {
  httplib::Server server;
  server.Get("/fixed", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(100000, 'f'), "application/json");
  });
  server.Get("/chunked", [](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider(
        "application/json", [](size_t offset, httplib::DataSink& sink) {
          if (offset < 30000) {
            std::string piece(10000, static_cast<char>('a' + offset / 10000));
            sink.write(piece.data(), piece.size());
          } else {
            sink.done();
          }
          return true;
        });
  });
  server.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
    res.status = req.get_header_value("Authorization") == "Bearer tok" ? 200 : 401;
    res.set_content(req.body, "application/json");
  });
  int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  auto until = Clock::now() + 5s;
  while (!server.is_running() && Clock::now() < until) std::this_thread::sleep_for(1ms);
  HttpClient client(fmt::format("http://127.0.0.1:{}", port), "tok");
  HttpResponse fixed = client.get("/fixed", Deadline::after(5s));
  EXPECT_EQ(fixed.status, 200);
  EXPECT_EQ(fixed.body, std::string(100000, 'f'));
  HttpResponse chunked = client.get("/chunked", Deadline::after(5s));
  EXPECT_EQ(chunked.status, 200);
  EXPECT_EQ(chunked.body,
            std::string(10000, 'a') + std::string(10000, 'b') + std::string(10000, 'c'));
  EXPECT_THROW(client.get("/chunked", Deadline::after(5s), 25000), IoError);
  HttpResponse echo = client.post("/echo", "{\"x\":1}", Deadline::after(5s));
  EXPECT_EQ(echo.status, 200);
  EXPECT_EQ(echo.body, "{\"x\":1}");
  EXPECT_EQ(HttpClient(client.baseUrl()).post("/echo", "{}", Deadline::after(5s)).status, 401);
  EXPECT_EQ(client.get("/missing", Deadline::after(5s)).status, 404);
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace rankmap
