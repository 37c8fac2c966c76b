// The C API (include/rfos/rfos.h) over ControlClient and Container.
#include "rfos/rfos.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <map>

#include "agent/agent_client.h"
#include "client/c_api_internal.h"
#include "client/container.h"
#include "client/control_client.h"
#include "client/scatter_gather.h"

using rfos::ObjectId;
using rfos::Status;

namespace {
thread_local std::string last_error;
}  // namespace

namespace rfos::client::c_api {

int fail(const Status& s) {
  last_error = s.to_string();
  return -s.to_errno();
}

bool bad(const void* p, const char* what) {
  if (p != nullptr) return false;
  last_error = std::string("InvalidArgument: ") + what + " is NULL";
  return true;
}

}  // namespace rfos::client::c_api

namespace {

using rfos::client::c_api::bad;
using rfos::client::c_api::fail;

int result(const Status& s) { return s.is_ok() ? 0 : fail(s); }

ObjectId oid_of(rfos_oid_t o) { return {o.hi, o.lo}; }

std::vector<rfos::client::Extent> extents_of(const rfos_extent_t* e, size_t n) {
  std::vector<rfos::client::Extent> out;
  for (size_t i = 0; i < n; ++i) out.push_back({e[i].offset, e[i].length});
  return out;
}

// Copies what fits of `all` into out[0..cap), the full count into *count: -ENOBUFS when some did not fit.
template <typename T, typename Out, typename F>
int fill(const std::vector<T>& all, Out* out, size_t cap, size_t* count, F convert) {
  *count = all.size();
  for (size_t i = 0; i < all.size() && i < cap; ++i) out[i] = convert(all[i]);
  if (all.size() <= cap) return 0;
  last_error = "NoBuffer: " + std::to_string(all.size()) + " entries, room for " + std::to_string(cap);
  return -ENOBUFS;
}

constexpr size_t kStagingSlots = 8;
constexpr size_t kSlot = rfos::client::kMaxIoBytes;

// An operation on the container's keys through the agent (agent/protocol.h, KeyOp): its answer. Its bytes use
// the staging slots, so not while submitted I/O may be using them.
rfos::Result<uint64_t> agent_keys(rfos_cont* c, rfos::agent::KeyOp op, rfos_oid_t oid, const char* dkey,
                                  const char* akey, uint64_t arg) {
  if (c->agent->in_flight() > 0)
    return rfos::error(rfos::StatusCode::kBusy, "synchronous calls while submissions are in flight");
  return c->agent->keys(op, c->handle, oid_of(oid), dkey ? dkey : "", akey ? akey : "", arg);
}

bool in_shared(const rfos_cont* c, const void* p, size_t len) {
  auto b = c->agent->buffer();
  auto* q = static_cast<const uint8_t*>(p);
  return q >= b.data() && len <= b.size() && q - b.data() <= static_cast<ptrdiff_t>(b.size() - len);
}

// Where `p` lies in the shared buffer (it does: in_shared).
size_t shared_offset(const rfos_cont* c, const void* p) {
  return static_cast<size_t>(static_cast<const uint8_t*>(p) - c->agent->buffer().data());
}

// Synchronous array I/O through the agent: pieces inside 1 MiB-aligned ranges, up to kStagingSlots at once;
// bytes outside the shared buffer go through a staging slot.
int agent_rw(rfos_cont* c, bool write, const ObjectId& oid, const char* dkey, const char* akey, uint64_t offset,
             uint8_t* buf, size_t len) {
  using rfos::agent::RingOp;
  if (c->agent->in_flight() > 0)
    return fail(rfos::error(rfos::StatusCode::kBusy, "synchronous I/O while submissions are in flight"));
  bool direct = len == 0 || in_shared(c, buf, len);
  uint8_t* staging = c->agent->buffer().data();
  struct Piece {
    size_t at;  // in buf
    size_t len;
  };
  std::map<uint64_t, std::pair<Piece, size_t>> inflight;  // tag -> piece, slot
  std::vector<size_t> free_slots;
  for (size_t i = 0; i < kStagingSlots; ++i) free_slots.push_back(i);
  size_t done = 0;
  Status first = Status::ok();
  while ((done < len && first.is_ok()) || !inflight.empty()) {
    while (done < len && first.is_ok() && !free_slots.empty()) {
      uint64_t at = offset + done;
      size_t n = static_cast<size_t>(std::min<uint64_t>(len - done, kSlot - at % kSlot));
      size_t slot = free_slots.back();
      uint8_t* bytes = direct ? buf + done : staging + slot * kSlot;
      if (write && !direct) std::memcpy(bytes, buf + done, n);
      uint64_t tag = (uint64_t{1} << 63) | c->next_ticket++;
      Status s =
          c->agent->submit(write ? RingOp::kWrite : RingOp::kRead, c->handle, oid, dkey, akey, at, {bytes, n}, tag);
      if (!s.is_ok()) {
        first = s;
        break;
      }
      free_slots.pop_back();
      inflight[tag] = {{done, n}, slot};
      done += n;
    }
    if (inflight.empty()) break;
    auto got = c->agent->poll(kStagingSlots, -1);
    if (!got.is_ok()) return fail(got.status());
    for (auto& x : *got) {
      auto it = inflight.find(x.user_data);
      if (it == inflight.end()) continue;
      auto [piece, slot] = it->second;
      if (!x.status.is_ok() && first.is_ok()) first = x.status;
      if (x.status.is_ok() && !write && !direct) std::memcpy(buf + piece.at, staging + slot * kSlot, piece.len);
      free_slots.push_back(slot);
      inflight.erase(it);
    }
  }
  return result(first);
}

// Scatter-gather through the agent: each extent a piece of the staging slots at a time, gathered there from
// the iovecs (a write) or scattered from there into them (a read).
int agent_rwv(rfos_cont* c, bool write, const ObjectId& oid, const char* dkey, const char* akey,
              const rfos_extent_t* extents, size_t nextents, const struct iovec* iov, size_t niov) {
  uint64_t have = 0;
  for (size_t i = 0; i < niov; ++i)
    if (Status s = rfos::client::add_buffer_bytes(&have, iov[i].iov_len); !s.is_ok()) return fail(s);
  if (Status s = rfos::client::check_extents(extents_of(extents, nextents), have); !s.is_ok()) return fail(s);
  uint8_t* staging = c->agent->buffer().data();
  size_t v = 0, at = 0;  // the iovec and the offset in it where the next byte is
  for (size_t i = 0; i < nextents; ++i) {
    for (uint64_t done = 0; done < extents[i].length;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(extents[i].length - done, kStagingSlots * kSlot));
      auto move = [&](bool into_staging) {
        for (size_t got = 0; got < n;) {
          while (iov[v].iov_len == at) ++v, at = 0;
          size_t k = std::min(n - got, iov[v].iov_len - at);
          uint8_t* mem = static_cast<uint8_t*>(iov[v].iov_base) + at;
          if (into_staging)
            std::memcpy(staging + got, mem, k);
          else
            std::memcpy(mem, staging + got, k);
          got += k;
          at += k;
        }
      };
      size_t v0 = v, at0 = at;
      if (write) move(true);
      if (int r = agent_rw(c, write, oid, dkey, akey, extents[i].offset + done, staging, n); r != 0) return r;
      if (!write) {
        v = v0, at = at0;
        move(false);
      }
      done += n;
    }
  }
  return 0;
}

