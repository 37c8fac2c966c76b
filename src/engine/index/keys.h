// The RocksDB key layout and record encodings of one target. docs/engine-format.md describes them.
//
//   'M' name                                  meta records (format, seq)
//   'P' pool(16)                              pool shard
//   'C' pool(16) cont(16)                     container: ContRecord
//   'S' cid(4) epoch(8)                       snapshot
//   'F' block(8)                              free block run: nblocks (allocator state)
//   'Q' cid(4) oid(16)                        the object holds punches (containers with punch_marks)
//   'O' cid(4) oid(16) 'P' ~epoch ~seq        object punch
//   'O' cid(4) oid(16) 'd' len(2) dkey 'P' ~epoch ~seq                        dkey punch
//                      'd' dkey 0x00                                         ... the dkey of an object whose id
//                                                                            says ObjectId::kOrderedDkeys
//   'O' cid(4) oid(16) 'd' len(2) dkey 'a' len(2) akey 'P' ~epoch ~seq        akey punch
//   'O' ... 'a' len(2) akey 'v' ~epoch ~seq                                   single value: SvRecord
//   'O' ... 'a' len(2) akey 'x' start(8) ~epoch ~seq                          array extent: ExtRecord
// Integers in keys are big-endian, so byte order is numeric order; inverted epochs and sequence numbers
// (~x) put the newest version first.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"

namespace rfos::engine::index {

inline constexpr char kMetaTag = 'M';
inline constexpr char kPoolTag = 'P';
inline constexpr char kContTag = 'C';
inline constexpr char kSnapTag = 'S';
inline constexpr char kFreeTag = 'F';
inline constexpr char kObjTag = 'O';
inline constexpr char kMarkTag = 'Q';   // an object with punches (ContRecord::punch_marks)
inline constexpr char kLazyTag = 'L';   // a lazy update's block data, not yet synced (docs/engine-format.md)
inline constexpr char kPunchTag = 'P';  // sorts before 'a', 'd', 'v', 'x': punches lead their level
inline constexpr char kDkeyTag = 'd';
inline constexpr char kAkeyTag = 'a';
inline constexpr char kSingleTag = 'v';
inline constexpr char kExtentTag = 'x';
inline constexpr size_t kVersionBytes = 16;       // ~epoch ~seq
inline constexpr size_t kObjectPrefixBytes = 21;  // object_prefix: 'O' cid(4) oid(16)

std::string meta_key(std::string_view name);
std::string pool_key(const Uuid& pool);
std::string cont_key(const Uuid& pool, const Uuid& cont);
std::string snap_prefix(uint32_t cid);
std::string snap_key(uint32_t cid, uint64_t epoch);
std::string free_key(uint64_t block);
std::string cont_objects_prefix(uint32_t cid);                 // 'O' cid
std::string object_prefix(uint32_t cid, const ObjectId& oid);  // 'O' cid oid
std::string mark_prefix(uint32_t cid);                         // 'Q' cid
std::string mark_key(uint32_t cid, const ObjectId& oid);       // 'Q' cid oid
std::string lazy_key(uint64_t seq);                            // 'L' seq
// A lazy marker's value: the index keys of the records whose block data it names.
std::string encode_lazy(const std::vector<std::string_view>& keys);
bool decode_lazy(std::string_view value, std::vector<std::string>* keys);
// 'd' len dkey, or 'd' dkey 0x00 where `key`, an object_prefix, names an object of ordered dkeys (byte order).
void append_dkey(std::string* key, std::string_view dkey);
void append_akey(std::string* key, std::string_view akey);  // 'a' len akey
void append_version(std::string* key, uint64_t epoch, uint64_t seq);
void append_extent_start(std::string* key, uint64_t start);  // 'x' start
// Whether `key`, which starts with an object_prefix, is of an object of ordered dkeys (ObjectId::kOrderedDkeys).
inline bool ordered_object(std::string_view key) {
  return key.size() >= kObjectPrefixBytes && (static_cast<uint8_t>(key[5]) & 0x80) != 0;
}

// A parsed object-record key. Returns false for anything malformed (keys come from disk).
struct ObjectKey {
  uint32_t cid = 0;
  ObjectId oid;
  int level = 0;  // 0 object, 1 dkey, 2 akey
  std::string_view dkey;
  std::string_view akey;
  char kind = 0;       // kPunchTag (at `level`), kSingleTag or kExtentTag (level 2)
  uint64_t start = 0;  // extents
  uint64_t epoch = 0;
  uint64_t seq = 0;
};
bool parse_object_key(std::string_view key, ObjectKey* out);

struct Run {
  uint64_t block = 0;
  uint32_t nblocks = 0;
  bool operator==(const Run&) const = default;
};

// Value of an 'x' record: one array piece, within one grain.
struct ExtentRecord {
  static constexpr uint8_t kHole = 1;    // punched range: no data, reads as zeros, not part of the size
  static constexpr uint8_t kInline = 2;  // data stored in the record itself
  uint8_t flags = 0;
  uint32_t length = 0;
  uint32_t csum_chunk_bytes = 0;
  std::vector<uint32_t> csums;   // one per checksum chunk touched (none for holes)
  std::vector<Run> runs;         // block file runs; data starts at (start % block) inside the first block
  std::string_view inline_data;  // points into the decoded value
};
std::string encode_extent(const ExtentRecord& r);
// False when malformed: bad version, truncated, counts out of range, zero-length runs.
bool decode_extent(std::string_view value, ExtentRecord* out);
// The record's length without decoding the rest (false when the value is not an extent record).
bool peek_extent_length(std::string_view value, uint32_t* length, uint8_t* flags = nullptr);

// Value of a 'v' record.
struct SingleRecord {
  uint32_t csum = 0;
  std::string_view data;
};
std::string encode_single(uint32_t csum, std::string_view data);
bool decode_single(std::string_view value, SingleRecord* out);

struct ContRecord {
  uint32_t id = 0;
  uint32_t csum_chunk_bytes = 0;
  bool csum = true;
  uint64_t agg_epoch = 0;
  // Set by the container's first object, dkey or akey punch (in the punch's own commit); a fetch from a
  // container without one skips the punch lookups. Records written before the flag existed lack its byte
  // and decode as true.
  bool has_punches = false;
  // Set with has_punches by this version: from that first punch on, every punch also writes its object's
  // mark (mark_key), so a fetch from an object without one skips the punch lookups too. Containers punched
  // before it existed keep looking everywhere.
  bool punch_marks = false;
};
std::string encode_cont(const ContRecord& r);
bool decode_cont(std::string_view value, ContRecord* out);

struct FormatRecord {
  uint32_t version = 0;
  uint32_t block_bytes = 0;
  uint64_t block_count = 0;
  Uuid uuid;
};
std::string encode_format(const FormatRecord& r);
bool decode_format(std::string_view value, FormatRecord* out);

}  // namespace rfos::engine::index
