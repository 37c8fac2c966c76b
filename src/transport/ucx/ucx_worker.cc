// UCX provider: UCP active messages on one worker. The provider string picks UCX's transports (UCX_TLS,
// ucx_transports): ucx+tcp -> tcp, ucx+shm -> posix/sysv shared memory, ucx+rc -> rc, ucx+dc_x -> dc_x,
// ucx+ud -> ud. UCX environment variables (UCX_NET_DEVICES, ...) still apply.
#include <poll.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "transport/transport.h"
#include "transport/ucx/peer_process.h"
#include "transport/ucx/remote_keys.h"
#include "transport/ucx/ucx.h"
#include "transport/ucx/ucx_common.h"

namespace rfos::transport {

using ucx::ucs_error;
using ucx::ucx_setup_mutex;

bool ucx_detects_peer_failure(std::string_view provider) { return provider != "ucx+shm"; }

const char* ucx_transports(std::string_view provider) {
  if (provider == "ucx+tcp") return "tcp";
  // Shared memory without CMA: UCX's rendezvous over CMA has the receiver copy each payload out of the sender
  // with process_vm_readv, a page at a time into memory that is mostly not in cache; through the posix/sysv
  // segments large reads measured faster (docs/BENCHMARKS.md).
  if (provider == "ucx+shm") return "posix,sysv,self";
  if (provider == "ucx+rc") return "rc,sm,self";
  if (provider == "ucx+dc_x") return "dc_x,sm,self";
  if (provider == "ucx+ud") return "ud,sm,self";
  return nullptr;
}

namespace {

constexpr unsigned kAmId = 7;
constexpr unsigned kHelloAmId = 8;  // a new endpoint's first message: the sender's worker address
constexpr std::chrono::seconds kWireupTimeout{10};

// What a pending UCX request calls back into.
class UcxWorker;

struct Pending {
  Done done;                      // empty once given up (UcxWorker::give_up)
  std::string header;             // kept alive until the send completes
  std::vector<ucp_dt_iov_t> iov;  // UCX reads the iov array until the operation completes
  UcxWorker* owner = nullptr;     // set while UCX holds it (UcxWorker::live_)
  EpHandle ep = 0;                // the peer it goes to or comes from
  // Completed by UCX inside the call that started it (UCX 1.13 purges a request of a failing endpoint there,
  // and still returns it): finish() calls done.
  bool early = false;
  Status early_status;
};

class UcxWorker final : public Worker {
 public:
  ~UcxWorker() override {
    // Closing progresses the worker, and UCX's callbacks must not touch this worker's maps or call up into a
    // target that is going away meanwhile.
    closing_ = true;
    rkeys_.clear();
    std::vector<ucp_ep_h> open = std::move(failed_);
    for (auto& [h, _] : eps_)
      if (ucp_ep_h ep = ep_of(h)) open.push_back(ep);
    for (ucp_ep_h ep : open) close_ep(ep, true);
    std::lock_guard setup(ucx_setup_mutex());
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
    // Operations UCX never completed (a send to a peer that stopped progressing; one given up on a dead shm
    // peer): their callbacks are dropped uncalled, which gives back what they hold (engine buffers).
    for (Pending* p : live_) delete p;
    for (Rma* op : rmas_) delete op;
  }