// The rfos_alloc allocations that hold [p, p + len) between them (one, unless the range runs on into the next),
// or none when a byte of it lies in none.
std::vector<size_t> allocations_of(const rfos_cont* c, const void* p, size_t len) {
  if (!in_shared(c, p, len)) return {};
  size_t at = shared_offset(c, p), end = at + len;
  auto it = c->allocated.upper_bound(at);
  if (it == c->allocated.begin()) return {};
  std::vector<size_t> out;
  for (--it; it != c->allocated.end() && it->first < end; ++it) {
    if (it->first > at) return {};  // a gap
    out.push_back(it->first);
    at = it->first + it->second;
    if (at >= end) return out;
  }
  return {};
}

int agent_submit(rfos_cont* c, bool write, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset,
                 void* buf, size_t len, uint64_t* ticket) {
  if (!rfos::client::within_one_piece(offset, len))
    return fail(
        rfos::error(rfos::StatusCode::kInvalidArgument, "an async I/O is 1 B .. 1 MiB within one 1 MiB-aligned range"));
  std::vector<size_t> holders = allocations_of(c, buf, len);
  if (holders.empty())
    return fail(rfos::error(rfos::StatusCode::kInvalidArgument,
                            "through the agent, submitted I/O uses buffers from rfos_alloc (its shared memory)"));
  uint64_t t = c->next_ticket++;
  Status s = c->agent->submit(write ? rfos::agent::RingOp::kWrite : rfos::agent::RingOp::kRead, c->handle, oid_of(oid),
                              dkey, akey, offset, {static_cast<uint8_t*>(buf), len}, t);
  if (!s.is_ok()) return fail(s);
  for (size_t h : holders) ++c->in_flight[h];
  c->submitted[t] = std::move(holders);
  *ticket = t;
  return 0;
}

