// One handler per data-plane operation: each gets a request that passed admission (Target::Impl::handle), asks
// the engine, and encodes the answer.
#include <algorithm>

#include "common/crc32c.h"
#include "common/fault.h"
#include "server/target_impl.h"

namespace rfos::server {

using transport::Incoming;
using transport::Iov;
using Impl = Target::Impl;

Impl::Handler Impl::handler_for(wire::Op op) {
  switch (op) {
    case wire::Op::kUpdate:
    case wire::Op::kFetch:
      return &Impl::handle_io;
    case wire::Op::kArraySize:
      return &Impl::handle_array_size;
    case wire::Op::kListObjects:
      return &Impl::handle_list_objects;
    case wire::Op::kListDkeys:
    case wire::Op::kListAkeys:
      return &Impl::handle_list_keys;
    case wire::Op::kListExtents:
      return &Impl::handle_list_extents;
    case wire::Op::kObjectEnd:
      return &Impl::handle_object_end;
    case wire::Op::kPunchDkey:
    case wire::Op::kPunchAkey:
    case wire::Op::kPunchExtent:
    case wire::Op::kPunchObject:
      return &Impl::handle_punch;
    case wire::Op::kNamespace:
      return &Impl::handle_namespace;
    case wire::Op::kSync:
      return &Impl::handle_sync;
    case wire::Op::kNamespaceRead:
      return &Impl::handle_namespace_read;
    case wire::Op::kWatch:
      return &Impl::handle_watch;
    case wire::Op::kGrant:
      return &Impl::handle_grant;
  }
  return nullptr;  // decode_request admits only the operations above
}

void Impl::handle_io(Call& c) {
  auto held = session_buffers.charge(c.cap.session, c.q.length);
  if (!held.is_ok()) return reply_error(c.to(), c.id(), held.status());
  if (c.q.op == wire::Op::kUpdate) return update(c, std::move(held).value());
  fetch(c, std::move(held).value());
}

void Impl::handle_array_size(Call& c) {
  auto size = engine->array_size(c.key, c.read_at);
  if (!size.is_ok()) return reply_error(c.to(), c.id(), size.status());
  reply_length(c, *size);
}

void Impl::handle_list_objects(Call& c) {
  engine::Anchor anchor;
  anchor.position = c.q.anchor;
  auto oids =
      engine->list_objects(c.cid, c.read_at, &anchor, std::clamp<uint64_t>(c.q.length, 1, wire::kMaxObjectsPerPage));
  if (!oids.is_ok()) return reply_error(c.to(), c.id(), oids.status());
  wire::ObjectPage page;
  page.anchor = anchor.position;
  page.done = anchor.done;
  page.oids = std::move(oids).value();
  wire::Reply r;
  r.request_id = c.id();
  reply_with(c.to(), std::move(r), wire::encode_object_page(page));
}

void Impl::handle_list_keys(Call& c) {
  const wire::Request& q = c.q;
  engine::Anchor anchor;
  anchor.position = q.anchor;
  size_t max = std::clamp<uint64_t>(q.length, 1, 1024);
  wire::KeyPage page;
  if (q.op == wire::Op::kListDkeys && !q.akey.empty()) {  // with each dkey's value of that akey
    auto pairs = dkeys_with_values(c.cid, q.oid, q.akey, c.read_at, &anchor, max, q.dkey);
    if (!pairs.is_ok()) return reply_error(c.to(), c.id(), pairs.status());
    page.with_values = true;
    for (auto& [k, v] : *pairs) {
      page.keys.push_back(std::move(k));
      page.values.push_back(std::move(v));
    }
  } else {
    auto keys = q.op == wire::Op::kListDkeys
                    ? engine->list_dkeys(c.cid, q.oid, c.read_at, &anchor, max, q.dkey, {}, nullptr)
                    : engine->list_akeys(c.cid, q.oid, q.dkey, c.read_at, &anchor, max);
    if (!keys.is_ok()) return reply_error(c.to(), c.id(), keys.status());
    page.keys = std::move(keys).value();
  }
  page.anchor = anchor.position;
  page.done = anchor.done;
  wire::Reply r;
  r.request_id = c.id();
  reply_with(c.to(), std::move(r), wire::encode_key_page(page));
}

Result<std::vector<std::pair<std::string, std::string>>> Impl::dkeys_with_values(uint32_t cid, const ObjectId& oid,
                                                                                 std::string_view akey,
                                                                                 engine::Epoch epoch,
                                                                                 engine::Anchor* anchor, size_t max,
                                                                                 std::string_view prefix) {
  std::vector<std::optional<std::string>> found;
  RFOS_ASSIGN_OR_RETURN(std::vector<std::string> keys,
                        engine->list_dkeys(cid, oid, epoch, anchor, max, prefix, akey, &found));
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string value;
    if (i < found.size() && found[i]) {
      value = std::move(*found[i]);
    } else {
      auto v = engine->fetch({{cid, oid, keys[i], akey}, epoch, engine::ValueKind::kSingle});
      if (v.is_ok()) value = std::move(v).value();
    }
    out.emplace_back(std::move(keys[i]), std::move(value));
  }
  return out;
}