  Status init(const std::string& provider, const WorkerOptions& options) {
    self_ = ucx::PeerProcess::self();
    hello_payload_.assign(reinterpret_cast<const char*>(&self_), sizeof(self_));
    admit_hello_ = options.admit_hello;
    sleep_when_waits_long_ = options.sleep_when_waits_long;
    introduced_only_ = options.introduced_peers_only;
    const char* tls = ucx_transports(provider);
    if (tls == nullptr) return error(StatusCode::kNotSupported, "UCX does not provide '" + provider + "'");
    std::lock_guard setup(ucx_setup_mutex());
    ucp_config_t* config = nullptr;
    ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
    if (s != UCS_OK) return ucs_error(s, "ucp_config_read");
    if (std::getenv("UCX_TLS") == nullptr) ucp_config_modify(config, "TLS", tls);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    // On shm the worker polls, as a kernel-bypass transport should: UCX 1.13's shm transports can wake a
    // sleeping worker (UCP_FEATURE_WAKEUP, without peer-failure handling, which they lack), but measured here
    // that halves the CPU a loaded target burns and costs 20-35% of 4 KiB IOPS, with 1 MiB transfers level.
    use_events_ = provider != "ucx+shm";
    peer_failure_ = ucx_detects_peer_failure(provider);
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | (use_events_ ? UCP_FEATURE_WAKEUP : 0);
    s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) return ucs_error(s, "ucp_init for " + provider);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    s = ucp_worker_create(context_, &wp, &worker_);
    if (s != UCS_OK) return ucs_error(s, "ucp_worker_create for " + provider);
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    s = ucp_worker_get_address(worker_, &addr, &len);
    if (s != UCS_OK) return ucs_error(s, "ucp_worker_get_address");
    address_.assign(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(worker_, addr);
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kAmId;
    hp.cb = &UcxWorker::am_cb;
    hp.arg = this;
    s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return ucs_error(s, "ucp_worker_set_am_recv_handler");
    hp.id = kHelloAmId;
    hp.cb = &UcxWorker::hello_cb;
    s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return ucs_error(s, "ucp_worker_set_am_recv_handler");
    if (use_events_) {
      s = ucp_worker_get_efd(worker_, &efd_);
      if (s != UCS_OK) return ucs_error(s, "ucp_worker_get_efd");
    }
    return Status::ok();
  }

  std::string address() const override { return address_; }
  void set_introduction(std::string token) override {
    hello_payload_.assign(reinterpret_cast<const char*>(&self_), sizeof(self_));
    hello_payload_ += token;
  }

  Result<EpHandle> connect(std::string_view peer) override {
    RFOS_ASSIGN_OR_RETURN(EpHandle h, create_ep(peer));
    // The peer answers on the endpoint UCX made for our messages, which cannot do RMA in UCX 1.13 (it stays
    // in the wireup match context); the hello gives the peer our address, so it opens a full endpoint of its
    // own for get/put into our memory.
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_AM_SEND_FLAG_REPLY;
    ucp_ep_h ep = ep_of(h);
    // The hello: our address as the header; our process, then the introduction (a capability), as the payload.
    void* req = ucp_am_send_nbx(ep, kHelloAmId, address_.data(), address_.size(), hello_payload_.data(),
                                hello_payload_.size(), &rp);
    if (UCS_PTR_IS_ERR(req)) {
      close_handle(h, true);
      return ucs_error(UCS_PTR_STATUS(req), "hello");
    }
    if (req != nullptr) ucp_request_free(req);  // UCX completes it on its own
    // Where endpoints detect peer failure (not shm), wait until this one is wired up. UCX 1.13 aborts the
    // *peer* when this side goes away while the peer still has its wireup reply queued for us: the failure
    // purges the reply and trips an assertion ("got REP message", fixed upstream in UCX 1.14). A CLI call that
    // failed right after connecting took the server down that way. After the flush the peer holds no wireup
    // message of ours, so exiting, cleanly or not, is safe for it. Shm endpoints never fail, so never purge.
    Status wired = peer_failure_ ? wait_wireup(ep) : Status::ok();
    if (!wired.is_ok()) {
      close_handle(h, true);
      return wired;
    }
    return h;
  }

  // Flushes a new endpoint: done once the peer answered the wireup, kTimeout after kWireupTimeout (the request
  // is released here; closing the endpoint completes it).
  Status wait_wireup(ucp_ep_h ep) {
    ucp_request_param_t rp{};
    void* req = ucp_ep_flush_nbx(ep, &rp);
    if (req == nullptr) return Status::ok();
    if (UCS_PTR_IS_ERR(req)) return ucs_error(UCS_PTR_STATUS(req), "connect (wireup)");
    auto deadline = std::chrono::steady_clock::now() + kWireupTimeout;
    ucs_status_t s;
    while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS && std::chrono::steady_clock::now() < deadline)
      if (ucp_worker_progress(worker_) == 0) std::this_thread::yield();
    ucp_request_free(req);
    if (s == UCS_INPROGRESS) return error(StatusCode::kTimeout, "connect: the peer did not complete the wireup");
    return s == UCS_OK ? Status::ok() : ucs_error(s, "connect (wireup)");
  }

  Result<EpHandle> create_ep(std::string_view peer) {
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    // Peer-failure detection: UCX 1.13's shared-memory transports cannot do it (they refuse the endpoint),
    // so on shm a target watches the peer's process instead (watch), and a client has its request deadline.
    ep.err_mode = peer_failure_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = &UcxWorker::ep_error_cb;
    ep.err_handler.arg = this;
    ucp_ep_h created = nullptr;
    ucs_status_t s = ucp_ep_create(worker_, &ep, &created);
    if (s != UCS_OK) return ucs_error(s, "connect");
    EpHandle h = handle_of(created);
    eps_[h] = true;
    return h;
  }