// A submission's completion: its buffer's allocation may be freed once none of its own is left in flight.
void agent_completed(rfos_cont* c, uint64_t ticket) {
  auto it = c->submitted.find(ticket);
  if (it == c->submitted.end()) return;
  for (size_t h : it->second)
    if (auto f = c->in_flight.find(h); f != c->in_flight.end() && --f->second == 0) c->in_flight.erase(f);
  c->submitted.erase(it);
}

}  // namespace

extern "C" {

const char* rfos_last_error(void) { return last_error.c_str(); }

int rfos_connect(const char* addr, uint32_t timeout_ms, rfos_client_t** out) {
  if (bad(out, "out")) return -EINVAL;
  const char* agent = std::getenv("RFOS_AGENT");
  std::string a = addr              ? addr
                  : agent && *agent ? std::string("agent://") + agent
                                    : rfos::client::default_control_address();
  if (a.rfind("agent://", 0) == 0) {
    // Agent mode: the agent holds the sessions; this process only names its socket. Checked at once.
    std::string sock = a.substr(8);
    rfos::agent::AgentClientOptions o;
    o.ring = false;
    o.timeout_ms = timeout_ms ? timeout_ms : 5000;
    auto probe = rfos::agent::AgentClient::connect(sock, o);
    if (!probe.is_ok()) return fail(probe.status());
    // Control calls (snapshots) are relayed by the agent, made there for this process's user.
    *out = new rfos_client{
        rfos::client::ControlClient::relayed(rfos::agent::AgentClient::control_relay(sock, o.timeout_ms), o.timeout_ms),
        sock, o.timeout_ms};
    return 0;
  }
  auto* c = new rfos_client{
      rfos::client::ControlClient::create(a, timeout_ms ? timeout_ms : 5000, rfos::client::TlsFiles::from_env()), "",
      0};
  Status s = c->control->health();
  if (!s.is_ok()) {
    delete c;
    return fail(s);
  }
  *out = c;
  return 0;
}

void rfos_disconnect(rfos_client_t* client) { delete client; }

int rfos_cont_open(rfos_client_t* client, const char* pool, const char* cont, int write, const char* provider,
                   rfos_cont_t** out) {
  if (bad(client, "client") || bad(pool, "pool") || bad(cont, "cont") || bad(out, "out")) return -EINVAL;
  if (!client->agent_socket.empty()) {
    rfos::agent::AgentClientOptions ao;
    const char* mib = std::getenv("RFOS_AGENT_BUFFER_MIB");
    uint64_t mibs = mib ? std::max<uint64_t>(std::strtoull(mib, nullptr, 10), kStagingSlots + 1) : 64;
    if (mibs > (uint64_t{1} << 30))  // 1 PiB: far past any memory, and well short of wrapping around in bytes
      return fail(rfos::error(rfos::StatusCode::kInvalidArgument, "RFOS_AGENT_BUFFER_MIB is too large"));
    ao.buffer_bytes = mibs << 20;
    ao.entries = 256;
    ao.timeout_ms = client->timeout_ms;
    auto a = rfos::agent::AgentClient::connect(client->agent_socket, ao);
    if (!a.is_ok()) return fail(a.status());
    auto h = (*a)->open(pool, cont, write != 0);
    if (!h.is_ok()) return fail(h.status());
    if ((*a)->buffer().size() <= kStagingSlots * kSlot)  // the staging slots come first, allocations after them
      return fail(rfos::error(rfos::StatusCode::kInternal, "the agent's shared buffer is smaller than asked"));
    auto* c = new rfos_cont;
    c->agent = std::move(a).value();
    c->handle = *h;
    c->free_ranges[kStagingSlots * kSlot] = c->agent->buffer().size() - kStagingSlots * kSlot;
    *out = c;
    return 0;
  }
  rfos::client::ContainerOptions o;
  o.write = write != 0;
  if (provider) o.provider = provider;
  auto c = rfos::client::Container::open(*client->control, pool, cont, o);
  if (!c.is_ok()) return fail(c.status());
  *out = new rfos_cont;
  (*out)->cont = std::move(c).value();
  return 0;
}

void rfos_cont_close(rfos_cont_t* cont) { delete cont; }

int rfos_write(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, const void* buf,
               size_t len) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || (len && bad(buf, "buf"))) return -EINVAL;
  if (c->agent)
    return agent_rw(c, true, oid_of(oid), dkey, akey, offset, static_cast<uint8_t*>(const_cast<void*>(buf)), len);
  return result(c->cont->write(oid_of(oid), dkey, akey, offset, {static_cast<const uint8_t*>(buf), len}));
}

