// The target's side of namespace operations (wire kNamespace, posix/dir_ops.h) and of kSync: the request's
// DirRequest lands, runs against the engine (reads at the latest state, then one atomic batch at the epoch the
// target stamped), and the DirReply goes back.
//
// Where an operation runs: on the target thread, when the engine has no other commit under way. Its commit is
// then lazy and leads a group of its own, so the thread waits for no media (only for the index's own write, which
// RocksDB stalls while its compactions are far behind, as it stalls every writer), and the operation saves the two
// hand-offs between threads that, on a loaded machine, cost more than the operation itself (docs/BENCHMARKS.md,
// "Small files"). Otherwise (another's commit, perhaps syncing, is under way) it runs on the target's namespace
// helper, as do the operations after it until the helper has answered them all: one operation's reads and commit
// come before the next's reads either way. An operation that must be durable is answered after a sync of the
// log, on the helper too.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "client/file_layout.h"
#include "common/clock.h"
#include "placement/placement.h"
#include "posix/dir_ops.h"
#include "server/target_impl.h"

namespace rfos::server {

using transport::Iov;
using Impl = Target::Impl;

static_assert(posix::kMaxFileSize <= engine::kArrayOffsetMax, "a file's bytes must fit the engine's array offsets");

namespace {

// The engine of one target, as posix::execute sees it. Its commits are lazy: whoever runs the operation syncs
// before answering when it asked for durability (durable_asked). `if_idle` (on the target thread): the first commit
// is made only if the engine has no other under way, else it fails with `busy()` true and nothing changed.
class EngineDirStore final : public posix::DirStore {
 public:
  EngineDirStore(Impl* target, uint32_t cid, engine::Epoch epoch, bool if_idle)
      : target_(target), engine_(target->engine), cid_(cid), epoch_(epoch), if_idle_(if_idle) {}

  bool owns(const ObjectId& oid, std::string_view dkey) const override {
    return placement::target_of(oid, dkey, target_->count) == target_->index;
  }

  Result<std::string> get(const ObjectId& oid, std::string_view dkey, std::string_view akey) override {
    engine::FetchOp op{{cid_, oid, dkey, akey}, engine::kEpochLatest, engine::ValueKind::kSingle, 0, 0};
    op.view = view();
    return engine_->fetch(op);
  }

  Result<bool> has_entries(const ObjectId& dir) override {
    engine::Anchor anchor;
    while (!anchor.done) {
      auto keys = engine_->list_dkeys(cid_, dir, engine::kEpochLatest, &anchor, 16);
      if (!keys.is_ok()) return keys.status().code() == StatusCode::kNotFound ? Result<bool>(false) : keys.status();
      for (const std::string& k : *keys)
        if (k != posix::kInodeDkey && k != posix::kXattrDkey) return true;
    }
    return false;
  }

  Result<uint64_t> data_end(const ObjectId& oid) override {
    return target_->object_end(cid_, oid, std::string(client::layout::kDataAkey), engine::kEpochLatest);
  }

  Result<uint64_t> first_chunk_end(const ObjectId& oid) override {
    std::string chunk0 = client::layout::chunk_key(0);
    auto size = engine_->array_size({cid_, oid, chunk0, client::layout::kDataAkey}, engine::kEpochLatest, view());
    if (size.status().code() == StatusCode::kNotFound) return uint64_t{0};
    return size;
  }

  Result<std::string> read_data(const ObjectId& oid, uint64_t len) override {
    if (len == 0) return std::string();
    std::string chunk0 = client::layout::chunk_key(0);
    engine::FetchOp op{
        {cid_, oid, chunk0, client::layout::kDataAkey}, engine::kEpochLatest, engine::ValueKind::kArray, 0, len};
    op.view = view();
    auto got = engine_->fetch(op);
    if (got.status().code() == StatusCode::kNotFound) return std::string(len, '\0');  // all a hole
    return got;
  }