void Impl::handle_list_extents(Call& c) {
  engine::Anchor anchor;
  anchor.position = c.q.anchor;
  size_t max = std::clamp<uint64_t>(c.q.length, 1, wire::kMaxExtentsPerPage);
  auto extents = engine->list_extents(c.key, c.read_at, &anchor, max);
  if (!extents.is_ok()) return reply_error(c.to(), c.id(), extents.status());
  wire::ExtentPage page;
  page.anchor = anchor.position;
  page.done = anchor.done;
  for (const engine::Extent& e : *extents) page.extents.emplace_back(e.offset, e.length);
  wire::Reply r;
  r.request_id = c.id();
  reply_with(c.to(), std::move(r), wire::encode_extent_page(page));
}

void Impl::handle_object_end(Call& c) {
  auto end = object_end(c.cid, c.q.oid, c.q.akey, c.read_at);
  if (!end.is_ok()) return reply_error(c.to(), c.id(), end.status());
  reply_length(c, *end);
}

// The size of the array `akey` under the greatest dkey (in byte order) that holds one; 0 when none. The layer
// above lays files out so that this is a file's end (client/file_layout.h); the target knows nothing of it.
Result<uint64_t> Impl::object_end(uint32_t cid, const ObjectId& oid, const std::string& akey, engine::Epoch epoch) {
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

// Punches still block on the media: they run on a media helper.
void Impl::handle_punch(Call& c) {
  uint64_t epoch = next_epoch();
  if (epoch == 0) return reply_error(c.to(), c.id(), clock_exhausted());
  executing(c);
  auto held = inflight_epochs.insert(epoch);
  const wire::Request& q = c.q;
  offload<Status>(
      [this, cid = c.cid, oid = q.oid, dk = q.dkey, ak = q.akey, op = q.op, off = q.offset, len = q.length, epoch] {
        if (op == wire::Op::kPunchDkey) return engine->punch_dkey(cid, oid, dk, epoch);
        if (op == wire::Op::kPunchAkey) return engine->punch_akey({cid, oid, dk, ak}, epoch);
        if (op == wire::Op::kPunchExtent) return engine->punch_extent({cid, oid, dk, ak}, epoch, off, len);
        return engine->punch_object(cid, oid, epoch);
      },
      write_done(c, epoch, held));
}

Result<std::shared_ptr<Impl::KeyHold>> Impl::hold_if_absent(const engine::KeyRef& k, engine::ValueKind kind) {
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

Status Impl::land(Incoming& in, const Remote& from, std::span<const Iov> dst, transport::Done done) {
  return from.rkey.empty() ? worker->fetch_payload(in, dst, std::move(done))
                           : worker->get(from.via, from.addr, from.rkey, dst, std::move(done));
}

void Impl::put_then_reply(transport::EpHandle to, std::span<const Iov> src, const Remote& into, wire::Reply r,
                          std::shared_ptr<const void> keep) {
  uint64_t id = r.request_id;
  Status s = worker->put(into.via, src, into.addr, into.rkey, [this, to, keep, r = std::move(r)](Status put) mutable {
    if (!put.is_ok()) return reply_error(to, r.request_id, put);
    reply(to, std::move(r));
  });
  if (!s.is_ok()) reply_error(to, id, s);
}

void Impl::bypass(Call& c) {
  Incoming& in = c.in;
  const wire::Request& q = c.q;
  if (zeros.empty()) zeros.assign(1u << 20, 0);
  uint64_t len = q.op == wire::Op::kUpdate ? (q.rkey.empty() ? in.payload_bytes : q.length) : q.length;
  if (len == 0 || len > zeros.size())
    return reply_error(c.to(), c.id(), error(StatusCode::kTooLarge, "bypass: 1 B .. 1 MiB per request"));
  auto to = c.to();
  wire::Reply r;
  r.request_id = c.id();
  if (q.op == wire::Op::kFetch) {
    auto known = bypass_csum_chunk.find({c.cap.pool, c.cap.cont});
    if (known == bypass_csum_chunk.end()) {
      auto info = engine->cont_open(c.cap.pool, c.cap.cont);
      uint32_t chunk = info.is_ok() && info->props.csum_chunk_bytes ? info->props.csum_chunk_bytes : 4096;
      known = bypass_csum_chunk.emplace(std::make_pair(c.cap.pool, c.cap.cont), chunk).first;
    }
    r.length = len;
    chunk_crcs(q.offset, {zeros.data(), len}, known->second, &r.csums);
    Iov v{zeros.data(), len};
    if (!q.rkey.empty()) return put_then_reply(to, {&v, 1}, {to, q.remote_addr, q.rkey}, std::move(r), nullptr);
    return reply(to, std::move(r), {&v, 1});
  }
  // Every bypassed update lands in the same scratch buffer: its bytes are dropped anyway.
  if (sink.empty()) sink.resize(zeros.size());
  Iov v{sink.data(), len};
  auto done = [this, to, r](Status got) mutable {
    if (!got.is_ok()) return;  // the client died mid-transfer: nothing to answer
    reply(to, std::move(r));
  };
  Status s = land(in, {to, q.remote_addr, q.rkey}, {&v, 1}, std::move(done));
  if (!s.is_ok()) reply_error(to, c.id(), s);
}

// The payload lands in the engine's buffers (pulled by the fabric's rendezvous, or read from the client's
// registered memory on the explicit path); then verify, write (on the target's ring), commit (a group commit
// on the engine's commit thread), answer (back on this thread).
void Impl::update(Call& c, std::shared_ptr<SessionBuffers::Charge> charge) {
  Incoming& in = c.in;
  wire::Request& q = c.q;
  auto remote = remote_of(c);
  if (!remote.is_ok()) return reply_error(c.to(), c.id(), remote.status());
  // On the explicit path the data stays in the client's (or the granted) memory until the target reads it.
  bool explicit_path = !remote->rkey.empty();
  uint64_t carried = explicit_path ? q.length : in.payload_bytes;
  if (carried != q.length || (explicit_path && in.payload_bytes != 0))
    return reply_error(c.to(), c.id(),
                       error(StatusCode::kInvalidArgument, "payload has " + std::to_string(in.payload_bytes) +
                                                               " bytes, the request says " + std::to_string(q.length) +
                                                               (explicit_path ? " with a memory descriptor" : "")));
  std::shared_ptr<KeyHold> hold;  // released when the update finished, whichever way
  if (q.flags & wire::kIfAbsent) {
    auto h = hold_if_absent(c.key, c.kind);
    if (!h.is_ok()) return reply_error(c.to(), c.id(), h.status());
    hold = std::move(h).value();
  }
  uint64_t epoch = next_epoch();
  if (epoch == 0) return reply_error(c.to(), c.id(), clock_exhausted());
  if (RFOS_FAULT("target.busy"))
    return reply_error(c.to(), c.id(), error(StatusCode::kBusy, "engine buffers exhausted (injected)"));
  engine::UpdateOp op{c.key, epoch, c.kind, q.offset, q.length};
  op.lazy = q.flags & wire::kLazy;
  op.checksum_here = remote->granted;  // bytes read from granted memory came with no checksums
  auto tx = engine->update_begin(op);
  if (!tx.is_ok()) return reply_error(c.to(), c.id(), tx.status());
  executing(c);
  auto held = inflight_epochs.insert(epoch);
  auto shared = std::make_shared<engine::UpdateTx>(std::move(tx).value());
  std::vector<Iov> dst;
  for (const engine::IoBuf& b : shared->buffers()) dst.push_back({b.data, b.len});
  auto csums = std::make_shared<std::vector<uint32_t>>(std::move(q.csums));
  auto landed = [this, shared, csums, epoch, held, hold, charge, done = write_done(c, epoch, held),
                 session = c.cap.session, id = c.id()](Status got) {
    if (!got.is_ok()) {
      inflight_epochs.erase(held);
      forget_execution(session, id);
      engine->update_abort(*shared);  // the client died mid-transfer: nothing is stored
      return;
    }
    engine->update_submit(*ring, std::move(*shared), std::move(*csums), [done, hold, charge](Status s) { done(s); });
  };
  Status s = land(in, *remote, dst, std::move(landed));
  if (!s.is_ok()) {
    inflight_epochs.erase(held);
    forget_execution(c.cap.session, c.id());
    engine->update_abort(*shared);
    reply_error(c.to(), c.id(), s);
  }
}

// Fetches run on the target thread: the index lookup now, the block reads on the target's own ring, the reply
// from the ring's completion (no hand-off to a media thread and back).
void Impl::fetch(Call& c, std::shared_ptr<SessionBuffers::Charge> charge) {
  wire::Request& q = c.q;
  auto remote = remote_of(c);
  if (!remote.is_ok()) return reply_error(c.to(), c.id(), remote.status());
  // The client checks every chunk against its checksum (wire-format.md), so chunks the engine returns as stored
  // are verified there, once, end to end; bytes written into granted memory are checked by no client, so here.
  engine::FetchOp op{c.key, c.read_at, c.kind, q.offset, q.length, !remote->granted};
  auto descriptor = std::make_shared<Remote>(std::move(remote).value());
  engine->fetch_submit(*ring, op, [this, to = c.to(), id = c.id(), descriptor, charge](Result<engine::FetchTx> tx) {
    if (!tx.is_ok()) return reply_error(to, id, tx.status());
    auto shared = std::make_shared<std::pair<engine::FetchTx, std::shared_ptr<SessionBuffers::Charge>>>(
        std::move(tx).value(), std::move(charge));
    const engine::FetchTx& fetched = shared->first;
    shared->second->grow_to(fetched.length());
    wire::Reply r;
    r.request_id = id;
    r.length = fetched.length();
    r.csums.assign(fetched.csums().begin(), fetched.csums().end());
    std::vector<Iov> src;
    for (const engine::IoBuf& b : fetched.buffers()) src.push_back({b.data, b.len});
    // The engine buffers (and the session's charge for them) stay until the transport is done with them.
    if (descriptor->rkey.empty()) return reply(to, std::move(r), src, [shared](Status) {});
    put_then_reply(to, src, *descriptor, std::move(r), shared);
  });
}

}  // namespace rfos::server
