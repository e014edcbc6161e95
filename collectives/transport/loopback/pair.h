// loopback::Pair: the mailbox of one ordered pair of ranks (src -> dst) of an in-process group.
//
// Both ranks' threads call it: src through send(), dst through recv(). One mutex guards the
// queues; copies are made under it (the pair is private to two ranks, so nobody else waits).
// Matching: per tag, the n-th send meets the n-th receive.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/transport/request.h"

namespace rankmap::coll::transport::loopback {

class Pair {
 public:
  Pair(int src, int dst);

  RequestPtr send(uint64_t tag, const void* buf, size_t bytes);
  RequestPtr recv(uint64_t tag, void* buf, size_t bytes);

  // The sending rank's context closed: its posted receives... none here; fail the receiver's
  // pending receives and drop its unsent rendezvous messages.
  void closeSrc();
  // The receiving rank's context closed: fail the sender's pending rendezvous sends.
  void closeDst();

 private:
  // A send that no receive has matched yet: eager (copied into `data`, its request already
  // complete) or rendezvous (`src` still points at the sender's buffer, `req` pending).
  struct Message {
    RequestStatePtr req;
    const void* src = nullptr;
    size_t bytes = 0;
    std::vector<char> data;
  };
  struct PostedRecv {
    RequestStatePtr req;
    void* buf;
    size_t bytes;
  };

  // Copies `msg` into `recv` (or fails `recv` on a length mismatch) and completes both.
  void deliver(Message& msg, PostedRecv& recv);

  const int src_;
  const int dst_;
  const std::shared_ptr<const std::string> srcName_;
  const std::shared_ptr<const std::string> dstName_;

  std::mutex mu_;
  std::map<uint64_t, std::deque<Message>> unexpected_;
  std::map<uint64_t, std::deque<PostedRecv>> posted_;
  bool srcClosed_ = false;
  bool dstClosed_ = false;
};

}  // namespace rankmap::coll::transport::loopback
