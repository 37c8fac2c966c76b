#include "server/target.h"
#include "common/clock.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "common/crc32c.h"
#include "common/fault.h"
#include "engine/engine.h"
#include "transport/transport.h"
#include "wire/capability.h"
#include "wire/data_plane.h"

namespace rfos::server {

using engine::Engine;
using transport::Incoming;
using transport::Iov;

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void Revocations::revoke(const Uuid& session, uint64_t expires_unix_ms) {
  std::lock_guard lock(mu_);
  ended_[session] = expires_unix_ms;
}

bool Revocations::revoked(const Uuid& session, uint64_t now_unix_ms) {
  std::lock_guard lock(mu_);
  std::erase_if(ended_, [&](const auto& e) { return e.second <= now_unix_ms; });
  return ended_.count(session) != 0;
}

class Target::Impl {
 public:
  uint32_t index = 0;
  Engine* engine = nullptr;
  std::string secret;
  std::shared_ptr<Revocations> revocations;
  std::unique_ptr<transport::Worker> worker;
  std::string address;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> last_epoch{0};              // the clock (next_epoch); raised by snapshot creation too
  std::map<std::pair<Uuid, Uuid>, uint32_t> conts;  // (pool, cont) -> engine handle

  // Engine buffers each session holds here (ServerConfig::session_buffer_bytes). A request's charge lives as
  // long as its buffers: it rides in the same callbacks, so a transfer the fabric never completes (a peer that
  // stops moving bytes; a one-sided operation libfabric never finishes, docs/wire-format.md) keeps its charge,
  // and its session, not every session, runs out of buffers. Counters are atomic because the last callback
  // holding a charge may be destroyed off the target thread (the engine's commit thread); the map itself is
  // the target thread's.
  uint64_t session_buffer_bytes = 0;
  std::map<Uuid, std::shared_ptr<std::atomic<uint64_t>>> session_bytes;
  struct Charge {
    std::shared_ptr<std::atomic<uint64_t>> held;
    uint64_t bytes = 0;
    ~Charge() {
      if (held) held->fetch_sub(bytes, std::memory_order_relaxed);
    }
    // A fetch that asked for a single value's whole length is charged what it turned out to hold.
    void grow_to(uint64_t n) {
      if (!held || n <= bytes) return;
      held->fetch_add(n - bytes, std::memory_order_relaxed);
      bytes = n;
    }
  };

  // Charges `bytes` to `session`, or kBusy when that would take it past its share. A session holding nothing
  // here always gets its request through (one request may be larger than the share; the engine's own limits
  // apply to it).
  Result<std::shared_ptr<Charge>> charge(const Uuid& session, uint64_t bytes) {
    auto charge = std::make_shared<Charge>();
    if (session_buffer_bytes == 0) return charge;
    auto& held = session_bytes[session];
    if (!held) held = std::make_shared<std::atomic<uint64_t>>(0);
    uint64_t now = held->load(std::memory_order_relaxed);
    if (now > 0 && (bytes > session_buffer_bytes || now > session_buffer_bytes - bytes))  // no overflow
      return error(StatusCode::kBusy, "the session holds " + std::to_string(now) + " bytes of this target's buffers (" +
                                          std::to_string(session_buffer_bytes) + " at most)");
    held->fetch_add(bytes, std::memory_order_relaxed);
    charge->held = held;
    charge->bytes = bytes;
    if (session_bytes.size() > 4096) {  // bounded: sessions come and go; drop the counters nothing holds
      for (auto it = session_bytes.begin(); it != session_bytes.end();)
        it = it->second.use_count() == 1 ? session_bytes.erase(it) : std::next(it);
    }
    return charge;
  }

  // Engine calls that still block on the media (punches, aggregation) run on helper threads
  // (ServerConfig::media_threads per target), so the target thread keeps serving the network. Their
  // continuations come back to the target thread through `finished`. Updates and fetches never leave it: their
  // I/O goes to the target's ring and their commits to the engine's commit thread.
  std::vector<std::thread> media;
  std::mutex media_mu;
  std::condition_variable media_cv;
  std::deque<std::function<void()>> jobs;
  bool media_stop = false;
  std::mutex finished_mu;
  std::vector<std::function<void()>> finished;