int rfos_read(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, void* buf,
              size_t len) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || (len && bad(buf, "buf"))) return -EINVAL;
  if (c->agent) return agent_rw(c, false, oid_of(oid), dkey, akey, offset, static_cast<uint8_t*>(buf), len);
  return result(c->cont->read(oid_of(oid), dkey, akey, offset, {static_cast<uint8_t*>(buf), len}));
}

int rfos_array_size(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t* size) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(size, "size")) return -EINVAL;
  auto r = c->agent ? c->agent->array_size(c->handle, oid_of(oid), dkey, akey)
                    : c->cont->array_size(oid_of(oid), dkey, akey);
  if (!r.is_ok()) return fail(r.status());
  *size = *r;
  return 0;
}

int rfos_put_value(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, const void* buf, size_t len) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(buf, "buf")) return -EINVAL;
  if (c->agent) {
    if (len > kSlot) return fail(rfos::error(rfos::StatusCode::kTooLarge, "a single value is at most 1 MiB"));
    if (c->agent->in_flight() == 0) std::memcpy(c->agent->buffer().data(), buf, len);
    return result(agent_keys(c, rfos::agent::KeyOp::kPutValue, oid, dkey, akey, len).status());
  }
  return result(c->cont->put_value(oid_of(oid), dkey, akey, {static_cast<const char*>(buf), len}));
}

int rfos_get_value(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, void* buf, size_t cap,
                   size_t* len) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(len, "len") || (cap && bad(buf, "buf")))
    return -EINVAL;
  std::string value;
  if (c->agent) {
    auto n = agent_keys(c, rfos::agent::KeyOp::kGetValue, oid, dkey, akey, std::min(cap, kSlot));
    if (!n.is_ok()) return fail(n.status());
    value.assign(reinterpret_cast<const char*>(c->agent->buffer().data()), *n <= cap ? *n : 0);
    *len = *n;
  } else {
    auto v = c->cont->get_value(oid_of(oid), dkey, akey);
    if (!v.is_ok()) return fail(v.status());
    value = std::move(v).value();
    *len = value.size();
  }
  if (*len > cap) {
    last_error = "the value has " + std::to_string(*len) + " bytes, the buffer " + std::to_string(cap);
    return -ENOBUFS;
  }
  if (!value.empty()) std::memcpy(buf, value.data(), value.size());
  return 0;
}

int rfos_punch_dkey(rfos_cont_t* c, rfos_oid_t oid, const char* dkey) {
  if (bad(c, "cont") || bad(dkey, "dkey")) return -EINVAL;
  if (c->agent) return result(agent_keys(c, rfos::agent::KeyOp::kPunchDkey, oid, dkey, nullptr, 0).status());
  return result(c->cont->punch_dkey(oid_of(oid), dkey));
}

