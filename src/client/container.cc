#include "client/container.h"
#include "common/clock.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "client/file_layout.h"
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

// Bytes from `at` up to the end of its kMaxIoBytes-aligned range, at most `left`.
size_t piece_at(uint64_t at, size_t left) { return static_cast<size_t>(layout::piece_length(kMaxIoBytes, at, left)); }

bool within_one_piece(uint64_t offset, size_t len) {
  return len > 0 && len <= kMaxIoBytes && offset / kMaxIoBytes == (offset + len - 1) / kMaxIoBytes;
}
}  // namespace

class Container::Impl {
 public:
  Session session;
  ContainerOptions options;
  // Keeps the session's capability valid from the thread using the handle (submit), so a long-lived client (a
  // mount, a training job) keeps working past the capability's lifetime: renewed three quarters into its life;
  // once it has expired (an idle handle) or the server ended the session, a new session is asked for, which
  // the server grants only if the ACLs still allow it.
  std::unique_ptr<ControlClient> control;
  uint64_t renew_at_ms = 0;
  uint64_t next_try_ms = 0;  // after a failed attempt: one a second, not one per request
  void schedule_renewal() {
    uint64_t now = wall_ms();
    renew_at_ms = session.expires_unix_ms > now ? now + (session.expires_unix_ms - now) * 3 / 4 : now;
  }
  Status reconnect() {
    RFOS_ASSIGN_OR_RETURN(Session fresh,
                          control->connect(session.pool.uuid, session.cont.uuid, options.write, options.ttl_s));
    if (fresh.target_addresses != session.target_addresses)
      return error(StatusCode::kShutdown, "the server's targets changed; open the container again");
    session.session_id = fresh.session_id;
    session.capability = fresh.capability;
    session.expires_unix_ms = fresh.expires_unix_ms;
    return Status::ok();
  }
  void maybe_renew() {
    uint64_t now = wall_ms();
    if (now < renew_at_ms || now < next_try_ms || !control) return;
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
  std::unique_ptr<transport::Worker> worker;
  std::vector<transport::EpHandle> eps;
  // Request ids are random, and a reply counts only from the endpoint its request went to: a peer on the fabric
  // cannot answer for a target by guessing ids, and a stale reply cannot match a later request.
  std::mt19937_64 ids{std::random_device{}()};
  uint64_t new_id() {
    for (;;) {
      uint64_t id = ids();
      if (id != 0 && !calls.count(id)) return id;
    }
  }
  uint32_t csum_chunk = 4096;
  uint64_t read_epoch = 0;  // 0: latest; else a snapshot's epoch (read-only view)

  Status writable() const {
    if (read_epoch == 0) return Status::ok();
    return error(StatusCode::kInvalidArgument,
                 "this handle reads snapshot epoch " + std::to_string(read_epoch) + ", which is read-only");
  }

  // One request in flight: done when its reply (and reply payload) arrived and its own send completed.
  struct Call {
    uint32_t target = 0;
    bool replied = false;
    bool sent = false;
    Status status;
    wire::Reply reply;
    std::span<uint8_t> into;                // fetch destination of a known size
    std::string* sized_by_reply = nullptr;  // or a string sized from the reply (single values)
    std::chrono::steady_clock::time_point deadline;
    uintptr_t region = 0;  // explicit path: the registered region the target reads or writes
    uintptr_t held = 0;    // fabric memory (alloc_memory) the call's bytes lie in, on any path: not freed under it
    // A target out of engine buffers answers Busy: the request goes again after a backoff, within its deadline.
    std::string header;
    std::vector<Iov> payload;
    int attempts = 0;
    std::optional<std::chrono::steady_clock::time_point> retry_at;
    // An update or punch the target stamps: refused as too old when a snapshot overtook it in flight, it is
    // sent again and gets a newer epoch.
    bool restamp = false;
    bool done() const { return replied && sent; }
  };
  static constexpr int kMaxBusyRetries = 200;
  static constexpr int kMaxRestamps = 16;
  std::map<uint64_t, Call> calls;
  // A finished call, with the reply it got (its checksums, for reads verified when handed out).
  struct Finished {
    Completion done;
    wire::Reply reply;
  };
  std::vector<Finished> completed;                                    // finished, not yet handed out
  std::map<uint64_t, std::pair<uint64_t, std::span<uint8_t>>> reads;  // async reads to verify: offset, bytes

  void on_message(transport::Incoming& in) {
    auto r = wire::decode_reply(in.header);
    if (!r.is_ok()) return;
    auto it = calls.find(r->request_id);
    if (it == calls.end() || it->second.replied) return;  // stale (timed out) or foreign: dropped
    if (in.reply_to != eps[it->second.target]) return;    // not from the target it asked
    Call& call = it->second;
    uint64_t id = it->first;
    call.reply = std::move(r).value();
    if (call.reply.status == StatusCode::kBusy && call.attempts < kMaxBusyRetries) {
      auto backoff = std::chrono::microseconds(200 * std::min(++call.attempts, 25));
      call.retry_at = std::chrono::steady_clock::now() + backoff;
      return;
    }
    if (call.reply.status == StatusCode::kEpochTooOld && call.restamp && call.attempts < kMaxRestamps) {
      ++call.attempts;
      call.retry_at = std::chrono::steady_clock::now();
      return;
    }
    if (call.reply.status != StatusCode::kOk) {
      call.status = error(call.reply.status, call.reply.message);
      call.replied = true;
      return;
    }
    if (in.payload_bytes == 0) {
      // On the explicit path a fetch's bytes are already in place: the target wrote them before it answered.
      if (call.region && !call.into.empty() && call.reply.length != call.into.size())
        call.status = error(StatusCode::kInternal, "the server wrote " + std::to_string(call.reply.length) +
                                                       " bytes for a read of " + std::to_string(call.into.size()));
      call.replied = true;
      return;
    }
    if (call.sized_by_reply) {
      call.sized_by_reply->resize(in.payload_bytes);
      call.into = {reinterpret_cast<uint8_t*>(call.sized_by_reply->data()), call.sized_by_reply->size()};
    }
    if (in.payload_bytes != call.into.size() || call.reply.length != in.payload_bytes) {
      call.status = error(StatusCode::kInternal, "the server sent " + std::to_string(in.payload_bytes) +
                                                     " bytes for a read of " + std::to_string(call.into.size()));
      call.replied = true;
      return;
    }
    Iov dst{call.into.data(), call.into.size()};
    Status s = worker->fetch_payload(in, {&dst, 1}, [this, id](Status got) {
      auto c = calls.find(id);
      if (c == calls.end()) return;
      c->second.status = got;
      c->second.replied = true;
    });
    if (!s.is_ok()) {
      call.status = s;
      call.replied = true;
    }
  }

  // The registration cache: buffers registered with the fabric, by start address. Explicit registrations
  // (register_memory) stay until unregister_memory; buffers registered on demand by the explicit path are kept
  // for reuse, at most kMaxCachedRegions of them, least recently used out first.
  static constexpr size_t kMaxCachedRegions = 64;
  struct Region {
    size_t len = 0;
    transport::Registration reg;
    bool pinned = false;  // registered by the application
    uint64_t used = 0;
    bool allocated = false;  // memory of the fabric's (alloc_memory): freed, not only deregistered, when dropped
  };
  std::map<uintptr_t, Region> regions;
  uint64_t use_clock = 0;
  bool rdma_provider = false;

  // The region holding [p, p+len): regions may nest or overlap, so every one starting at or below p is a
  // candidate (there are few).
  std::map<uintptr_t, Region>::iterator region_of(const void* p, size_t len) {
    auto a = reinterpret_cast<uintptr_t>(p);
    for (auto it = regions.upper_bound(a); it != regions.begin();) {
      --it;
      if (a + len <= it->first + it->second.len) {
        it->second.used = ++use_clock;
        return it;
      }
    }
    return regions.end();
  }

  void drop_region(std::map<uintptr_t, Region>::iterator it) {
    if (it->second.allocated)
      worker->free_memory(it->second.reg, reinterpret_cast<void*>(it->first), it->second.len);
    else
      worker->deregister_memory(it->second.reg);
    regions.erase(it);
  }

  Result<std::map<uintptr_t, Region>::iterator> add_region(const void* p, size_t len, bool pinned) {
    auto a = reinterpret_cast<uintptr_t>(p);
    if (!pinned) {  // whole pages: neighbouring buffers of one allocation share the registration
      uintptr_t page = 4096;
      len = ((a + len + page - 1) & ~(page - 1)) - (a & ~(page - 1));
      a &= ~(page - 1);
    }
    // Cached registrations overlapping an application's buffer are of memory since freed and reused: they go.
    for (auto it = regions.begin(); pinned && it != regions.end();) {
      bool overlaps = it->first < a + len && a < it->first + it->second.len;
      if (overlaps && !it->second.pinned && !in_use(it->first))
        drop_region(it++);
      else
        ++it;
    }
    if (auto same = regions.find(a); same != regions.end()) {
      if (same->second.pinned || in_use(a)) return error(StatusCode::kBusy, "a registered buffer starts here");
      drop_region(same);  // a smaller cached one: the new one covers it
    }
    if (!pinned) {
      size_t cached = 0;
      auto oldest = regions.end();
      for (auto it = regions.begin(); it != regions.end(); ++it) {
        if (it->second.pinned) continue;
        ++cached;
        if (oldest == regions.end() || it->second.used < oldest->second.used) oldest = it;
      }
      if (cached >= kMaxCachedRegions && !in_use(oldest->first)) drop_region(oldest);
    }
    RFOS_ASSIGN_OR_RETURN(transport::Registration reg, worker->register_memory(reinterpret_cast<void*>(a), len));
    return regions.emplace(a, Region{len, std::move(reg), pinned, ++use_clock}).first;
  }

  bool in_use(uintptr_t region) const {
    for (const auto& [id, call] : calls)
      if (call.region == region || call.held == region) return true;
    return false;
  }

  // The fabric memory holding [p, p+len), 0 when it lies elsewhere.
  uintptr_t fabric_of(const void* p, size_t len) {
    auto it = region_of(p, len);
    return it != regions.end() && it->second.allocated ? it->first : 0;
  }

  // Puts a descriptor of [p, p+len) into q when the explicit path applies; returns the region's key (0: none).
  Result<uintptr_t> describe(wire::Request& q, const void* p, size_t len) {
    if (options.data_path == DataPath::kMessage || len == 0) return uintptr_t{0};
    auto it = region_of(p, len);
    if (it == regions.end()) {
      if (options.data_path != DataPath::kExplicit) return uintptr_t{0};
      auto added = add_region(p, len, false);
      if (!added.is_ok() && added.status().code() == StatusCode::kBusy) return uintptr_t{0};  // messages, then
      RFOS_RETURN_IF_ERROR(added.status());
      it = *added;
    } else if (options.data_path == DataPath::kAuto && !rdma_provider) {
      // auto takes the explicit path on RDMA providers only: over UCX's and libfabric's tcp and shm the peer
      // serves each get or put with messages of its own, and the message path measured faster (BENCHMARKS.md).
      return uintptr_t{0};
    }
    q.remote_addr = it->second.reg.remote_base + (reinterpret_cast<uintptr_t>(p) - it->first);
    q.rkey = it->second.reg.rkey;
    return it->first;
  }

  uint32_t target_of(const wire::Request& q) const {
    return placement::target_of(q.oid, q.dkey, static_cast<uint32_t>(eps.size()));
  }

  // Sends a request to target `t`; its completion comes out of reap(). A fetch's payload lands in `into`, or
  // in `sized` resized to what arrives. `payload` and `into` must stay valid until then.
  Result<uint64_t> submit(uint32_t t, wire::Request& q, std::span<const Iov> payload, std::span<uint8_t> into,
                          std::string* sized = nullptr, uintptr_t region = 0) {
    uint64_t id = new_id();
    q.request_id = id;
    maybe_renew();
    q.capability = session.capability;
    Call& call = calls[id];
    call.target = t;
    call.region = region;
    call.into = into;
    call.sized_by_reply = sized;
    call.restamp = wire::is_write(q.op) && q.epoch == 0;
    call.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
    call.header = wire::encode_request(q);
    call.payload.assign(payload.begin(), payload.end());
    Status s = send(id, call);
    if (!s.is_ok()) {
      calls.erase(id);
      return s;
    }
    return id;
  }

  // At most send_limit payloads over transport::kLargePayloadBytes move at a time from this handle
  // (ContainerOptions::payload_sends_at_once): the rest wait here, in order, and go as earlier ones finish.
  uint32_t send_limit = 0;  // 0: no limit
  uint32_t large_sending = 0;
  std::deque<uint64_t> send_queue;

  Status send(uint64_t id, Call& call) {
    call.sent = false;
    size_t bytes = 0;
    for (const Iov& v : call.payload) bytes += v.len;
    bool large = send_limit > 0 && bytes > transport::kLargePayloadBytes;
    if (large && large_sending >= send_limit) {
      send_queue.push_back(id);
      return Status::ok();
    }
    if (large) ++large_sending;
    Status s = worker->send(eps[call.target], call.header, call.payload, [this, id, large](Status st) {
      if (large) send_done();
      auto c = calls.find(id);
      if (c == calls.end()) return;
      c->second.sent = true;
      if (!st.is_ok() && !c->second.replied) {
        c->second.status = st;
        c->second.replied = true;
      }
    });
    if (!s.is_ok() && large) send_done();
    return s;
  }

  // A large payload finished sending (or failed): the next queued one goes, skipping calls that ended while
  // they waited (timed out).
  void send_done() {
    --large_sending;
    while (!send_queue.empty() && large_sending < send_limit) {
      auto c = calls.find(send_queue.front());
      send_queue.pop_front();
      if (c == calls.end() || c->second.sent) continue;
      Status s = send(c->first, c->second);
      if (!s.is_ok()) {
        c->second.status = s;
        c->second.replied = c->second.sent = true;
      }
    }
  }

  // Moves finished and timed-out calls to `completed`.
  void reap() {
    auto now = std::chrono::steady_clock::now();
    for (auto it = calls.begin(); it != calls.end();) {
      Call& c = it->second;
      if (c.retry_at && c.sent && now >= *c.retry_at && now <= c.deadline) {
        c.retry_at.reset();
        Status s = send(it->first, c);
        if (!s.is_ok()) {
          c.status = s;
          c.replied = c.sent = true;
        }
      }
      if (!c.done() && now > c.deadline) {
        c.status = c.retry_at
                       ? error(StatusCode::kBusy, "target " + std::to_string(c.target) +
                                                      " stayed busy (out of engine buffers) for " +
                                                      std::to_string(options.timeout_ms) + " ms")
                       : error(StatusCode::kTimeout, "target " + std::to_string(c.target) + " did not answer within " +
                                                         std::to_string(options.timeout_ms) + " ms");
        c.replied = c.sent = true;  // a late reply or send completion finds nothing and is dropped
        // A target still holding the descriptor must not write into the buffer once the caller has it back:
        // the registration goes (RDMA revokes the key; UCX's tcp and shm emulation cannot). Memory of the
        // fabric's stays registered: it is the caller's to free (free_memory).
        if (auto r = regions.find(c.region); c.region && r != regions.end() && !r->second.allocated) drop_region(r);
      }
      if (c.done()) {
        completed.push_back({{it->first, c.status, c.reply.length}, std::move(c.reply)});
        it = calls.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Progresses until `id` completed; returns its completion.
  Finished wait_for(uint64_t id) {
    for (;;) {
      for (auto it = completed.begin(); it != completed.end(); ++it) {
        if (it->done.ticket == id) {
          Finished c = std::move(*it);
          completed.erase(it);
          return c;
        }
      }
      if (worker->progress() == 0) worker->wait(1);
      reap();
    }
  }

  // A finished async read counts only once the checksums that came with it match its bytes.
  Completion verify_read(Finished f) {
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

  Status roundtrip(uint32_t t, wire::Request& q, std::span<const Iov> payload, std::span<uint8_t> into,
                   wire::Reply* out, std::string* sized = nullptr) {
    RFOS_ASSIGN_OR_RETURN(uint64_t id, submit(t, q, payload, into, sized));
    Finished c = wait_for(id);
    RFOS_RETURN_IF_ERROR(c.done.status);
    if (out) *out = std::move(c.reply);
    return Status::ok();
  }

  Result<uint64_t> write_piece(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                               std::span<const uint8_t> data) {
    wire::Request q = make_request(wire::Op::kUpdate, wire::Kind::kArray, oid, dkey, akey, offset, data.size());
    // A container without end-to-end checksums takes none: its engine makes its own for the data at rest.
    if (!session.cont.props.csum_off) chunk_crcs(offset, data, csum_chunk, &q.csums);
    RFOS_ASSIGN_OR_RETURN(uintptr_t region, describe(q, data.data(), data.size()));
    Iov v{const_cast<uint8_t*>(data.data()), data.size()};
    auto id =
        submit(target_of(q), q, region ? std::span<const Iov>() : std::span<const Iov>(&v, 1), {}, nullptr, region);
    if (id.is_ok()) calls[*id].held = fabric_of(data.data(), data.size());
    return id;
  }

  Result<uint64_t> read_piece(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                              std::span<uint8_t> out) {
    wire::Request q = make_request(wire::Op::kFetch, wire::Kind::kArray, oid, dkey, akey, offset, out.size());
    q.epoch = read_epoch;
    RFOS_ASSIGN_OR_RETURN(uintptr_t region, describe(q, out.data(), out.size()));
    auto id = submit(target_of(q), q, {}, out, nullptr, region);
    if (id.is_ok()) {
      calls[*id].held = fabric_of(out.data(), out.size());
      reads[*id] = {offset, out};
    }
    return id;
  }

  // Synchronous array I/O: the extents cut at 1 MiB-aligned boundaries, each piece a request, up to
  // kSyncWindow of them in flight. `sgl` is written from (write) or read into; a piece that straddles two of
  // its buffers goes through a bounce buffer. Returns the first failure, once nothing is in flight.
  static constexpr size_t kSyncWindow = 8;
  Status scatter_gather(bool write, const ObjectId& oid, std::string_view dkey, std::string_view akey,
                        std::span<const Extent> extents, std::span<const std::span<uint8_t>> sgl) {
    uint64_t want = 0, have = 0;
    for (const Extent& e : extents) {
      if (e.length == 0 || e.offset >= (1ull << 62) || e.length > (1ull << 62) - e.offset)
        return error(StatusCode::kInvalidArgument, "an extent is empty or reaches past 2^62");
      want += e.length;
    }
    for (const auto& b : sgl) have += b.size();
    if (want != have)
      return error(StatusCode::kInvalidArgument,
                   "the extents hold " + std::to_string(want) + " bytes, the buffers " + std::to_string(have));
    struct InFlight {
      uint64_t ticket = 0;
      std::vector<uint8_t> bounce;
      std::vector<std::span<uint8_t>> parts;  // where the bounce's bytes belong, in order
    };
    std::deque<InFlight> window;
    Status first;
    auto finish_oldest = [&] {
      InFlight f = std::move(window.front());
      window.pop_front();
      Completion c = write ? wait_for(f.ticket).done : verify_read(wait_for(f.ticket));
      if (c.status.is_ok() && !write) {
        size_t at = 0;
        for (std::span<uint8_t> part : f.parts) {
          std::memcpy(part.data(), f.bounce.data() + at, part.size());
          at += part.size();
        }
      }
      if (first.is_ok() && !c.status.is_ok()) first = c.status;
    };
    size_t bi = 0, bpos = 0;  // the sgl cursor
    for (const Extent& e : extents) {
      for (uint64_t done = 0, n = 0; done < e.length && first.is_ok(); done += n) {
        uint64_t at = e.offset + done;
        n = piece_at(at, e.length - done);
        while (bpos == sgl[bi].size()) bi++, bpos = 0;
        InFlight f;
        std::span<uint8_t> mem;
        if (sgl[bi].size() - bpos >= n) {
          mem = sgl[bi].subspan(bpos, n);
          bpos += n;
        } else {
          f.bounce.resize(n);
          for (size_t got = 0; got < n;) {
            while (bpos == sgl[bi].size()) bi++, bpos = 0;
            size_t take = std::min<size_t>(n - got, sgl[bi].size() - bpos);
            f.parts.push_back(sgl[bi].subspan(bpos, take));
            if (write) std::memcpy(f.bounce.data() + got, sgl[bi].data() + bpos, take);
            got += take;
            bpos += take;
          }
          mem = f.bounce;
        }
        auto t = write ? write_piece(oid, dkey, akey, at, mem) : read_piece(oid, dkey, akey, at, mem);
        if (!t.is_ok()) {
          first = t.status();
          break;
        }
        f.ticket = *t;
        window.push_back(std::move(f));
        if (window.size() >= kSyncWindow) finish_oldest();
      }
      if (!first.is_ok()) break;
    }
    while (!window.empty()) finish_oldest();
    return first;
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
  impl->options = options;
  impl->session = std::move(session);
  impl->schedule_renewal();
  impl->csum_chunk = impl->session.cont.props.csum_chunk_bytes ? impl->session.cont.props.csum_chunk_bytes : 4096;
  std::string provider = options.provider.empty() ? impl->session.provider : options.provider;
  RFOS_ASSIGN_OR_RETURN(impl->worker, transport::Worker::create(provider));
  impl->rdma_provider = transport::one_sided_in_hardware(provider);
  impl->send_limit = options.payload_sends_at_once >= 0 ? static_cast<uint32_t>(options.payload_sends_at_once)
                                                        : transport::payload_sends_at_once(provider);
  Impl* raw = impl.get();
  impl->worker->on_message([raw](transport::Incoming& in) { raw->on_message(in); });
  impl->worker->set_introduction(impl->session.capability);  // targets admit our hellos by it
  for (const std::string& addr : impl->session.target_addresses) {
    if (addr.empty()) return error(StatusCode::kNotSupported, "the server has no data plane for this pool");
    auto ep = impl->worker->connect(addr);
    if (!ep.is_ok())
      return error(ep.status().code(), "cannot reach target " + std::to_string(impl->eps.size()) + " over " + provider +
                                           " (the server speaks " + impl->session.provider +
                                           "): " + ep.status().message());
    impl->eps.push_back(*ep);
  }
  if (impl->eps.empty()) return error(StatusCode::kInternal, "the pool map has no targets");
  return std::unique_ptr<Container>(new Container(std::move(impl)));
}

Container::Container(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Container::~Container() {
  while (!impl_->regions.empty()) impl_->drop_region(impl_->regions.begin());
  // The worker goes first: sends still in flight complete (cancelled) as it closes the endpoints, and their
  // callbacks look up calls, which must still exist then; nothing queued may be sent by them.
  impl_->send_queue.clear();
  impl_->worker.reset();
}
const Session& Container::session() const { return impl_->session; }

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
  return impl_->scatter_gather(true, oid, dkey, akey, extents, sources);
}

Status Container::read(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                       std::span<const Extent> extents, std::span<const std::span<uint8_t>> sgl) {
  return impl_->scatter_gather(false, oid, dkey, akey, extents, sgl);
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
  RFOS_RETURN_IF_ERROR(impl_->writable());
  wire::Request q = make_request(wire::Op::kUpdate, wire::Kind::kSingle, oid, dkey, akey, 0, value.size());
  q.csums.push_back(crc32c(value.data(), value.size()));
  Iov v{const_cast<char*>(value.data()), value.size()};
  return impl_->roundtrip(impl_->target_of(q), q, {&v, 1}, {}, nullptr);
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
  return impl_->write_piece(oid, dkey, akey, offset, data);
}

Result<Ticket> Container::submit_read(const ObjectId& oid, std::string_view dkey, std::string_view akey,
                                      uint64_t offset, std::span<uint8_t> out) {
  if (!within_one_piece(offset, out.size()))
    return error(StatusCode::kInvalidArgument, "an async read is 1 B .. 1 MiB within one 1 MiB-aligned range");
  return impl_->read_piece(oid, dkey, akey, offset, out);
}

std::vector<Completion> Container::poll(size_t max, int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    impl_->worker->progress();
    impl_->reap();
    if (!impl_->completed.empty() || impl_->calls.empty() || std::chrono::steady_clock::now() >= until) break;
    impl_->worker->wait(1);
  }
  std::vector<Completion> out;
  while (!impl_->completed.empty() && out.size() < max) {
    out.push_back(impl_->verify_read(std::move(impl_->completed.front())));
    impl_->completed.erase(impl_->completed.begin());
  }
  return out;
}

size_t Container::in_flight() const { return impl_->calls.size(); }

Status Container::register_memory(std::span<const uint8_t> buffer) {
  if (buffer.empty()) return error(StatusCode::kInvalidArgument, "cannot register an empty buffer");
  return impl_->add_region(buffer.data(), buffer.size(), true).status();
}

Result<std::span<uint8_t>> Container::alloc_memory(size_t len) {
  if (len == 0) return error(StatusCode::kInvalidArgument, "cannot allocate an empty buffer");
  void* addr = nullptr;
  RFOS_ASSIGN_OR_RETURN(transport::Registration reg, impl_->worker->alloc_memory(len, &addr));
  auto a = reinterpret_cast<uintptr_t>(addr);
  impl_->regions.emplace(a, Impl::Region{len, std::move(reg), true, ++impl_->use_clock, true});
  return std::span<uint8_t>(static_cast<uint8_t*>(addr), len);
}

Status Container::free_memory(const void* addr) {
  auto it = impl_->regions.find(reinterpret_cast<uintptr_t>(addr));
  if (it == impl_->regions.end() || !it->second.allocated)
    return error(StatusCode::kNotFound, "no buffer allocated at that address");
  if (impl_->in_use(it->first)) return error(StatusCode::kBusy, "I/O using the buffer is still in flight");
  impl_->drop_region(it);
  return Status::ok();
}

Status Container::unregister_memory(const void* addr) {
  auto it = impl_->regions.find(reinterpret_cast<uintptr_t>(addr));
  if (it == impl_->regions.end() || !it->second.pinned || it->second.allocated)
    return error(StatusCode::kNotFound, "no buffer registered at that address");
  if (impl_->in_use(it->first)) return error(StatusCode::kBusy, "I/O using the buffer is still in flight");
  impl_->drop_region(it);
  return Status::ok();
}

size_t Container::registered_regions() const { return impl_->regions.size(); }
void Container::set_data_path(DataPath path) { impl_->options.data_path = path; }
void Container::set_read_epoch(uint64_t epoch) { impl_->read_epoch = epoch; }
uint64_t Container::read_epoch() const { return impl_->read_epoch; }

Result<std::vector<ObjectId>> Container::list_objects() {
  std::set<ObjectId> seen;
  for (uint32_t t = 0; t < impl_->eps.size(); ++t) {
    std::string anchor;
    for (bool done = false; !done;) {
      wire::Request q = make_request(wire::Op::kListObjects, wire::Kind::kArray, {}, anchor, {}, 0, 1024);
      q.epoch = impl_->read_epoch;
      wire::Reply r;
      std::string page;
      RFOS_RETURN_IF_ERROR(impl_->roundtrip(t, q, {}, {}, &r, &page));
      if (page.size() % 16 != 0)
        return error(StatusCode::kInternal, "malformed object list from target " + std::to_string(t));
      for (size_t i = 0; i < page.size(); i += 16) {
        ObjectId o;
        std::memcpy(&o.hi, page.data() + i, 8);
        std::memcpy(&o.lo, page.data() + i + 8, 8);
        seen.insert(o);
      }
      done = r.epoch == 1;
      if (!done && r.message == anchor) return error(StatusCode::kInternal, "object listing made no progress");
      anchor = r.message;
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
  RFOS_RETURN_IF_ERROR(impl_->writable());
  wire::Request q = make_request(wire::Op::kPunchAkey, wire::Kind::kArray, oid, dkey, akey);
  return impl_->roundtrip(impl_->target_of(q), q, {}, {}, nullptr);
}

Status Container::punch_extent(const ObjectId& oid, std::string_view dkey, std::string_view akey, uint64_t offset,
                               uint64_t length) {
  RFOS_RETURN_IF_ERROR(impl_->writable());
  wire::Request q = make_request(wire::Op::kPunchExtent, wire::Kind::kArray, oid, dkey, akey, offset, length);
  return impl_->roundtrip(impl_->target_of(q), q, {}, {}, nullptr);
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
                                      std::string_view value_akey) {
  if (target >= impl_->eps.size()) return error(StatusCode::kInvalidArgument, "no such target");
  wire::Request q = make_request(wire::Op::kListDkeys, wire::Kind::kArray, oid, {}, value_akey, 0, max);
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
  for (uint32_t t = 0; t < impl_->eps.size(); ++t) {
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

Result<uint64_t> Container::object_end(const ObjectId& oid, std::string_view akey) {
  uint64_t end = 0;
  for (uint32_t t = 0; t < impl_->eps.size(); ++t) {
    wire::Request q = make_request(wire::Op::kObjectEnd, wire::Kind::kArray, oid, {}, akey);
    q.epoch = impl_->read_epoch;
    wire::Reply r;
    RFOS_RETURN_IF_ERROR(impl_->roundtrip(t, q, {}, {}, &r));
    end = std::max(end, r.length);
  }
  return end;
}

uint32_t Container::target_count() const { return static_cast<uint32_t>(impl_->eps.size()); }
uint32_t Container::target_of(const ObjectId& oid, std::string_view dkey) const {
  return placement::target_of(oid, dkey, target_count());
}

Status Container::punch_object(const ObjectId& oid) {
  RFOS_RETURN_IF_ERROR(impl_->writable());
  // A striped object has dkeys on every target: punch it everywhere it may live.
  bool any = false;
  for (uint32_t t = 0; t < impl_->eps.size(); ++t) {
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
