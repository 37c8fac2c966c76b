/* rfos C API: the RDMA data path of `rfos s3` (docs/s3.md, "RDMA"). An object (or a range of it) moves between
 * the server's targets and the caller's buffer by the data plane, never through the gateway or an HTTP body:
 * the buffer is lent to the targets through the session of an open container handle (rfos_cont_open; any
 * container the caller may open), for the one request, and the request, signed with SigV4, carries the token
 * that names the grant. The C++ class behind it is rfos::s3::RdmaClient (src/s3/rdma_client.h).
 *
 * In agent mode (rfos_connect("agent://...")) the agent lends the memory, which must then come from rfos_alloc
 * (its shared memory; -EINVAL otherwise); a tenant whose data the agent seals cannot lend (-EOPNOTSUPP).
 * Elsewhere the buffer is registered for the request unless it is already (rfos_register, rfos_alloc).
 *
 * Errors as in rfos.h, and the gateway's: -ENOENT NoSuchKey / NoSuchBucket / NoSuchUpload, -EACCES AccessDenied
 * or a bad signature, -EINVAL an object larger than the buffer or a bad request, -EOPNOTSUPP the gateway declined
 * the RDMA path, -EIO anything else; rfos_last_error() says which.
 */
#ifndef RFOS_RFOS_S3_H
#define RFOS_RFOS_S3_H

#include <stddef.h>
#include <stdint.h>

#include "rfos/rfos.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char* host; /* NULL: 127.0.0.1 */
  uint16_t port;    /* 0: 9000 */
  const char* access_key;
  const char* secret_key;
  const char* region; /* NULL: us-east-1 */
} rfos_s3_endpoint_t;

/* GET bucket/key into buf[0, len): the whole object, or `range` (a Range header's value, "bytes=A-B", "bytes=A-"
 * or "bytes=-N"; NULL for all of it). *moved: the bytes the targets wrote. */
int rfos_s3_get_into(rfos_cont_t* cont, const rfos_s3_endpoint_t* s3, const char* bucket, const char* key, void* buf,
                     size_t len, const char* range, uint64_t* moved);

/* Room for any ETag the gateway gives, quoted, with its NUL. */
#define RFOS_S3_ETAG_LEN 80

/* PUT buf[0, len) (1 byte or more) as bucket/key. etag (may be NULL): etag_len >= RFOS_S3_ETAG_LEN bytes for the
 * object's quoted ETag (-EINVAL before anything is sent otherwise). */
int rfos_s3_put_from(rfos_cont_t* cont, const rfos_s3_endpoint_t* s3, const char* bucket, const char* key,
                     const void* buf, size_t len, char* etag, size_t etag_len);

/* buf[0, len) as part `part` of the multipart upload `upload_id` of bucket/key; etag as rfos_s3_put_from's (the
 * part's, for CompleteMultipartUpload). */
int rfos_s3_upload_part_from(rfos_cont_t* cont, const rfos_s3_endpoint_t* s3, const char* bucket, const char* key,
                             const char* upload_id, uint32_t part, const void* buf, size_t len, char* etag,
                             size_t etag_len);

#ifdef __cplusplus
}
#endif

#endif /* RFOS_RFOS_S3_H */
