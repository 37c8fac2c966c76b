#include "server/target.h"

#include <spdlog/spdlog.h>
#include <algorithm>

#include "common/clock.h"
#include "server/target_impl.h"

namespace rfos::server {

using transport::Incoming;
using transport::Iov;

void Revocations::revoke(const Uuid& session, uint64_t expires_unix_ms) {
  std::lock_guard lock(mu_);
  ended_[session] = expires_unix_ms;
}

bool Revocations::revoked(const Uuid& session, uint64_t now_unix_ms) {
  std::lock_guard lock(mu_);
  std::erase_if(ended_, [&](const auto& e) { return e.second <= now_unix_ms; });
  return ended_.count(session) != 0;
}

uint64_t QosLedger::admit(const wire::CapabilityQos& qos, uint64_t bytes, uint64_t now_ns) {
  std::lock_guard lock(mu_);
  // Keys are signed by this server, so only trusted agents make them; bounded anyway.
  if (tenants_.size() >= 65536 && !tenants_.count(qos.key)) tenants_.clear();
  Tenant& t = tenants_[qos.key];
  if (!t.buckets || !(t.limits == qos)) {  // new, or its agent changed the limits: they start over
    t.limits = qos;
    QosLimits l;
    l.iops = qos.iops;
    l.burst_ios = qos.burst_ios;
    l.bytes_per_s = double(qos.bytes_per_s);
    l.burst_bytes = double(qos.burst_bytes);
    t.buckets = std::make_unique<TenantQos>(l, now_ns);
  }
  return t.buckets->admit(bytes, now_ns);
}

// Aggregation runs in the background, as in DAOS: versions that no snapshot pins and no update still in flight
// could be ordered before are reclaimed every second (in the objects written since the last pass), so overwrites
// do not fill the block file. After a pass that merged a grain (small overwrites piling up in a file, whose every
// read walks its records) the next comes after 200 ms, so such a file is soon in few records again; a pass scans
// every record of the objects it looks at, so passes are not that frequent otherwise. Under space pressure (less
// than a quarter of the block file free) it runs every 50 ms, so overwrites at media speed do not run a small
// target out of space; and so it does when a read or a size walked an array's piled-up records (small overwrites
// and truncates of one file in quick succession, each adding a record its next read steps over).
void Target::Impl::maybe_aggregate() {
  if (aggregating) return;
  auto now = Clock::now();
  if (now < next_aggregation) {
    if (now < last_aggregation + std::chrono::nanoseconds(kAggregationSlackNs)) return;
    engine::SpaceInfo space = engine->space();
    if (space.free_bytes * 4 >= space.total_bytes && !engine->records_piled_up()) return;
  }
  aggregating = true;
  last_aggregation = now;
  next_aggregation = now + std::chrono::seconds(1);
  uint64_t high = std::max(wall_ns(), last_epoch.load(std::memory_order_relaxed));
  uint64_t upto = high > kAggregationSlackNs ? high - kAggregationSlackNs : 0;
  if (!inflight_epochs.empty()) upto = std::min(upto, *inflight_epochs.begin() - 1);
  auto merged = std::make_shared<uint64_t>(0);
  offload<Status>(
      [this, upto, merged] {
        // Lazy writes become durable within a pass even when nobody syncs (a local file system's commit
        // interval), and the markers open() would check after a power cut stay few.
        RFOS_RETURN_IF_ERROR(engine->sync());
        for (const Uuid& pool : engine->pool_list()) {
          auto conts = engine->cont_list(pool);
          if (!conts.is_ok()) continue;
          for (const auto& c : *conts) {
            auto st = engine->aggregate(c.id, upto);
            if (!st.is_ok() && st.status().code() != StatusCode::kUnknownContainer) return st.status();
            if (st.is_ok()) *merged += st->grains_merged;
          }
        }
        return Status::ok();
      },
      [this, upto, merged](Status& s) {
        aggregating = false;
        if (*merged > 0)
          next_aggregation = std::min(next_aggregation, last_aggregation + std::chrono::milliseconds(200));
        if (s.is_ok()) aggregated_epoch.store(upto, std::memory_order_relaxed);
        if (!s.is_ok()) spdlog::error("target {}: aggregation: {}", index, s.to_string());
      });
}

void Target::Impl::run() {
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

// A hybrid logical clock per target: wall-clock nanoseconds, strictly increasing, started past every epoch the
// engine has recorded (Engine::high_epoch) and moved only by this target and by snapshot creation
// (advance_clock), never by a client. 0 when the clock is exhausted (it would pass kEpochLatest - 1): a target
// whose recorded epochs reach that far takes no more writes rather than wrap around.
uint64_t Target::Impl::next_epoch() {
  uint64_t last = last_epoch.load(std::memory_order_relaxed);
  for (;;) {
    if (last >= engine::kEpochLatest - 1) return 0;
    uint64_t e = std::max(wall_ns(), last + 1);
    if (last_epoch.compare_exchange_weak(last, e, std::memory_order_relaxed)) return e;
  }
}

void Target::Impl::advance_clock(uint64_t e) {
  uint64_t last = last_epoch.load(std::memory_order_relaxed);
  while (e > last && !last_epoch.compare_exchange_weak(last, e, std::memory_order_relaxed)) {
  }
}

Status Target::Impl::clock_exhausted() {
  return error(StatusCode::kEpochTooOld, "the target's epoch clock is exhausted (recorded epochs reach 2^64 - 2)");
}

void Target::Impl::reply(transport::EpHandle to, wire::Reply r, std::span<const Iov> payload, transport::Done done) {
  Status s = worker->send(to, wire::encode_reply(r), payload, std::move(done));
  if (!s.is_ok()) spdlog::warn("target {}: reply failed: {}", index, s.to_string());
}

// Answers with `bytes` as the reply's payload (the reply's length is its size).
void Target::Impl::reply_with(transport::EpHandle to, wire::Reply r, std::string bytes) {
  auto payload = std::make_shared<std::string>(std::move(bytes));
  r.length = payload->size();
  Iov v{payload->data(), payload->size()};
  reply(to, std::move(r), payload->empty() ? std::span<const Iov>() : std::span(&v, 1), [payload](Status) {});
}

void Target::Impl::reply_error(transport::EpHandle to, uint64_t id, const Status& s) {
  wire::Reply r;
  r.request_id = id;
  r.status = s.code();
  r.message = s.message();
  reply(to, std::move(r));
}

void Target::Impl::reply_length(Call& c, uint64_t length) {
  wire::Reply r;
  r.request_id = c.id();
  r.length = length;
  reply(c.to(), std::move(r));
}

std::function<void(Status&)> Target::Impl::write_done(Call& c, uint64_t epoch, std::multiset<uint64_t>::iterator held) {
  return [this, to = c.to(), id = c.id(), session = c.cap.session, epoch, held](Status& s) {
    inflight_epochs.erase(held);
    if (!s.is_ok()) {
      // Not carried out: the client sends the same request again (Busy, or a snapshot overtook it).
      if (s.code() == StatusCode::kBusy || s.code() == StatusCode::kEpochTooOld) forget_execution(session, id);
      return reply_error(to, id, s);
    }
    wire::Reply r;
    r.request_id = id;
    r.epoch = epoch;
    reply(to, std::move(r));
  };
}

void Target::Impl::executing(const Call& c) {
  if (!executed.insert({c.cap.session, c.id()}).second) return;
  executed_order.push_back({c.cap.session, c.id()});
  if (executed_order.size() > kMaxExecuted) {
    executed.erase(executed_order.front());
    executed_order.pop_front();
  }
}

void Target::Impl::forget_execution(const Uuid& session, uint64_t id) { executed.erase({session, id}); }

// Capabilities this target has verified: a session sends the same token with every request, so its HMAC is
// computed once, not per request. Only tokens that verified get in; expiry is still checked every time.
Result<wire::Capability> Target::Impl::verified(const std::string& token, uint64_t now) {
  auto it = verified_tokens.find(token);
  if (it != verified_tokens.end()) {
    if (it->second.expires_unix_ms > now) return it->second;
    verified_tokens.erase(it);
    return error(StatusCode::kPermissionDenied, "capability has expired");
  }
  std::span<const uint8_t> key(reinterpret_cast<const uint8_t*>(secret.data()), secret.size());
  RFOS_ASSIGN_OR_RETURN(wire::Capability cap, wire::verify_capability(token, key, now));
  if (verified_tokens.size() >= 4096) verified_tokens.clear();  // bounded: sessions come and go
  verified_tokens.emplace(token, cap);
  return cap;
}

Result<uint32_t> Target::Impl::container(const Uuid& pool, const Uuid& cont) {
  auto it = conts.find({pool, cont});
  if (it != conts.end()) return it->second;
  RFOS_ASSIGN_OR_RETURN(engine::ContainerInfo info, engine->cont_open(pool, cont));
  conts[{pool, cont}] = info.id;
  return info.id;
}

// Admission: decode, capability (signature, expiry, revocation), rights, container, epoch; then the handler.
void Target::Impl::handle(Incoming& in) {
  auto req = wire::decode_request(in.header);
  uint64_t now = wall_ms();
  if (!in.reply_to) {
    // A sender the transport does not know yet (libfabric: only the address its message claims). It becomes a
    // peer on a request whose capability verifies; anything else is dropped unanswered, and costs nothing.
    if (!req.is_ok()) return;
    auto cap = verified(req->capability, now);
    if (!cap.is_ok() || revocations->revoked(cap->session, now)) return;
    auto peer = worker->adopt(in);
    if (!peer.is_ok()) return;
    in.reply_to = *peer;
  }
  if (!req.is_ok()) return reply_error(in.reply_to, wire::request_id_of(in.header), req.status());
  wire::Request& q = *req;
  auto cap = verified(q.capability, now);
  if (!cap.is_ok()) return reply_error(in.reply_to, q.request_id, cap.status());
  if (revocations->revoked(cap->session, now))
    return reply_error(in.reply_to, q.request_id, error(StatusCode::kPermissionDenied, "the session has ended"));
  if (wire::is_write(q.op) && !(cap->rights & wire::Capability::kWrite))
    return reply_error(in.reply_to, q.request_id, error(StatusCode::kPermissionDenied, "the session is read-only"));
  if (cap->qos.limited()) {
    uint64_t bytes = q.op == wire::Op::kUpdate || q.op == wire::Op::kFetch ? q.length : 0;
    uint64_t now_ns = static_cast<uint64_t>(steady_now().time_since_epoch().count());
    if (uint64_t wait = qos->admit(cap->qos, bytes, now_ns); wait > 0) {
      wire::Reply r;  // Busy, with when to send it again (in microseconds, as a Busy reply's length)
      r.request_id = q.request_id;
      r.status = StatusCode::kBusy;
      r.message = "held to its tenant's QoS limits";
      r.length = wait / 1000 + 1;
      return reply(in.reply_to, std::move(r));
    }
  }
  auto cid = container(cap->pool, cap->cont);
  if (!cid.is_ok()) {
    conts.erase({cap->pool, cap->cont});
    return reply_error(in.reply_to, q.request_id, cid.status());
  }
  // Epochs come from the target's clock: a client names one only to read at a snapshot. (A client that could
  // stamp its own writes could move every container's aggregation boundary, or the clock, to 2^64.)
  if (q.epoch != 0 && wire::is_write(q.op))
    return reply_error(in.reply_to, q.request_id,
                       error(StatusCode::kInvalidArgument,
                             "updates and punches are stamped by the target; "
                             "a request may name an epoch only to read a snapshot"));
  if (q.epoch != 0 && !engine->has_snapshot(*cid, q.epoch))
    return reply_error(in.reply_to, q.request_id,
                       error(StatusCode::kEpochTooOld,
                             "epoch " + std::to_string(q.epoch) + " is not a snapshot of this container (destroyed?)"));
  Call c{in, q, *cap, *cid, {*cid, q.oid, q.dkey, q.akey}};
  c.read_at = q.epoch ? q.epoch : engine::kEpochLatest;
  c.kind = q.kind == wire::Kind::kSingle ? engine::ValueKind::kSingle : engine::ValueKind::kArray;
  if (bypass_media && c.kind == engine::ValueKind::kArray && (q.op == wire::Op::kUpdate || q.op == wire::Op::kFetch) &&
      q.grant.empty())
    return bypass(c);
  // A write delivered twice is carried out once; the copy goes unanswered (its first answer is on its way).
  if (wire::is_write(q.op) && executed.count({cap->session, q.request_id})) return;
  (this->*handler_for(q.op))(c);
}

Result<std::unique_ptr<Target>> Target::start(uint32_t index, uint32_t count, engine::Engine* engine,
                                              const ServerConfig& config, const std::string& secret,
                                              std::shared_ptr<Revocations> revocations, std::shared_ptr<QosLedger> qos,
                                              std::shared_ptr<GrantClaims> claims) {
  auto impl = std::make_unique<Impl>();
  impl->bypass_media = config.bypass_media;
  impl->session_buffers.set_share(config.session_buffer_bytes);
  impl->index = index;
  impl->count = count;
  impl->engine = engine;
  impl->last_epoch = engine->high_epoch();
  impl->secret = secret;
  impl->revocations = std::move(revocations);
  impl->qos = std::move(qos);
  impl->claims = std::move(claims);
  transport::WorkerOptions wo;
  wo.payload_timeout_ms = config.payload_timeout_ms;
  wo.sleep_when_waits_long = true;
  wo.introduced_peers_only = true;
  Impl* raw = impl.get();
  // A peer is introduced only by a live capability: a target makes no endpoint for anyone else's hello.
  wo.admit_hello = [raw](std::string_view token) {
    uint64_t now = wall_ms();
    auto cap = raw->verified(std::string(token), now);
    return cap.is_ok() && !raw->revocations->revoked(cap->session, now);
  };
  RFOS_ASSIGN_OR_RETURN(impl->worker, transport::Worker::create(config.provider, wo));
  RFOS_ASSIGN_OR_RETURN(impl->ring, engine->make_io_ring());
  engine::IoRing* ring = impl->ring.get();
  impl->ring_wake = {ring->event_fd(), [ring] { return ring->ready(); }, [ring] { return ring->arm(); }};
  impl->address = impl->worker->address();
  impl->worker->on_message([raw](Incoming& in) { raw->handle(in); });
  impl->worker->on_peer_failure([raw](transport::EpHandle ep, const Status&) {
    // In-flight transfers of that peer complete with errors and release their engine buffers.
    raw->drop_watchers(ep);
    raw->drop_grants(ep);
  });
  impl->media = std::make_unique<WorkerPool>(std::max(1u, config.media_threads));
  impl->namespace_ops = std::make_unique<WorkerPool>(1);
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
  impl_->namespace_ops.reset();
  impl_->media.reset();     // queued media work runs to its end
  impl_->finished.clear();  // continuations of a stopped target are dropped (their engine work is done)
}

}  // namespace rfos::server