  void disconnect(EpHandle h) override { close_handle(h, false); }
  // What UCX still holds toward the peer is given up first: over shm it need not complete even once the endpoint
  // is closed by force (give_up).
  void abandon(EpHandle h) override {
    std::vector<EpHandle> eps = {h};
    for (const auto& [reply, own] : rma_eps_)  // an endpoint a hello made beside it, either way round
      if (reply == h || own == h) eps.push_back(reply == h ? own : reply);
    give_up(eps, error(StatusCode::kShutdown, "the peer was abandoned (its server restarted)"));
    for (EpHandle e : eps)
      if (e != h) close_handle(e, true);
    std::erase_if(rma_eps_, [h](const auto& e) { return e.first == h || e.second == h; });
    close_handle(h, true);
  }

  // Closes an endpoint this worker created, unless its failure closed it already. By force where connect()
  // gives up on it: a peer that does not answer would never let a graceful close finish.
  void close_handle(EpHandle h, bool force) {
    rkeys_.forget(h);
    admitted_.erase(h);
    ucp_ep_h ep = ep_of(h);
    if (eps_.erase(h) && ep) {
      forget(ep);
      close_ep(ep, force);
    }
  }

  Result<Registration> register_memory(void* addr, size_t len) override {
    if (len == 0) return error(StatusCode::kInvalidArgument, "cannot register an empty range");
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = addr;
    mp.length = len;
    ucp_mem_h memh = nullptr;
    ucs_status_t s = ucp_mem_map(context_, &mp, &memh);
    if (s != UCS_OK) return ucs_error(s, "ucp_mem_map");
    void* packed = nullptr;
    size_t packed_len = 0;
    s = ucp_rkey_pack(context_, memh, &packed, &packed_len);
    if (s != UCS_OK) {
      ucp_mem_unmap(context_, memh);
      return ucs_error(s, "ucp_rkey_pack");
    }
    Registration r{memh, reinterpret_cast<uint64_t>(addr), std::string(static_cast<char*>(packed), packed_len)};
    ucp_rkey_buffer_release(packed);
    return r;
  }

  void deregister_memory(const Registration& r) override {
    if (r.handle) ucp_mem_unmap(context_, static_cast<ucp_mem_h>(r.handle));
  }

  Status get(EpHandle ep, uint64_t remote_addr, std::string_view rkey, std::span<const Iov> dst, Done done) override {
    return rma(false, ep, remote_addr, rkey, dst, std::move(done));
  }
  Status put(EpHandle ep, std::span<const Iov> src, uint64_t remote_addr, std::string_view rkey, Done done) override {
    return rma(true, ep, remote_addr, rkey, src, std::move(done));
  }

  void on_message(std::function<void(Incoming&)> h) override { handler_ = std::move(h); }
  void on_peer_failure(std::function<void(EpHandle, const Status&)> h) override { failure_ = std::move(h); }

  Status fetch_payload(Incoming& in, std::span<const Iov> dst, Done done) override {
    size_t total = 0;
    for (const Iov& v : dst) total += v.len;
    if (total != in.payload_bytes) return error(StatusCode::kInternal, "payload size mismatch");
    if (in.eager_payload) {
      const char* src = static_cast<const char*>(in.eager_payload);
      for (const Iov& v : dst) {
        std::memcpy(v.data, src, v.len);
        src += v.len;
      }
      done(Status::ok());
      return Status::ok();
    }
    in.rndv_taken = true;
    ++receiving_;
    auto* p = new Pending;
    p->done = [this, done = std::move(done)](Status s) {
      --receiving_;
      done(s);
    };
    p->ep = in.reply_to;
    for (const Iov& v : dst) p->iov.push_back({v.data, v.len});
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.recv_am = &UcxWorker::recv_done_cb;
    rp.user_data = p;
    auto [buffer, count] = datatype(p->iov, rp);
    void* req = ucp_am_recv_data_nbx(worker_, in.rndv, buffer, count, &rp);
    if (UCS_PTR_IS_ERR(req)) --receiving_;  // finish() drops p without calling done
    return finish(req, p, "receive payload");
  }

