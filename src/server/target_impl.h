// Inside a target (server/target.h): what the loop, the admission of a request and its handlers share. Private
// to server/: target.cc has the loop, the clock, aggregation and admission; target_handlers.cc one handler per
// operation (decode done, engine, encode); session_buffers.h the per-session charge of engine buffers.
//
// Thread-safety: everything here is the target thread's, unless marked atomic.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/worker_pool.h"
#include "engine/engine.h"
#include "server/session_buffers.h"
#include "server/target.h"
#include "transport/transport.h"
#include "wire/capability.h"
#include "wire/data_plane.h"

namespace rfos::server {

class Target::Impl {
 public:
  using Clock = std::chrono::steady_clock;

  // What a handler gets: the request, decoded and admitted (capability verified, rights checked, container
  // open), and where to answer.
  struct Call {
    transport::Incoming& in;
    wire::Request& q;
    const wire::Capability& cap;
    uint32_t cid = 0;  // the engine's container handle
    engine::KeyRef key;
    engine::Epoch read_at = engine::kEpochLatest;  // reads: latest, or a snapshot's epoch
    engine::ValueKind kind = engine::ValueKind::kArray;
    transport::EpHandle to() const { return in.reply_to; }
    uint64_t id() const { return q.request_id; }
  };
  using Handler = void (Impl::*)(Call&);

  uint32_t index = 0;
  uint32_t count = 1;  // targets of the server: where placement puts a key
  engine::Engine* engine = nullptr;
  std::string secret;
  std::shared_ptr<Revocations> revocations;
  std::shared_ptr<QosLedger> qos;
  std::shared_ptr<GrantClaims> claims;
  std::unique_ptr<transport::Worker> worker;
  std::string address;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> last_epoch{0};              // the clock (next_epoch); raised by snapshot creation too
  std::map<std::pair<Uuid, Uuid>, uint32_t> conts;  // (pool, cont) -> engine handle
  SessionBuffers session_buffers;
  bool bypass_media = false;

  // --- the loop (target.cc) ---
  void run();
  // Runs `work` on a media helper thread, then `then` (with work's result) on the target thread.
  template <typename T>
  void offload(std::function<T()> work, std::function<void(T&)> then, WorkerPool* pool = nullptr);
  // Engine calls that still block on the media (punches, aggregation, syncs) run on helpers, so the target
  // thread keeps serving the network; their continuations come back through `finished`.
  std::unique_ptr<WorkerPool> media;
  // Namespace operations that found the engine committing another's batch, in order, and the syncs of durable
  // ones (target_namespace.cc). `namespace_behind`: the operations handed to it and not answered yet (not the
  // syncs, which commit nothing); while any, the next operations go there too.
  std::unique_ptr<WorkerPool> namespace_ops;
  uint32_t namespace_behind = 0;
  std::mutex finished_mu;
  std::vector<std::function<void()>> finished;
  std::unique_ptr<engine::IoRing> ring;  // the target's own media ring (fetches, update writes)
  transport::WakeSource ring_wake;

  // --- aggregation (target.cc) ---
  static constexpr uint64_t kAggregationSlackNs = 50'000'000ull;
  std::multiset<uint64_t> inflight_epochs;  // epochs stamped here whose update or punch has not finished
  Clock::time_point next_aggregation = Clock::now();
  Clock::time_point last_aggregation;
  bool aggregating = false;
  std::atomic<uint64_t> aggregated_epoch{0};
  void maybe_aggregate();

  // --- the clock (target.cc) ---
  uint64_t next_epoch();
  void advance_clock(uint64_t e);
  static Status clock_exhausted();

