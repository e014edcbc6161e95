#include "probe/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace rankmap::probe {

ProbeServer::ProbeServer(Options opts, ProbeKey key, RequestHandler handler)
    : opts_(std::move(opts)),
      key_(std::move(key)),
      handler_(std::move(handler)),
      guard_(opts_.replayWindow) {
  if (key_.empty()) RANKMAP_THROW(InvalidInput, "probe server: no probe key");
}

ProbeServer::~ProbeServer() { stop(); }

void ProbeServer::start() {
  listener_ = listenOn(opts_.listen);
  port_ = listener_.port();
  RANKMAP_INFO(Probe, "probe server {}: listening on {}:{} (key {})", opts_.name, opts_.listen.host,
               port_, key_.fingerprint());
  acceptThread_ = std::thread([this] { acceptLoop(); });
}

void ProbeServer::stop() {
  if (stopping_.exchange(true)) {
    if (acceptThread_.joinable()) acceptThread_.join();
    return;
  }
  listener_.shutdown();
  if (acceptThread_.joinable()) acceptThread_.join();
  std::unique_lock<std::mutex> lock(mu_);
  for (int fd : active_) ::shutdown(fd, SHUT_RDWR);
  idle_.wait(lock, [&] { return running_ == 0; });
  auto threads = std::move(threads_);
  threads_.clear();
  finished_.clear();
  lock.unlock();
  for (auto& [id, t] : threads) t.join();  // each has left serve(); this waits for its exit
}

void ProbeServer::reapFinished() {
  for (auto id : finished_) {
    auto it = threads_.find(id);
    if (it == threads_.end()) continue;
    it->second.join();  // it has left serve() and holds no lock: this waits for its exit only
    threads_.erase(it);
  }
  finished_.clear();
}