  // Runs `work` on a media thread, then `then` (with work's result) on the target thread.
  template <typename T>
  void offload(std::function<T()> work, std::function<void(T&)> then) {
    {
      std::lock_guard lock(media_mu);
      jobs.push_back([this, work = std::move(work), then = std::move(then)]() mutable {
        auto result = std::make_shared<T>(work());
        {
          std::lock_guard done(finished_mu);
          finished.push_back([then = std::move(then), result]() mutable { then(*result); });
        }
        worker->signal();
      });
    }
    media_cv.notify_one();
  }

  void media_loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(media_mu);
        media_cv.wait(lock, [&] { return media_stop || !jobs.empty(); });
        if (jobs.empty()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      job();
    }
  }

  // Aggregation runs in the background, as in DAOS: versions that no snapshot pins and no update still in
  // flight could be ordered before are reclaimed every second, so overwrites do not fill the block file.
  static constexpr uint64_t kAggregationSlackNs = 100'000'000ull;
  std::multiset<uint64_t> inflight_epochs;  // epochs stamped here whose update or punch has not finished
  Clock::time_point next_aggregation = Clock::now();
  Clock::time_point last_aggregation;
  bool aggregating = false;
  std::atomic<uint64_t> aggregated_epoch{0};  // Target::aggregated_epoch

  // Under space pressure (less than a quarter of the block file free) it runs every 50 ms instead, so
  // overwrites at media speed do not run a small target out of space.
  void maybe_aggregate() {
    if (aggregating) return;
    auto now = Clock::now();
    if (now < next_aggregation) {
      engine::SpaceInfo space = engine->space();
      if (space.free_bytes * 4 >= space.total_bytes || now < last_aggregation + std::chrono::milliseconds(50)) return;
    }
    aggregating = true;
    last_aggregation = now;
    next_aggregation = now + std::chrono::seconds(1);
    uint64_t high = std::max(wall_ns(), last_epoch.load(std::memory_order_relaxed));
    uint64_t upto = high > kAggregationSlackNs ? high - kAggregationSlackNs : 0;
    if (!inflight_epochs.empty()) upto = std::min(upto, *inflight_epochs.begin() - 1);
    offload<Status>(
        [this, upto] {
          for (const Uuid& pool : engine->pool_list()) {
            auto conts = engine->cont_list(pool);
            if (!conts.is_ok()) continue;
            for (const auto& c : *conts) {
              auto st = engine->aggregate(c.id, upto);
              if (!st.is_ok() && st.status().code() != StatusCode::kUnknownContainer) return st.status();
            }
          }
          return Status::ok();
        },
        [this, upto](Status& s) {
          aggregating = false;
          if (s.is_ok()) aggregated_epoch.store(upto, std::memory_order_relaxed);
          if (!s.is_ok()) std::fprintf(stderr, "rfos target %u: aggregation: %s\n", index, s.to_string().c_str());
        });
  }

  // The target's own media ring (fetches) and how its loop sleeps on it beside the transport.
  std::unique_ptr<engine::IoRing> ring;
  transport::WakeSource ring_wake;

  void run() {
    while (!stopping.load(std::memory_order_relaxed)) {
      maybe_aggregate();
      int events = worker->progress();
      if (ring->in_flight() > 0) events += ring->poll();
      std::vector<std::function<void()>> ready;
      {
        std::lock_guard lock(finished_mu);
        ready.swap(finished);
      }
      for (auto& f : ready) f();
      if (ready.empty() && events == 0) worker->wait(100, ring->in_flight() > 0 ? &ring_wake : nullptr);
    }
    ring->drain();  // reads in flight answer (or fail) before the target goes
  }

