#include "client/container.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "client/call_engine.h"
#include "client/file_layout.h"
#include "client/registration_cache.h"
#include "client/scatter_gather.h"
#include "client/sealed_io.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "placement/placement.h"
#include "transport/transport.h"
#include "wire/data_plane.h"

namespace rfos::client {

using transport::Iov;

namespace {

wire::Request make_request(wire::Op op, wire::Kind kind, const ObjectId& oid, std::string_view dkey,
                           std::string_view akey, uint64_t offset = 0, uint64_t length = 0) {
  wire::Request q;
  q.op = op;
  q.kind = kind;
  q.oid = oid;
  q.dkey = dkey;
  q.akey = akey;
  q.offset = offset;
  q.length = length;
  return q;
}

// The request that revokes grant `id` on a target (wire kGrant, length 0).
wire::Request revoke_request(std::string_view id) {
  wire::Request q = make_request(wire::Op::kGrant, wire::Kind::kArray, {}, {}, {});
  q.grant = std::string(id) + std::string(wire::kGrantScopeBytes, '\0');
  return q;
}

}  // namespace

class Container::Impl : public RawArrays {
 public:
  // Before `calls`, so that it goes after them: calls in flight at close still move its buffers.
  std::unique_ptr<SealedIo> sealed;
  Session session;
  ContainerOptions options;
  // Keeps the session's capability valid from the thread using the handle (submit), so a long-lived client (a
  // mount, a training job) keeps working past the capability's lifetime: renewed three quarters into its life;
  // once it has expired (an idle handle) or the server ended the session, a new session is asked for, which
  // the server grants only if the ACLs still allow it.
  std::unique_ptr<ControlClient> control;
  uint64_t renew_at_ms = 0;
  uint64_t next_try_ms = 0;  // after a failed attempt: one a second, not one per request
  uint64_t client_tag = 0;   // Container::set_client_tag
  void schedule_renewal() {
    uint64_t now = wall_ms();
    renew_at_ms = session.expires_unix_ms > now ? now + (session.expires_unix_ms - now) * 3 / 4 : now;
  }
  Status reconnect() {
    RFOS_ASSIGN_OR_RETURN(Session fresh,
                          control->connect(session.pool.uuid, session.cont.uuid, options.write, options.ttl_s));
    std::string id = fresh.session_id;
    Status s = adopt(std::move(fresh));
    if (!s.is_ok()) (void)control->disconnect(id);
    return s;
  }
  // Ends session `id` with the server, best effort and a second at most (a server that is gone): at a handle's
  // close, at a handle that could not be made, and for the sessions a look or an adopt leaves behind.
  void end_session(const std::string& id) const {
    if (control) (void)control->clone(1000)->disconnect(id);
  }
  // Takes `fresh` (a new session of the same container) for the handle's own. Where it comes from another server
  // process (the server restarted: a crash and recovery, an upgrade), the handle connects to that one's targets
  // and goes on there; the calls still in flight to the old ones end with kShutdown. The old session is ended:
  // sessions are recorded, so the new process has it open. A server whose number of targets changed places
  // objects elsewhere: the handle cannot go on (`gone`).
  Status adopt(Session fresh) {
    if (another_server(fresh)) {
      if (fresh.target_addresses.size() != session.target_addresses.size()) {
        gone = error(StatusCode::kShutdown, "the server's targets changed in number; open the container again");
        return gone;
      }
      if (options.provider.empty() && fresh.provider != session.provider) {
        gone = error(StatusCode::kShutdown, "the server speaks " + fresh.provider + " now, not " + session.provider +
                                                "; open the container again");
        return gone;
      }
      transport::Worker& w = calls->worker();
      w.set_introduction(fresh.capability);  // the new targets admit our hellos by it
      std::vector<transport::EpHandle> eps;
      for (const std::string& addr : fresh.target_addresses) {
        auto ep = w.connect(addr);
        if (!ep.is_ok()) {
          for (transport::EpHandle e : eps) w.abandon(e);
          w.set_introduction(session.capability);
          return ep.status();
        }
        eps.push_back(*ep);
      }
      calls->retarget(std::move(eps));
      calls->set_target_window(fresh.target_share_bytes);
      grants.clear();  // the restarted targets hold none
      rewatch = watch_tag != 0;
      end_session(session.session_id);
      newest_instances().saw(session.pool.uuid, fresh.server_instance);
      if (fresh.cont.props.csum_chunk_bytes) csum_chunk = fresh.cont.props.csum_chunk_bytes;
    }
    session = std::move(fresh);
    schedule_renewal();
    return Status::ok();
  }
  // Whether `fresh` comes from another server process than the handle's session: its instance differs (its
  // targets may listen at the old addresses, as libfabric's tcp ones do), or, from a server that names none, its
  // targets' addresses do.
  bool another_server(const Session& fresh) const {
    return fresh.server_instance != session.server_instance || fresh.target_addresses != session.target_addresses;
  }
  // The newest server instance each pool's handles in this process have found, so that one handle's finding
  // sends the others to look before their next request goes to targets that are gone (over shared memory it
  // would wait out its silence), and handles already there do not look again.
  class NewestInstances {
   public:
    void saw(const std::string& pool, const std::string& instance) {
      if (instance.empty()) return;
      std::lock_guard lock(mu_);
      std::string& newest = by_pool_[pool];
      if (newest == instance) return;
      newest = instance;
      changes_.fetch_add(1, std::memory_order_relaxed);
    }
    // Changes so far: a handle compares its pool's entry only when this moved since it last did.
    uint64_t changes() const { return changes_.load(std::memory_order_relaxed); }
    std::string of(const std::string& pool) {
      std::lock_guard lock(mu_);
      auto it = by_pool_.find(pool);
      return it == by_pool_.end() ? std::string() : it->second;
    }