  Status send(EpHandle h, std::string_view header, std::span<const Iov> payload, Done done) override {
    ucp_ep_h ep = ep_of(h);
    if (ep == nullptr) return error(StatusCode::kShutdown, "the peer is gone");
    auto* p = new Pending;
    p->done = std::move(done);
    p->header = header;
    p->ep = h;
    for (const Iov& v : payload) p->iov.push_back({v.data, v.len});
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    rp.cb.send = &UcxWorker::send_done_cb;
    rp.user_data = p;
    rp.flags = UCP_AM_SEND_FLAG_REPLY;
    auto [buffer, count] = datatype(p->iov, rp);
    void* req = ucp_am_send_nbx(ep, kAmId, p->header.data(), p->header.size(), buffer, count, &rp);
    return finish(req, p, "send");
  }

  int progress() override {
    int n = 0;
    while (ucp_worker_progress(worker_) != 0) ++n;
    if (n > 0) naps_.last_event = std::chrono::steady_clock::now();
    check_watched();
    while (!failed_.empty()) {
      ucp_ep_h ep = failed_.back();
      failed_.pop_back();
      close_ep(ep, true);
    }
    return n;
  }

  void wait(int timeout_ms, const WakeSource* also) override {
    if (ucp_worker_progress(worker_) != 0) {
      naps_.last_event = std::chrono::steady_clock::now();
      return;
    }
    if (also && also->ready()) return;
    auto progress = [this] { return static_cast<int>(ucp_worker_progress(worker_)); };
    if (!use_events_) return poll_then_nap(progress, signaled_, timeout_ms, also, &naps_);
    // When to spin before sleeping on the worker's event fd:
    //  - while a rendezvous payload is arriving: it comes as a train of fragments (64 KiB on tcp), and a
    //    receiver that slept between them woke once per fragment, stalling the sender's socket each time (1 MiB
    //    reads over tcp at depth 4, data plane alone: 1.2-1.4k/s sleeping, 2.1-2.8k/s spinning);
    //  - for up to kSpinAfterEvent after the last event, since the next is likely microseconds away (small
    //    requests at depth). With sleep_when_waits_long (the server's targets), only while this worker's idle
    //    spells have been short (kShortIdleUs on average): a target whose spells are long (waiting for 1 MiB
    //    device reads) sleeps at once, and leaves the cores to the threads with work: 1 MiB reads over tcp end
    //    to end 1.45-1.5k -> 2.0k/s. A client spinning so cost nothing there, and a client that slept after
    //    each ~300 us wait for a reply cost 4 KiB writes at depth 1 up to 20% (docs/BENCHMARKS.md).
    auto start = std::chrono::steady_clock::now();
    IdleSpell spell(this, start);
    bool short_waits = !sleep_when_waits_long_ || idle_ewma_us_ < kShortIdleUs;
    auto spin_end = receiving_ > 0 ? start + kSpinAfterEvent : short_waits ? naps_.last_event + kSpinAfterEvent : start;
    if (start < spin_end && spin_until(progress, signaled_, spin_end, also)) {
      naps_.last_event = std::chrono::steady_clock::now();
      return;
    }
    ucs_status_t s = ucp_worker_arm(worker_);
    if (s == UCS_ERR_BUSY) return;  // events pending: progress again
    if (also && also->arm && also->arm()) return;
    pollfd pfd[2] = {{efd_, POLLIN, 0}, {also ? also->fd : -1, POLLIN, 0}};
    poll(pfd, 2, timeout_ms);
  }

  void signal() override {
    signaled_ = true;  // ends a spin
    if (use_events_) ucp_worker_signal(worker_);
  }

 private:
  // How a payload goes to UCX: one piece (the usual case) or none as a contiguous buffer, several as an iov.
  // UCX 1.13 moves iov payloads with its copying protocols only (bounce buffers and a send() per segment on
  // tcp), while a contiguous one goes zero-copy (sendmsg straight from the buffer; RDMA on rc): measured here,
  // 1 MiB writes over tcp cost the client 3x the kernel time per byte as an iov of one piece.
  static std::pair<void*, size_t> datatype(std::vector<ucp_dt_iov_t>& iov, ucp_request_param_t& rp) {
    if (iov.size() <= 1) return {iov.empty() ? nullptr : iov[0].buffer, iov.empty() ? 0 : iov[0].length};
    rp.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_iov();
    return {iov.data(), iov.size()};
  }