  // A hybrid logical clock per target: wall-clock nanoseconds, strictly increasing, started past every epoch
  // the engine has recorded (Engine::high_epoch) and moved only by this target and by snapshot creation
  // (advance_clock), never by a client. 0 when the clock is exhausted (it would pass kEpochLatest - 1): a target
  // whose recorded epochs reach that far takes no more writes rather than wrap around.
  uint64_t next_epoch() {
    uint64_t last = last_epoch.load(std::memory_order_relaxed);
    for (;;) {
      if (last >= engine::kEpochLatest - 1) return 0;
      uint64_t e = std::max(wall_ns(), last + 1);
      if (last_epoch.compare_exchange_weak(last, e, std::memory_order_relaxed)) return e;
    }
  }
  void advance_clock(uint64_t e) {
    uint64_t last = last_epoch.load(std::memory_order_relaxed);
    while (e > last && !last_epoch.compare_exchange_weak(last, e, std::memory_order_relaxed)) {
    }
  }
  static Status clock_exhausted() {
    return error(StatusCode::kEpochTooOld, "the target's epoch clock is exhausted (recorded epochs reach 2^64 - 2)");
  }

  void reply(
      transport::EpHandle to, wire::Reply r, std::span<const Iov> payload = {}, transport::Done done = [](Status) {}) {
    Status s = worker->send(to, wire::encode_reply(r), payload, std::move(done));
    if (!s.is_ok()) std::fprintf(stderr, "rfos target %u: reply failed: %s\n", index, s.to_string().c_str());
  }
  // Answers with `bytes` as the reply's payload (the reply's length is its size).
  void reply_with(transport::EpHandle to, wire::Reply r, std::string bytes) {
    auto payload = std::make_shared<std::string>(std::move(bytes));
    r.length = payload->size();
    Iov v{payload->data(), payload->size()};
    reply(to, std::move(r), payload->empty() ? std::span<const Iov>() : std::span(&v, 1), [payload](Status) {});
  }

  // The continuation of a write (update or punch) stamped with `epoch`: release the epoch, then answer.
  std::function<void(Status&)> write_done(transport::EpHandle to, uint64_t id, uint64_t epoch,
                                          std::multiset<uint64_t>::iterator held) {
    return [this, to, id, epoch, held](Status& s) {
      inflight_epochs.erase(held);
      if (!s.is_ok()) return reply_error(to, id, s);
      wire::Reply r;
      r.request_id = id;
      r.epoch = epoch;
      reply(to, std::move(r));
    };
  }

  void reply_error(transport::EpHandle to, uint64_t id, const Status& s) {
    wire::Reply r;
    r.request_id = id;
    r.status = s.code();
    r.message = s.message();
    reply(to, std::move(r));
  }

  // Capabilities this target has verified: a session sends the same token with every request, so its HMAC is
  // computed once, not per request. Only tokens that verified get in; expiry is still checked every time.
  std::unordered_map<std::string, wire::Capability> verified_tokens;

  Result<wire::Capability> verified(const std::string& token, std::span<const uint8_t> key, uint64_t now) {
    auto it = verified_tokens.find(token);
    if (it != verified_tokens.end()) {
      if (it->second.expires_unix_ms > now) return it->second;
      verified_tokens.erase(it);
      return error(StatusCode::kPermissionDenied, "capability has expired");
    }
    RFOS_ASSIGN_OR_RETURN(wire::Capability cap, wire::verify_capability(token, key, now));
    if (verified_tokens.size() >= 4096) verified_tokens.clear();  // bounded: sessions come and go
    verified_tokens.emplace(token, cap);
    return cap;
  }

  Result<uint32_t> container(const Uuid& pool, const Uuid& cont) {
    auto it = conts.find({pool, cont});
    if (it != conts.end()) return it->second;
    RFOS_ASSIGN_OR_RETURN(engine::ContainerInfo info, engine->cont_open(pool, cont));
    conts[{pool, cont}] = info.id;
    return info.id;
  }