  // --- admission (target.cc) ---
  void handle(transport::Incoming& in);
  Result<wire::Capability> verified(const std::string& token, uint64_t now);
  std::unordered_map<std::string, wire::Capability> verified_tokens;
  Result<uint32_t> container(const Uuid& pool, const Uuid& cont);
  // Writes carried out (or being carried out), by (session, request id): a fabric that delivers a request
  // twice (the simulated one can; a buggy or hostile peer might) must not apply it twice, which could undo a
  // later write. A write refused before it began, or refused as Busy or too old, is not recorded: the client
  // sends it again with the same id. Bounded: the oldest go first.
  struct Executed {
    Uuid session;
    uint64_t id = 0;
    bool operator==(const Executed&) const = default;
  };
  struct ExecutedHash {
    size_t operator()(const Executed& e) const { return std::hash<uint64_t>()(e.id ^ e.session.bytes[0]); }
  };
  static constexpr size_t kMaxExecuted = 1 << 16;
  std::unordered_set<Executed, ExecutedHash> executed;
  std::deque<Executed> executed_order;
  void executing(const Call& c);
  void forget_execution(const Uuid& session, uint64_t id);

  // --- answers (target.cc) ---
  void reply(
      transport::EpHandle to, wire::Reply r, std::span<const transport::Iov> payload = {},
      transport::Done done = [](Status) {});
  void reply_with(transport::EpHandle to, wire::Reply r, std::string bytes);
  void reply_error(transport::EpHandle to, uint64_t id, const Status& s);
  void reply_length(Call& c, uint64_t length);
  // The continuation of a write stamped with `epoch`: release the epoch, then answer.
  std::function<void(Status&)> write_done(Call& c, uint64_t epoch, std::multiset<uint64_t>::iterator held);

  // --- handlers (target_handlers.cc), one per operation ---
  static Handler handler_for(wire::Op op);
  void handle_io(Call& c);  // update and fetch: charged to the session's buffers
  void handle_array_size(Call& c);
  void handle_list_objects(Call& c);
  void handle_list_keys(Call& c);
  void handle_list_extents(Call& c);
  void handle_object_end(Call& c);
  void handle_punch(Call& c);
  void handle_namespace(Call& c);  // target_namespace.cc
  void handle_namespace_read(Call& c);
  Status namespace_payload(Call& c, std::function<void(Status, std::shared_ptr<const std::string>)> landed);
  void handle_sync(Call& c);
  void handle_watch(Call& c);
  void handle_grant(Call& c);  // target_grants.cc

  // --- grants (target_grants.cc) ---
  // Memory a session granted (wire kGrant) for the fetches or updates of any session that name the grant to move
  // bytes into or out of: an S3 RDMA token's buffer. The bytes move over the granting session's own endpoint, so a
  // grant never aims this target at anyone else's memory; the first use claims it, and no other use moves bytes
  // with it (a replayed token moves nothing); it ends at its lifetime, its revocation, its session's end, or the
  // failure of its endpoint. Bounded, per session and in all.
  struct Grant {
    transport::EpHandle via = 0;
    Uuid session;
    uint64_t addr = 0;
    uint64_t length = 0;
    std::string rkey;
    bool fetch = false;  // fetches write into it; else updates read from it
    std::string scope;
    uint64_t until_ms = 0;  // wall_ms
  };
  static constexpr size_t kMaxGrants = 4096;
  static constexpr size_t kMaxGrantsPerSession = 64;
  static constexpr uint64_t kDefaultGrantMs = 60000;
  std::unordered_map<std::string, Grant> grants;  // by id
  // Where the bytes of a fetch or update go to or come from on the explicit path: the requester's memory (its
  // descriptor) or memory granted by another session (its grant reference, claimed here for the request's use).
  struct Remote {
    transport::EpHandle via = 0;
    uint64_t addr = 0;
    std::string rkey;
    bool granted = false;
  };
  Result<Remote> remote_of(const Call& c);
  void drop_grants(transport::EpHandle via);