int rfos_punch_object(rfos_cont_t* c, rfos_oid_t oid) {
  if (bad(c, "cont")) return -EINVAL;
  if (c->agent) return result(agent_keys(c, rfos::agent::KeyOp::kPunchObject, oid, nullptr, nullptr, 0).status());
  return result(c->cont->punch_object(oid_of(oid)));
}

int rfos_submit_write(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset,
                      const void* buf, size_t len, uint64_t* ticket) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(buf, "buf") || bad(ticket, "ticket"))
    return -EINVAL;
  if (c->agent) return agent_submit(c, true, oid, dkey, akey, offset, const_cast<void*>(buf), len, ticket);
  auto t = c->cont->submit_write(oid_of(oid), dkey, akey, offset, {static_cast<const uint8_t*>(buf), len});
  if (!t.is_ok()) return fail(t.status());
  *ticket = *t;
  return 0;
}

int rfos_submit_read(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, void* buf,
                     size_t len, uint64_t* ticket) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(buf, "buf") || bad(ticket, "ticket"))
    return -EINVAL;
  if (c->agent) return agent_submit(c, false, oid, dkey, akey, offset, buf, len, ticket);
  auto t = c->cont->submit_read(oid_of(oid), dkey, akey, offset, {static_cast<uint8_t*>(buf), len});
  if (!t.is_ok()) return fail(t.status());
  *ticket = *t;
  return 0;
}

int rfos_poll(rfos_cont_t* c, rfos_completion_t* out, int max, int timeout_ms) {
  if (bad(c, "cont") || bad(out, "out") || max <= 0) return -EINVAL;
  if (c->agent) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    for (;;) {
      auto got = c->agent->poll(static_cast<size_t>(max), timeout_ms);
      if (!got.is_ok()) {
        // The agent is gone: nothing it held is in flight any more (it drains what it started before it hangs
        // up), so every buffer may go. A broken ring leaves them held: the agent may still be moving bytes.
        if (got.status().code() == rfos::StatusCode::kShutdown) {
          c->submitted.clear();
          c->in_flight.clear();
        }
        return fail(got.status());
      }
      int n = 0;
      for (const auto& done : *got) {
        if (done.user_data >> 63) continue;  // a piece of a synchronous call that failed part-way: not the app's
        agent_completed(c, done.user_data);
        out[n].ticket = done.user_data;
        out[n].status = done.status.is_ok() ? 0 : -done.status.to_errno();
        if (!done.status.is_ok()) last_error = done.status.to_string();
        ++n;
      }
      // Only pieces not the app's: it asked to wait for its own, so the wait goes on (what is left of it).
      if (n > 0 || got->empty() || timeout_ms == 0) return n;
      if (timeout_ms > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return 0;
        timeout_ms = static_cast<int>(left.count());
      }
    }
  }
  auto done = c->cont->poll(static_cast<size_t>(max), timeout_ms);
  for (size_t i = 0; i < done.size(); ++i) {
    out[i].ticket = done[i].ticket;
    out[i].status = done[i].status.is_ok() ? 0 : -done[i].status.to_errno();
    if (!done[i].status.is_ok()) last_error = done[i].status.to_string();
  }
  return static_cast<int>(done.size());
}

int rfos_set_data_path(rfos_cont_t* c, rfos_data_path_t path) {
  if (bad(c, "cont")) return -EINVAL;
  if (path != RFOS_DATA_PATH_AUTO && path != RFOS_DATA_PATH_MESSAGE && path != RFOS_DATA_PATH_EXPLICIT)
    return fail(rfos::error(rfos::StatusCode::kInvalidArgument, "unknown data path"));
  if (c->agent) return 0;  // the agent picks how bytes move
  c->cont->set_data_path(path == RFOS_DATA_PATH_EXPLICIT  ? rfos::client::DataPath::kExplicit
                         : path == RFOS_DATA_PATH_MESSAGE ? rfos::client::DataPath::kMessage
                                                          : rfos::client::DataPath::kAuto);
  return 0;
}

