#include "collectives/transport/rdma/pair.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "collectives/transport/rdma/memory.h"
#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll::transport::rdma {

namespace {

constexpr uint32_t kRecvSlots = 128;
constexpr uint32_t kSendSlots = 128;
// Send queue depth: control sends (one slab slot each) plus RDMA writes.
constexpr uint32_t kSendDepth = 512;

// wr_id layout: the top bits say what completed, the rest is a slot or a send id.
constexpr uint64_t kKindShift = 60;
constexpr uint64_t kRecvKind = 1;
constexpr uint64_t kControlKind = 2;
constexpr uint64_t kWriteKind = 3;
constexpr uint64_t kIdMask = (1ull << kKindShift) - 1;

uint64_t wrId(uint64_t kind, uint64_t id) { return (kind << kKindShift) | (id & kIdMask); }

void checkVerbs(int rv, const char* call, const std::string& who) {
  // Verbs calls return an errno value (not -1) on failure.
  if (rv != 0) throw SystemError(fmt::format("{} for {}", call, who), rv);
}

}  // namespace

Pair::Pair(int rank, int peer, ibv_pd* pd, ibv_cq* cq, int portNum, RegistrationCache& cache)
    : rank_(rank),
      peer_(peer),
      name_(std::make_shared<const std::string>(fmt::format("rank {} (rdma)", peer))),
      pd_(pd),
      cq_(cq),
      portNum_(portNum),
      cache_(cache) {
  slab_ = std::make_unique<ControlMsg[]>(kRecvSlots + kSendSlots);
  slabMr_ = ibv_reg_mr(pd_, slab_.get(), sizeof(ControlMsg) * (kRecvSlots + kSendSlots),
                       IBV_ACCESS_LOCAL_WRITE);
  if (slabMr_ == nullptr) {
    int err = errno;
    throw SystemError(fmt::format("ibv_reg_mr of the control slab for {}", *name_), err);
  }
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = kRecvSlots;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = ibv_create_qp(pd_, &init);
  if (qp_ == nullptr) {
    int err = errno;
    ibv_dereg_mr(slabMr_);
    throw SystemError(fmt::format("ibv_create_qp for {}", *name_), err);
  }
  local_.qpn = qp_->qp_num;
  // Any 24-bit start; differing per queue pair helps tell stale packets apart.
  local_.psn = (local_.qpn * 2654435761u + static_cast<uint32_t>(rank)) & 0xffffff;
  for (uint32_t s = 0; s < kSendSlots; ++s) freeSendSlots_.push_back(kRecvSlots + s);
}

Pair::~Pair() {
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
  if (slabMr_ != nullptr) ibv_dereg_mr(slabMr_);
}