  // Completes immediately-finished operations inline; errors out failed ones; leaves the rest to callbacks.
  Status finish(void* req, Pending* p, const char* what) {
    if (UCS_PTR_IS_ERR(req)) {
      delete p;
      return ucs_error(UCS_PTR_STATUS(req), what);
    }
    if (req == nullptr || p->early) {
      Done d = std::move(p->done);
      Status s = p->early ? p->early_status : Status::ok();
      delete p;
      d(s);
      return Status::ok();
    }
    p->owner = this;  // UCX calls back later
    live_.insert(p);
    return Status::ok();
  }

  // One get or put: a UCX operation per local piece, and for a put a flush of the endpoint after them, so the
  // bytes are remotely visible before done runs (a put's own completion is only local).
  struct Rma {
    UcxWorker* self = nullptr;
    Done done;        // empty once given up (give_up)
    int pending = 1;  // the issuing loop holds one until it is done
    Status status;
    ucp_ep_h flush = nullptr;
    EpHandle ep = 0;  // the peer whose memory it reaches, as the caller named it
  };

  // The endpoint that reaches the peer behind `ep` for RMA: `ep` itself when this worker created or adopted it
  // (hello_cb), else one made from the peer's hello. Only endpoints this worker created can do RMA: a reply
  // endpoint of a peer that sent no hello would trip UCX's assertion (and end the process), so it is refused.
  // Where the hello's endpoint was not adopted (shm, or a peer UCX did not match), it is made on the first RMA,
  // not on the hello: most peers never ask for RMA, and UCX 1.13 aborts the process when a peer dies while an
  // endpoint to it is still in wireup (a short-lived client that exits right after its request would otherwise
  // kill the server).
  Result<std::pair<EpHandle, ucp_ep_h>> rma_ep(EpHandle ep) {
    if (ep_of(ep) == nullptr) return error(StatusCode::kShutdown, "the peer is gone");
    auto it = rma_eps_.find(ep);
    if (it != rma_eps_.end()) ep = it->second;
    if (it != rma_eps_.end() || eps_.count(ep)) {
      ucp_ep_h to = ep_of(ep);
      if (to == nullptr) return error(StatusCode::kShutdown, "the peer is gone");
      return std::make_pair(ep, to);
    }
    auto addr = hello_addrs_.find(ep);
    if (addr == hello_addrs_.end())
      return error(StatusCode::kInvalidArgument,
                   "the peer did not introduce itself (no hello): no remote memory access");
    std::string peer = std::move(addr->second);
    hello_addrs_.erase(addr);
    // A peer whose address is garbage gets no RMA.
    RFOS_ASSIGN_OR_RETURN(EpHandle own, create_ep(peer));
    rma_eps_[ep] = own;
    return std::make_pair(own, ep_of(own));
  }