  // --- watchers (target_namespace.cc) ---
  // Endpoints that asked for notices of the namespace changes committed here (wire kWatch), each until its lease
  // or its capability ends, its session is revoked, or a notice to it fails; bounded.
  struct Watcher {
    transport::EpHandle to = 0;
    Uuid session;
    uint32_t cid = 0;
    uint64_t tag = 0;
    uint64_t until_ms = 0;  // wall_ms
    // A change to container `c` whose request carried tag `t` is news to this watcher (tag 0: to every one).
    bool hears(uint32_t c, uint64_t t) const { return cid == c && (t == 0 || tag != t); }
  };
  static constexpr size_t kMaxWatchers = 256;
  std::vector<Watcher> watchers;
  // Sends `notice` (an encoded posix::Notice) to the watchers of container `cid` but those tagged `tag`.
  void notify_watchers(uint32_t cid, uint64_t tag, std::string notice);
  // Whether a change to container `cid` whose request carried `tag` has a watcher to tell.
  bool watched_by_others(uint32_t cid, uint64_t tag) const;
  void drop_watchers(transport::EpHandle to);
  void update(Call& c, std::shared_ptr<SessionBuffers::Charge> charge);
  void fetch(Call& c, std::shared_ptr<SessionBuffers::Charge> charge);
  Result<uint64_t> object_end(uint32_t cid, const ObjectId& oid, const std::string& akey, engine::Epoch epoch);
  // Up to `max` dkeys of `oid` after *anchor that start with `prefix`, each with its single value under `akey`
  // ("" where none): a listing with its values (a directory's entries, a name index's page). The scan brings most
  // values; the others are fetched. Namespace operations call it too (as object_end).
  Result<std::vector<std::pair<std::string, std::string>>> dkeys_with_values(uint32_t cid, const ObjectId& oid,
                                                                             std::string_view akey, engine::Epoch epoch,
                                                                             engine::Anchor* anchor, size_t max,
                                                                             std::string_view prefix = {});

  // Conditional inserts (kIfAbsent) in flight, by key: a second one on the same key waits its turn (kBusy, the
  // client retries), so of two racing creates exactly one wins.
  std::set<std::string> if_absent_keys;
  struct KeyHold {
    KeyHold(Impl* i, std::string k) : impl(i), key(std::move(k)) { impl->if_absent_keys.insert(key); }
    KeyHold(const KeyHold&) = delete;
    KeyHold& operator=(const KeyHold&) = delete;
    ~KeyHold() { impl->if_absent_keys.erase(key); }
    Impl* impl;
    std::string key;
  };
  Result<std::shared_ptr<KeyHold>> hold_if_absent(const engine::KeyRef& k, engine::ValueKind kind);

  // Lands an update's bytes in dst: the message's payload (rendezvous), or on the explicit path a get from the
  // client's registered memory.
  Status land(transport::Incoming& in, const Remote& from, std::span<const transport::Iov> dst, transport::Done done);
  // A fetch's answer on the explicit path: write src into the remote memory, then the reply (no payload) to `to`
  // once the bytes are visible there. `keep` holds src's buffers until the transport is done with them.
  void put_then_reply(transport::EpHandle to, std::span<const transport::Iov> src, const Remote& into, wire::Reply r,
                      std::shared_ptr<const void> keep);

  // --bypass-media: the data plane without the engine. Updates land in scratch memory and are dropped; fetches
  // answer zeros with their true checksums. Everything before (decode, capability, rights, container) runs.
  std::vector<uint8_t> zeros;                                   // 1 MiB, shared by every bypassed fetch
  std::vector<uint8_t> sink;                                    // 1 MiB, where every bypassed update lands
  std::map<std::pair<Uuid, Uuid>, uint32_t> bypass_csum_chunk;  // per container, looked up once
  void bypass(Call& c);
};

template <typename T>
void Target::Impl::offload(std::function<T()> work, std::function<void(T&)> then, WorkerPool* pool) {
  (pool ? pool : media.get())->post([this, work = std::move(work), then = std::move(then)]() mutable {
    auto result = std::make_shared<T>(work());
    {
      std::lock_guard done(finished_mu);
      finished.push_back([then = std::move(then), result]() mutable { then(*result); });
    }
    worker->signal();
  });
}

}  // namespace rfos::server
