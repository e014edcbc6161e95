// tcp::Pair: this rank's connection to one peer: `streams` TCP sockets, send queues, the
// receive parser and the matching tables.
//
// Framing: every message is cut into chunks (one chunk unless it is at least stripeMin bytes
// and there are several streams); each chunk is a 40-byte ChunkHeader {tag, seq, total, offset,
// length} followed by `length` payload bytes. `seq` numbers the messages of one (pair, tag) in
// posting order on both sides, so chunks of one message may travel on different streams and
// still land in the receive posted in the same position: that is the matching rule of
// transport.h. A chunk whose receive is posted is read straight into the user's buffer; one
// that arrives first is kept in an "unexpected" buffer until its receive is posted; a large one
// is mapped so that only the bytes that arrive take memory (a header is the peer's word only).
//
// Threads: the context's caller calls send()/recv(); the progress thread calls onReadable()/
// onWritable(). sendMu_ guards the send side (queues, sequence numbers), recvMu_ the receive
// side; when both are needed, sendMu_ is taken first. Sends are written by whoever finds the
// socket writable: at once by send() when the queue was empty, else by the progress thread on
// EPOLLOUT. A send completes when all of its bytes are in the kernel.
//
// Failure: an error on a socket, or end-of-file inside a chunk or on every stream, fails the
// pair: every pending request fails with PeerError naming the peer, and so does every later
// one, except receives of messages that had already fully arrived.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/transport/request.h"
#include "common/net.h"

namespace rankmap::coll::transport::tcp {

struct ChunkHeader {
  uint64_t tag;
  uint64_t seq;
  uint64_t total;
  uint64_t offset;
  uint64_t length;
};
static_assert(sizeof(ChunkHeader) == 40);

// Storage for a message that arrives before its receive is posted, uninitialized. Up to 1 MiB
// from the heap; larger ones are mapped without reserving memory, so pages are taken only as
// bytes are written: a corrupt or hostile `total` costs address space, not memory.
class MessageBuffer {
 public:
  // Empty when the memory cannot be had (the size exceeds what the process can map).
  static MessageBuffer allocate(uint64_t bytes);
  MessageBuffer() = default;
  MessageBuffer(MessageBuffer&& o) noexcept { *this = std::move(o); }
  MessageBuffer& operator=(MessageBuffer&& o) noexcept;
  ~MessageBuffer() { release(); }
  char* get() const { return data_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  void release();
  char* data_ = nullptr;
  uint64_t mapped_ = 0;  // > 0: an mmap of this many bytes, else new[] (or nothing)
};

class Pair {
 public:
  // `sockets` are connected and non-blocking, one per stream. `epollFd` is the context's; the
  // pair registers its sockets there with data (peer << 8 | stream).
  Pair(int rank, int peer, std::string peerName, std::vector<Socket> sockets, int epollFd,
       uint64_t stripeMin);
  // Closing the sockets also removes them from the epoll set.
  ~Pair() = default;
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  RequestPtr send(uint64_t tag, const void* buf, size_t bytes);
  RequestPtr recv(uint64_t tag, void* buf, size_t bytes);

  // Progress thread: socket `stream` is readable (or hung up) / writable.
  void onReadable(int stream);
  void onWritable(int stream);

  // Fails every pending and future request: with PeerError when `peerFault` (the peer died or
  // broke the protocol), else with IoError (this context is closing). `reason` names the cause.
  void fail(const std::string& reason, bool peerFault);

  const std::shared_ptr<const std::string>& name() const { return name_; }
  int streams() const { return static_cast<int>(streams_.size()); }

 private:
  struct Key {
    uint64_t tag;
    uint64_t seq;
    bool operator==(const Key& o) const { return tag == o.tag && seq == o.seq; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(k.tag * 0x9E3779B97F4A7C15ull ^ k.seq);
    }
  };

  // --- send side (sendMu_) ---
  struct SendOp {
    RequestStatePtr req;
    int chunksLeft;
  };
  struct SendChunk {
    std::shared_ptr<SendOp> op;
    ChunkHeader header;
    const char* data;
    size_t sent = 0;  // bytes of header + payload written so far
  };

  // --- receive side (recvMu_) ---
  struct PostedRecv {
    RequestStatePtr req;
    char* buf;
    size_t bytes;
  };
  // A message some of whose chunks have arrived.
  struct Incoming {
    RequestStatePtr req;              // the matched receive, if posted
    char* dest = nullptr;             // where chunks go: the receive's buffer or `buffer`
    MessageBuffer buffer;             // unexpected message storage
    char* copyTo = nullptr;           // receive posted while the message was still arriving
    uint64_t total = 0;
    uint64_t received = 0;
    bool discard = false;             // length mismatch: read and drop
  };
  // An unexpected message that has fully arrived.
  struct Arrived {
    MessageBuffer buffer;
    uint64_t total;
  };

  struct Stream {
    Socket socket;
    // send side
    std::deque<SendChunk> queue;
    bool wantWrite = false;
    // receive side: a staging buffer for headers and small payloads
    std::unique_ptr<char[]> staging;
    size_t stagingBegin = 0;
    size_t stagingEnd = 0;
    ChunkHeader header{};
    size_t headerGot = 0;
    bool inPayload = false;
    uint64_t payloadGot = 0;
    // Set by the progress thread (recvMu_), read by senders (sendMu_).
    std::atomic<bool> eof{false};
  };

  // Writes queued chunks of `s` until the queue is empty or the socket would block; returns an
  // error text when the connection failed. Called with sendMu_ held.
  std::string flushLocked(int stream);
  void setWantWriteLocked(int stream, bool want);
  // Reads and dispatches what is available on `stream`; returns an error text on failure.
  // Called with recvMu_ held.
  std::string readLocked(int stream);
  // A complete header was parsed on `s`: find or create the message it belongs to.
  std::string beginChunkLocked(Stream& s);
  // `n` payload bytes of the current chunk of `s` are at `src` (or already at their place when
  // src is null).
  void payloadLocked(Stream& s, const char* src, size_t n);
  // Where the next payload byte of the current chunk of `s` goes (null: discard).
  char* payloadDestLocked(Stream& s);
  void endChunkLocked(Stream& s);
  void failLocked(const std::string& reason, bool peerFault);
  void failRequestLocked(RequestState& req);

  const int rank_;
  const int peer_;
  const std::shared_ptr<const std::string> name_;
  const int epollFd_;
  const uint64_t stripeMin_;
  std::vector<Stream> streams_;

  std::mutex sendMu_;
  std::unordered_map<uint64_t, uint64_t> sendSeq_;
  int nextStream_ = 0;

  std::mutex recvMu_;
  std::unordered_map<uint64_t, uint64_t> recvSeq_;
  std::unordered_map<Key, PostedRecv, KeyHash> posted_;
  std::unordered_map<Key, Incoming, KeyHash> incoming_;
  std::unordered_map<Key, Arrived, KeyHash> arrived_;

  // Set once under both mutexes; read under either.
  bool failed_ = false;
  std::string failure_;
  bool peerFault_ = false;
};

}  // namespace rankmap::coll::transport::tcp
