// libfabric provider: reliable datagram endpoints (FI_EP_RDM) with tagged messages.
//   ofi+tcp -> "tcp;ofi_rxm", ofi+shm -> "shm", ofi+verbs -> "verbs;ofi_rxm".
//
// libfabric has no active messages, so a message travels as two tagged sends: an envelope on tag 0 (the
// sender's address, a payload tag, the payload size, the header) into receive buffers posted in advance, then,
// when there is a payload, the payload itself on its own tag. The receiver reads the envelope, and when it
// wants the payload posts a tagged receive for that tag straight into the memory it chose (the engine's
// buffers); the provider's rendezvous does the rest (RDMA on verbs, pipelined on tcp). A payload nobody takes
// is received into scratch memory and dropped. Payload receives a dead sender never completes are cancelled
// after WorkerOptions::payload_timeout_ms, which aborts their update.
//
// An envelope names its sender, and any peer could name any address there, so each one also carries a proof
// that its sender owns the address it names: a token the receiver made (an HMAC, under a secret of its own, of
// that address) and sent to that address, where only its owner heard it. A worker asks a peer for its token
// before its first message to it (a proof request with a nonce, answered to the address it named) and drops
// every message whose proof does not verify, so a peer cannot have replies or one-sided operations sent to
// another's address, nor answer for another (docs/wire-format.md).
//
// The shm provider neither reports a dead
// peer nor cancels a send or a remote read toward one, so on ofi+shm those fail once they are that old and the
// peer's process (its id is in the name every rfos endpoint gives itself) is gone.
//
// A post libfabric refuses for now (-FI_EAGAIN: rxm refuses sends toward a peer whose connection is backed up,
// as to a client that died) waits in that peer's queue and goes again from progress(); the worker never spins
// on it, so one dead peer does not stall a target's other clients. A peer that takes none of its queued posts
// for payload_timeout_ms has them all failed.
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/coding.h"
#include "common/fault.h"
#include "transport/transport.h"

namespace rfos::transport {
namespace {

constexpr uint64_t kHeaderTag = 0;
constexpr size_t kHeaderBufBytes = 72 * 1024;  // envelope + the largest data-plane header (64 KiB)
constexpr int kHeaderBufs = 64;
constexpr size_t kProofBytes = 16;

// Envelope kinds.
constexpr uint8_t kMessage = 0;       // a message; its header follows
constexpr uint8_t kProofRequest = 1;  // "send me your token": the header is a nonce, echoed in the answer
constexpr uint8_t kProofAnswer = 2;   // the token field is the sender's token for the receiver; the header the nonce

// libfabric is opened when a process first asks for an ofi+ provider, not when it starts: loading it runs the
// constructors of every provider library it links (Debian's pulls in libinfinipath through psm, whose
// constructor alone takes about 0.3 s), which a process speaking UCX, or only the control plane, never needs.
// Only these calls are functions of the library; the rest of its API is inline, through the objects they open.
struct Libfabric {
  decltype(&::fi_getinfo) getinfo = nullptr;
  decltype(&::fi_freeinfo) freeinfo = nullptr;
  decltype(&::fi_dupinfo) dupinfo = nullptr;
  decltype(&::fi_fabric) fabric = nullptr;
  decltype(&::fi_strerror) strerror = nullptr;
  std::string missing;  // why it could not be opened; empty once it was
};

const Libfabric& libfabric() {
  static const Libfabric lib = [] {
    Libfabric l;
    void* h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      l.missing = std::string("libfabric cannot be loaded (") + dlerror() + "); install libfabric1";
      return l;
    }
    l.getinfo = reinterpret_cast<decltype(l.getinfo)>(dlsym(h, "fi_getinfo"));
    l.freeinfo = reinterpret_cast<decltype(l.freeinfo)>(dlsym(h, "fi_freeinfo"));
    l.dupinfo = reinterpret_cast<decltype(l.dupinfo)>(dlsym(h, "fi_dupinfo"));
    l.fabric = reinterpret_cast<decltype(l.fabric)>(dlsym(h, "fi_fabric"));
    l.strerror = reinterpret_cast<decltype(l.strerror)>(dlsym(h, "fi_strerror"));
    if (!l.getinfo || !l.freeinfo || !l.dupinfo || !l.fabric || !l.strerror)
      l.missing = "libfabric.so.1 lacks the calls rfos uses (fi_getinfo, fi_fabric, ...)";
    return l;
  }();
  return lib;
}

Status fi_error(int rc, const std::string& what) {
  rc = rc < 0 ? -rc : rc;
  StatusCode code = StatusCode::kIoError;
  if (rc == FI_ENODATA || rc == FI_ENOSYS || rc == FI_EOPNOTSUPP) code = StatusCode::kNotSupported;
  if (rc == FI_ECONNREFUSED || rc == FI_ECONNRESET || rc == FI_EHOSTUNREACH || rc == FI_ECANCELED)
    code = StatusCode::kShutdown;
  return error(code, what + ": " + libfabric().strerror(rc));
}

const char* prov_for(const std::string& provider) {
  if (provider == "ofi+tcp") return "tcp;ofi_rxm";
  if (provider == "ofi+shm") return "shm";
  if (provider == "ofi+verbs") return "verbs;ofi_rxm";
  return nullptr;
}

// Every operation handed to libfabric; fi_context first (FI_CONTEXT mode).
struct Op {
  fi_context ctx{};
  enum Kind { kHeaderRecv, kSend, kPayloadRecv, kDiscard } kind = kSend;
  Done done;
  std::string bytes;  // header receive buffer, or the envelope being sent, or discard scratch
  int pending = 0;    // sends: envelope + payload completions still to come; get/put: pieces still to come
  Status status;
  std::vector<fid_mr*> mrs;  // when the domain wants local registration
  std::chrono::steady_clock::time_point posted;
  pid_t peer_pid = 0;      // sends and remote reads or writes on ofi+shm: the peer's process
  bool abandoned = false;  // failed while the provider still holds it: freed when the provider lets go
  uint64_t peer = 0;       // sends and remote reads or writes: the peer's handle (its operations in flight)
  fi_addr_t transient = FI_ADDR_UNSPEC;  // a proof answer to a sender not in the table: its own entry
};

class OfiWorker final : public Worker {
 public:
  ~OfiWorker() override {
    if (ep_) fi_close(&ep_->fid);
    if (av_) fi_close(&av_->fid);
    if (cq_) fi_close(&cq_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) libfabric().freeinfo(info_);
    for (Op* op : ops_) {
      for (fid_mr* mr : op->mrs) fi_close(&mr->fid);
      delete op;
    }
  }