  void handle(Incoming& in) {
    auto req = wire::decode_request(in.header);
    std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(secret.data()), secret.size());
    uint64_t now = wall_ms();
    if (!in.reply_to) {
      // A sender the transport does not know yet (libfabric: only the address its message claims). It becomes a
      // peer on a request whose capability verifies; anything else is dropped unanswered, and costs nothing.
      if (!req.is_ok()) return;
      auto cap = verified(req->capability, key, now);
      if (!cap.is_ok() || revocations->revoked(cap->session, now)) return;
      auto peer = worker->adopt(in);
      if (!peer.is_ok()) return;
      in.reply_to = *peer;
    }
    if (!req.is_ok()) return reply_error(in.reply_to, 0, req.status());
    wire::Request& q = *req;
    auto cap = verified(q.capability, key, now);
    if (!cap.is_ok()) return reply_error(in.reply_to, q.request_id, cap.status());
    if (revocations->revoked(cap->session, now))
      return reply_error(in.reply_to, q.request_id, error(StatusCode::kPermissionDenied, "the session has ended"));
    if (wire::is_write(q.op) && !(cap->rights & wire::Capability::kWrite))
      return reply_error(in.reply_to, q.request_id, error(StatusCode::kPermissionDenied, "the session is read-only"));
    auto cid = container(cap->pool, cap->cont);
    if (!cid.is_ok()) {
      conts.erase({cap->pool, cap->cont});
      return reply_error(in.reply_to, q.request_id, cid.status());
    }
    // Epochs come from the target's clock: a client names one only to read at a snapshot. (A client that
    // could stamp its own writes could move every container's aggregation boundary, or the clock, to 2^64.)
    if (q.epoch != 0 && wire::is_write(q.op))
      return reply_error(in.reply_to, q.request_id,
                         error(StatusCode::kInvalidArgument,
                               "updates and punches are stamped by the target; "
                               "a request may name an epoch only to read a snapshot"));
    if (q.epoch != 0 && !engine->has_snapshot(*cid, q.epoch))
      return reply_error(in.reply_to, q.request_id,
                         error(StatusCode::kEpochTooOld, "epoch " + std::to_string(q.epoch) +
                                                             " is not a snapshot of this container (destroyed?)"));
    engine::KeyRef k{*cid, q.oid, q.dkey, q.akey};
    engine::Epoch read_at = q.epoch ? q.epoch : engine::kEpochLatest;  // reads: latest, or a snapshot's epoch
    auto kind = q.kind == wire::Kind::kSingle ? engine::ValueKind::kSingle : engine::ValueKind::kArray;
    if (bypass_media && kind == engine::ValueKind::kArray && (q.op == wire::Op::kUpdate || q.op == wire::Op::kFetch))
      return bypass(in, q, cap->pool, cap->cont);
    switch (q.op) {
      case wire::Op::kUpdate:
      case wire::Op::kFetch: {
        auto held = charge(cap->session, q.length);
        if (!held.is_ok()) return reply_error(in.reply_to, q.request_id, held.status());
        if (q.op == wire::Op::kUpdate) return update(in, q, k, kind, std::move(held).value());
        return fetch(in, q, k, kind, std::move(held).value());
      }
      case wire::Op::kArraySize: {
        auto size = engine->array_size(k, read_at);
        if (!size.is_ok()) return reply_error(in.reply_to, q.request_id, size.status());
        wire::Reply r;
        r.request_id = q.request_id;
        r.length = *size;
        return reply(in.reply_to, std::move(r));
      }
      case wire::Op::kListObjects: {
        engine::Anchor anchor;
        anchor.position = q.dkey;
        auto oids = engine->list_objects(*cid, read_at, &anchor, std::min<uint64_t>(q.length, 4096));
        if (!oids.is_ok()) return reply_error(in.reply_to, q.request_id, oids.status());
        std::string payload;
        for (const ObjectId& o : *oids) {
          payload.append(reinterpret_cast<const char*>(&o.hi), 8);
          payload.append(reinterpret_cast<const char*>(&o.lo), 8);
        }
        wire::Reply r;
        r.request_id = q.request_id;
        r.message = anchor.position;
        r.epoch = anchor.done ? 1 : 0;
        return reply_with(in.reply_to, std::move(r), std::move(payload));
      }
      case wire::Op::kListDkeys:
      case wire::Op::kListAkeys: {
        engine::Anchor anchor;
        anchor.position = q.anchor;
        size_t max = std::clamp<uint64_t>(q.length, 1, 1024);
        auto keys = q.op == wire::Op::kListDkeys ? engine->list_dkeys(*cid, q.oid, read_at, &anchor, max)
                                                 : engine->list_akeys(*cid, q.oid, q.dkey, read_at, &anchor, max);
        if (!keys.is_ok()) return reply_error(in.reply_to, q.request_id, keys.status());
        wire::KeyPage page;
        page.anchor = anchor.position;
        page.done = anchor.done;
        page.keys = std::move(keys).value();
        if (q.op == wire::Op::kListDkeys && !q.akey.empty()) {  // with each dkey's value of that akey
          page.with_values = true;
          for (const std::string& dk : page.keys) {
            auto v = engine->fetch({{*cid, q.oid, dk, q.akey}, read_at, engine::ValueKind::kSingle});
            page.values.push_back(v.is_ok() ? std::move(v).value() : std::string());
          }
        }
        wire::Reply r;
        r.request_id = q.request_id;
        return reply_with(in.reply_to, std::move(r), wire::encode_key_page(page));
      }
      case wire::Op::kListExtents: {
        engine::Anchor anchor;
        anchor.position = q.anchor;
        size_t max = std::clamp<uint64_t>(q.length, 1, wire::kMaxExtentsPerPage);
        auto extents = engine->list_extents(k, read_at, &anchor, max);
        if (!extents.is_ok()) return reply_error(in.reply_to, q.request_id, extents.status());
        wire::ExtentPage page;
        page.anchor = anchor.position;
        page.done = anchor.done;
        for (const engine::Extent& e : *extents) page.extents.emplace_back(e.offset, e.length);
        wire::Reply r;
        r.request_id = q.request_id;
        return reply_with(in.reply_to, std::move(r), wire::encode_extent_page(page));
      }
      case wire::Op::kObjectEnd: {
        auto end = object_end(*cid, q.oid, q.akey, read_at);
        if (!end.is_ok()) return reply_error(in.reply_to, q.request_id, end.status());
        wire::Reply r;
        r.request_id = q.request_id;
        r.length = *end;
        return reply(in.reply_to, std::move(r));
      }
      case wire::Op::kPunchDkey:
      case wire::Op::kPunchAkey:
      case wire::Op::kPunchExtent:
      case wire::Op::kPunchObject: {
        uint64_t epoch = next_epoch();
        if (epoch == 0) return reply_error(in.reply_to, q.request_id, clock_exhausted());
        auto to = in.reply_to;
        auto id = q.request_id;
        auto held = inflight_epochs.insert(epoch);
        offload<Status>(
            [this, cid = *cid, oid = q.oid, dk = q.dkey, ak = q.akey, op = q.op, off = q.offset, len = q.length,
             epoch] {
              if (op == wire::Op::kPunchDkey) return engine->punch_dkey(cid, oid, dk, epoch);
              if (op == wire::Op::kPunchAkey) return engine->punch_akey({cid, oid, dk, ak}, epoch);
              if (op == wire::Op::kPunchExtent) return engine->punch_extent({cid, oid, dk, ak}, epoch, off, len);
              return engine->punch_object(cid, oid, epoch);
            },
            write_done(to, id, epoch, held));
        return;
      }
    }
  }

  // The size of the array `akey` under the greatest dkey (in byte order) that holds one; 0 when none. The
  // layer above lays files out so that this is a file's end (client/file_layout.h); the target knows nothing of
  // it.
  Result<uint64_t> object_end(uint32_t cid, const ObjectId& oid, const std::string& akey, engine::Epoch epoch) {
    std::vector<std::string> chunks;
    engine::Anchor anchor;
    while (!anchor.done) {
      RFOS_ASSIGN_OR_RETURN(auto keys, engine->list_dkeys(cid, oid, epoch, &anchor, 1024));
      for (std::string& k : keys) chunks.push_back(std::move(k));
    }
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) {
      auto size = engine->array_size({cid, oid, *it, akey}, epoch);
      if (size.is_ok()) return *size;
      if (size.status().code() != StatusCode::kNotFound) return size.status();
    }
    return uint64_t{0};
  }

  // Conditional inserts (kIfAbsent) in flight, by key: a second one on the same key waits its turn (kBusy,
  // the client retries), so of two racing creates exactly one wins.
  std::set<std::string> if_absent_keys;
  struct KeyHold {
    KeyHold(Impl* i, std::string k) : impl(i), key(std::move(k)) { impl->if_absent_keys.insert(key); }
    KeyHold(const KeyHold&) = delete;
    KeyHold& operator=(const KeyHold&) = delete;
    ~KeyHold() { impl->if_absent_keys.erase(key); }
    Impl* impl;
    std::string key;
  };

  Result<std::shared_ptr<KeyHold>> hold_if_absent(const engine::KeyRef& k, engine::ValueKind kind) {
    std::string key = std::to_string(k.cont) + '/' + k.oid.to_string() + '/' + std::to_string(k.dkey.size()) + '/' +
                      std::string(k.dkey) + std::string(k.akey);
    if (if_absent_keys.count(key)) return error(StatusCode::kBusy, "a conditional update of this key is in flight");
    Status present = Status::ok();
    if (kind == engine::ValueKind::kSingle)
      present = engine->fetch_begin({k, engine::kEpochLatest, kind, 0, 0}).status();
    else
      present = engine->array_size(k, engine::kEpochLatest).status();
    if (present.is_ok()) return error(StatusCode::kAlreadyExists, "the key already has a value");
    if (present.code() != StatusCode::kNotFound) return present;
    return std::make_shared<KeyHold>(this, std::move(key));
  }

  // --bypass-media: the data plane without the engine. Updates land in scratch memory and are dropped; fetches
  // answer zeros with their true checksums. Everything before (decode, capability, rights, container) still runs.
  bool bypass_media = false;
  // Lands an update's bytes in dst: the message's payload (rendezvous), or on the explicit path a get from the
  // client's registered memory.
  Status land(Incoming& in, const wire::Request& q, std::span<const Iov> dst, transport::Done done) {
    return q.rkey.empty() ? worker->fetch_payload(in, dst, std::move(done))
                          : worker->get(in.reply_to, q.remote_addr, q.rkey, dst, std::move(done));
  }

  // A fetch's answer on the explicit path: write src into the client's memory, then the reply (no payload) once
  // the bytes are visible there. `keep` holds src's buffers until the transport is done with them.
  void put_then_reply(transport::EpHandle to, std::span<const Iov> src, uint64_t remote_addr, const std::string& rkey,
                      wire::Reply r, std::shared_ptr<const void> keep) {
    uint64_t id = r.request_id;
    Status s = worker->put(to, src, remote_addr, rkey, [this, to, keep, r = std::move(r)](Status put) mutable {
      if (!put.is_ok()) return reply_error(to, r.request_id, put);
      reply(to, std::move(r));
    });
    if (!s.is_ok()) reply_error(to, id, s);
  }

  std::vector<uint8_t> zeros;                                   // 1 MiB, shared by every bypassed fetch
  std::vector<uint8_t> sink;                                    // 1 MiB, where every bypassed update lands
  std::map<std::pair<Uuid, Uuid>, uint32_t> bypass_csum_chunk;  // per container, looked up once

  void bypass(Incoming& in, wire::Request& q, const Uuid& pool, const Uuid& cont) {
    if (zeros.empty()) zeros.assign(1u << 20, 0);
    uint64_t len = q.op == wire::Op::kUpdate ? (q.rkey.empty() ? in.payload_bytes : q.length) : q.length;
    if (len == 0 || len > zeros.size())
      return reply_error(in.reply_to, q.request_id, error(StatusCode::kTooLarge, "bypass: 1 B .. 1 MiB per request"));
    auto to = in.reply_to;
    wire::Reply r;
    r.request_id = q.request_id;
    if (q.op == wire::Op::kFetch) {
      auto known = bypass_csum_chunk.find({pool, cont});
      if (known == bypass_csum_chunk.end()) {
        auto info = engine->cont_open(pool, cont);
        uint32_t c = info.is_ok() && info->props.csum_chunk_bytes ? info->props.csum_chunk_bytes : 4096;
        known = bypass_csum_chunk.emplace(std::make_pair(pool, cont), c).first;
      }
      uint32_t chunk = known->second;
      r.length = len;
      chunk_crcs(q.offset, {zeros.data(), len}, chunk, &r.csums);
      Iov v{zeros.data(), len};
      if (!q.rkey.empty()) return put_then_reply(to, {&v, 1}, q.remote_addr, q.rkey, std::move(r), nullptr);
      return reply(to, std::move(r), {&v, 1});
    }
    // Every bypassed update lands in the same scratch buffer: its bytes are dropped anyway.
    if (sink.empty()) sink.resize(zeros.size());
    Iov v{sink.data(), len};
    auto done = [this, to, r](Status got) mutable {
      if (!got.is_ok()) return;  // the client died mid-transfer: nothing to answer
      reply(to, std::move(r));
    };
    Status s = land(in, q, {&v, 1}, std::move(done));
    if (!s.is_ok()) reply_error(to, q.request_id, s);
  }

  void update(Incoming& in, wire::Request& q, const engine::KeyRef& k, engine::ValueKind kind,
              std::shared_ptr<Charge> charge) {
    bool explicit_path = !q.rkey.empty();  // the data stays in the client's memory until the target reads it
    uint64_t carried = explicit_path ? q.length : in.payload_bytes;
    if (carried != q.length || (explicit_path && in.payload_bytes != 0))
      return reply_error(in.reply_to, q.request_id,
                         error(StatusCode::kInvalidArgument,
                               "payload has " + std::to_string(in.payload_bytes) + " bytes, the request says " +
                                   std::to_string(q.length) + (explicit_path ? " with a memory descriptor" : "")));
    std::shared_ptr<KeyHold> hold;  // released when the update finished, whichever way
    if (q.flags & wire::kIfAbsent) {
      auto h = hold_if_absent(k, kind);
      if (!h.is_ok()) return reply_error(in.reply_to, q.request_id, h.status());
      hold = std::move(h).value();
    }
    uint64_t epoch = next_epoch();
    if (epoch == 0) return reply_error(in.reply_to, q.request_id, clock_exhausted());
    if (RFOS_FAULT("target.busy"))
      return reply_error(in.reply_to, q.request_id, error(StatusCode::kBusy, "engine buffers exhausted (injected)"));
    auto tx = engine->update_begin({k, epoch, kind, q.offset, q.length});
    if (!tx.is_ok()) return reply_error(in.reply_to, q.request_id, tx.status());
    auto held = inflight_epochs.insert(epoch);
    auto shared = std::make_shared<engine::UpdateTx>(std::move(tx).value());
    std::vector<Iov> dst;
    for (const engine::IoBuf& b : shared->buffers()) dst.push_back({b.data, b.len});
    auto to = in.reply_to;
    auto id = q.request_id;
    auto csums = std::make_shared<std::vector<uint32_t>>(std::move(q.csums));
    // The payload lands in the engine's buffers (pulled by the fabric's rendezvous, or read from the client's
    // registered memory on the explicit path); then verify, write (on the target's ring), commit (a group
    // commit on the engine's commit thread), answer (back on this thread).
    auto landed = [this, shared, csums, to, id, epoch, held, hold, charge](Status got) {
      if (!got.is_ok()) {
        inflight_epochs.erase(held);
        engine->update_abort(*shared);  // the client died mid-transfer: nothing is stored
        return;
      }
      engine->update_submit(*ring, std::move(*shared), std::move(*csums),
                            [done = write_done(to, id, epoch, held), hold, charge](Status s) { done(s); });
    };
    Status s = land(in, q, dst, std::move(landed));
    if (!s.is_ok()) {
      inflight_epochs.erase(held);
      engine->update_abort(*shared);
      reply_error(in.reply_to, q.request_id, s);
    }
  }

  // Fetches run on the target thread: the index lookup now, the block reads on the target's own ring, the
  // reply from the ring's completion (no hand-off to a media thread and back).
  void fetch(Incoming& in, wire::Request& q, const engine::KeyRef& k, engine::ValueKind kind,
             std::shared_ptr<Charge> charge) {
    // The client checks every chunk against its checksum (wire-format.md), so chunks the engine returns as
    // stored are verified there, once, end to end.
    engine::FetchOp op{k, q.epoch ? q.epoch : engine::kEpochLatest, kind, q.offset, q.length, true};
    auto to = in.reply_to;
    auto id = q.request_id;
    auto descriptor = std::make_shared<std::pair<uint64_t, std::string>>(q.remote_addr, std::move(q.rkey));
    engine->fetch_submit(*ring, op, [this, to, id, descriptor, charge](Result<engine::FetchTx> tx) {
      if (!tx.is_ok()) return reply_error(to, id, tx.status());
      auto shared = std::make_shared<std::pair<engine::FetchTx, std::shared_ptr<Charge>>>(std::move(tx).value(),
                                                                                          std::move(charge));
      const engine::FetchTx& fetched = shared->first;
      shared->second->grow_to(fetched.length());
      wire::Reply r;
      r.request_id = id;
      r.length = fetched.length();
      r.csums.assign(fetched.csums().begin(), fetched.csums().end());
      std::vector<Iov> src;
      for (const engine::IoBuf& b : fetched.buffers()) src.push_back({b.data, b.len});
      // The engine buffers (and the session's charge for them) stay until the transport is done with them.
      if (descriptor->second.empty()) return reply(to, std::move(r), src, [shared](Status) {});
      put_then_reply(to, src, descriptor->first, descriptor->second, std::move(r), shared);
    });
  }
};

