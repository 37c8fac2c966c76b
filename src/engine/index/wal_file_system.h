// A RocksDB file system whose write-ahead logs are written ahead with zeros.
//
// RocksDB appends its WAL: every synced write grows the file, so on ext4 (and XFS) each fdatasync must also
// make the new file size durable, which commits the file system's journal: a second device flush per index
// commit. This wrapper keeps a WAL's file size ahead of its records by writing zeros past them in chunks and
// syncing once per chunk, on a thread of its own a chunk ahead of the writers; the records then overwrite
// allocated, written blocks and their fdatasync is a data flush only (measured on this machine's ext4: 87-94 against 121-137 us at the median for a bare 300-byte
// write + fdatasync, and docs/BENCHMARKS.md for the engine).
//
// Recovery is unchanged: RocksDB's log reader skips zero-filled space (a zero-type, zero-length record ends
// the block; it was the format of RocksDB's mmap-written logs), and a record torn by a crash fails its
// checksum, where point-in-time recovery stops as it would at a short file. A log closed cleanly is
// truncated to its records.
//
// Thread-safety: as RocksDB's FileSystem and FSWritableFile.
#pragma once

#include <cstdint>
#include <memory>

namespace rocksdb {
class FileSystem;
}

namespace rfos::engine::index {

inline constexpr uint64_t kWalPrewriteChunkBytes = 1u << 20;

// `base` (default: RocksDB's default file system), with files named *.log written ahead kWalPrewriteChunkBytes
// at a time.
std::shared_ptr<rocksdb::FileSystem> make_prewritten_wal_fs(std::shared_ptr<rocksdb::FileSystem> base = nullptr);

}  // namespace rfos::engine::index
