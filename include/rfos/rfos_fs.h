/* rfos C API, the POSIX namespace: a container's files and directories as `rfos mount` shows them, without a
 * mount, and many small files in one call (a data loader's batch). The C++ class behind it is
 * rfos::posix::Namespace (src/posix/namespace.h); docs/posix.md has the layout and the durability contract.
 *
 * Calls act as the calling process's user (its effective uid and gid and its groups), checked by the server as
 * Linux checks them. Errors as in rfos.h: 0 (or a count) on success, a negative errno on failure (-ENOENT,
 * -EEXIST, -EACCES, -ENOTDIR, -EISDIR, -ENAMETOOLONG, ...), rfos_last_error() for the message.
 *
 * Thread-safety: an rfos_fs may be used by many threads at once.
 */
#ifndef RFOS_RFOS_FS_H
#define RFOS_RFOS_FS_H

#include "rfos/rfos.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rfos_fs rfos_fs_t;

/* pool, cont: labels or uuids; provider: NULL for the pool's. Opens read-write. */
int rfos_fs_open(rfos_client_t* client, const char* pool, const char* cont, const char* provider, rfos_fs_t** out);
void rfos_fs_close(rfos_fs_t* fs);

/* path: absolute in the container ("/a/b"). */
int rfos_fs_mkdir(rfos_fs_t* fs, const char* path, uint32_t mode);

/* One file of a batch to create. */
typedef struct {
  const char* name; /* in the directory: no '/' */
  uint32_t mode;    /* permission bits */
  const void* data;
  size_t len;
  int status; /* out: 0, or a negative errno (-EEXIST when the name exists) */
} rfos_fs_put_t;

/* Creates each file in directory `dir` with its bytes, up to `depth` operations in flight (0: 32): one round trip
 * for a file of up to 4095 bytes. Each entry's status says how it went; returns how many were made, or a
 * negative errno when `dir` cannot be used (then none was tried). Visible to every client at once, durable after
 * rfos_fs_sync. */
int rfos_fs_put_files(rfos_fs_t* fs, const char* dir, rfos_fs_put_t* files, size_t n, uint32_t depth);

/* One file of a batch to read whole. */
typedef struct {
  const char* name;
  void* buf;
  size_t cap;
  size_t len; /* out: the file's size */
  int status; /* out: 0, or a negative errno (-ENOBUFS when the file is larger than cap: nothing copied) */
} rfos_fs_get_t;

/* Reads each whole regular file of directory `dir` into its buffer, checked as open(O_RDONLY) is, up to `depth`
 * in flight (0: 32): one round trip for a file of up to 4095 bytes. Returns how many were read, or a negative
 * errno when `dir` cannot be used. */
int rfos_fs_get_files(rfos_fs_t* fs, const char* dir, rfos_fs_get_t* files, size_t n, uint32_t depth);

/* Makes every operation and write acknowledged so far durable (fsync for the whole container). */
int rfos_fs_sync(rfos_fs_t* fs);

#ifdef __cplusplus
}
#endif

#endif /* RFOS_RFOS_FS_H */