  Status init(const std::string& provider, const WorkerOptions& options) {
    payload_timeout_ = std::chrono::milliseconds(std::max<uint32_t>(options.payload_timeout_ms, 1));
    introduced_only_ = options.introduced_peers_only;
    const char* prov = prov_for(provider);
    if (!prov) return error(StatusCode::kNotSupported, "libfabric does not provide '" + provider + "'");
    const Libfabric& fi = libfabric();
    if (!fi.missing.empty()) return error(StatusCode::kNotSupported, fi.missing);
    fi_info* hints = fi.dupinfo(nullptr);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_RMA;
    hints->mode = FI_CONTEXT;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(prov);
    int rc = fi.getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info_);
    fi.freeinfo(hints);
    if (rc) return fi_error(rc, "no libfabric '" + std::string(prov) + "' provider here (fi_getinfo)");
    if (RAND_bytes(secret_, sizeof(secret_)) != 1) return error(StatusCode::kInternal, "no random bytes (RAND_bytes)");
    local_mr_ = info_->domain_attr->mr_mode & FI_MR_LOCAL;
    if ((rc = fi.fabric(info_->fabric_attr, &fabric_, nullptr))) return fi_error(rc, "fi_fabric");
    if ((rc = fi_domain(fabric_, info_, &domain_, nullptr))) return fi_error(rc, "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_NONE;
    cq_attr.size = 1024;
    if ((rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr))) return fi_error(rc, "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    if ((rc = fi_av_open(domain_, &av_attr, &av_, nullptr))) return fi_error(rc, "fi_av_open");
    if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr))) return fi_error(rc, "fi_endpoint");
    if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV))) return fi_error(rc, "fi_ep_bind cq");
    if ((rc = fi_ep_bind(ep_, &av_->fid, 0))) return fi_error(rc, "fi_ep_bind av");
    shm_ = provider == "ofi+shm";
    if (shm_) {
      // shm names its region after the process id by default; a process killed with SIGKILL leaves its region
      // behind, and a later process given the same pid then fails with EBUSY. A random name avoids that.
      std::random_device rd;
      char shm_name[64];
      std::snprintf(shm_name, sizeof(shm_name), "rfos-%d-%08x%08x", static_cast<int>(getpid()), rd(), rd());
      if ((rc = fi_setname(&ep_->fid, shm_name, std::strlen(shm_name) + 1))) return fi_error(rc, "fi_setname");
    }
    if ((rc = fi_enable(ep_))) return fi_error(rc, "fi_enable");
    char name[256];
    size_t len = sizeof(name);
    if ((rc = fi_getname(&ep_->fid, name, &len))) return fi_error(rc, "fi_getname");
    address_.assign(name, len);
    std::random_device rd;
    tag_base_ = (1ull << 63) | (uint64_t(rd() & 0x7fffffff) << 32);
    for (int i = 0; i < kHeaderBufs; ++i) {
      Op* op = track(new Op{});
      op->kind = Op::kHeaderRecv;
      op->bytes.resize(kHeaderBufBytes);
      RFOS_RETURN_IF_ERROR(post_header(op));
    }
    return Status::ok();
  }

  std::string address() const override { return address_; }

  Result<EpHandle> connect(std::string_view peer) override { return lookup(peer); }
  Result<EpHandle> adopt(const Incoming& in) override {
    if (in.reply_to) return in.reply_to;
    if (in.claimed_address.empty() || in.claimed_address != handling_from_)
      return error(StatusCode::kInvalidArgument, "adopt() takes the message being handled");
    RFOS_ASSIGN_OR_RETURN(EpHandle h, lookup(in.claimed_address));
    by_handle_[h].proof = handling_token_;
    return h;
  }
  uint64_t unproved_dropped() const override { return unproved_dropped_; }
  void disconnect(EpHandle) override {}  // RDM endpoints hold no connection of their own
  void on_message(std::function<void(Incoming&)> h) override { handler_ = std::move(h); }
  void on_peer_failure(std::function<void(EpHandle, const Status&)> h) override { failure_ = std::move(h); }

  Status fetch_payload(Incoming& in, std::span<const Iov> dst, Done done) override {
    in.rndv_taken = true;
    Op* op = track(new Op{});
    op->kind = Op::kPayloadRecv;
    op->done = std::move(done);
    Status s = post_payload_recv(op, reinterpret_cast<uint64_t>(in.rndv), dst);
    if (!s.is_ok()) untrack(op);
    return s;
  }

  Status send(EpHandle ep, std::string_view header, std::span<const Iov> payload, Done done) override {
    uint64_t total = 0;
    for (const Iov& v : payload) total += v.len;
    if (header.size() + envelope_bytes() > kHeaderBufBytes)
      return error(StatusCode::kInvalidArgument, "message header too large");
    RFOS_ASSIGN_OR_RETURN(fi_addr_t to, address_of(ep));
    Peer& peer = by_handle_[ep];
    // Asked once; again when the last request went unanswered (what waited for it failed, and left).
    if (peer.proof.empty() && (peer.nonce.empty() || !deferred_.count(ep)))
      RFOS_RETURN_IF_ERROR(ask_for_proof(ep, peer));
    Op* op = track(new Op{});
    op->kind = Op::kSend;
    op->done = std::move(done);
    uint64_t tag = total ? tag_base_ | (next_tag_++ & 0xffffffffull) : 0;
    op->bytes = envelope(kMessage, peer.token, tag, total, header);  // the proof goes in when it is posted
    watch(op, ep);
    op->pending = total ? 2 : 1;
    Status posted = post(ep, op, "fi_tsend", [this, op, to, ep] {
      if (auto p = by_handle_.find(ep); p != by_handle_.end() && p->second.proof.size() == kProofBytes)
        std::memcpy(op->bytes.data() + proof_offset(), p->second.proof.data(), kProofBytes);
      return fi_tsend(ep_, op->bytes.data(), op->bytes.size(), nullptr, to, kHeaderTag, &op->ctx);
    });
    if (!posted.is_ok()) {
      untrack(op);
      return posted;
    }
    // A sender that goes silent after announcing its payload (tests of the receiver's payload timeout).
    if (total && RFOS_FAULT("ofi.withhold_payload")) {
      op->pending = 1;
      return Status::ok();
    }
    if (total) {
      std::vector<iovec> iov;
      for (const Iov& v : payload) iov.push_back({v.data, v.len});
      std::vector<void*> desc(iov.size(), nullptr);
      Status s = local_mr_ ? register_local(op, iov, desc, FI_SEND) : Status::ok();
      if (s.is_ok())
        s = post(ep, op, "fi_tsendv", [this, op, to, tag, iov = std::move(iov), desc = std::move(desc)]() mutable {
          return fi_tsendv(ep_, iov.data(), desc.data(), iov.size(), to, tag, &op->ctx);
        });
      if (!s.is_ok()) {  // the envelope still completes; the op reports the failure then
        op->pending = 1;
        op->status = s;
      }
    }
    return Status::ok();
  }

  Result<Registration> register_memory(void* addr, size_t len) override {
    if (len == 0) return error(StatusCode::kInvalidArgument, "cannot register an empty range");
    fid_mr* mr = nullptr;
    int rc = fi_mr_reg(domain_, addr, len, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, next_key_++, 0, &mr, nullptr);
    if (rc) return fi_error(rc, "fi_mr_reg");
    std::string rkey;
    put_le<uint64_t>(&rkey, fi_mr_key(mr));
    // With FI_MR_VIRT_ADDR peers name our bytes by their virtual address, otherwise by offset.
    uint64_t base = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(addr) : 0;
    return Registration{mr, base, std::move(rkey)};
  }

  void deregister_memory(const Registration& r) override {
    if (r.handle) fi_close(&static_cast<fid_mr*>(r.handle)->fid);
  }

  Status get(EpHandle ep, uint64_t remote_addr, std::string_view rkey, std::span<const Iov> dst, Done done) override {
    return rma(false, ep, remote_addr, rkey, dst, std::move(done));
  }
  Status put(EpHandle ep, std::span<const Iov> src, uint64_t remote_addr, std::string_view rkey, Done done) override {
    return rma(true, ep, remote_addr, rkey, src, std::move(done));
  }

  int progress() override {
    int n = 0;
    fi_cq_tagged_entry entries[16];
    for (;;) {
      ssize_t got = fi_cq_read(cq_, entries, 16);
      if (got == -FI_EAGAIN) break;
      if (got == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        if (fi_cq_readerr(cq_, &err, 0) > 0 && err.op_context)
          complete(static_cast<Op*>(err.op_context), fi_error(err.err, "transfer"), nullptr);
        ++n;
        continue;
      }
      if (got < 0) break;
      for (ssize_t i = 0; i < got; ++i) complete(static_cast<Op*>(entries[i].op_context), Status::ok(), &entries[i]);
      n += static_cast<int>(got);
    }
    n += post_deferred();
    give_up_stale();
    if (n > 0) naps_.last_event = std::chrono::steady_clock::now();
    return n;
  }

  void wait(int timeout_ms, const WakeSource* also) override {
    // No wait object (FI_WAIT_NONE keeps every provider usable).
    poll_then_nap([this] { return progress(); }, signaled_, timeout_ms, also, &naps_);
  }

  void signal() override { signaled_ = true; }

 private:
  struct Peer {
    fi_addr_t fa = FI_ADDR_UNSPEC;
    std::string addr;
    uint64_t last_used = 0;
    int ops = 0;        // sends and remote reads or writes in flight toward it
    std::string token;  // ours for it (token_for): what its envelopes must carry
    std::string proof;  // its token for us, what our envelopes carry; empty until it answered our request
    std::string nonce;  // our proof request's, until answered
  };
  static constexpr size_t kMaxPeers = 4096;

  Op* track(Op* op) {
    ops_.insert(op);
    return op;
  }
  void untrack(Op* op) {
    if (op->transient != FI_ADDR_UNSPEC) {
      fi_av_remove(av_, &op->transient, 1, 0);
      --answering_;
    }
    if (op->peer)
      if (auto p = by_handle_.find(op->peer); p != by_handle_.end()) --p->second.ops;
    for (fid_mr* mr : op->mrs) fi_close(&mr->fid);
    ops_.erase(op);
    delete op;
  }

  // A post of an operation (fi_tsend, fi_trecv, ...) that libfabric refused for now: `attempt` makes it again
  // and returns 0 or a negative fi_errno, as libfabric's calls do.
  struct Deferred {
    Op* op = nullptr;
    const char* what = "";
    std::function<ssize_t()> attempt;
    bool needs_proof = true;  // waits while the peer's token is still asked for (everything but the asking)
  };
  // The refused posts toward one peer (kAnyPeer: receives), oldest first.
  static constexpr EpHandle kAnyPeer = 0;
  struct PeerQueue {
    std::deque<Deferred> posts;
    std::chrono::steady_clock::time_point moved;  // when a post toward the peer last went in, or this queue began
  };

  // Posts `op` at once, or queues it behind the peer's refused posts, so that they go in order (an envelope
  // before its payload), and behind the peer's token while it is asked for. A proof request (needs_proof
  // false) goes ahead of what waits for its answer. Errors: a post libfabric rejects outright, not in flight then.
  Status post(EpHandle peer, Op* op, const char* what, std::function<ssize_t()> attempt, bool needs_proof = true) {
    auto it = deferred_.find(peer);
    if (it == deferred_.end() && !(needs_proof && awaiting_proof(peer))) {
      ssize_t rc = attempt();
      if (rc == 0) return Status::ok();
      if (rc != -FI_EAGAIN) return fi_error(static_cast<int>(rc), what);
    }
    if (it == deferred_.end()) it = deferred_.emplace(peer, PeerQueue{{}, std::chrono::steady_clock::now()}).first;
    Deferred d{op, what, std::move(attempt), needs_proof};
    if (needs_proof)
      it->second.posts.push_back(std::move(d));
    else
      it->second.posts.push_front(std::move(d));
    return Status::ok();
  }

  bool awaiting_proof(EpHandle peer) const {
    auto p = by_handle_.find(peer);
    return p != by_handle_.end() && p->second.proof.empty();
  }

  // Tries the refused posts again, in order per peer. Those toward a peer that has taken none of them for
  // payload_timeout_ fail (a dead client, a hung server); receives wait for room however long it takes.
  // Returns how many went in or failed.
  int post_deferred() {
    int n = 0;
    auto now = std::chrono::steady_clock::now();
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      PeerQueue& q = it->second;
      bool expired = it->first != kAnyPeer && now - q.moved >= payload_timeout_;
      bool unproved = awaiting_proof(it->first);
      while (!q.posts.empty()) {
        Op* op = q.posts.front().op;
        // A piece of a send that failed already (its envelope, an earlier piece) or that was given up does not
        // go: a payload without its envelope is a message nobody receives, and the caller has its buffers back.
        bool moot = op->abandoned || (op->kind == Op::kSend && !op->status.is_ok());
        bool held = unproved && q.posts.front().needs_proof;
        ssize_t rc = moot ? -FI_ECANCELED : held ? -FI_EAGAIN : q.posts.front().attempt();
        if (rc == -FI_EAGAIN && !expired) break;
        if (rc == 0) {
          q.moved = now;
          expired = false;
        }
        const char* what = q.posts.front().what;
        q.posts.pop_front();
        ++n;
        if (rc == 0) continue;
        if (op->kind == Op::kHeaderRecv) {  // not posted again: an endpoint that refuses it would spin here
          untrack(op);
          continue;
        }
        Status failed =
            moot   ? op->status
            : held ? error(StatusCode::kShutdown, std::string(what) + ": the peer did not answer for its address in " +
                                                      std::to_string(payload_timeout_.count()) + " ms")
            : rc == -FI_EAGAIN ? error(StatusCode::kShutdown, std::string(what) + ": the peer took nothing for " +
                                                                  std::to_string(payload_timeout_.count()) + " ms")
                               : fi_error(static_cast<int>(rc), what);
        complete(op, failed, nullptr);  // as a failed transfer would: its callbacks may post more (to q's back)
      }
      it = q.posts.empty() ? deferred_.erase(it) : std::next(it);
    }
    return n;
  }

  // Local registration per operation when the provider needs local keys (verbs).
  Status register_local(Op* op, const std::vector<iovec>& iov, std::vector<void*>& desc, uint64_t access) {
    for (size_t i = 0; i < iov.size(); ++i) {
      fid_mr* mr = nullptr;
      int rc = fi_mr_reg(domain_, iov[i].iov_base, iov[i].iov_len, access, 0, 0, 0, &mr, nullptr);
      if (rc) return fi_error(rc, "fi_mr_reg");
      op->mrs.push_back(mr);
      desc[i] = fi_mr_desc(mr);
    }
    return Status::ok();
  }

  // One RMA operation per local piece, over consecutive remote bytes. A put asks for delivery completion, so
  // its completion means the bytes are visible at the peer.
  Status rma(bool put, EpHandle ep, uint64_t remote_addr, std::string_view rkey, std::span<const Iov> local,
             Done done) {
    if (rkey.size() != 8) return error(StatusCode::kInvalidArgument, "malformed remote key");
    uint64_t key = 0;
    std::memcpy(&key, rkey.data(), 8);
    RFOS_ASSIGN_OR_RETURN(fi_addr_t to, address_of(ep));
    Op* op = track(new Op{});
    op->kind = Op::kSend;
    op->done = std::move(done);
    watch(op, ep);
    op->pending = 1;  // held by this loop
    std::vector<iovec> iov;
    for (const Iov& v : local)
      if (v.len) iov.push_back({v.data, v.len});
    std::vector<void*> desc(iov.size(), nullptr);
    if (local_mr_) {
      Status s = register_local(op, iov, desc, put ? FI_WRITE : FI_READ);
      if (!s.is_ok()) {
        op->done = nullptr;
        untrack(op);
        return s;
      }
    }
    for (size_t i = 0; i < iov.size(); ++i) {
      ++op->pending;
      Status s = post(ep, op, put ? "fi_writemsg" : "fi_readmsg",
                      [this, put, op, to, key, remote_addr, piece = iov[i], d = desc[i]]() mutable {
                        fi_rma_iov target{remote_addr, piece.iov_len, key};
                        fi_msg_rma msg{};
                        msg.msg_iov = &piece;
                        msg.desc = &d;
                        msg.iov_count = 1;
                        msg.addr = to;
                        msg.rma_iov = &target;
                        msg.rma_iov_count = 1;
                        msg.context = &op->ctx;
                        return put ? fi_writemsg(ep_, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE)
                                   : fi_readmsg(ep_, &msg, FI_COMPLETION);
                      });
      if (!s.is_ok()) {
        --op->pending;
        op->status = s;
        break;
      }
      remote_addr += iov[i].iov_len;
    }
    complete(op, Status::ok(), nullptr);  // drops the loop's hold
    return Status::ok();
  }

  Status post_header(Op* op) {
    return post(kAnyPeer, op, "fi_trecv", [this, op] {
      return fi_trecv(ep_, op->bytes.data(), op->bytes.size(), nullptr, FI_ADDR_UNSPEC, kHeaderTag, 0, &op->ctx);
    });
  }

  // Errors leave `op` out of payload_recvs_; the caller drops it.
  Status post_payload_recv(Op* op, uint64_t tag, std::span<const Iov> dst) {
    std::vector<iovec> iov;
    for (const Iov& v : dst) iov.push_back({v.data, v.len});
    std::vector<void*> desc(iov.size(), nullptr);
    if (local_mr_) RFOS_RETURN_IF_ERROR(register_local(op, iov, desc, FI_RECV));
    op->posted = std::chrono::steady_clock::now();
    payload_recvs_.insert(op);
    Status s = post(kAnyPeer, op, "fi_trecvv", [this, op, tag, iov = std::move(iov), desc = std::move(desc)]() mutable {
      ssize_t rc = fi_trecvv(ep_, iov.data(), desc.data(), iov.size(), FI_ADDR_UNSPEC, tag, 0, &op->ctx);
      if (rc == 0) op->posted = std::chrono::steady_clock::now();  // its timeout runs from here, not the queue
      return rc;
    });
    if (!s.is_ok()) payload_recvs_.erase(op);
    return s;
  }

  // The handle of the peer at `addr` (as it names itself in its messages, or as connect() was given it),
  // adding it to the address vector when new. The table is bounded (kMaxPeers): when full, the peer unused the
  // longest with nothing in flight is forgotten (fi_av_remove), so a flood of messages naming made-up addresses
  // costs a bounded table, not an address vector that grows without end. Handles are never reused: a reply for a
  // forgotten peer fails (kShutdown) instead of reaching whoever got its slot.
  Result<EpHandle> lookup(std::string_view addr) {
    auto it = peers_.find(std::string(addr));
    if (it != peers_.end()) {
      by_handle_[it->second].last_used = ++use_clock_;
      return it->second;
    }
    if (by_handle_.size() >= kMaxPeers && !forget_idle_peer())
      return error(StatusCode::kBusy, "every one of " + std::to_string(kMaxPeers) + " peers has operations in flight");
    fi_addr_t fa = FI_ADDR_UNSPEC;
    if (fi_av_insert(av_, addr.data(), 1, &fa, 0, nullptr) != 1)
      return error(StatusCode::kShutdown, "cannot add the peer's address (fi_av_insert)");
    EpHandle h = next_handle_++;
    peers_[std::string(addr)] = h;
    by_handle_[h] = Peer{fa, std::string(addr), ++use_clock_, 0, token_for(addr), {}, {}};
    // Every rfos endpoint on shm is named rfos-<pid>-<random> (init).
    unsigned pid = 0;
    if (shm_ && std::sscanf(std::string(addr).c_str(), "rfos-%u-", &pid) == 1 && pid > 0) shm_pids_[h] = pid;
    return h;
  }

  bool forget_idle_peer() {
    auto victim = by_handle_.end();
    for (auto it = by_handle_.begin(); it != by_handle_.end(); ++it)
      if (it->second.ops == 0 && !deferred_.count(it->first) &&
          (victim == by_handle_.end() || it->second.last_used < victim->second.last_used))
        victim = it;
    if (victim == by_handle_.end()) return false;
    fi_addr_t fa = victim->second.fa;
    fi_av_remove(av_, &fa, 1, 0);
    peers_.erase(victim->second.addr);
    shm_pids_.erase(victim->first);
    by_handle_.erase(victim);
    return true;
  }

  Result<fi_addr_t> address_of(EpHandle ep) const {
    auto it = by_handle_.find(ep);
    if (it == by_handle_.end()) return error(StatusCode::kShutdown, "the peer is gone (forgotten or never known)");
    return it->second.fa;
  }

  // Notes when `op` toward `ep` began and, on shm, the peer's process, for give_up_stale.
  void watch(Op* op, EpHandle ep) {
    op->posted = std::chrono::steady_clock::now();
    if (auto p = by_handle_.find(ep); p != by_handle_.end()) {
      op->peer = ep;
      ++p->second.ops;
      p->second.last_used = ++use_clock_;
    }
    auto it = shm_pids_.find(ep);
    if (it != shm_pids_.end()) op->peer_pid = it->second;
  }

  void complete(Op* op, Status s, fi_cq_tagged_entry* e) {
    if (op->abandoned) {  // its caller heard already
      if (--op->pending <= 0) untrack(op);
      return;
    }
    switch (op->kind) {
      case Op::kHeaderRecv:
        if (s.is_ok() && e) deliver(op->bytes.data(), e->len);
        if (post_header(op).is_ok()) return;
        untrack(op);
        return;
      case Op::kSend:
        if (!s.is_ok() && op->status.is_ok()) op->status = s;
        // A peer that went away may come back at the same address with another secret: ask it again.
        if (!s.is_ok() && op->peer)
          if (auto p = by_handle_.find(op->peer); p != by_handle_.end()) p->second.proof.clear();
        if (--op->pending > 0) return;
        break;
      case Op::kPayloadRecv:
        payload_recvs_.erase(op);
        op->status = s;
        break;
      case Op::kDiscard:
        payload_recvs_.erase(op);
        break;
    }
    Done d = std::move(op->done);
    Status st = op->status;
    untrack(op);
    if (d) d(st);
  }

  // Envelope: kind u8 | addr_len u16 | addr | proof [16] | token [16] | payload_tag u64 | payload_len u64 |
  // header. `proof` is the token the receiver gave the sender; `token` the sender's for the receiver.
  size_t proof_offset() const { return 3 + address_.size(); }
  size_t envelope_bytes() const { return proof_offset() + 2 * kProofBytes + 16; }
  std::string envelope(uint8_t kind, std::string_view token, uint64_t tag, uint64_t payload_len,
                       std::string_view header) const {
    std::string e;
    e.reserve(envelope_bytes() + header.size());
    put_le<uint8_t>(&e, kind);
    put_le<uint16_t>(&e, static_cast<uint16_t>(address_.size()));
    e += address_;
    e.append(kProofBytes, '\0');
    e += token;
    put_le<uint64_t>(&e, tag);
    put_le<uint64_t>(&e, payload_len);
    e.append(header);
    return e;
  }

  // What a peer at `addr` must show in its envelopes to be heard: known only to us and to whoever receives
  // what is sent to `addr`.
  std::string token_for(std::string_view addr) const {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), secret_, sizeof(secret_), reinterpret_cast<const unsigned char*>(addr.data()), addr.size(), out,
         &len);
    return std::string(reinterpret_cast<char*>(out), kProofBytes);
  }

  // Asks `peer` for its token: a nonce to the peer's address, echoed in the answer, which only a peer that
  // received the request can give.
  Status ask_for_proof(EpHandle ep, Peer& peer) {
    peer.nonce.resize(kProofBytes);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(peer.nonce.data()), kProofBytes) != 1)
      return error(StatusCode::kInternal, "no random bytes (RAND_bytes)");
    return send_control(ep, peer.fa, envelope(kProofRequest, peer.token, 0, 0, peer.nonce));
  }

  // A proof request or answer: sent ahead of whatever waits for the peer's token, nobody told of its completion.
  // `transient`: the answer's own address-vector entry, removed when the send completes.
  Status send_control(EpHandle ep, fi_addr_t to, std::string bytes, fi_addr_t transient = FI_ADDR_UNSPEC) {
    Op* op = track(new Op{});
    op->kind = Op::kSend;
    op->bytes = std::move(bytes);
    op->pending = 1;
    op->transient = transient;
    watch(op, ep);
    Status s = post(
        ep, op, "fi_tsend",
        [this, op, to] { return fi_tsend(ep_, op->bytes.data(), op->bytes.size(), nullptr, to, kHeaderTag, &op->ctx); },
        false);
    if (!s.is_ok()) untrack(op);
    return s;
  }

  void deliver(const char* data, size_t len) {
    ByteReader r(std::string_view(data, len));
    uint8_t kind;
    uint16_t alen;
    uint64_t tag, plen;
    std::string_view addr, proof, token;
    if (!r.get_le(&kind) || !r.get_le(&alen) || !r.get_bytes(alen, &addr) || !r.get_bytes(kProofBytes, &proof) ||
        !r.get_bytes(kProofBytes, &token) || !r.get_le(&tag) || !r.get_le(&plen) || alen == 0) {
      ++unproved_dropped_;  // garbage
      return;
    }
    std::string_view header(data + (len - r.remaining()), r.remaining());
    auto known = peers_.find(std::string(addr));
    Peer* peer = known == peers_.end() ? nullptr : &by_handle_[known->second];
    if (kind == kProofRequest) {
      // Answered to the address it names, which only that address's owner hears. Nothing from the request is
      // kept: the answer goes through an address-vector entry of its own, removed once sent, and a target
      // (introduced_only_) adds no peer before a request whose capability verifies. At most kMaxAnswers at once.
      if (header.size() != kProofBytes || plen || answering_ >= kMaxAnswers) return void(++unproved_dropped_);
      if (peer) return void(send_control(known->second, peer->fa, envelope(kProofAnswer, peer->token, 0, 0, header)));
      fi_addr_t fa = FI_ADDR_UNSPEC;
      if (fi_av_insert(av_, addr.data(), 1, &fa, 0, nullptr) != 1) return void(++unproved_dropped_);
      ++answering_;
      Status sent = send_control(next_handle_++, fa, envelope(kProofAnswer, token_for(addr), 0, 0, header), fa);
      if (!sent.is_ok()) {
        --answering_;
        fi_av_remove(av_, &fa, 1, 0);
      }
      return;
    }
    if (kind == kProofAnswer) {
      if (!peer || peer->nonce.empty() || header != peer->nonce || plen) return void(++unproved_dropped_);
      peer->nonce.clear();
      peer->proof.assign(token);  // now what waits for it goes (post_deferred)
      return;
    }
    std::string expected = peer ? peer->token : token_for(addr);
    if (kind != kMessage || CRYPTO_memcmp(proof.data(), expected.data(), kProofBytes) != 0)
      return void(++unproved_dropped_);
    Incoming in;
    if (peer) {
      in.reply_to = known->second;
      peer->last_used = ++use_clock_;
      peer->proof.assign(token);
    } else if (introduced_only_) {
      in.claimed_address = addr;  // not added unless adopted (adopt) by the handler
    } else {
      auto from = lookup(addr);
      if (!from.is_ok()) return;
      in.reply_to = *from;
      by_handle_[*from].proof.assign(token);
    }
    in.header = header;
    in.payload_bytes = plen;
    in.rndv = plen ? reinterpret_cast<void*>(tag) : nullptr;
    handling_from_ = addr;
    handling_token_ = token;
    if (handler_) handler_(in);
    handling_from_ = {};
    if (plen && !in.rndv_taken) {
      // Nobody wants it: receive into scratch and drop, so the sender completes.
      Op* op = track(new Op{});
      op->kind = Op::kDiscard;
      op->bytes.resize(plen);
      Iov v{op->bytes.data(), op->bytes.size()};
      if (!post_payload_recv(op, tag, {&v, 1}).is_ok()) untrack(op);
    }
  }

  // Operations a peer has left hanging for payload_timeout_. Payload receives are cancelled (they complete with
  // FI_ECANCELED). On shm, sends and remote reads or writes toward a peer whose process is gone fail: the
  // provider holds them forever, and a target's update would keep its buffers and block space, and hold back
  // aggregation, until the server restarts. Their Op stays allocated (abandoned) until the provider lets go of it
  // or the worker closes its endpoint; a dead process cannot write into the buffers any more. A peer that is
  // only slow or stopped keeps its operations. (shm peers see one another's processes: the provider copies
  // through cross-memory attach, which needs that.)
  void give_up_stale() {
    auto now = std::chrono::steady_clock::now();
    if (now < next_stale_check_) return;
    next_stale_check_ = now + std::min<std::chrono::milliseconds>(std::chrono::seconds(1), payload_timeout_ / 4);
    for (Op* op : payload_recvs_)
      if (now - op->posted > payload_timeout_) fi_cancel(&ep_->fid, &op->ctx);  // completes with FI_ECANCELED
    std::vector<Op*> dead;
    for (Op* op : ops_)
      if (op->kind == Op::kSend && op->peer_pid && !op->abandoned && now - op->posted > payload_timeout_ &&
          kill(op->peer_pid, 0) != 0 && errno == ESRCH)
        dead.push_back(op);
    for (Op* op : dead) {
      op->abandoned = true;
      Done d = std::move(op->done);
      if (d) d(error(StatusCode::kShutdown, "the peer's process is gone"));
    }
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  bool local_mr_ = false;
  bool shm_ = false;
  std::string address_;
  uint64_t tag_base_ = 0;
  uint64_t next_tag_ = 1;
  uint64_t next_key_ = 1;
  bool introduced_only_ = false;  // WorkerOptions::introduced_peers_only
  unsigned char secret_[32];      // keys token_for
  uint64_t unproved_dropped_ = 0;
  static constexpr int kMaxAnswers = 64;
  int answering_ = 0;                                // proof answers in flight through entries of their own
  std::string_view handling_from_, handling_token_;  // the sender of the message being handled, its token
  std::map<std::string, EpHandle> peers_;
  std::unordered_map<EpHandle, Peer> by_handle_;
  EpHandle next_handle_ = 1;
  uint64_t use_clock_ = 0;
  std::map<EpHandle, pid_t> shm_pids_;  // on shm: each peer's process
  std::set<Op*> ops_;
  std::set<Op*> payload_recvs_;
  std::map<EpHandle, PeerQueue> deferred_;  // posts libfabric refused for now, per peer
  std::chrono::steady_clock::time_point next_stale_check_;
  std::chrono::milliseconds payload_timeout_{30000};
  std::function<void(Incoming&)> handler_;
  std::function<void(EpHandle, const Status&)> failure_;
  std::atomic<bool> signaled_{false};
  Naps naps_;  // poll_then_nap's; progress() moves its last_event
};

}  // namespace

Result<std::unique_ptr<Worker>> make_ofi_worker(const std::string& provider, const WorkerOptions& options) {
  auto w = std::make_unique<OfiWorker>();
  RFOS_RETURN_IF_ERROR(w->init(provider, options));
  return std::unique_ptr<Worker>(std::move(w));
}

}  // namespace rfos::transport
