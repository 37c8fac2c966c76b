/* rfos C API: connect to a server, open a container, and do object I/O, synchronously or through an event
 * queue. For bindings, the FUSE mount and the agent. The C++ classes behind it are rfos::client::ControlClient
 * and rfos::client::Container (src/client/).
 *
 * Errors: functions return 0 (or a count) on success and a negative errno on failure (-ENOENT unknown pool,
 * container or key; -EACCES read-only session or bad capability; -EIO checksum mismatch or media error;
 * -ETIMEDOUT / -ESHUTDOWN server gone; -EINVAL bad arguments). rfos_last_error() gives the message of the
 * calling thread's last failure.
 *
 * Thread-safety: an rfos_client may be shared by threads; an rfos_cont belongs to one thread at a time.
 * Buffers passed to rfos_submit_* must stay valid until their completion is returned by rfos_poll.
 */
#ifndef RFOS_RFOS_H
#define RFOS_RFOS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rfos_client rfos_client_t;
typedef struct rfos_cont rfos_cont_t;

typedef struct {
  uint64_t hi; /* the top 8 bits name the object class: 1 = S1 (one target), 2 = SX (striped); with the top
                  bit also set (0x81, 0x82) the object keeps its dkeys in byte order (no NUL byte in them) */
  uint64_t lo;
} rfos_oid_t;

typedef struct {
  uint64_t ticket;
  int status; /* 0 or a negative errno */
} rfos_completion_t;

/* The message of the calling thread's last failure ("" when none). */
const char* rfos_last_error(void);

/* addr: the control plane, "unix:/path" or "HOST:PORT" (NULL: $RFOS_ADDR, else the local server's socket
 * unix:/run/rfos/control.sock); or "agent:///path/to/agent.sock" (NULL with $RFOS_AGENT set: that socket) for
 * agent mode, where `rfos agent` holds the sessions and every container handle is a ring to it: rfos_alloc
 * memory moves without a copy, rfos_submit_* takes only that memory, and the calls docs/agent.md lists as not
 * through the agent yet return -EOPNOTSUPP. Toward a TCP listener with mutual TLS, RFOS_TLS_CA, RFOS_TLS_CERT and
 * RFOS_TLS_KEY name the PEM files. A session's capability is renewed before it expires. */
int rfos_connect(const char* addr, uint32_t timeout_ms, rfos_client_t** out);
void rfos_disconnect(rfos_client_t* client);

/* pool, cont: labels or uuids. provider: NULL for the pool's. write: non-zero for a read-write session. */
int rfos_cont_open(rfos_client_t* client, const char* pool, const char* cont, int write, const char* provider,
                   rfos_cont_t** out);
void rfos_cont_close(rfos_cont_t* cont);

/* Array I/O at [offset, offset+len): durable on return / read and verified on return. */
int rfos_write(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, const void* buf,
               size_t len);
int rfos_read(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, void* buf,
              size_t len);
int rfos_array_size(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t* size);

/* A byte range of an array. */
typedef struct {
  uint64_t offset;
  uint64_t length;
} rfos_extent_t;

/* Scatter-gather array I/O: the extents' bytes, in order, are the concatenation of the iovecs (the totals must
 * match: -EINVAL). Durable on return / read and verified on return. */
int rfos_writev(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, const rfos_extent_t* extents,
                size_t nextents, const struct iovec* iov, size_t niov);
int rfos_readv(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, const rfos_extent_t* extents,
               size_t nextents, const struct iovec* iov, size_t niov);
/* The array's extents that hold data, in offset order, coalesced: up to cap of them into out, their number in
 * *count; -ENOBUFS when cap is too small (then *count says how many there are). */
int rfos_list_extents(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, rfos_extent_t* out,
                      size_t cap, size_t* count);

/* Snapshots, named by their epoch. rfos_snapshot_list: oldest first, as rfos_list_extents fills its array.
 * rfos_set_read_epoch: reads through `cont` from now on see the snapshot at `epoch` (0: the latest state);
 * while it is set, writes and punches fail with -EINVAL. */
int rfos_snapshot_create(rfos_client_t* client, const char* pool, const char* cont, uint64_t* epoch);
int rfos_snapshot_list(rfos_client_t* client, const char* pool, const char* cont, uint64_t* out, size_t cap,
                       size_t* count);
int rfos_snapshot_destroy(rfos_client_t* client, const char* pool, const char* cont, uint64_t epoch);
int rfos_set_read_epoch(rfos_cont_t* cont, uint64_t epoch);

/* Single values (up to 1 MiB). rfos_get_value copies at most cap bytes and stores the value's size in *len;
 * -ENOBUFS when cap is too small (then *len says how much is needed). */
int rfos_put_value(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, const void* buf, size_t len);
int rfos_get_value(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, void* buf, size_t cap,
                   size_t* len);
int rfos_punch_dkey(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey);
int rfos_punch_object(rfos_cont_t* cont, rfos_oid_t oid);

/* Event queue: an I/O of 1 B .. 1 MiB inside one 1 MiB-aligned range; many may be in flight. */
int rfos_submit_write(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset,
                      const void* buf, size_t len, uint64_t* ticket);
int rfos_submit_read(rfos_cont_t* cont, rfos_oid_t oid, const char* dkey, const char* akey, uint64_t offset, void* buf,
                     size_t len, uint64_t* ticket);
/* Up to max completions, waiting up to timeout_ms for the first. Returns how many, or a negative errno. */
int rfos_poll(rfos_cont_t* cont, rfos_completion_t* out, int max, int timeout_ms);

/* How array data moves (see docs/wire-format.md): AUTO, MESSAGE (with the messages), EXPLICIT (targets read and
 * write the client's registered buffers). */
typedef enum { RFOS_DATA_PATH_AUTO = 0, RFOS_DATA_PATH_MESSAGE = 1, RFOS_DATA_PATH_EXPLICIT = 2 } rfos_data_path_t;
int rfos_set_data_path(rfos_cont_t* cont, rfos_data_path_t path);

/* Registers a buffer with the fabric once; I/O whose bytes lie inside it lets the targets RDMA-read and write it
 * directly (the explicit path). -EAGAIN from unregister while I/O using it is in flight. */
int rfos_register(rfos_cont_t* cont, const void* buf, size_t len);
int rfos_unregister(rfos_cont_t* cont, const void* buf);

/* A page-aligned buffer of len bytes (on huge pages where the kernel gives them), registered as rfos_register's
 * are, until rfos_free (or the container's close). -EAGAIN from rfos_free while I/O using it is in flight. */
int rfos_alloc(rfos_cont_t* cont, size_t len, void** buf);
int rfos_free(rfos_cont_t* cont, void* buf);

#ifdef __cplusplus
}
#endif

#endif /* RFOS_RFOS_H */