Result<std::unique_ptr<Target>> Target::start(uint32_t index, Engine* engine, const ServerConfig& config,
                                              const std::string& secret, std::shared_ptr<Revocations> revocations) {
  auto impl = std::make_unique<Impl>();
  impl->bypass_media = config.bypass_media;
  impl->session_buffer_bytes = config.session_buffer_bytes;
  impl->index = index;
  impl->engine = engine;
  impl->last_epoch = engine->high_epoch();
  impl->secret = secret;
  impl->revocations = std::move(revocations);
  transport::WorkerOptions wo;
  wo.payload_timeout_ms = config.payload_timeout_ms;
  wo.sleep_when_waits_long = true;
  wo.introduced_peers_only = true;
  Impl* self = impl.get();
  // A peer is introduced only by a live capability: a target makes no endpoint for anyone else's hello.
  wo.admit_hello = [self](std::string_view token) {
    std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(self->secret.data()), self->secret.size());
    uint64_t now = wall_ms();
    auto cap = self->verified(std::string(token), key, now);
    return cap.is_ok() && !self->revocations->revoked(cap->session, now);
  };
  RFOS_ASSIGN_OR_RETURN(impl->worker, transport::Worker::create(config.provider, wo));
  RFOS_ASSIGN_OR_RETURN(impl->ring, engine->make_io_ring());
  engine::IoRing* ring = impl->ring.get();
  impl->ring_wake = {ring->event_fd(), [ring] { return ring->ready(); }, [ring] { return ring->arm(); }};
  impl->address = impl->worker->address();
  Impl* raw = impl.get();
  impl->worker->on_message([raw](Incoming& in) { raw->handle(in); });
  impl->worker->on_peer_failure([](transport::EpHandle, const Status&) {
    // In-flight transfers of that peer complete with errors and release their engine buffers.
  });
  for (uint32_t i = 0; i < std::max(1u, config.media_threads); ++i)
    impl->media.emplace_back([raw] { raw->media_loop(); });
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<Target>(new Target(std::move(impl)));
}

Target::Target(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Target::~Target() { stop(); }
const std::string& Target::address() const { return impl_->address; }
uint64_t Target::last_epoch() const { return impl_->last_epoch.load(std::memory_order_relaxed); }
uint64_t Target::aggregated_epoch() const { return impl_->aggregated_epoch.load(std::memory_order_relaxed); }
void Target::advance_clock(uint64_t epoch) { impl_->advance_clock(epoch); }

void Target::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->stopping = true;
  impl_->worker->signal();
  impl_->thread.join();
  {
    std::lock_guard lock(impl_->media_mu);
    impl_->media_stop = true;
  }
  impl_->media_cv.notify_all();
  for (auto& t : impl_->media) t.join();
  impl_->finished.clear();  // continuations of a stopped target are dropped (their engine work is done)
}

}  // namespace rfos::server