int rfos_register(rfos_cont_t* c, const void* buf, size_t len) {
  if (bad(c, "cont") || bad(buf, "buf")) return -EINVAL;
  if (c->agent) {  // a hint: the agent registers its shared buffer; other memory is copied through it
    if (len == 0) return fail(rfos::error(rfos::StatusCode::kInvalidArgument, "cannot register an empty buffer"));
    bool allocated = in_shared(c, buf, 1) && c->allocated.count(shared_offset(c, buf));
    if (allocated || !c->registered.emplace(buf, len).second)
      return fail(rfos::error(rfos::StatusCode::kBusy, "a registered buffer starts here"));
    return 0;
  }
  return result(c->cont->register_memory({static_cast<const uint8_t*>(buf), len}));
}

int rfos_unregister(rfos_cont_t* c, const void* buf) {
  if (bad(c, "cont") || bad(buf, "buf")) return -EINVAL;
  if (c->agent) {
    if (c->registered.erase(buf) == 0)
      return fail(rfos::error(rfos::StatusCode::kNotFound, "no buffer registered at that address"));
    return 0;
  }
  return result(c->cont->unregister_memory(buf));
}

int rfos_alloc(rfos_cont_t* c, size_t len, void** buf) {
  if (bad(c, "cont") || bad(buf, "buf")) return -EINVAL;
  if (c->agent) {  // first fit in the shared buffer, 4 KiB granules
    if (len == 0) return fail(rfos::error(rfos::StatusCode::kInvalidArgument, "cannot allocate an empty buffer"));
    if (len > c->agent->buffer().size())  // (and no rounding up below wraps around)
      return fail(
          rfos::error(rfos::StatusCode::kNoSpace, "larger than the agent's shared buffer (RFOS_AGENT_BUFFER_MIB)"));
    size_t want = (len + 4095) & ~size_t{4095};
    for (auto it = c->free_ranges.begin(); it != c->free_ranges.end(); ++it) {
      if (it->second < want) continue;
      auto [at, n] = *it;
      c->free_ranges.erase(it);
      if (n > want) c->free_ranges[at + want] = n - want;
      c->allocated[at] = want;
      *buf = c->agent->buffer().data() + at;
      return 0;
    }
    return fail(rfos::error(rfos::StatusCode::kNoSpace, "the agent's shared buffer has no " + std::to_string(want) +
                                                            " bytes free (RFOS_AGENT_BUFFER_MIB)"));
  }
  auto m = c->cont->alloc_memory(len);
  if (!m.is_ok()) return result(m.status());
  *buf = m->data();
  return 0;
}

int rfos_free(rfos_cont_t* c, void* buf) {
  if (bad(c, "cont") || bad(buf, "buf")) return -EINVAL;
  if (c->agent) {
    auto it = in_shared(c, buf, 1) ? c->allocated.find(shared_offset(c, buf)) : c->allocated.end();
    if (it == c->allocated.end())
      return fail(rfos::error(rfos::StatusCode::kNotFound, "no buffer allocated at that address"));
    size_t at = it->first;
    if (c->in_flight.count(at))
      return fail(rfos::error(rfos::StatusCode::kBusy, "I/O using the buffer is still in flight"));
    size_t n = it->second;
    c->allocated.erase(it);
    auto next = c->free_ranges.lower_bound(at);  // merged with the free neighbours
    if (next != c->free_ranges.end() && next->first == at + n) {
      n += next->second;
      next = c->free_ranges.erase(next);
    }
    if (next != c->free_ranges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        prev->second += n;
        return 0;
      }
    }
    c->free_ranges[at] = n;
    return 0;
  }
  return result(c->cont->free_memory(buf));
}

int rfos_writev(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, const rfos_extent_t* extents,
                size_t nextents, const struct iovec* iov, size_t niov) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || (nextents && bad(extents, "extents")) ||
      (niov && bad(iov, "iov")))
    return -EINVAL;
  if (c->agent) return agent_rwv(c, true, oid_of(oid), dkey, akey, extents, nextents, iov, niov);
  std::vector<rfos::client::Extent> ext = extents_of(extents, nextents);
  std::vector<std::span<const uint8_t>> sgl;
  for (size_t i = 0; i < niov; ++i) sgl.emplace_back(static_cast<const uint8_t*>(iov[i].iov_base), iov[i].iov_len);
  return result(c->cont->write(oid_of(oid), dkey, akey, ext, sgl));
}