   private:
    std::mutex mu_;
    std::map<std::string, std::string> by_pool_;
    std::atomic<uint64_t> changes_{0};
  };
  static NewestInstances& newest_instances() {
    static NewestInstances n;
    return n;
  }
  // How long a call may go without a word from its target before the handle looks whether the server restarted
  // (CallEngine::on_silence): a restarted server's old targets never answer, and over shared memory or a tcp
  // connection UCX has not seen close, nothing else says so before the call's deadline.
  static constexpr std::chrono::milliseconds kSilenceBeforeLook{2000};
  uint64_t unanswered_seen = 0;  // calls->unanswered() as of the last look for a restart
  uint64_t changes_seen = 0;     // newest_instances().changes() as of the last comparison
  bool silent = false;           // a call went unanswered for kSilenceBeforeLook since the last look
  bool closing = false;          // in the destructor: no more looks
  uint64_t next_look_ms = 0;     // no look before (a second after the last)
  uint64_t next_quiet_ms = 0;    // no look for a silent call before: the backoff while the same server is slow
  uint64_t look_gap_ms = 1000;   // doubled (to 32 s) by each look that finds the same server: slow, not restarted
  uint64_t last_same_ms = 0;     // when a look last found the same server
  Status gone;                   // the handle cannot go on (adopt): every request fails with it
  uint64_t watch_tag = 0;        // Container::watch's, sent again to a restarted server's targets (rewatch)
  bool rewatch = false;
  // Whether this handle should look now: calls went unanswered or silent, or another handle of the process found
  // the pool's server at an instance this one is not at.
  bool suspects() {
    if (calls->unanswered() != unanswered_seen || silent) return true;
    uint64_t changes = newest_instances().changes();
    if (changes == changes_seen) return false;
    std::string newest = newest_instances().of(session.pool.uuid);
    if (!newest.empty() && newest != session.server_instance) return true;  // taken as seen once looked
    changes_seen = changes;  // another pool's, or where this handle is already
    return false;
  }
  // Called before each request and when a call went silent. When the handle suspects a restart, it asks the
  // server who it is (ServerInfo: its instance, no session made); another instance than the session's means
  // another process, and the handle takes a new session there and goes on with its targets (adopt). A server
  // that names no instance (one before it) is asked for a session, whose target addresses say. The same process
  // was slow, not restarted. Looks back off: one a second while no server answers, doubling to one per 32 s
  // while the same one does.
  void look_for_restart() {
    if (closing || !control || !gone.is_ok() || !suspects()) return;
    const uint64_t now = wall_ms();
    // News (a call unanswered, another handle's finding) is looked at a second after the last look; a silent
    // call only as the backoff allows, which a slow server's silences grow.
    const uint64_t unanswered = calls->unanswered(), changes = newest_instances().changes();
    const bool news = unanswered != unanswered_seen || changes != changes_seen;
    if (now < next_look_ms || (!news && now < next_quiet_ms)) return;
    // `answered`: a server answered who it is (the registry's news is then taken in); else the next request
    // looks again, a second on.
    auto done = [&](bool answered) {
      next_look_ms = wall_ms() + 1000;
      unanswered_seen = unanswered;
      if (answered) changes_seen = changes;
      silent = false;  // a call still silent says so again after kSilenceBeforeLook
    };
    auto same_server = [&] {
      // The backoff decays once the server has been quick for a while.
      if (now - last_same_ms > 2 * look_gap_ms) look_gap_ms = 1000;
      last_same_ms = now;
      next_quiet_ms = now + look_gap_ms;
      look_gap_ms = std::min<uint64_t>(look_gap_ms * 2, 32000);
      done(true);
    };
    auto info = control->probe(500)->server_info();
    if (!info.is_ok()) return done(false);  // not back yet
    if (!info->instance.empty() && info->instance == session.server_instance) return same_server();
    auto fresh = control->connect(session.pool.uuid, session.cont.uuid, options.write, options.ttl_s);
    if (!fresh.is_ok()) return done(false);  // not back yet (or no longer ours to open): requests fail as they would
    std::string id = fresh->session_id;
    if (!another_server(*fresh)) {
      end_session(id);
      same_server();
    } else if (adopt(std::move(*fresh)).is_ok()) {
      look_gap_ms = 1000;
      next_quiet_ms = 0;
      done(true);
    } else {
      end_session(id);
      done(false);
    }
  }
  void maybe_renew() {
    uint64_t now = wall_ms();
    if (now < renew_at_ms || now < next_try_ms || !control || closing) return;
    Status s = now + 500 < session.expires_unix_ms ? control->renew(&session, options.ttl_s)
                                                   : error(StatusCode::kPermissionDenied, "expired");
    if (s.code() == StatusCode::kPermissionDenied) s = reconnect();
    if (s.is_ok()) {
      schedule_renewal();
    } else {
      // Requests go on with the capability held; the targets refuse them once it is no longer valid.
      next_try_ms = now + 1000;
    }
  }

  std::unique_ptr<CallEngine> calls;
  std::unique_ptr<RegistrationCache> regions;
  bool rdma_provider = false;
  uint32_t csum_chunk = 4096;
  uint64_t read_epoch = 0;       // 0: latest; else a snapshot's epoch (read-only view)
  bool lazy_writes = false;      // set_lazy_writes
  std::set<std::string> grants;  // ids of the grants made and not revoked (grant_memory)
  std::map<uint64_t, std::pair<uint64_t, std::span<uint8_t>>> reads;  // async reads to verify: offset, bytes

  Status writable() const {
    if (read_epoch == 0) return Status::ok();
    return error(StatusCode::kInvalidArgument,
                 "this handle reads snapshot epoch " + std::to_string(read_epoch) + ", which is read-only");
  }

