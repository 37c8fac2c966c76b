// A RocksDB file system whose write-ahead logs are written ahead (with kWalFillByte).
//
// RocksDB appends its WAL: every synced write grows the file, so on ext4 (and XFS) each fdatasync must also
// make the new file size durable, which commits the file system's journal: a second device flush per index
// commit. This wrapper keeps a WAL's file size ahead of its records by writing fill past them in chunks and
// syncing once per chunk, on a thread of its own a chunk ahead of the writers; the records then overwrite
// allocated, written blocks and their fdatasync is a data flush only (measured on this machine's ext4: 87-94 against
// 121-137 us at the median for a bare 300-byte write + fdatasync, and docs/BENCHMARKS.md for the engine).
//
// Recovery: RocksDB's log reader reports the fill past the records as a bad record, where point-in-time recovery
// stops, as it does at a record a crash tore (its checksum fails) or at a short file; so it stops at the first
// byte of the log a power cut lost, wherever that is (kWalFillByte). A log closed cleanly is truncated to its
// records.
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

// What the log is written ahead with. A record header of these bytes claims a record longer than its block,
// which RocksDB's reader reports as corruption, so point-in-time recovery stops at the first page a power cut
// lost. Zeros read as padding instead: the reader skipped the rest of their block and replayed the records after
// it, so a cut that kept a later page of unsynced records and lost an earlier one left a log with a hole.
inline constexpr char kWalFillByte = '\xff';

// `base` (default: RocksDB's default file system), with files named *.log written ahead kWalPrewriteChunkBytes
// at a time.
std::shared_ptr<rocksdb::FileSystem> make_prewritten_wal_fs(std::shared_ptr<rocksdb::FileSystem> base = nullptr);

}  // namespace rfos::engine::index