void Pair::connect(const PortInfo& self, const PortInfo& remote, const QpInfo& remoteQp) {
  std::string host(remote.host, strnlen(remote.host, sizeof(remote.host)));
  name_ = std::make_shared<const std::string>(
      fmt::format("rank {} ({} qp {})", peer_, host, remoteQp.qpn));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = static_cast<uint8_t>(portNum_);
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  checkVerbs(ibv_modify_qp(qp_, &attr,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
             "ibv_modify_qp(INIT)", *name_);
  // Receive slots must be posted before the peer can send (RTR below).
  for (uint32_t s = 0; s < kRecvSlots; ++s) postRecvSlot(s);

  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min(self.mtu, remote.mtu));
  attr.dest_qp_num = remoteQp.qpn;
  attr.rq_psn = remoteQp.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = static_cast<uint8_t>(portNum_);
  attr.ah_attr.dlid = remote.lid;
  if (self.gidIndex >= 0) {
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid, sizeof(remote.gid));
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(self.gidIndex);
    attr.ah_attr.grh.hop_limit = 64;
  }
  checkVerbs(ibv_modify_qp(qp_, &attr,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
             "ibv_modify_qp(RTR)", *name_);

  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;    // 4.096 us * 2^14 = 67 ms per retry
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;   // infinite: the receiver reposts slots at once
  attr.sq_psn = local_.psn;
  attr.max_rd_atomic = 1;
  checkVerbs(ibv_modify_qp(qp_, &attr,
                           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
             "ibv_modify_qp(RTS)", *name_);
}

void Pair::postRecvSlot(uint32_t slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(&slab_[slot]);
  sge.length = sizeof(ControlMsg);
  sge.lkey = slabMr_->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = wrId(kRecvKind, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  checkVerbs(ibv_post_recv(qp_, &wr, &bad), "ibv_post_recv", *name_);
}

bool Pair::postBacklogged(const Backlog& b) {
  if (sqOutstanding_ >= static_cast<int>(kSendDepth)) return false;
  ibv_send_wr wr{};
  ibv_sge sge{};
  ibv_send_wr* bad = nullptr;
  if (!b.isData) {
    if (freeSendSlots_.empty()) return false;
    uint32_t slot = freeSendSlots_.back();
    freeSendSlots_.pop_back();
    slab_[slot] = b.msg;
    sge.addr = reinterpret_cast<uintptr_t>(&slab_[slot]);
    sge.length = sizeof(ControlMsg);
    sge.lkey = slabMr_->lkey;
    wr.wr_id = wrId(kControlKind, slot);
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
  } else {
    Write& w = writes_.at(b.sendId);
    wr.wr_id = wrId(kWriteKind, b.sendId);
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(b.recvId);
    wr.wr.rdma.remote_addr = b.remoteAddr;
    wr.wr.rdma.rkey = b.rkey;
    if (w.bytes > 0) {
      sge.addr = reinterpret_cast<uintptr_t>(w.buf);
      sge.length = static_cast<uint32_t>(w.bytes);
      sge.lkey = w.reg->mr->lkey;
      wr.sg_list = &sge;
      wr.num_sge = 1;
    }
  }
  wr.send_flags = IBV_SEND_SIGNALED;
  checkVerbs(ibv_post_send(qp_, &wr, &bad), "ibv_post_send", *name_);
  ++sqOutstanding_;
  return true;
}

void Pair::drainBacklog() {
  while (!backlog_.empty() && postBacklogged(backlog_.front())) backlog_.pop_front();
}

void Pair::postControl(const ControlMsg& msg) {
  Backlog b{};
  b.isData = false;
  b.msg = msg;
  if (!backlog_.empty() || !postBacklogged(b)) backlog_.push_back(b);
}

void Pair::postWrite(uint64_t sendId, uint64_t remoteAddr, uint32_t rkey, uint32_t recvId) {
  Backlog b{};
  b.isData = true;
  b.sendId = sendId;
  b.remoteAddr = remoteAddr;
  b.rkey = rkey;
  b.recvId = recvId;
  if (!backlog_.empty() || !postBacklogged(b)) backlog_.push_back(b);
}

void Pair::failRequest(RequestState& req) { req.failBrokenPair(rank_, failure_, peerFault_); }

RequestPtr Pair::send(uint64_t tag, const void* buf, size_t bytes) {
  auto req = std::make_shared<RequestState>(OpKind::Send, name_, tag, bytes);
  if (failed_) {
    failRequest(*req);
    return req;
  }
  if (bytes > 0x7fffffffu) {
    req->fail(RANKMAP_MAKE_ERROR(InvalidInput, "rank {}: {}: rdma messages are limited to 2 GiB",
                                 rank_, req->describe()));
    return req;
  }
  Key key{tag, sendSeq_[tag]++};
  sends_.emplace(key, PendingSend{req, static_cast<const char*>(buf), bytes});
  startWrite(key);
  return req;
}

RequestPtr Pair::recv(uint64_t tag, void* buf, size_t bytes) {
  auto req = std::make_shared<RequestState>(OpKind::Recv, name_, tag, bytes);
  if (failed_) {
    failRequest(*req);
    return req;
  }
  uint64_t seq = recvSeq_[tag]++;
  std::shared_ptr<Registration> reg;
  if (bytes > 0) reg = cache_.acquire(buf, bytes);
  uint32_t recvId = nextRecvId_++;
  if (nextRecvId_ == 0) nextRecvId_ = 1;
  recvs_.emplace(recvId, PendingRecv{req, reg});
  ControlMsg m{};
  m.type = static_cast<uint32_t>(ControlType::ClearToSend);
  m.recvId = recvId;
  m.tag = tag;
  m.seq = seq;
  m.addr = reinterpret_cast<uintptr_t>(buf);
  m.length = bytes;
  m.rkey = reg ? reg->mr->rkey : 0;
  postControl(m);
  return req;
}

void Pair::startWrite(const Key& key) {
  auto s = sends_.find(key);
  auto c = clearToSend_.find(key);
  if (s == sends_.end() || c == clearToSend_.end()) return;
  PendingSend send = s->second;
  ControlMsg cts = c->second;
  sends_.erase(s);
  clearToSend_.erase(c);
  if (cts.length != send.bytes) {
    send.req->fail(RANKMAP_MAKE_ERROR(InvalidInput,
                                      "rank {}: {} tag {}: the receive expects {} bytes but {} "
                                      "are sent",
                                      rank_, *name_, key.tag, cts.length, send.bytes));
    ControlMsg m{};
    m.type = static_cast<uint32_t>(ControlType::Mismatch);
    m.recvId = cts.recvId;
    m.tag = key.tag;
    m.length = send.bytes;
    postControl(m);
    return;
  }
  uint64_t id = nextSendId_++;
  Write w{send.req, send.buf, send.bytes, nullptr};
  if (send.bytes > 0) w.reg = cache_.acquire(send.buf, send.bytes);
  writes_.emplace(id, std::move(w));
  postWrite(id, cts.addr, cts.rkey, cts.recvId);
}

void Pair::handleControl(const ControlMsg& msg) {
  switch (static_cast<ControlType>(msg.type)) {
    case ControlType::ClearToSend: {
      Key key{msg.tag, msg.seq};
      clearToSend_.emplace(key, msg);
      startWrite(key);
      break;
    }
    case ControlType::Mismatch: {
      auto it = recvs_.find(msg.recvId);
      if (it != recvs_.end()) {
        it->second.req->failSizeMismatch(rank_, msg.length);
        recvs_.erase(it);
      }
      break;
    }
    case ControlType::Ping:
      break;
    case ControlType::Bye:
      fail(fmt::format("{} closed its context", *name_), true);
      break;
    default:
      fail(fmt::format("{} sent an unknown control message {}", *name_, msg.type), true);
  }
}

void Pair::onCompletion(const ibv_wc& wc) {
  const uint64_t kind = wc.wr_id >> kKindShift;
  const uint64_t id = wc.wr_id & kIdMask;
  if (kind == kControlKind || kind == kWriteKind) --sqOutstanding_;
  if (kind == kControlKind) freeSendSlots_.push_back(static_cast<uint32_t>(id));
  if (failed_) return;  // flushed work requests after a failure
  if (wc.status != IBV_WC_SUCCESS) {
    fail(fmt::format("RDMA with {} failed: {} (the peer died or its port went down)", *name_,
                     ibv_wc_status_str(wc.status)),
         true);
    return;
  }
  if (kind == kRecvKind) {
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      auto it = recvs_.find(ntohl(wc.imm_data));
      if (it != recvs_.end()) {
        it->second.req->complete();
        recvs_.erase(it);
      }
    } else {
      handleControl(slab_[id]);
    }
    if (!failed_) postRecvSlot(static_cast<uint32_t>(id));
  } else if (kind == kWriteKind) {
    auto it = writes_.find(id);
    if (it != writes_.end()) {
      it->second.req->complete();
      writes_.erase(it);
    }
  }
  if (!failed_) drainBacklog();
}

void Pair::heartbeat() {
  if (failed_ || idle()) return;
  ControlMsg m{};
  m.type = static_cast<uint32_t>(ControlType::Ping);
  postControl(m);
}

bool Pair::sendBye() {
  if (failed_) return false;
  ControlMsg m{};
  m.type = static_cast<uint32_t>(ControlType::Bye);
  postControl(m);
  return true;
}

void Pair::fail(const std::string& reason, bool peerFault) {
  if (failed_) return;
  failed_ = true;
  peerFault_ = peerFault;
  failure_ = reason;
  if (peerFault && !idle()) {
    RANKMAP_WARN(Coll, "rank {}: pair {}->{}: {}", rank_, rank_, peer_, reason);
  }
  for (auto& [key, s] : sends_) failRequest(*s.req);
  for (auto& [id, w] : writes_) failRequest(*w.req);
  for (auto& [id, r] : recvs_) failRequest(*r.req);
  sends_.clear();
  writes_.clear();
  recvs_.clear();
  clearToSend_.clear();
  backlog_.clear();
  // Moving the queue pair to the error state flushes its work requests (with errors we ignore)
  // and makes the peer's operations on it fail.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp_, &attr, IBV_QP_STATE);
}

}  // namespace rankmap::coll::transport::rdma