  // Every request goes out with the session's current capability.
  Result<uint64_t> submit(uint32_t t, wire::Request& q, std::span<const Iov> payload, std::span<uint8_t> into,
                          std::string* sized = nullptr, CallEngine::Memory memory = {}, bool look = true) {
    if (look) look_for_restart();
    RFOS_RETURN_IF_ERROR(gone);
    maybe_renew();
    q.capability = session.capability;
    return calls->submit(t, q, payload, into, sized, memory);
  }
  Status roundtrip(uint32_t t, wire::Request& q, std::span<const Iov> payload, std::span<uint8_t> into,
                   wire::Reply* out, std::string* sized = nullptr) {
    RFOS_ASSIGN_OR_RETURN(uint64_t id, submit(t, q, payload, into, sized));
    CallEngine::Finished f = calls->wait_for(id);
    RFOS_RETURN_IF_ERROR(f.done.status);
    if (out) *out = std::move(f.reply);
    return Status::ok();
  }

  // Where the bytes [p, p+len) lie, from one look at the registrations: the fabric memory holding them (held),
  // and, when the explicit path applies, the region the target reads or writes, whose descriptor goes into q.
  Result<CallMemory> describe(wire::Request& q, const void* p, size_t len) {
    CallMemory m;
    if (len == 0) return m;
    auto it = regions->find(p, len);
    if (it != regions->end() && it->second.allocated) m.held = it->first;
    if (options.data_path == DataPath::kMessage) return m;
    if (it == regions->end()) {
      if (options.data_path != DataPath::kExplicit) return m;
      auto added = regions->add(p, len, false);
      if (!added.is_ok() && added.status().code() == StatusCode::kBusy) return m;  // messages, then
      RFOS_RETURN_IF_ERROR(added.status());
      it = *added;
    } else if (options.data_path == DataPath::kAuto && !rdma_provider) {
      // auto takes the explicit path on RDMA providers only: over UCX's and libfabric's tcp and shm the peer
      // serves each get or put with messages of its own, and the message path measured faster (BENCHMARKS.md).
      return m;
    }
    q.remote_addr = it->second.reg.remote_base + (reinterpret_cast<uintptr_t>(p) - it->first);
    q.rkey = it->second.reg.rkey;
    m.region = it->first;
    return m;
  }

  uint32_t target_of(const wire::Request& q) const { return placement::target_of(q.oid, q.dkey, calls->targets()); }

  // One request to every target (but `skip`) at once: `make` builds each, `take` gets each reply in turn.
  template <typename Make, typename Take>
  Status to_every_target(Make make, Take take, uint32_t skip) {
    std::vector<std::pair<uint32_t, uint64_t>> ids;
    Status first = Status::ok();
    look_for_restart();  // once, before any goes: a restart found between two would end the first
    for (uint32_t t = 0; t < calls->targets(); ++t) {
      if (t == skip) continue;
      wire::Request q = make(t);
      auto id = submit(t, q, {}, {}, nullptr, {}, false);
      if (!id.is_ok()) {
        first = id.status();
        break;
      }
      ids.emplace_back(t, *id);
    }
    for (auto [t, id] : ids) {  // every call is waited for, so none is left in flight
      CallEngine::Finished f = calls->wait_for(id);
      Status s = f.done.status.is_ok() ? take(t, f.reply) : f.done.status;
      if (first.is_ok() && !s.is_ok()) first = s;
    }
    return first;
  }

  // Every target tells this handle of its changes under watch_tag (wire kWatch; the lease a renewal extends).
  Status watch_targets() {
    const uint64_t tag = watch_tag;
    return to_every_target(
        [tag](uint32_t) { return make_request(wire::Op::kWatch, wire::Kind::kSingle, {}, {}, {}, tag); },
        [](uint32_t, const wire::Reply&) { return Status::ok(); }, ~0u);
  }

  // A finished async read counts only once the checksums that came with it match its bytes.
  Completion verify_read(CallEngine::Finished f) {
    Completion c = f.done;
    auto r = reads.find(c.ticket);
    if (r == reads.end()) return c;
    if (c.status.is_ok()) {
      std::vector<uint32_t> want;
      chunk_crcs(r->second.first, r->second.second, csum_chunk, &want);
      if (want != f.reply.csums)
        c.status = error(StatusCode::kChecksumMismatch, "the data read at offset " + std::to_string(r->second.first) +
                                                            " fails its checksum (damaged at rest or in transit)");
    }
    reads.erase(r);
    return c;
  }

  Result<uint64_t> write_piece(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                               std::span<const uint8_t> data) {
    wire::Request q = make_request(wire::Op::kUpdate, wire::Kind::kArray, oid, dkey, akey, offset, data.size());
    // A container without end-to-end checksums takes none: its engine makes its own for the data at rest.
    if (!session.cont.props.csum_off) chunk_crcs(offset, data, csum_chunk, &q.csums);
    if (lazy_writes) q.flags |= wire::kLazy;
    RFOS_ASSIGN_OR_RETURN(CallMemory memory, describe(q, data.data(), data.size()));
    Iov v{const_cast<uint8_t*>(data.data()), data.size()};
    return submit(target_of(q), q, memory.region ? std::span<const Iov>() : std::span<const Iov>(&v, 1), {}, nullptr,
                  memory);
  }

  Result<uint64_t> read_piece(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                              std::span<uint8_t> out) {
    wire::Request q = make_request(wire::Op::kFetch, wire::Kind::kArray, oid, dkey, akey, offset, out.size());
    q.epoch = read_epoch;
    RFOS_ASSIGN_OR_RETURN(CallMemory memory, describe(q, out.data(), out.size()));
    auto id = submit(target_of(q), q, {}, out, nullptr, memory);
    if (id.is_ok()) reads[*id] = {offset, out};
    return id;
  }