void ProbeServer::acceptLoop() {
  while (!stopping_.load()) {
    std::optional<Socket> s;
    try {
      s = listener_.accept(Deadline::after(std::chrono::seconds(1)));
    } catch (const std::exception& e) {
      RANKMAP_ERROR(Probe, "probe server {}: accept failed: {}", opts_.name, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (!s) continue;
    std::lock_guard<std::mutex> lock(mu_);
    reapFinished();
    if (stopping_.load()) continue;  // closes the socket
    if (running_ >= opts_.maxConnections) {
      refuse(Refusal::kBusy, fmt::format("{} connections open, its cap", running_));
      continue;
    }
    // A duplicate descriptor names the connection for stop(): it stays valid (and is not
    // reused for another connection) until serve() has finished and closes it.
    int dupFd = ::dup(s->fd());
    if (dupFd < 0) {
      refuse(Refusal::kNoDescriptors, std::strerror(errno));
      continue;
    }
    ++running_;
    ++accepted_;
    active_.insert(dupFd);
    std::thread t([this, dupFd, sock = std::move(*s)]() mutable { serve(std::move(sock), dupFd); });
    const auto id = t.get_id();
    threads_.emplace(id, std::move(t));
  }
}

const char* ProbeServer::refusalName(Refusal r) {
  switch (r) {
    case Refusal::kBusy:
      return "busy";
    case Refusal::kNoDescriptors:
      return "no_descriptors";
  }
  return "unknown";
}

void ProbeServer::refuse(Refusal r, const std::string& detail) {
  const size_t i = static_cast<size_t>(r);
  ++refused_[i];
  uint64_t left = 0;
  if (refusedLog_[i].allow(left))
    RANKMAP_WARN(Probe, "probe server {}: closed a connection unanswered ({}: {}){}", opts_.name,
                 refusalName(r), detail,
                 left ? fmt::format("; {} more since the last such line", left) : "");
}

void ProbeServer::serve(Socket s, int dupFd) {
  {
    std::string peer = s.peerText();
    try {
      Channel c =
          Channel::accept(std::move(s), key_, guard_, Deadline::after(opts_.handshakeTimeout));
      serveChannel(c);
    } catch (const AuthError& e) {
      ++authFailures_[static_cast<size_t>(e.reason())];
      RANKMAP_WARN(Probe, "probe server {}: rejected {}: {} ({})", opts_.name, peer, e.what(),
                   authFailureName(e.reason()));
    } catch (const std::exception& e) {
      RANKMAP_DEBUG(Probe, "probe server {}: connection from {} ended: {}", opts_.name, peer,
                    e.what());
    }
  }
  // Everything this thread owned is destroyed; the notify happens under the lock so that
  // stop() cannot return (and destroy *this) before we are done touching it.
  std::lock_guard<std::mutex> lock(mu_);
  active_.erase(dupFd);
  ::close(dupFd);
  --running_;
  finished_.push_back(std::this_thread::get_id());
  idle_.notify_all();
}

void ProbeServer::serveChannel(Channel& c) {
  for (;;) {
    if (stopping_.load()) return;
    Frame f;
    try {
      f = c.recv(Deadline::after(opts_.idleTimeout), kMaxDocumentPayload);
    } catch (const PeerError& e) {
      if (dynamic_cast<const AuthError*>(&e)) throw;
      return;  // the client closed the connection: the normal end
    }
    switch (f.type) {
      case MsgType::kPing: {
        if (f.payload.size() != 8) throw AuthError(AuthFailure::kMalformed, "Ping of wrong size");
        c.send(MsgType::kPong, f.payload, Deadline::after(opts_.idleTimeout));
        break;
      }
      case MsgType::kBulkSink:
      case MsgType::kBulkSource: {
        BandwidthOptions bo;
        try {
          bo = BandwidthOptions::fromJson(parseJson(f.payload, "bulk request"), "bulk request");
          if (bo.maxMs > opts_.maxBulkMs || bo.maxBytes > opts_.maxBulkBytes)
            throw InvalidInput(
                fmt::format("bulk request of {} ms / {} bytes exceeds this agent's "
                            "limits ({} ms / {} bytes)",
                            bo.maxMs, bo.maxBytes, opts_.maxBulkMs, opts_.maxBulkBytes));
        } catch (const InvalidInput& e) {
          c.send(MsgType::kError, e.what(), Deadline::after(opts_.idleTimeout));
          return;
        }
        // The bytes start bo.startInMs from now and end by bulkEnd(); the deadline only
        // bounds a peer that stops reading or answering.
        const auto start =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(bo.startInMs);
        Deadline d =
            Deadline::at(start + std::chrono::milliseconds(bo.maxMs * 4) + opts_.idleTimeout);
        if (f.type == MsgType::kBulkSink) {
          BulkResult r = receiveBulk(c.socket(), bo, d, bulkEnd(start, bo));
          c.send(MsgType::kBulkResult, r.toJson().dump(), d);
          // Drain until the sender sees the result and closes: closing with unread bytes would
          // reset the connection and could destroy the result before it is read.
          shutdownWrite(c.socket());
          char sink[65536];
          Deadline drain = Deadline::after(std::chrono::seconds(5));
          try {
            while (c.socket().recvSome(sink, sizeof(sink), drain, "bulk drain") > 0) {
            }
          } catch (const std::exception&) {
          }
        } else {
          std::this_thread::sleep_until(start);
          streamBulk(c.socket(), bo.maxBytes, d, bulkEnd(start, bo));
          // Stopped at the byte bound or the end: a FIN after the last byte, and the receiver
          // closes (a reset now could destroy bytes it has not read yet).
          shutdownWrite(c.socket());
          char sink[4096];
          Deadline drain = Deadline::after(std::chrono::milliseconds(bo.maxMs + kBulkGraceMs))
                               .min(Deadline::after(std::chrono::seconds(5)));
          try {
            while (c.socket().recvSome(sink, sizeof(sink), drain, "bulk drain") > 0) {
            }
          } catch (const std::exception&) {
          }
        }
        return;  // a bulk transfer ends its connection
      }
      case MsgType::kRequest: {
        Json reply;
        Deadline d = Deadline::after(opts_.requestTimeout);
        try {
          Json req = parseJson(f.payload, fmt::format("request from {}", c.describe()));
          reply = handler_(req, c.peerName(), d);
        } catch (const InvalidInput& e) {
          c.send(MsgType::kError, e.what(), d);
          break;
        } catch (const NotSupported& e) {
          c.send(MsgType::kError, e.what(), d);
          break;
        } catch (const std::exception& e) {
          c.send(MsgType::kError, fmt::format("failed: {}", e.what()), d);
          break;
        }
        c.send(MsgType::kReply, reply.dump(), d);
        break;
      }
      default:
        throw AuthError(AuthFailure::kMalformed,
                        fmt::format("{}: unexpected {} frame", c.describe(), msgTypeName(f.type)));
    }
  }
}

}  // namespace rankmap::probe
