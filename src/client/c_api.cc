// The C API (include/rfos/rfos.h) over ControlClient and Container.
#include "rfos/rfos.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/c_api_internal.h"
#include "client/container.h"
#include "client/control_client.h"

using rfos::ObjectId;
using rfos::Status;

struct rfos_cont {
  std::unique_ptr<rfos::client::Container> cont;
};

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

}  // namespace

extern "C" {

const char* rfos_last_error(void) { return last_error.c_str(); }

int rfos_connect(const char* addr, uint32_t timeout_ms, rfos_client_t** out) {
  if (bad(out, "out")) return -EINVAL;
  std::string a = addr ? addr : rfos::client::default_control_address();
  auto* c = new rfos_client{
      rfos::client::ControlClient::create(a, timeout_ms ? timeout_ms : 5000, rfos::client::TlsFiles::from_env())};
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
  rfos::client::ContainerOptions o;
  o.write = write != 0;
  if (provider) o.provider = provider;
  auto c = rfos::client::Container::open(*client->control, pool, cont, o);
  if (!c.is_ok()) return fail(c.status());
  *out = new rfos_cont{std::move(c).value()};
  return 0;
}

void rfos_cont_close(rfos_cont_t* cont) { delete cont; }

int rfos_write(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, const void* buf,
               size_t len) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || (len && bad(buf, "buf"))) return -EINVAL;
  return result(c->cont->write(oid_of(oid), dkey, akey, offset, {static_cast<const uint8_t*>(buf), len}));
}

int rfos_read(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, void* buf,
              size_t len) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || (len && bad(buf, "buf"))) return -EINVAL;
  return result(c->cont->read(oid_of(oid), dkey, akey, offset, {static_cast<uint8_t*>(buf), len}));
}

int rfos_array_size(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t* size) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(size, "size")) return -EINVAL;
  auto r = c->cont->array_size(oid_of(oid), dkey, akey);
  if (!r.is_ok()) return fail(r.status());
  *size = *r;
  return 0;
}

int rfos_put_value(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, const void* buf, size_t len) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(buf, "buf")) return -EINVAL;
  return result(c->cont->put_value(oid_of(oid), dkey, akey, {static_cast<const char*>(buf), len}));
}

int rfos_get_value(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, void* buf, size_t cap,
                   size_t* len) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(len, "len") || (cap && bad(buf, "buf")))
    return -EINVAL;
  auto v = c->cont->get_value(oid_of(oid), dkey, akey);
  if (!v.is_ok()) return fail(v.status());
  *len = v->size();
  if (v->size() > cap) {
    last_error = "the value has " + std::to_string(v->size()) + " bytes, the buffer " + std::to_string(cap);
    return -ENOBUFS;
  }
  std::memcpy(buf, v->data(), v->size());
  return 0;
}

int rfos_punch_dkey(rfos_cont_t* c, rfos_oid_t oid, const char* dkey) {
  if (bad(c, "cont") || bad(dkey, "dkey")) return -EINVAL;
  return result(c->cont->punch_dkey(oid_of(oid), dkey));
}

int rfos_punch_object(rfos_cont_t* c, rfos_oid_t oid) {
  if (bad(c, "cont")) return -EINVAL;
  return result(c->cont->punch_object(oid_of(oid)));
}

int rfos_submit_write(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset,
                      const void* buf, size_t len, uint64_t* ticket) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(buf, "buf") || bad(ticket, "ticket"))
    return -EINVAL;
  auto t = c->cont->submit_write(oid_of(oid), dkey, akey, offset, {static_cast<const uint8_t*>(buf), len});
  if (!t.is_ok()) return fail(t.status());
  *ticket = *t;
  return 0;
}

int rfos_submit_read(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, void* buf,
                     size_t len, uint64_t* ticket) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(buf, "buf") || bad(ticket, "ticket"))
    return -EINVAL;
  auto t = c->cont->submit_read(oid_of(oid), dkey, akey, offset, {static_cast<uint8_t*>(buf), len});
  if (!t.is_ok()) return fail(t.status());
  *ticket = *t;
  return 0;
}

int rfos_poll(rfos_cont_t* c, rfos_completion_t* out, int max, int timeout_ms) {
  if (bad(c, "cont") || bad(out, "out") || max <= 0) return -EINVAL;
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
  c->cont->set_data_path(path == RFOS_DATA_PATH_EXPLICIT  ? rfos::client::DataPath::kExplicit
                         : path == RFOS_DATA_PATH_MESSAGE ? rfos::client::DataPath::kMessage
                                                          : rfos::client::DataPath::kAuto);
  return 0;
}

int rfos_register(rfos_cont_t* c, const void* buf, size_t len) {
  if (bad(c, "cont") || bad(buf, "buf")) return -EINVAL;
  return result(c->cont->register_memory({static_cast<const uint8_t*>(buf), len}));
}

int rfos_unregister(rfos_cont_t* c, const void* buf) {
  if (bad(c, "cont") || bad(buf, "buf")) return -EINVAL;
  return result(c->cont->unregister_memory(buf));
}

int rfos_alloc(rfos_cont_t* c, size_t len, void** buf) {
  if (bad(c, "cont") || bad(buf, "buf")) return -EINVAL;
  auto m = c->cont->alloc_memory(len);
  if (!m.is_ok()) return result(m.status());
  *buf = m->data();
  return 0;
}

int rfos_free(rfos_cont_t* c, void* buf) {
  if (bad(c, "cont") || bad(buf, "buf")) return -EINVAL;
  return result(c->cont->free_memory(buf));
}

int rfos_writev(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, const rfos_extent_t* extents,
                size_t nextents, const struct iovec* iov, size_t niov) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || (nextents && bad(extents, "extents")) ||
      (niov && bad(iov, "iov")))
    return -EINVAL;
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
  std::vector<rfos::client::Extent> ext = extents_of(extents, nextents);
  std::vector<std::span<uint8_t>> sgl;
  for (size_t i = 0; i < niov; ++i) sgl.emplace_back(static_cast<uint8_t*>(iov[i].iov_base), iov[i].iov_len);
  return result(c->cont->read(oid_of(oid), dkey, akey, ext, sgl));
}

int rfos_list_extents(rfos_cont_t* c, rfos_oid_t oid, const char* dkey, const char* akey, rfos_extent_t* out,
                      size_t cap, size_t* count) {
  if (bad(c, "cont") || bad(dkey, "dkey") || bad(akey, "akey") || bad(count, "count") || (cap && bad(out, "out")))
    return -EINVAL;
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
  c->cont->set_read_epoch(epoch);
  return 0;
}

}  // extern "C"