  Result<uint64_t> granted_piece(wire::Op op, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                                 uint64_t offset, uint64_t length, const GrantRef& grant, uint64_t at) {
    if (!within_one_piece(offset, length))
      return error(StatusCode::kInvalidArgument, "an async I/O is 1 B .. 1 MiB within one 1 MiB-aligned range");
    if (grant.id.size() != wire::kGrantIdBytes || grant.use.size() != wire::kGrantUseBytes ||
        grant.scope.size() != wire::kGrantScopeBytes)
      return error(StatusCode::kInvalidArgument, "a grant reference is 16 bytes of id, 16 of use, 32 of scope");
    wire::Request q = make_request(op, wire::Kind::kArray, oid, dkey, akey, offset, length);
    if (op == wire::Op::kFetch) q.epoch = read_epoch;
    if (op == wire::Op::kUpdate && lazy_writes) q.flags |= wire::kLazy;
    q.remote_addr = at;
    q.grant = grant.id + grant.use + grant.scope;
    return submit(target_of(q), q, {}, {});
  }

  // Synchronous array I/O keeps up to kSyncWindow pieces in flight.
  static constexpr size_t kSyncWindow = 8;
  Status array_io(bool write, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                  std::span<const Extent> extents, std::span<const std::span<uint8_t>> sgl) {
    PieceIo io;
    if (sealed) {
      io.submit = [&](uint64_t at, std::span<uint8_t> mem) {
        return write ? sealed->submit_write(oid, dkey, akey, at, mem) : sealed->submit_read(oid, dkey, akey, at, mem);
      };
      io.finish = [&](uint64_t ticket) { return sealed->finish(ticket); };
    } else {
      io.submit = [&](uint64_t at, std::span<uint8_t> mem) {
        return write ? write_piece(oid, dkey, akey, at, mem) : read_piece(oid, dkey, akey, at, mem);
      };
      io.finish = [&](uint64_t ticket) {
        CallEngine::Finished f = calls->wait_for(ticket);
        return write ? f.done.status : verify_read(std::move(f)).status;
      };
    }
    return scatter_gather(write, extents, sgl, kSyncWindow, io);
  }

  Status punch(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset, uint64_t length) {
    wire::Request q = make_request(wire::Op::kPunchExtent, wire::Kind::kArray, oid, dkey, akey, offset, length);
    return roundtrip(target_of(q), q, {}, {}, nullptr);
  }

  // What a sealed handle's SealedIo moves its ciphertext and records with.
  Result<uint64_t> raw_write(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                             std::span<const uint8_t> data) override {
    return write_piece(oid, dkey, akey, offset, data);
  }
  Result<uint64_t> raw_read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                            std::span<uint8_t> out) override {
    return read_piece(oid, dkey, akey, offset, out);
  }
  Completion raw_wait(uint64_t id) override { return verify_read(calls->wait_for(id)); }
  std::vector<Completion> raw_take(size_t max, int timeout_ms) override {
    std::vector<Completion> out;
    for (CallEngine::Finished& f : calls->take(max, timeout_ms)) out.push_back(verify_read(std::move(f)));
    return out;
  }
  Status raw_punch(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                   uint64_t length) override {
    return punch(oid, dkey, akey, offset, length);
  }

  Status unsealed(const char* what) const {
    if (!sealed) return Status::ok();
    return error(StatusCode::kNotSupported,
                 std::string(what) + " is not for a handle that seals its data: the targets would move it unsealed");
  }
};

Result<std::unique_ptr<Container>> Container::open(ControlClient& control, const std::string& pool,
                                                   const std::string& cont, const ContainerOptions& options) {
  RFOS_ASSIGN_OR_RETURN(Session session, control.connect(pool, cont, options.write, options.ttl_s));
  auto impl = std::make_unique<Impl>();
  impl->control = control.clone();
  return open(std::move(impl), std::move(session), options);
}

Result<std::unique_ptr<Container>> Container::open(Session session, const ContainerOptions& options) {
  return open(std::make_unique<Impl>(), std::move(session), options);
}

Result<std::unique_ptr<Container>> Container::open(std::unique_ptr<Impl> impl, Session session,
                                                   const ContainerOptions& options) {
  // A session granted for a handle that could not be made is ended, not left open for its capability's life.
  struct EndOnFailure {
    Impl* impl;
    bool armed = true;
    ~EndOnFailure() {
      if (armed) impl->end_session(impl->session.session_id);
    }
  } end_on_failure{impl.get()};
  impl->options = options;
  impl->session = std::move(session);
  impl->schedule_renewal();
  impl->changes_seen = Impl::newest_instances().changes();
  impl->csum_chunk = impl->session.cont.props.csum_chunk_bytes ? impl->session.cont.props.csum_chunk_bytes : 4096;
  std::string provider = options.provider.empty() ? impl->session.provider : options.provider;
  RFOS_ASSIGN_OR_RETURN(std::unique_ptr<transport::Worker> worker, transport::Worker::create(provider));
  impl->rdma_provider = transport::one_sided_in_hardware(provider);
  worker->set_introduction(impl->session.capability);  // targets admit our hellos by it
  std::vector<transport::EpHandle> eps;
  for (const std::string& addr : impl->session.target_addresses) {
    if (addr.empty()) return error(StatusCode::kNotSupported, "the server has no data plane for this pool");
    auto ep = worker->connect(addr);
    if (!ep.is_ok())
      return error(ep.status().code(), "cannot reach target " + std::to_string(eps.size()) + " over " + provider +
                                           " (the server speaks " + impl->session.provider +
                                           "): " + ep.status().message());
    eps.push_back(*ep);
  }
  if (eps.empty()) return error(StatusCode::kInternal, "the pool map has no targets");
  CallEngine::Options co;
  co.timeout_ms = options.timeout_ms;
  co.send_limit = options.payload_sends_at_once >= 0 ? static_cast<uint32_t>(options.payload_sends_at_once)
                                                     : transport::payload_sends_at_once(provider);
  co.target_window_bytes = impl->session.target_share_bytes;
  impl->calls = std::make_unique<CallEngine>(std::move(worker), std::move(eps), co);
  CallEngine* calls = impl->calls.get();
  impl->regions =
      std::make_unique<RegistrationCache>(&calls->worker(), [calls](uintptr_t r) { return calls->in_use(r); });
  // A target still holding a timed-out call's descriptor must not write into the buffer once the caller has it
  // back: the registration goes.
  RegistrationCache* regions = impl->regions.get();
  calls->on_deadline([regions](const CallEngine::Memory& m) { regions->revoke(m.region); });
  Impl* raw = impl.get();
  calls->on_silence(Impl::kSilenceBeforeLook, [raw] {
    raw->silent = true;
    raw->look_for_restart();
  });
  if (options.sealer)
    impl->sealed = std::make_unique<SealedIo>(options.sealer, impl->session.cont.uuid, *impl, options.timeout_ms);
  end_on_failure.armed = false;
  return std::unique_ptr<Container>(new Container(std::move(impl)));
}