  Result<std::vector<std::pair<std::string, std::string>>> list(const ObjectId& dir, std::string* anchor, size_t max,
                                                                bool* done) override {
    engine::Anchor a;
    a.position = *anchor;
    auto pairs = target_->dkeys_with_values(cid_, dir, posix::kEntryAkey, engine::kEpochLatest, &a, max);
    if (!pairs.is_ok() && pairs.status().code() != StatusCode::kNotFound) return pairs.status();
    *anchor = a.position;
    *done = !pairs.is_ok() || a.done;
    if (!pairs.is_ok()) return std::vector<std::pair<std::string, std::string>>();
    return std::move(pairs).value();
  }

  Status apply(const std::vector<posix::Change>& changes, bool durable) override {
    durable_asked_ = durable_asked_ || durable;
    view_.reset();  // a read after this sees the change (and the commit holds no view's lock)
    std::vector<engine::Mutation> batch;
    batch.reserve(changes.size());
    for (const posix::Change& c : changes) {
      engine::Mutation m;
      switch (c.kind) {
        case posix::Change::Kind::kPut:
          m.kind = engine::Mutation::Kind::kPutSingle;
          break;
        case posix::Change::Kind::kPutData:
          m.kind = engine::Mutation::Kind::kPutArray;
          break;
        case posix::Change::Kind::kPunch:
          m.kind = engine::Mutation::Kind::kPunchDkey;
          break;
        case posix::Change::Kind::kPunchObject:
          m.kind = engine::Mutation::Kind::kPunchObject;
          break;
        case posix::Change::Kind::kPunchData:
          m.kind = engine::Mutation::Kind::kPunchArray;
          break;
      }
      m.oid = c.oid;
      m.offset = c.offset;
      m.length = c.length;
      m.dkey = c.dkey;
      m.akey = c.akey;
      m.value = c.value;
      batch.push_back(std::move(m));
    }
    if (!if_idle_ || applied_) return note(engine_->apply(cid_, epoch_, batch, /*lazy=*/true));
    Status s = engine_->apply_if_idle(cid_, epoch_, batch);
    busy_ = s.code() == StatusCode::kBusy;
    return note(s);
  }

  bool durable_asked() const { return durable_asked_; }
  bool busy() const { return busy_; }

 private:
  // The operation's reads go through one view of the index, made at its first read: they see one moment, and
  // an inode's record and its file's first chunk cost one index search (engine::ReadView).
  engine::ReadView* view() {
    if (!view_) view_ = engine_->read_view();
    return &*view_;
  }

  Status note(Status s) {
    applied_ = applied_ || s.is_ok();
    return s;
  }