int rfos_readv(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, const rfos_extent_t* extents,
               size_t nextents, const struct iovec* iov, size_t niov) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || (nextents && bad(extents, "extents")) ||
      (niov && bad(iov, "iov")))
    return -EINVAL;
  if (c->agent) return agent_rwv(c, false, oid_of(oid), dkey, akey, extents, nextents, iov, niov);
  std::vector<rfos::client::Extent> ext = extents_of(extents, nextents);
  std::vector<std::span<uint8_t>> sgl;
  for (size_t i = 0; i < niov; ++i) sgl.emplace_back(static_cast<uint8_t*>(iov[i].iov_base), iov[i].iov_len);
  return result(c->cont->read(oid_of(oid), dkey, akey, ext, sgl));
}

int rfos_list_extents(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, rfos_extent_t* out,
                      size_t cap, size_t* count) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(count, "count") || (cap && bad(out, "out")))
    return -EINVAL;
  if (c->agent) {
    auto n = agent_keys(c, rfos::agent::KeyOp::kListExtents, oid, dkey, akey, kStagingSlots * kSlot);
    if (!n.is_ok()) return fail(n.status());
    if (std::min<uint64_t>(*n, cap) * 16 > kStagingSlots * kSlot)
      return fail(rfos::error(rfos::StatusCode::kTooLarge, "more extents than the agent can hand over at once"));
    const uint8_t* p = c->agent->buffer().data();
    std::vector<rfos_extent_t> all(std::min<uint64_t>(*n, cap));
    for (size_t i = 0; i < all.size(); ++i) {
      std::memcpy(&all[i].offset, p + 16 * i, 8);
      std::memcpy(&all[i].length, p + 16 * i + 8, 8);
    }
    std::copy(all.begin(), all.end(), out);
    *count = *n;
    if (*n <= cap) return 0;
    last_error = "NoBuffer: " + std::to_string(*n) + " entries, room for " + std::to_string(cap);
    return -ENOBUFS;
  }
  auto all = c->cont->list_extents(oid_of(oid), dkey, akey);
  if (!all.is_ok()) return fail(all.status());
  return fill(*all, out, cap, count, [](const rfos::client::Extent& e) { return rfos_extent_t{e.offset, e.length}; });
}

int rfos_snapshot_create(rfos_client_t* client, const char* pool, const char* cont, uint64_t* epoch) {
  if (bad(client, "client") || bad(pool, "pool") || bad(cont, "cont") || bad(epoch, "epoch")) return -EINVAL;
  auto e = client->control->snapshot_create(pool, cont);
  if (!e.is_ok()) return fail(e.status());
  *epoch = *e;
  return 0;
}

int rfos_snapshot_list(rfos_client_t* client, const char* pool, const char* cont, uint64_t* out, size_t cap,
                       size_t* count) {
  if (bad(client, "client") || bad(pool, "pool") || bad(cont, "cont") || bad(count, "count") ||
      (cap && bad(out, "out")))
    return -EINVAL;
  auto all = client->control->snapshot_list(pool, cont);
  if (!all.is_ok()) return fail(all.status());
  return fill(*all, out, cap, count, [](uint64_t e) { return e; });
}

int rfos_snapshot_destroy(rfos_client_t* client, const char* pool, const char* cont, uint64_t epoch) {
  if (bad(client, "client") || bad(pool, "pool") || bad(cont, "cont")) return -EINVAL;
  return result(client->control->snapshot_destroy(pool, cont, epoch));
}

int rfos_set_read_epoch(rfos_cont_t* c, uint64_t epoch) {
  if (bad(c, "cont")) return -EINVAL;
  if (c->agent) return result(agent_keys(c, rfos::agent::KeyOp::kReadEpoch, {}, nullptr, nullptr, epoch).status());
  c->cont->set_read_epoch(epoch);
  return 0;
}

}  // extern "C"