Container::Container(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Container::~Container() {
  // A sealed handle's writes land before their blocks are let go (within the request timeout).
  if (impl_->sealed) impl_->sealed->drain(static_cast<int>(impl_->options.timeout_ms));
  // A restart this handle has reason to suspect is looked for once more (the new targets hold none of its
  // grants); then no more, as a look would change the grants and the session under the steps below.
  impl_->look_for_restart();
  impl_->closing = true;
  // Grants still out go first: a target must not write into or read from memory whose handle is gone (over
  // shm, where UCX 1.13 reports no closed peer, such a transfer would never end).
  if (!impl_->grants.empty()) {
    std::vector<uint64_t> ids;
    const std::vector<std::string> grants(impl_->grants.begin(), impl_->grants.end());
    for (const std::string& g : grants) {
      for (uint32_t t = 0; t < impl_->calls->targets(); ++t) {
        wire::Request q = revoke_request(g);
        if (auto id = impl_->submit(t, q, {}, {}); id.is_ok()) ids.push_back(*id);
      }
    }
    for (uint64_t id : ids) (void)impl_->calls->wait_for(id);
  }
  impl_->regions->clear();  // before the call engine's worker goes
  // The session ends with the handle, not an hour later at its capability's expiry: the server holds each
  // principal to 1024 open sessions, and `rfos fs check --repair` asks that none be open on the container. A
  // second at most, for a server that is gone.
  impl_->end_session(impl_->session.session_id);
}
const Session& Container::session() const { return impl_->session; }
bool Container::sealed() const { return impl_->sealed != nullptr; }

Status Container::write(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                        std::span<const uint8_t> data) {
  if (data.empty()) return impl_->writable();
  Extent e{offset, data.size()};
  return write(oid, dkey, akey, {&e, 1}, {&data, 1});
}

Status Container::read(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                       std::span<uint8_t> out) {
  if (out.empty()) return Status::ok();
  Extent e{offset, out.size()};
  return read(oid, dkey, akey, {&e, 1}, {&out, 1});
}

Status Container::write(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                        std::span<const Extent> extents, std::span<const std::span<const uint8_t>> sgl) {
  RFOS_RETURN_IF_ERROR(impl_->writable());
  std::vector<std::span<uint8_t>> sources;  // only read from
  for (const auto& b : sgl) sources.emplace_back(const_cast<uint8_t*>(b.data()), b.size());
  return impl_->array_io(true, oid, dkey, akey, extents, sources);
}

Status Container::read(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                       std::span<const Extent> extents, std::span<const std::span<uint8_t>> sgl) {
  return impl_->array_io(false, oid, dkey, akey, extents, sgl);
}

Result<std::vector<Extent>> Container::list_extents(const ObjectId& oid, std::string_view dkey, std::string_view akey) {
  std::vector<Extent> all;
  std::string anchor;
  for (bool done = false; !done;) {
    wire::Request q =
        make_request(wire::Op::kListExtents, wire::Kind::kArray, oid, dkey, akey, 0, wire::kMaxExtentsPerPage);
    q.anchor = anchor;
    q.epoch = impl_->read_epoch;
    std::string raw;
    RFOS_RETURN_IF_ERROR(impl_->roundtrip(impl_->target_of(q), q, {}, {}, nullptr, &raw));
    RFOS_ASSIGN_OR_RETURN(wire::ExtentPage page, wire::decode_extent_page(raw));
    if (!page.done && page.anchor == anchor) return error(StatusCode::kInternal, "extent listing made no progress");
    for (const auto& [offset, length] : page.extents) all.push_back({offset, length});
    anchor = std::move(page.anchor);
    done = page.done;
  }
  return all;
}

Result<uint64_t> Container::array_size(const ObjectId& oid, std::string_view dkey, std::string_view akey) {
  wire::Request q = make_request(wire::Op::kArraySize, wire::Kind::kArray, oid, dkey, akey);
  q.epoch = impl_->read_epoch;
  wire::Reply r;
  RFOS_RETURN_IF_ERROR(impl_->roundtrip(impl_->target_of(q), q, {}, {}, &r));
  return r.length;
}

Status Container::put_value(const ObjectId& oid, std::string_view dkey, std::string_view akey, std::string_view value) {
  const KeyUpdate u{KeyUpdate::Kind::kPut, oid, dkey, akey, value};
  return update_keys({&u, 1})[0];
}

Result<std::string> Container::get_value(const ObjectId& oid, std::string_view dkey, std::string_view akey) {
  wire::Request q = make_request(wire::Op::kFetch, wire::Kind::kSingle, oid, dkey, akey);
  q.epoch = impl_->read_epoch;
  wire::Reply r;
  std::string value;
  RFOS_RETURN_IF_ERROR(impl_->roundtrip(impl_->target_of(q), q, {}, {}, &r, &value));
  if (r.csums.size() != 1 || r.csums[0] != crc32c(value.data(), value.size()))
    return error(StatusCode::kChecksumMismatch, "single value damaged in transit");
  return value;
}

Result<Ticket> Container::submit_write(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                                       uint64_t offset, std::span<const uint8_t> data) {
  if (!within_one_piece(offset, data.size()))
    return error(StatusCode::kInvalidArgument, "an async write is 1 B .. 1 MiB within one 1 MiB-aligned range");
  RFOS_RETURN_IF_ERROR(impl_->writable());
  if (impl_->sealed) return impl_->sealed->submit_write(oid, dkey, akey, offset, data);
  return impl_->write_piece(oid, dkey, akey, offset, data);
}

Result<Ticket> Container::submit_read(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                                      uint64_t offset, std::span<uint8_t> out) {
  if (!within_one_piece(offset, out.size()))
    return error(StatusCode::kInvalidArgument, "an async read is 1 B .. 1 MiB within one 1 MiB-aligned range");
  if (impl_->sealed) return impl_->sealed->submit_read(oid, dkey, akey, offset, out);
  return impl_->read_piece(oid, dkey, akey, offset, out);
}

Status Container::grant_memory(std::span<const uint8_t> buffer, bool targets_write, std::string_view id,
                               std::string_view scope, uint32_t ttl_ms) {
  if (id.size() != wire::kGrantIdBytes || scope.size() != wire::kGrantScopeBytes || ttl_ms == 0 ||
      ttl_ms > wire::kMaxGrantMs || buffer.empty())
    return error(StatusCode::kInvalidArgument, "a grant is 16 bytes of id, 32 of scope, 1 ms .. 300 s, 1 byte or more");
  RFOS_RETURN_IF_ERROR(impl_->unsealed("lending memory"));
  auto it = impl_->regions->find(buffer.data(), buffer.size());
  if (it == impl_->regions->end() || !(it->second.pinned || it->second.allocated))
    return error(StatusCode::kInvalidArgument, "grant registered memory only (register_memory or alloc_memory)");
  const uint64_t remote = it->second.reg.remote_base + (reinterpret_cast<uintptr_t>(buffer.data()) - it->first);
  const std::string rkey = it->second.reg.rkey;
  std::string grant = std::string(id) + std::string(scope);
  impl_->grants.insert(std::string(id));  // revoked at close if not before (even if only some targets took it)
  return impl_->to_every_target(
      [&](uint32_t) {
        wire::Request q = make_request(wire::Op::kGrant, wire::Kind::kArray, {}, {}, {}, ttl_ms, buffer.size());
        q.remote_addr = remote;
        q.rkey = rkey;
        q.flags = targets_write ? wire::kGrantFetch : wire::kGrantUpdate;
        q.grant = grant;
        return q;
      },
      [](uint32_t, const wire::Reply&) { return Status::ok(); }, ~0u);
}

Status Container::revoke_grant(std::string_view id) {
  if (id.size() != wire::kGrantIdBytes) return error(StatusCode::kInvalidArgument, "a grant id is 16 bytes");
  Status s = impl_->to_every_target([&](uint32_t) { return revoke_request(id); },
                                    [](uint32_t, const wire::Reply&) { return Status::ok(); }, ~0u);
  if (s.is_ok()) impl_->grants.erase(std::string(id));
  return s;
}

Result<Ticket> Container::submit_read_to(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                                         uint64_t offset, uint64_t length, const GrantRef& grant, uint64_t at) {
  RFOS_RETURN_IF_ERROR(impl_->unsealed("I/O with granted memory"));
  return impl_->granted_piece(wire::Op::kFetch, oid, dkey, akey, offset, length, grant, at);
}

Result<Ticket> Container::submit_write_from(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                                            uint64_t offset, uint64_t length, const GrantRef& grant, uint64_t at) {
  RFOS_RETURN_IF_ERROR(impl_->writable());
  RFOS_RETURN_IF_ERROR(impl_->unsealed("I/O with granted memory"));
  return impl_->granted_piece(wire::Op::kUpdate, oid, dkey, akey, offset, length, grant, at);
}

std::vector<Completion> Container::poll(size_t max, int timeout_ms) {
  if (impl_->sealed) return impl_->sealed->poll(max, timeout_ms);
  std::vector<Completion> out;
  for (CallEngine::Finished& f : impl_->calls->take(max, timeout_ms)) out.push_back(impl_->verify_read(std::move(f)));
  return out;
}

size_t Container::in_flight() const { return impl_->sealed ? impl_->sealed->pending() : impl_->calls->in_flight(); }

Status Container::register_memory(std::span<const uint8_t> buffer) {
  if (buffer.empty()) return error(StatusCode::kInvalidArgument, "cannot register an empty buffer");
  return impl_->regions->add(buffer.data(), buffer.size(), true).status();
}

Result<std::span<uint8_t>> Container::alloc_memory(size_t len) {
  if (len == 0) return error(StatusCode::kInvalidArgument, "cannot allocate an empty buffer");
  RFOS_ASSIGN_OR_RETURN(void* addr, impl_->regions->allocate(len));
  return std::span<uint8_t>(static_cast<uint8_t*>(addr), len);
}

Status Container::free_memory(const void* addr) { return impl_->regions->release(addr, true); }
Status Container::unregister_memory(const void* addr) { return impl_->regions->release(addr, false); }

size_t Container::registered_regions() const { return impl_->regions->size(); }
void Container::set_data_path(DataPath path) { impl_->options.data_path = path; }
void Container::set_read_epoch(uint64_t epoch) { impl_->read_epoch = epoch; }
uint64_t Container::read_epoch() const { return impl_->read_epoch; }

Result<std::vector<ObjectId>> Container::list_objects() {
  std::set<ObjectId> seen;
  for (uint32_t t = 0; t < impl_->calls->targets(); ++t) {
    std::string anchor;
    for (bool done = false; !done;) {
      wire::Request q = make_request(wire::Op::kListObjects, wire::Kind::kArray, {}, {}, {}, 0, 1024);
      q.anchor = anchor;
      q.epoch = impl_->read_epoch;
      std::string raw;
      RFOS_RETURN_IF_ERROR(impl_->roundtrip(t, q, {}, {}, nullptr, &raw));
      auto page = wire::decode_object_page(raw);
      if (!page.is_ok()) return error(StatusCode::kInternal, "malformed object list from target " + std::to_string(t));
      seen.insert(page->oids.begin(), page->oids.end());
      if (!page->done && page->anchor == anchor) return error(StatusCode::kInternal, "object listing made no progress");
      anchor = std::move(page->anchor);
      done = page->done;
    }
  }
  return std::vector<ObjectId>(seen.begin(), seen.end());
}

Status Container::punch_dkey(const ObjectId& oid, std::string_view dkey) {
  RFOS_RETURN_IF_ERROR(impl_->writable());
  wire::Request q = make_request(wire::Op::kPunchDkey, wire::Kind::kArray, oid, dkey, {});
  return impl_->roundtrip(impl_->target_of(q), q, {}, {}, nullptr);
}

Status Container::punch_akey(const ObjectId& oid, std::string_view dkey, std::string_view akey) {
  const KeyUpdate u{KeyUpdate::Kind::kPunchAkey, oid, dkey, akey, {}};
  return update_keys({&u, 1})[0];
}

Status Container::punch_extent(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                               uint64_t length) {
  RFOS_RETURN_IF_ERROR(impl_->writable());
  if (impl_->sealed) return impl_->sealed->punch_extent(oid, dkey, akey, offset, length);
  return impl_->punch(oid, dkey, akey, offset, length);
}

std::vector<Status> Container::update_keys(std::span<const KeyUpdate> updates) {
  std::vector<Status> out(updates.size(), Status::ok());
  if (Status w = impl_->writable(); !w.is_ok()) return std::vector<Status>(updates.size(), w);
  std::vector<std::pair<size_t, uint64_t>> ids;
  for (size_t i = 0; i < updates.size(); ++i) {
    const KeyUpdate& u = updates[i];
    const bool put = u.kind == KeyUpdate::Kind::kPut;
    wire::Request q =
        put ? make_request(wire::Op::kUpdate, wire::Kind::kSingle, u.oid, u.dkey, u.akey, 0, u.value.size())
            : make_request(wire::Op::kPunchAkey, wire::Kind::kArray, u.oid, u.dkey, u.akey);
    if (put) q.csums.push_back(crc32c(u.value.data(), u.value.size()));
    Iov v{const_cast<char*>(u.value.data()), u.value.size()};
    auto id = impl_->submit(impl_->target_of(q), q, put ? std::span<const Iov>(&v, 1) : std::span<const Iov>(), {});
    if (id.is_ok())
      ids.emplace_back(i, *id);
    else
      out[i] = id.status();
  }
  for (auto [i, id] : ids) out[i] = impl_->calls->wait_for(id).done.status;  // every one, so none is left in flight
  return out;
}

Status Container::insert_value(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                               std::string_view value) {
  RFOS_RETURN_IF_ERROR(impl_->writable());
  for (int attempt = 0;; ++attempt) {
    wire::Request q = make_request(wire::Op::kUpdate, wire::Kind::kSingle, oid, dkey, akey, 0, value.size());
    q.flags = wire::kIfAbsent;
    q.csums.push_back(crc32c(value.data(), value.size()));
    Iov v{const_cast<char*>(value.data()), value.size()};
    Status s = impl_->roundtrip(impl_->target_of(q), q, {&v, 1}, {}, nullptr);
    // kBusy: another insert of this key is in flight; its outcome decides ours, so ask again shortly.
    if (s.code() != StatusCode::kBusy || attempt >= 1000) return s;
    std::this_thread::sleep_for(std::chrono::microseconds(100 + 50 * std::min(attempt, 40)));
  }
}

Result<KeyPage> Container::list_dkeys(const ObjectId& oid, uint32_t target, const std::string& anchor, size_t max,
                                      std::string_view value_akey, std::string_view prefix) {
  if (target >= impl_->calls->targets()) return error(StatusCode::kInvalidArgument, "no such target");
  wire::Request q = make_request(wire::Op::kListDkeys, wire::Kind::kArray, oid, prefix, value_akey, 0, max);
  q.anchor = anchor;
  q.epoch = impl_->read_epoch;
  std::string page;
  RFOS_RETURN_IF_ERROR(impl_->roundtrip(target, q, {}, {}, nullptr, &page));
  RFOS_ASSIGN_OR_RETURN(wire::KeyPage got, wire::decode_key_page(page));
  if (!value_akey.empty() && (!got.with_values || got.values.size() != got.keys.size()))
    return error(StatusCode::kInternal, "the server listed keys without the values asked for");
  return KeyPage{std::move(got.anchor), got.done, std::move(got.keys), std::move(got.values)};
}

Result<std::vector<std::string>> Container::list_dkeys(const ObjectId& oid) {
  std::set<std::string> all;
  for (uint32_t t = 0; t < impl_->calls->targets(); ++t) {
    if (placement::object_class(oid) == placement::ObjectClass::kS1 && t != target_of(oid, {})) continue;
    std::string anchor;
    for (bool done = false; !done;) {
      RFOS_ASSIGN_OR_RETURN(KeyPage page, list_dkeys(oid, t, anchor, 1024));
      if (!page.done && page.anchor == anchor) return error(StatusCode::kInternal, "key listing made no progress");
      all.insert(page.keys.begin(), page.keys.end());
      anchor = std::move(page.anchor);
      done = page.done;
    }
  }
  return std::vector<std::string>(all.begin(), all.end());
}

Result<std::vector<std::string>> Container::list_akeys(const ObjectId& oid, std::string_view dkey) {
  std::vector<std::string> all;
  std::string anchor;
  for (bool done = false; !done;) {
    wire::Request q = make_request(wire::Op::kListAkeys, wire::Kind::kArray, oid, dkey, {}, 0, 1024);
    q.anchor = anchor;
    q.epoch = impl_->read_epoch;
    std::string raw;
    RFOS_RETURN_IF_ERROR(impl_->roundtrip(impl_->target_of(q), q, {}, {}, nullptr, &raw));
    RFOS_ASSIGN_OR_RETURN(wire::KeyPage page, wire::decode_key_page(raw));
    if (!page.done && page.anchor == anchor) return error(StatusCode::kInternal, "key listing made no progress");
    std::move(page.keys.begin(), page.keys.end(), std::back_inserter(all));
    anchor = std::move(page.anchor);
    done = page.done;
  }
  return all;
}

Result<uint64_t> Container::object_end(const ObjectId& oid, std::string_view akey, uint32_t skip) {
  uint64_t end = 0;
  RFOS_RETURN_IF_ERROR(impl_->to_every_target(
      [&](uint32_t t) {
        wire::Request q = make_request(wire::Op::kObjectEnd, wire::Kind::kArray, oid, {}, akey);
        q.epoch = impl_->read_epoch;
        return q;
      },
      [&](uint32_t, const wire::Reply& r) {
        end = std::max(end, r.length);
        return Status::ok();
      },
      skip));
  return end;
}

Result<std::string> Container::namespace_op(uint32_t target, const ObjectId& oid, std::string_view request, bool read) {
  if (!read) RFOS_RETURN_IF_ERROR(impl_->writable());
  if (request.empty() || request.size() > wire::kMaxNamespaceBytes)
    return error(StatusCode::kInvalidArgument, "a namespace request is 1 B .. 64 KiB");
  wire::Request q = make_request(read ? wire::Op::kNamespaceRead : wire::Op::kNamespace, wire::Kind::kSingle, oid, {},
                                 {}, impl_->client_tag, request.size());
  Iov v{const_cast<char*>(request.data()), request.size()};
  std::string reply;
  RFOS_RETURN_IF_ERROR(impl_->roundtrip(target, q, {&v, 1}, {}, nullptr, &reply));
  return reply;
}

std::vector<Result<std::string>> Container::namespace_ops(std::span<const NamespaceCall> calls, size_t depth) {
  std::vector<Result<std::string>> out(calls.size(), Result<std::string>(std::string()));
  std::vector<std::string> replies(calls.size());   // where each reply lands (sized by it)
  std::vector<std::pair<size_t, uint64_t>> window;  // (call, request id), oldest first
  depth = std::max<size_t>(depth, 1);
  auto finish_oldest = [&] {
    auto [i, id] = window.front();
    window.erase(window.begin());
    CallEngine::Finished f = impl_->calls->wait_for(id);
    if (f.done.status.is_ok())
      out[i] = std::move(replies[i]);
    else
      out[i] = f.done.status;
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    const NamespaceCall& call = calls[i];
    Status ok = call.read ? Status::ok() : impl_->writable();
    if (ok.is_ok() && (call.request.empty() || call.request.size() > wire::kMaxNamespaceBytes))
      ok = error(StatusCode::kInvalidArgument, "a namespace request is 1 B .. 64 KiB");
    if (!ok.is_ok()) {
      out[i] = ok;
      continue;
    }
    while (window.size() >= depth) finish_oldest();
    wire::Request q = make_request(call.read ? wire::Op::kNamespaceRead : wire::Op::kNamespace, wire::Kind::kSingle,
                                   call.oid, {}, {}, impl_->client_tag, call.request.size());
    Iov v{const_cast<char*>(call.request.data()), call.request.size()};
    auto id = impl_->submit(call.target, q, {&v, 1}, {}, &replies[i]);
    if (id.is_ok())
      window.emplace_back(i, *id);
    else
      out[i] = id.status();
  }
  while (!window.empty()) finish_oldest();
  return out;
}

void Container::set_client_tag(uint64_t tag) { impl_->client_tag = tag; }

Status Container::watch(uint64_t tag, std::function<void(std::string_view)> on_notice) {
  impl_->calls->on_notice(std::move(on_notice));
  impl_->watch_tag = tag;
  return impl_->watch_targets();
}

void Container::wait(int timeout_ms) {
  // A handle that only watches sends little: it looks for a restart here too, and watches the new targets.
  impl_->look_for_restart();
  if (impl_->rewatch) {
    impl_->rewatch = false;
    (void)impl_->watch_targets();
  }
  impl_->calls->wait(timeout_ms);
}

Status Container::sync() {
  return impl_->to_every_target([](uint32_t) { return make_request(wire::Op::kSync, wire::Kind::kArray, {}, {}, {}); },
                                [](uint32_t, const wire::Reply&) { return Status::ok(); }, ~0u);
}

void Container::set_lazy_writes(bool lazy) { impl_->lazy_writes = lazy; }

uint32_t Container::target_count() const { return static_cast<uint32_t>(impl_->calls->targets()); }
uint32_t Container::target_of(const ObjectId& oid, std::string_view dkey) const {
  return placement::target_of(oid, dkey, target_count());
}

Status Container::punch_object(const ObjectId& oid) {
  RFOS_RETURN_IF_ERROR(impl_->writable());
  // A striped object has dkeys on every target: punch it everywhere it may live.
  bool any = false;
  for (uint32_t t = 0; t < impl_->calls->targets(); ++t) {
    wire::Request q = make_request(wire::Op::kPunchObject, wire::Kind::kArray, oid, {}, {});
    Status s = impl_->roundtrip(t, q, {}, {}, nullptr);
    if (s.is_ok())
      any = true;
    else if (s.code() != StatusCode::kNotFound)
      return s;
  }
  return any ? Status::ok() : error(StatusCode::kNotFound, "object " + oid.to_string() + " has nothing to punch");
}

}  // namespace rfos::client
