// The C API of `rfos s3`'s RDMA path (include/rfos/rfos_s3.h): s3::RdmaClient over a C container handle, lending
// through its own session or, in agent mode, through the agent's.
#include "rfos/rfos_s3.h"

#include <cstring>

#include "client/c_api_internal.h"
#include "s3/rdma_client.h"

namespace {

using rfos::client::c_api::bad;
using rfos::client::c_api::fail;

rfos::s3::S3Endpoint endpoint_of(const rfos_s3_endpoint_t* e) {
  rfos::s3::S3Endpoint out;
  if (e->host) out.host = e->host;
  if (e->port) out.port = e->port;
  out.access_key = e->access_key;
  out.secret_key = e->secret_key;
  if (e->region) out.region = e->region;
  return out;
}

// The client for one call, or null (the last error says why).
std::unique_ptr<rfos::s3::RdmaClient> client_of(rfos_cont_t* c, const rfos_s3_endpoint_t* s3, const char* bucket,
                                                const char* key) {
  if (bad(c, "cont") || bad(s3, "s3") || bad(s3->access_key, "s3->access_key") ||
      bad(s3->secret_key, "s3->secret_key") || bad(bucket, "bucket") || bad(key, "key"))
    return nullptr;
  auto lender = c->agent ? rfos::s3::lender_of(*c->agent, c->handle) : rfos::s3::lender_of(*c->cont);
  return std::make_unique<rfos::s3::RdmaClient>(std::move(lender), endpoint_of(s3));
}

bool no_room(const char* etag, size_t room) {
  if (!etag || room >= RFOS_S3_ETAG_LEN) return false;
  fail(rfos::error(rfos::StatusCode::kInvalidArgument, "etag needs RFOS_S3_ETAG_LEN bytes"));
  return true;
}

int etag_out(const rfos::Result<std::string>& etag, char* out) {
  if (!etag.is_ok()) return fail(etag.status());
  if (!out) return 0;
  if (etag->size() >= RFOS_S3_ETAG_LEN)
    return fail(rfos::error(rfos::StatusCode::kInternal, "the gateway's ETag is longer than RFOS_S3_ETAG_LEN"));
  std::memcpy(out, etag->c_str(), etag->size() + 1);
  return 0;
}

std::span<const uint8_t> bytes_of(const void* buf, size_t len) { return {static_cast<const uint8_t*>(buf), len}; }

}  // namespace

extern "C" {

int rfos_s3_get_into(rfos_cont_t* cont, const rfos_s3_endpoint_t* s3, const char* bucket, const char* key, void* buf,
                     size_t len, const char* range, uint64_t* moved) {
  auto client = client_of(cont, s3, bucket, key);
  if (!client || bad(buf, "buf")) return -EINVAL;
  auto n = client->get_into(bucket, key, {static_cast<uint8_t*>(buf), len}, range ? range : "");
  if (!n.is_ok()) return fail(n.status());
  if (moved) *moved = *n;
  return 0;
}

int rfos_s3_put_from(rfos_cont_t* cont, const rfos_s3_endpoint_t* s3, const char* bucket, const char* key,
                     const void* buf, size_t len, char* etag, size_t etag_len) {
  auto client = client_of(cont, s3, bucket, key);
  if (!client || bad(buf, "buf") || no_room(etag, etag_len)) return -EINVAL;
  return etag_out(client->put_from(bucket, key, bytes_of(buf, len)), etag);
}

int rfos_s3_upload_part_from(rfos_cont_t* cont, const rfos_s3_endpoint_t* s3, const char* bucket, const char* key,
                             const char* upload_id, uint32_t part, const void* buf, size_t len, char* etag,
                             size_t etag_len) {
  auto client = client_of(cont, s3, bucket, key);
  if (!client || bad(upload_id, "upload_id") || bad(buf, "buf") || no_room(etag, etag_len)) return -EINVAL;
  return etag_out(client->upload_part_from(bucket, key, upload_id, part, bytes_of(buf, len)), etag);
}

}  // extern "C"