  Impl* target_;
  engine::Engine* engine_;
  uint32_t cid_;
  engine::Epoch epoch_;
  bool if_idle_;
  std::optional<engine::ReadView> view_;
  bool durable_asked_ = false;
  bool applied_ = false;  // once one commit of the operation is made, the next may not be refused
  bool busy_ = false;
};

// A namespace operation once run: its request (for the notice), its answer, and whether that answer waits for a
// sync of the log. `busy`: not run, as the engine had another commit under way (if_idle).
struct NamespaceRun {
  posix::DirRequest dq;
  Result<posix::DirReply> answer = posix::DirReply{};
  bool durable = false;
  bool busy = false;
};

NamespaceRun run_namespace(Impl* target, const std::string& bytes, uint32_t cid, engine::Epoch epoch, bool if_idle) {
  NamespaceRun run;
  auto decoded = posix::decode_dir_request(bytes);
  if (!decoded.is_ok()) {
    run.answer = decoded.status();
    return run;
  }
  run.dq = std::move(decoded).value();
  EngineDirStore store(target, cid, epoch, if_idle);
  run.answer = posix::execute(run.dq, store, wall_ns());
  run.busy = store.busy();
  // Durable even when it changed nothing or refused: what it found may be another's change, seen and not yet
  // synced.
  run.durable = run.dq.durable || store.durable_asked();
  return run;
}

}  // namespace

// The DirRequest a namespace request carries as its payload, charged to the session's buffer share (as an
// update's bytes are) until `landed` lets go of it: `landed` gets it, or a failure when the client died
// mid-transfer. An error here is the caller's to answer.
Status Impl::namespace_payload(Call& c, std::function<void(Status, std::shared_ptr<const std::string>)> landed) {
  const wire::Request& q = c.q;
  if (!q.rkey.empty() || c.in.payload_bytes != q.length)
    return error(StatusCode::kInvalidArgument, "a namespace request carries its DirRequest as the payload");
  RFOS_ASSIGN_OR_RETURN(auto charge, session_buffers.charge(c.cap.session, q.length));
  auto bytes = std::make_shared<std::string>(q.length, '\0');
  Iov dst{bytes->data(), bytes->size()};
  return worker->fetch_payload(c.in, {&dst, 1}, [bytes, charge, landed = std::move(landed)](Status got) mutable {
    // The charge goes with the bytes: held until whoever took them is done.
    std::shared_ptr<const std::string> held(bytes.get(), [bytes, charge](const std::string*) {});
    landed(got, got.is_ok() ? held : nullptr);
  });
}

void Impl::handle_namespace(Call& c) {
  uint64_t epoch = next_epoch();
  if (epoch == 0) return reply_error(c.to(), c.id(), clock_exhausted());
  executing(c);
  auto held = inflight_epochs.insert(epoch);
  auto landed = [this, epoch, held, cid = c.cid, to = c.to(), id = c.id(), session = c.cap.session, tag = c.q.offset](
                    Status got, std::shared_ptr<const std::string> bytes) {
    if (!got.is_ok()) {  // the client died mid-transfer: nothing to do
      inflight_epochs.erase(held);
      forget_execution(session, id);
      return;
    }
    auto answer = [this, to, id, session, cid, tag](const NamespaceRun& run) {
      const Result<posix::DirReply>& a = run.answer;
      if (!a.is_ok()) {
        if (a.status().code() == StatusCode::kEpochTooOld) forget_execution(session, id);
        return reply_error(to, id, a.status());
      }
      wire::Reply r;
      r.request_id = id;
      reply_with(to, std::move(r), posix::encode_dir_reply(*a));
      if (a->need != ObjectId{} || !watched_by_others(cid, tag)) return;  // nothing done, or nobody to tell
      posix::Notice n = posix::notice_of(run.dq, *a);
      if (!n.empty()) notify_watchers(cid, tag, posix::encode_notice(n));
    };
    if (namespace_behind == 0) {
      NamespaceRun run = run_namespace(this, *bytes, cid, epoch, /*if_idle=*/true);
      if (!run.busy) {
        inflight_epochs.erase(held);
        if (!run.durable) return answer(run);
        // Committed and seen by every later operation; answered once the log that holds it is synced. A refusal
        // too: what it found (a name taken, a directory not empty) may be another's change, not yet synced.
        auto later = std::make_shared<NamespaceRun>(std::move(run));
        return offload<Status>([this] { return engine->sync(); },
                               [later, answer](Status& synced) {
                                 if (!synced.is_ok()) later->answer = synced;
                                 answer(*later);
                               },
                               namespace_ops.get());
      }
    }
    ++namespace_behind;
    // The bytes (and their charge) are let go on this thread, by the continuation, which runs after the work.
    offload<NamespaceRun>(
        [this, raw = bytes.get(), cid, epoch] {
          NamespaceRun run = run_namespace(this, *raw, cid, epoch, /*if_idle=*/false);
          if (run.durable) {
            Status synced = engine->sync();
            if (!synced.is_ok()) run.answer = synced;
          }
          return run;
        },
        [this, held, bytes, answer](NamespaceRun& run) {
          --namespace_behind;
          inflight_epochs.erase(held);
          answer(run);
        },
        namespace_ops.get());
  };
  Status s = namespace_payload(c, std::move(landed));
  if (!s.is_ok()) {
    inflight_epochs.erase(held);
    forget_execution(c.cap.session, c.id());
    reply_error(c.to(), c.id(), s);
  }
}

// Reads (lookup, getattr) run here on the target thread, as listings do: index reads, no batch, so a namespace
// operation in its commit is seen before or after, whole.
void Impl::handle_namespace_read(Call& c) {
  auto landed = [this, cid = c.cid, to = c.to(), id = c.id()](Status got, std::shared_ptr<const std::string> bytes) {
    if (!got.is_ok()) return;  // the client died mid-transfer
    auto answer = [&]() -> Result<posix::DirReply> {
      RFOS_ASSIGN_OR_RETURN(posix::DirRequest dq, posix::decode_dir_request(*bytes));
      if (!posix::is_read(dq.op))
        return error(StatusCode::kInvalidArgument, "a namespace read carries a lookup or a getattr");
      EngineDirStore store(this, cid, engine::kEpochLatest, /*if_idle=*/true);
      return posix::execute(dq, store, wall_ns());
    }();
    if (!answer.is_ok()) return reply_error(to, id, answer.status());
    wire::Reply r;
    r.request_id = id;
    reply_with(to, std::move(r), posix::encode_dir_reply(*answer));
  };
  Status s = namespace_payload(c, std::move(landed));
  if (!s.is_ok()) reply_error(c.to(), c.id(), s);
}

// A watcher is the endpoint that asked, for the container of its session: a notice names entries and inodes of
// that container only, which its session may read whole anyway (docs/posix.md, "Trust model").
void Impl::handle_watch(Call& c) {
  uint64_t now = wall_ms();
  std::erase_if(watchers, [&](const Watcher& w) {
    return w.until_ms <= now || (w.to == c.to() && w.session == c.cap.session && w.cid == c.cid);
  });
  if (watchers.size() >= kMaxWatchers)
    return reply_error(c.to(), c.id(),
                       error(StatusCode::kBusy, "this target serves " + std::to_string(kMaxWatchers) + " watchers"));
  watchers.push_back({c.to(), c.cap.session, c.cid, c.q.offset,
                      c.cap.expires_unix_ms ? std::min<uint64_t>(now + wire::kWatchLeaseMs, c.cap.expires_unix_ms)
                                            : now + wire::kWatchLeaseMs});
  wire::Reply r;
  r.request_id = c.id();
  reply(c.to(), std::move(r));
}

void Impl::notify_watchers(uint32_t cid, uint64_t tag, std::string notice) {
  uint64_t now = wall_ms();
  std::erase_if(watchers, [&](const Watcher& w) { return w.until_ms <= now || revocations->revoked(w.session, now); });
  auto payload = std::make_shared<std::string>(std::move(notice));
  wire::Reply r;  // request id 0: no request's answer
  r.length = payload->size();
  std::string header = wire::encode_reply(r);
  Iov v{payload->data(), payload->size()};
  std::vector<transport::EpHandle> tell;  // a send may fail inline, dropping watchers: not while iterating them
  for (const Watcher& w : watchers)
    if (w.hears(cid, tag)) tell.push_back(w.to);
  for (transport::EpHandle to : tell) {
    Status s = worker->send(to, header, {&v, 1}, [this, payload, to](Status sent) {
      if (!sent.is_ok()) drop_watchers(to);
    });
    if (!s.is_ok()) {
      spdlog::debug("target {}: notice not sent: {}", index, s.to_string());
      drop_watchers(to);
    }
  }
}

bool Impl::watched_by_others(uint32_t cid, uint64_t tag) const {
  return std::any_of(watchers.begin(), watchers.end(), [&](const Watcher& w) { return w.hears(cid, tag); });
}

void Impl::drop_watchers(transport::EpHandle to) {
  std::erase_if(watchers, [&](const Watcher& w) { return w.to == to; });
}

// Every write acknowledged before is in the log it syncs: their replies went after their commits.
void Impl::handle_sync(Call& c) {
  offload<Status>([this] { return engine->sync(); },
                  [this, to = c.to(), id = c.id()](Status& s) {
                    if (!s.is_ok()) return reply_error(to, id, s);
                    wire::Reply r;
                    r.request_id = id;
                    reply(to, std::move(r));
                  });
}

}  // namespace rfos::server
