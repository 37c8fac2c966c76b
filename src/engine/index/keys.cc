#include "engine/index/keys.h"

#include "common/coding.h"

namespace rfos::engine::index {
namespace {

constexpr uint8_t kRecordVersion = 1;
constexpr uint32_t kMaxRecordLength = 1u << 20;  // a piece never spans more than a grain
constexpr uint32_t kMaxCsums = (1u << 20) / 512 + 1;
constexpr uint32_t kMaxRuns = (1u << 20) / 4096 + 1;

void put_uuid(std::string* dst, const Uuid& u) { dst->append(reinterpret_cast<const char*>(u.bytes.data()), 16); }

// Reads a NUL-terminated dkey (an object of ordered dkeys) at `in`, after its tag.
bool take_ordered_key(std::string_view* in, char tag, std::string_view* out) {
  if (in->size() < 3 || (*in)[0] != tag) return false;
  size_t end = in->find('\0', 1);
  if (end == std::string_view::npos || end == 1) return false;
  *out = in->substr(1, end - 1);
  in->remove_prefix(end + 1);
  return true;
}

// Reads a u16 length-prefixed key at `in`, after a tag byte equal to `tag`.
bool take_key(std::string_view* in, char tag, std::string_view* out) {
  if (in->size() < 3 || (*in)[0] != tag) return false;
  size_t len = get_be16(in->data() + 1);
  if (len == 0 || in->size() < 3 + len) return false;
  *out = in->substr(3, len);
  in->remove_prefix(3 + len);
  return true;
}

bool take_version(std::string_view in, ObjectKey* out) {
  if (in.size() != kVersionBytes) return false;
  out->epoch = ~get_be64(in.data());
  out->seq = ~get_be64(in.data() + 8);
  return true;
}

}  // namespace

std::string meta_key(std::string_view name) {
  std::string k(1, kMetaTag);
  k.append(name);
  return k;
}

std::string pool_key(const Uuid& pool) {
  std::string k(1, kPoolTag);
  put_uuid(&k, pool);
  return k;
}

std::string cont_key(const Uuid& pool, const Uuid& cont) {
  std::string k(1, kContTag);
  put_uuid(&k, pool);
  put_uuid(&k, cont);
  return k;
}

std::string snap_prefix(uint32_t cid) {
  std::string k(1, kSnapTag);
  put_be32(&k, cid);
  return k;
}

std::string snap_key(uint32_t cid, uint64_t epoch) {
  std::string k = snap_prefix(cid);
  put_be64(&k, epoch);
  return k;
}

std::string free_key(uint64_t block) {
  std::string k(1, kFreeTag);
  put_be64(&k, block);
  return k;
}

std::string cont_objects_prefix(uint32_t cid) {
  std::string k(1, kObjTag);
  put_be32(&k, cid);
  return k;
}

std::string mark_prefix(uint32_t cid) {
  std::string k(1, kMarkTag);
  put_be32(&k, cid);
  return k;
}

std::string mark_key(uint32_t cid, const ObjectId& oid) {
  std::string k = mark_prefix(cid);
  put_be64(&k, oid.hi);
  put_be64(&k, oid.lo);
  return k;
}

std::string lazy_key(uint64_t seq) {
  std::string k(1, kLazyTag);
  put_be64(&k, seq);
  return k;
}

std::string encode_lazy(const std::vector<std::string_view>& keys) {
  std::string v;
  for (std::string_view k : keys) {
    put_le<uint32_t>(&v, static_cast<uint32_t>(k.size()));
    v.append(k);
  }
  return v;
}

bool decode_lazy(std::string_view value, std::vector<std::string>* keys) {
  keys->clear();
  ByteReader r(value);
  while (r.remaining() > 0) {
    uint32_t n = 0;
    std::string_view k;
    if (!r.get_le(&n) || n == 0 || !r.get_bytes(n, &k)) return false;
    keys->emplace_back(k);
  }
  return true;
}

std::string object_prefix(uint32_t cid, const ObjectId& oid) {
  std::string k = cont_objects_prefix(cid);
  put_be64(&k, oid.hi);
  put_be64(&k, oid.lo);
  return k;
}

void append_dkey(std::string* key, std::string_view dkey) {
  const bool ordered = ordered_object(*key);
  key->push_back(kDkeyTag);
  if (ordered) {
    key->append(dkey);
    key->push_back('\0');
    return;
  }
  put_be16(key, static_cast<uint16_t>(dkey.size()));
  key->append(dkey);
}

void append_akey(std::string* key, std::string_view akey) {
  key->push_back(kAkeyTag);
  put_be16(key, static_cast<uint16_t>(akey.size()));
  key->append(akey);
}

void append_version(std::string* key, uint64_t epoch, uint64_t seq) {
  put_be64(key, ~epoch);
  put_be64(key, ~seq);
}

void append_extent_start(std::string* key, uint64_t start) {
  key->push_back(kExtentTag);
  put_be64(key, start);
}

bool parse_object_key(std::string_view key, ObjectKey* out) {
  if (key.size() < 1 + 4 + 16 + 1 || key[0] != kObjTag) return false;
  out->cid = get_be32(key.data() + 1);
  out->oid.hi = get_be64(key.data() + 5);
  out->oid.lo = get_be64(key.data() + 13);
  key.remove_prefix(21);
  out->dkey = {};
  out->akey = {};
  out->start = 0;
  if (key[0] == kPunchTag) {
    out->level = 0;
    out->kind = kPunchTag;
    return take_version(key.substr(1), out);
  }
  const bool dkey_ok =
      out->oid.ordered_dkeys() ? take_ordered_key(&key, kDkeyTag, &out->dkey) : take_key(&key, kDkeyTag, &out->dkey);
  if (!dkey_ok || key.empty()) return false;
  if (key[0] == kPunchTag) {
    out->level = 1;
    out->kind = kPunchTag;
    return take_version(key.substr(1), out);
  }
  if (!take_key(&key, kAkeyTag, &out->akey) || key.empty()) return false;
  out->level = 2;
  out->kind = key[0];
  key.remove_prefix(1);
  switch (out->kind) {
    case kPunchTag:
    case kSingleTag:
      return take_version(key, out);
    case kExtentTag:
      if (key.size() != 8 + kVersionBytes) return false;
      out->start = get_be64(key.data());
      return take_version(key.substr(8), out);
    default:
      return false;
  }
}

std::string encode_extent(const ExtentRecord& r) {
  std::string v;
  v.reserve(16 + r.csums.size() * 4 + r.runs.size() * 12 + r.inline_data.size());
  put_le<uint8_t>(&v, kRecordVersion);
  put_le<uint8_t>(&v, r.flags);
  put_le<uint32_t>(&v, r.length);
  put_le<uint32_t>(&v, r.csum_chunk_bytes);
  put_le<uint32_t>(&v, static_cast<uint32_t>(r.csums.size()));
  for (uint32_t c : r.csums) put_le<uint32_t>(&v, c);
  if (r.flags & ExtentRecord::kInline) {
    v.append(r.inline_data);
  } else if (!(r.flags & ExtentRecord::kHole)) {
    put_le<uint32_t>(&v, static_cast<uint32_t>(r.runs.size()));
    for (const Run& run : r.runs) {
      put_le<uint64_t>(&v, run.block);
      put_le<uint32_t>(&v, run.nblocks);
    }
  }
  return v;
}

bool peek_extent_length(std::string_view value, uint32_t* length, uint8_t* flags) {
  ByteReader in(value);
  uint8_t version, f;
  if (!(in.get_le(&version) && version == kRecordVersion && in.get_le(&f) && in.get_le(length))) return false;
  if (flags) *flags = f;
  return true;
}

bool decode_extent(std::string_view value, ExtentRecord* out) {
  ByteReader in(value);
  uint8_t version;
  uint32_t ncsum;
  if (!in.get_le(&version) || version != kRecordVersion) return false;
  if (!in.get_le(&out->flags) || !in.get_le(&out->length) || !in.get_le(&out->csum_chunk_bytes)) return false;
  if (out->length == 0 || out->length > kMaxRecordLength) return false;
  if ((out->flags & ~(ExtentRecord::kHole | ExtentRecord::kInline)) != 0) return false;
  if ((out->flags & ExtentRecord::kHole) && (out->flags & ExtentRecord::kInline)) return false;
  if (!in.get_le(&ncsum) || ncsum > kMaxCsums || in.remaining() < ncsum * 4ull) return false;
  out->csums.resize(ncsum);
  for (uint32_t& c : out->csums) in.get_le(&c);
  out->runs.clear();
  out->inline_data = {};
  if (out->flags & ExtentRecord::kInline) {
    if (in.remaining() != out->length) return false;
    return in.get_bytes(out->length, &out->inline_data);
  }
  if (out->flags & ExtentRecord::kHole) return in.remaining() == 0 && ncsum == 0;
  uint32_t nruns;
  if (!in.get_le(&nruns) || nruns == 0 || nruns > kMaxRuns || in.remaining() != nruns * 12ull) return false;
  out->runs.resize(nruns);
  uint64_t blocks = 0;
  for (Run& run : out->runs) {
    in.get_le(&run.block);
    in.get_le(&run.nblocks);
    if (run.nblocks == 0) return false;
    blocks += run.nblocks;
  }
  // The runs must hold the data (it may start inside the first block, but never past a grain of blocks + 1).
  return blocks * 4096 >= out->length && blocks <= kMaxRuns;
}

std::string encode_single(uint32_t csum, std::string_view data) {
  std::string v;
  v.reserve(9 + data.size());
  put_le<uint8_t>(&v, kRecordVersion);
  put_le<uint32_t>(&v, csum);
  put_le<uint32_t>(&v, static_cast<uint32_t>(data.size()));
  v.append(data);
  return v;
}

bool decode_single(std::string_view value, SingleRecord* out) {
  ByteReader in(value);
  uint8_t version;
  uint32_t len;
  if (!in.get_le(&version) || version != kRecordVersion) return false;
  if (!in.get_le(&out->csum) || !in.get_le(&len) || len == 0 || in.remaining() != len) return false;
  return in.get_bytes(len, &out->data);
}

std::string encode_cont(const ContRecord& r) {
  std::string v;
  put_le<uint8_t>(&v, kRecordVersion);
  put_le<uint32_t>(&v, r.id);
  put_le<uint32_t>(&v, r.csum_chunk_bytes);
  put_le<uint8_t>(&v, r.csum ? 1 : 0);
  put_le<uint64_t>(&v, r.agg_epoch);
  put_le<uint8_t>(&v, (r.has_punches ? 1 : 0) | (r.punch_marks ? 2 : 0));
  return v;
}

bool decode_cont(std::string_view value, ContRecord* out) {
  ByteReader in(value);
  uint8_t version, csum, punches = 1;
  if (!in.get_le(&version) || version != kRecordVersion) return false;
  if (!in.get_le(&out->id) || !in.get_le(&out->csum_chunk_bytes) || !in.get_le(&csum) || csum > 1) return false;
  out->csum = csum == 1;
  if (!in.get_le(&out->agg_epoch)) return false;
  // Bit 0: has_punches, bit 1: punch_marks (which comes only with it).
  if (in.remaining() > 0 && (!in.get_le(&punches) || punches > 3 || punches == 2)) return false;
  if (in.remaining() != 0) return false;
  out->has_punches = punches & 1;
  out->punch_marks = punches & 2;
  uint32_t c = out->csum_chunk_bytes;
  return c >= 512 && c <= (1u << 20) && (c & (c - 1)) == 0;
}

std::string encode_format(const FormatRecord& r) {
  std::string v;
  put_le<uint32_t>(&v, r.version);
  put_le<uint32_t>(&v, r.block_bytes);
  put_le<uint64_t>(&v, r.block_count);
  v.append(reinterpret_cast<const char*>(r.uuid.bytes.data()), 16);
  return v;
}

bool decode_format(std::string_view value, FormatRecord* out) {
  ByteReader in(value);
  std::string_view uuid;
  if (!in.get_le(&out->version) || !in.get_le(&out->block_bytes) || !in.get_le(&out->block_count)) return false;
  if (!in.get_bytes(16, &uuid) || in.remaining() != 0) return false;
  std::copy(uuid.begin(), uuid.end(), out->uuid.bytes.begin());
  return out->block_bytes == 4096 && out->block_count >= 2;
}

}  // namespace rfos::engine::index