  static ucs_status_t hello_cb(void* arg, const void* header, size_t header_length, void* data, size_t length,
                               const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxWorker*>(arg);
    if (self->closing_) return UCS_OK;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) || header_length > kMaxHelloBytes) return UCS_OK;
    EpHandle reply = self->handle_of(param->reply_ep);
    if (self->eps_.count(reply) || self->rma_eps_.count(reply) || self->hello_addrs_.count(reply)) return UCS_OK;
    std::string_view peer(static_cast<const char*>(header), header_length);
    if (self->admit_hello_) {
      // Checked before any endpoint is made for the peer: a hello whose introduction does not pass makes nothing,
      // and the peer is not heard (as a peer that sent no hello).
      bool eager = !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV);
      std::string_view token = eager && length > sizeof(ucx::PeerProcess)
                                   ? std::string_view(static_cast<const char*>(data) + sizeof(ucx::PeerProcess),
                                                      length - sizeof(ucx::PeerProcess))
                                   : std::string_view();
      if (!self->admit_hello_(token)) {
        if (self->introduced_only_) self->forget(param->reply_ep);
        return UCS_OK;
      }
      self->admitted_.insert(reply);
    }
    if (self->peer_failure_) {
      // Adopt the endpoint UCX made for the peer's messages: an endpoint of ours to the peer's address is that
      // one (UCX matches it by the peer's worker and connection number), now with our error handler and able to
      // do RMA. Left as UCX made it, UCX destroys it unseen when the peer fails, and a target that answers a
      // request of the dead peer later (its update committing) wrote to freed memory.
      auto own = self->create_ep(peer);
      if (own.is_ok() && *own == reply) return UCS_OK;
      // A new endpoint instead, still wiring up, which UCX 1.13 does not survive the peer dying in: dropped,
      // and RMA makes its own when asked.
      if (own.is_ok()) self->fail(*own);
      // A worker that hears only adopted peers never hears this one: it keeps no handle to an endpoint UCX may
      // free and give the next peer.
      if (self->introduced_only_) {
        self->forget(param->reply_ep);
        return UCS_OK;
      }
    }
    self->hello_addrs_[reply].assign(peer);
    if (!self->peer_failure_) self->watch(reply, data, length, param);
    return UCS_OK;
  }

  // Where UCX cannot tell that a peer died (shm), a target watches the process the peer's hello names
  // (transport/ucx/peer_process.h): once it is gone, the peer fails as it would on tcp (peer_gone). A peer that
  // names another process and goes on sending after it ends could write into buffers given back, which UCX
  // 1.13's shm FIFOs let any peer that maps them do anyway (docs/wire-format.md, "Dead peers on shm").
  void watch(EpHandle reply, const void* data, size_t length, const ucp_am_recv_param_t* param) {
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length < sizeof(ucx::PeerProcess)) return;
    ucx::PeerProcess p;
    std::memcpy(&p, data, sizeof(p));
    watched_.watch(reply, p);
  }

  // Fails every watched peer whose process has ended.
  void check_watched() {
    std::vector<EpHandle> gone = watched_.gone();
    if (gone.empty()) return;
    // What the dead peers sent before they died is in this worker's receive queue now: taken in first, so that
    // nothing of theirs arrives after their operations were given up (into buffers handed back by then).
    while (ucp_worker_progress(worker_) != 0) {
    }
    Status why = error(StatusCode::kShutdown, "the peer's process has exited");
    for (EpHandle h : gone) {
      if (!watched_.watching(h)) continue;  // failed while draining
      std::vector<EpHandle> eps = {h};
      if (auto it = rma_eps_.find(h); it != rma_eps_.end()) eps.push_back(it->second);
      peer_gone(h, why);
      give_up(eps, why);
    }
  }

  // Completes now, with `why`, every send, payload receive and remote access toward `eps` that UCX still holds:
  // UCX 1.13 need not complete them once their shm peer is gone, even when its endpoint is closed by force (seen
  // for payload receives and gets), and they hold engine buffers. UCX keeps its request, which calls back into
  // nothing if it ever completes.
  void give_up(const std::vector<EpHandle>& eps, const Status& why) {
    auto toward = [&](EpHandle h) { return std::find(eps.begin(), eps.end(), h) != eps.end(); };
    std::vector<Done> dones;
    for (Pending* p : live_) {
      if (!toward(p->ep) || !p->done) continue;
      dones.push_back(std::move(p->done));
      p->done = nullptr;
    }
    for (Rma* op : rmas_) {
      if (!toward(op->ep) || !op->done) continue;
      dones.push_back(std::move(op->done));
      op->done = nullptr;
    }
    for (Done& d : dones) d(why);
  }

  Status rma(bool put, EpHandle ep, uint64_t remote_addr, std::string_view packed, std::span<const Iov> local,
             Done done) {
    RFOS_ASSIGN_OR_RETURN(auto target, rma_ep(ep));
    ucp_ep_h to = target.second;
    RFOS_ASSIGN_OR_RETURN(ucp_rkey_h rk, rkeys_.get(target.first, to, packed));
    auto* op = new Rma{this, std::move(done), 1, Status::ok(), put ? to : nullptr, ep};
    rmas_.insert(op);
    for (const Iov& v : local) {
      if (v.len == 0) continue;
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      rp.cb.send = &UcxWorker::rma_cb;
      rp.user_data = op;
      // Counted before the call: UCX may complete it inside (a failing endpoint's purge) and still return it.
      ++op->pending;
      void* req = put ? ucp_put_nbx(to, v.data, v.len, remote_addr, rk, &rp)
                      : ucp_get_nbx(to, v.data, v.len, remote_addr, rk, &rp);
      if (!UCS_PTR_IS_PTR(req)) --op->pending;  // done (NULL) or failed: no callback comes
      if (UCS_PTR_IS_ERR(req)) {
        op->status = ucs_error(UCS_PTR_STATUS(req), put ? "put" : "get");
        break;
      }
      remote_addr += v.len;
    }
    rma_step(op);
    return Status::ok();
  }

  static void rma_cb(void* req, ucs_status_t status, void* user_data) {
    auto* op = static_cast<Rma*>(user_data);
    if (status != UCS_OK && op->status.is_ok()) op->status = ucs_error(status, "remote memory access");
    ucp_request_free(req);
    op->self->rma_step(op);
  }

  void rma_step(Rma* op) {
    if (--op->pending > 0) return;
    if (op->flush && op->status.is_ok() && op->done) {
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      rp.cb.send = &UcxWorker::rma_cb;
      rp.user_data = op;
      ucp_ep_h ep = op->flush;
      op->flush = nullptr;
      op->pending = 2;  // the flush's callback, which may come inside the call, and this call
      void* req = ucp_ep_flush_nbx(ep, &rp);
      if (UCS_PTR_IS_ERR(req)) op->status = ucs_error(UCS_PTR_STATUS(req), "flush after put");
      if (!UCS_PTR_IS_PTR(req)) --op->pending;  // no callback comes
      if (--op->pending > 0) return;
    }
    Done d = std::move(op->done);
    Status s = op->status;
    rmas_.erase(op);
    delete op;
    if (d) d(s);
  }

  static void complete(void* req, ucs_status_t status, void* user_data) {
    auto* p = static_cast<Pending*>(user_data);
    ucp_request_free(req);
    if (p->owner == nullptr) {  // inside the call that started it: finish() takes over
      p->early = true;
      p->early_status = status == UCS_OK ? Status::ok() : ucs_error(status, "transfer");
      return;
    }
    p->owner->live_.erase(p);
    Done d = std::move(p->done);
    delete p;
    if (d) d(status == UCS_OK ? Status::ok() : ucs_error(status, "transfer"));
  }
  static void send_done_cb(void* req, ucs_status_t status, void* user_data) { complete(req, status, user_data); }
  static void recv_done_cb(void* req, ucs_status_t status, size_t, void* user_data) {
    complete(req, status, user_data);
  }

  static ucs_status_t am_cb(void* arg, const void* header, size_t header_length, void* data, size_t length,
                            const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxWorker*>(arg);
    if (self->closing_) return UCS_OK;
    Incoming in;
    in.header = {static_cast<const char*>(header), header_length};
    in.payload_bytes = length;
    if (self->introduced_only_ && self->peer_failure_) {
      // Only a peer whose endpoint was adopted on its hello (so that UCX reports its failure to us) gets a
      // hearing: a target answers some requests late, and UCX destroys an endpoint it was not told to keep.
      auto known = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? self->handles_.find(param->reply_ep)
                                                                        : self->handles_.end();
      if (known == self->handles_.end() || !self->eps_.count(known->second)) return UCS_OK;
      in.reply_to = known->second;
    } else if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
      in.reply_to = self->handle_of(param->reply_ep);
      // Where every message counts (shm), a target still hears only peers whose hello it admitted.
      if (self->introduced_only_ && self->admit_hello_ && !self->admitted_.count(in.reply_to)) return UCS_OK;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
      in.rndv = data;
    else
      in.eager_payload = length ? data : nullptr;
    if (self->handler_) self->handler_(in);
    // A rendezvous payload nobody took: returning UCS_OK makes UCX drop it and complete the sender's side
    // (calling ucp_am_data_release here as well would free its descriptor twice).
    return UCS_OK;
  }

  static void ep_error_cb(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* self = static_cast<UcxWorker*>(arg);
    if (self->closing_) return;
    auto found = self->handles_.find(ep);
    if (found == self->handles_.end()) return;  // failed or closed already
    self->peer_gone(found->second, ucs_error(status, "peer failed"));
  }

  void peer_gone(EpHandle h, const Status& why) {
    fail(h);
    // An endpoint a hello made is ours to close, whether it failed itself or the reply endpoint it stands
    // beside did.
    std::erase_if(rma_eps_, [this, h](const auto& e) {
      if (e.first != h && e.second != h) return false;
      if (e.second != h) fail(e.second);
      return true;
    });
    if (failure_) failure_(h, why);
  }

  // Callers hold handles, never UCX's endpoints: UCX frees an endpoint once it is closed and may give the next
  // peer the same pointer, while a target still holds the handle of a request from the failed one (an update
  // that commits after its client died wants to answer). A failed endpoint's handle resolves to nothing, and a
  // send to it fails, instead of reaching freed memory or a stranger.
  EpHandle handle_of(ucp_ep_h ep) {
    auto [it, fresh] = handles_.try_emplace(ep, next_handle_);
    if (!fresh) return it->second;
    by_handle_[next_handle_] = ep;
    return next_handle_++;
  }
  ucp_ep_h ep_of(EpHandle h) const {
    auto it = by_handle_.find(h);
    return it == by_handle_.end() ? nullptr : it->second;
  }
  void forget(ucp_ep_h ep) {
    auto it = handles_.find(ep);
    if (it == handles_.end()) return;
    by_handle_.erase(it->second);
    handles_.erase(it);
  }
  // A failed endpoint: its handle resolves to nothing from now on, and progress() closes it (not inside UCX's
  // callback).
  void fail(EpHandle h) {
    rkeys_.forget(h);
    admitted_.erase(h);
    hello_addrs_.erase(h);
    watched_.forget(h);
    eps_.erase(h);
    ucp_ep_h ep = ep_of(h);
    if (ep == nullptr) return;
    forget(ep);
    failed_.push_back(ep);
  }

  void close_ep(ucp_ep_h ep, bool force) {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* req = ucp_ep_close_nbx(ep, &rp);
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(req);
    }
  }

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  bool use_events_ = true;
  bool peer_failure_ = true;            // endpoints detect a dead peer (ucx_detects_peer_failure)
  bool sleep_when_waits_long_ = false;  // WorkerOptions::sleep_when_waits_long
  bool introduced_only_ = false;        // WorkerOptions::introduced_peers_only
  bool closing_ = false;                // in the destructor: callbacks do nothing
  std::unordered_set<Pending*> live_;   // sends and payload receives UCX still holds (given up: done empty)
  std::unordered_set<Rma*> rmas_;       // gets and puts not finished
  std::atomic<bool> signaled_{false};
  static constexpr std::chrono::microseconds kSpinAfterEvent{1000};
  static constexpr double kShortIdleUs = 300;
  // poll_then_nap's without events; its last_event, when progress last found something, steers the spinning
  // with events too (a new worker counts as busy).
  Naps naps_{.last_event = std::chrono::steady_clock::now()};
  int receiving_ = 0;        // rendezvous payloads being received
  double idle_ewma_us_ = 0;  // how long wait() took, on average (1/8 weight per call)
  // Adds the time from `start` until it goes out of scope (the end of a wait) to the average idle spell.
  struct IdleSpell {
    UcxWorker* w;
    std::chrono::steady_clock::time_point start;
    ~IdleSpell() {
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      w->idle_ewma_us_ += (us - w->idle_ewma_us_) / 8;
    }
  };
  std::string address_;
  std::function<void(Incoming&)> handler_;
  std::function<void(EpHandle, const Status&)> failure_;
  std::map<EpHandle, bool> eps_;  // the endpoints this worker created
  std::unordered_map<ucp_ep_h, EpHandle> handles_;
  std::unordered_map<EpHandle, ucp_ep_h> by_handle_;
  EpHandle next_handle_ = 1;
  ucx::RemoteKeys rkeys_;                 // unpacked remote keys per peer
  std::map<EpHandle, EpHandle> rma_eps_;  // reply endpoint -> our own, from hellos
  static constexpr size_t kMaxHelloBytes = 64 << 10;
  std::map<EpHandle, std::string> hello_addrs_;        // reply endpoint -> its peer's address, until RMA needs it
  std::vector<ucp_ep_h> failed_;                       // endpoints whose peer failed, to close
  ucx::PeerProcess self_;                              // what this worker's hellos say about its process
  std::string hello_payload_;                          // self_, then the introduction (set_introduction)
  std::function<bool(std::string_view)> admit_hello_;  // WorkerOptions::admit_hello
  std::unordered_set<EpHandle> admitted_;              // reply endpoints whose hello passed admit_hello_
  ucx::ProcessWatch watched_;                          // reply endpoints' peer processes (shm; watch())
};

}  // namespace

Result<std::unique_ptr<Worker>> make_ucx_worker(const std::string& provider, const WorkerOptions& options) {
  auto w = std::make_unique<UcxWorker>();
  RFOS_RETURN_IF_ERROR(w->init(provider, options));
  return std::unique_ptr<Worker>(std::move(w));
}

}  // namespace rfos::transport
