// rdma::Pair: this rank's reliable-connected (RC) queue pair to one peer, and the matching of
// tagged messages over it.
//
// Protocol (receiver-driven rendezvous, zero-copy both ways):
// - irecv registers the buffer (registration cache) and sends the peer a control message
//   ClearToSend {tag, seq, address, length, rkey, recvId};
// - isend waits for the ClearToSend with the same (tag, seq) -- seq numbers the messages of one
//   (pair, tag) in posting order on both sides, which is the matching rule of transport.h -- and
//   then posts one RDMA WRITE WITH IMMEDIATE (immediate = recvId) of its buffer into the
//   receiver's. The send completes when the write is acknowledged, the receive when the
//   immediate arrives. A length mismatch fails the send with InvalidInput and tells the receiver
//   (control message Mismatch), which fails its receive too.
// - Control messages travel as SENDs from a registered slab into pre-posted receive slots; the
//   immediate of a write consumes a receive slot too. Slots are reposted at once, and rnr_retry=7
//   makes a sender wait (in hardware) rather than fail while the receiver reposts.
// - Liveness: while requests are pending, the progress thread sends a Ping every
//   kHeartbeatInterval; the send to a dead peer fails after the RC retries (about 0.5 s) and the
//   pair fails with PeerError. A closing context sends Bye, so peers fail at once.
//
// Threads: every method is called with the owning context's mutex held (by the caller's thread
// or the progress thread).
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/transport/request.h"

namespace rankmap::coll::transport::rdma {

class RegistrationCache;
struct Registration;

inline constexpr auto kHeartbeatInterval = std::chrono::milliseconds(500);

// What a rank publishes about one of its queue pairs.
struct QpInfo {
  uint32_t qpn;
  uint32_t psn;
};

// What a rank publishes about its port.
struct PortInfo {
  uint16_t lid;
  uint8_t gid[16];
  uint32_t mtu;          // enum ibv_mtu
  int32_t gidIndex;      // -1: no GRH (InfiniBand LID routing)
  uint32_t ethernet;     // 1 for RoCE
  char host[64];         // host name, for messages
};

class Pair {
 public:
  Pair(int rank, int peer, ibv_pd* pd, ibv_cq* cq, int portNum, RegistrationCache& cache);
  ~Pair();
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  QpInfo local() const { return local_; }
  uint32_t qpn() const { return local_.qpn; }
  // INIT -> RTR -> RTS against the peer's published port and queue pair; names the pair after
  // the peer's host. Called once, before any request.
  void connect(const PortInfo& self, const PortInfo& remote, const QpInfo& remoteQp);

  RequestPtr send(uint64_t tag, const void* buf, size_t bytes);
  RequestPtr recv(uint64_t tag, void* buf, size_t bytes);

  // A completion for this pair's queue pair, from the shared completion queue.
  void onCompletion(const ibv_wc& wc);
  // Sends a Ping when requests are pending (liveness).
  void heartbeat();
  // Best effort: tells the peer this context is closing; true if a Bye was posted.
  bool sendBye();
  bool idle() const { return sends_.empty() && writes_.empty() && recvs_.empty(); }
  // Nothing posted to the send queue is still waiting for its completion.
  bool quiet() const { return failed_ || (sqOutstanding_ == 0 && backlog_.empty()); }
  void fail(const std::string& reason, bool peerFault);

  const std::shared_ptr<const std::string>& name() const { return name_; }

 private:
  enum class ControlType : uint32_t { ClearToSend = 1, Mismatch = 2, Ping = 3, Bye = 4 };
  struct ControlMsg {
    uint32_t type;
    uint32_t recvId;
    uint64_t tag;
    uint64_t seq;
    uint64_t addr;
    uint64_t length;
    uint32_t rkey;
    uint32_t pad;
  };
  struct Key {
    uint64_t tag;
    uint64_t seq;
    bool operator<(const Key& o) const { return tag != o.tag ? tag < o.tag : seq < o.seq; }
  };
  struct PendingSend {
    RequestStatePtr req;
    const char* buf;
    size_t bytes;
  };
  struct PendingRecv {
    RequestStatePtr req;
    std::shared_ptr<Registration> reg;
  };
  // A send matched with its ClearToSend: the write is posted or backlogged.
  struct Write {
    RequestStatePtr req;
    const char* buf;
    size_t bytes;
    std::shared_ptr<Registration> reg;
  };
  // A send work request waiting for room in the send queue.
  struct Backlog {
    bool isData;
    ControlMsg msg;          // control
    uint64_t sendId;         // data: key into writes_
    uint64_t remoteAddr;
    uint32_t rkey;
    uint32_t recvId;
  };

  void postRecvSlot(uint32_t slot);
  void postControl(const ControlMsg& msg);
  void postWrite(uint64_t sendId, uint64_t remoteAddr, uint32_t rkey, uint32_t recvId);
  bool postBacklogged(const Backlog& b);
  void drainBacklog();
  // Matches a ClearToSend with a posted send, if both are there.
  void startWrite(const Key& key);
  void handleControl(const ControlMsg& msg);
  void failRequest(RequestState& req);

  const int rank_;
  const int peer_;
  std::shared_ptr<const std::string> name_;
  ibv_pd* pd_;
  ibv_cq* cq_;
  const int portNum_;
  RegistrationCache& cache_;
  ibv_qp* qp_ = nullptr;
  QpInfo local_{};

  // Control slabs: kRecvSlots receive slots, then kSendSlots send slots, one registration.
  std::unique_ptr<ControlMsg[]> slab_;
  ibv_mr* slabMr_ = nullptr;
  std::vector<uint32_t> freeSendSlots_;
  int sqOutstanding_ = 0;
  std::deque<Backlog> backlog_;

  std::unordered_map<uint64_t, uint64_t> sendSeq_;
  std::unordered_map<uint64_t, uint64_t> recvSeq_;
  std::map<Key, PendingSend> sends_;           // posted, no ClearToSend yet
  std::map<Key, ControlMsg> clearToSend_;      // ClearToSend, no send posted yet
  std::unordered_map<uint64_t, Write> writes_;        // by send id
  std::unordered_map<uint32_t, PendingRecv> recvs_;    // by recvId
  uint64_t nextSendId_ = 1;
  uint32_t nextRecvId_ = 1;

  bool failed_ = false;
  bool peerFault_ = false;
  std::string failure_;
};

}  // namespace rankmap::coll::transport::rdma
