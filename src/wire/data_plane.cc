#include "wire/data_plane.h"

#include <cstring>

#include "common/coding.h"

namespace rfos::wire {
namespace {

Status malformed(const char* what) {
  return error(StatusCode::kInvalidArgument, std::string("malformed message: ") + what);
}

// More checksums than one per 512-byte chunk of the extent (plus partial ends) cannot be valid.
bool csum_count_ok(uint32_t n, uint64_t length) { return n <= length / 512 + 2 && n <= (1u << 20); }

}  // namespace

std::string encode_request(const Request& r) {
  std::string s;
  s.reserve(160 + r.dkey.size() + r.akey.size() + r.csums.size() * 4);
  put_le<uint32_t>(&s, kRequestMagic);
  put_le<uint8_t>(&s, kDataPlaneVersion);
  put_le<uint8_t>(&s, static_cast<uint8_t>(r.op));
  put_le<uint8_t>(&s, static_cast<uint8_t>(r.kind));
  put_le<uint8_t>(&s, static_cast<uint8_t>(r.capability.size()));
  put_le<uint64_t>(&s, r.request_id);
  put_le<uint64_t>(&s, r.oid.hi);
  put_le<uint64_t>(&s, r.oid.lo);
  put_le<uint64_t>(&s, r.epoch);
  put_le<uint64_t>(&s, r.offset);
  put_le<uint64_t>(&s, r.length);
  put_le<uint16_t>(&s, static_cast<uint16_t>(r.dkey.size()));
  put_le<uint16_t>(&s, static_cast<uint16_t>(r.akey.size()));
  put_le<uint32_t>(&s, static_cast<uint32_t>(r.csums.size()));
  put_le<uint32_t>(&s, r.flags);
  put_le<uint16_t>(&s, static_cast<uint16_t>(r.anchor.size()));
  s += r.capability;
  s += r.dkey;
  s += r.akey;
  s += r.anchor;
  for (uint32_t c : r.csums) put_le<uint32_t>(&s, c);
  put_le<uint64_t>(&s, r.remote_addr);
  put_le<uint16_t>(&s, static_cast<uint16_t>(r.rkey.size()));
  s += r.rkey;
  put_le<uint8_t>(&s, static_cast<uint8_t>(r.grant.size()));
  s += r.grant;
  return s;
}

Status check_lengths(const Request& r) {
  if (r.dkey.size() > kMaxKeyBytes || r.akey.size() > kMaxKeyBytes)
    return error(StatusCode::kInvalidArgument, "a key is at most " + std::to_string(kMaxKeyBytes) + " bytes");
  if (r.anchor.size() > kMaxAnchorBytes || r.rkey.size() > kMaxRkeyBytes)
    return error(StatusCode::kInvalidArgument, "an anchor or remote key is too long");
  return Status::ok();
}

uint64_t request_id_of(std::string_view in) {
  ByteReader r(in);
  uint32_t magic = 0;
  uint8_t version = 0, op = 0, kind = 0, caplen = 0;
  uint64_t id = 0;
  if (!r.get_le(&magic) || magic != kRequestMagic || !r.get_le(&version) || !r.get_le(&op) || !r.get_le(&kind) ||
      !r.get_le(&caplen) || !r.get_le(&id))
    return 0;
  return id;
}

Result<Request> decode_request(std::string_view in) {
  if (in.size() > kMaxHeaderBytes) return malformed("header too large");
  ByteReader r(in);
  uint32_t magic, ncsum;
  uint8_t version = 0, op = 0, kind = 0, caplen = 0;
  uint16_t dlen, alen, anlen;
  Request q;
  if (!r.get_le(&magic) || magic != kRequestMagic) return malformed("not an rfos request");
  if (!r.get_le(&version) || version != kDataPlaneVersion)
    return error(StatusCode::kNotSupported, "data-plane version " + std::to_string(version) + " is not spoken here");
  if (!r.get_le(&op) || !r.get_le(&kind) || !r.get_le(&caplen)) return malformed("truncated");
  if (op < 1 || op > kMaxOp) return malformed("unknown op");
  if (kind != 1 && kind != 2) return malformed("unknown value kind");
  q.op = static_cast<Op>(op);
  q.kind = static_cast<Kind>(kind);
  if (!r.get_le(&q.request_id) || !r.get_le(&q.oid.hi) || !r.get_le(&q.oid.lo) || !r.get_le(&q.epoch) ||
      !r.get_le(&q.offset) || !r.get_le(&q.length) || !r.get_le(&dlen) || !r.get_le(&alen) || !r.get_le(&ncsum) ||
      !r.get_le(&q.flags) || !r.get_le(&anlen))
    return malformed("truncated");
  if (dlen > kMaxKeyBytes || alen > kMaxKeyBytes || anlen > kMaxAnchorBytes) return malformed("key too long");
  if (q.flags & ~(kIfAbsent | kLazy | kGrantFetch | kGrantUpdate)) return malformed("unknown flags");
  if ((q.flags & (kGrantFetch | kGrantUpdate)) && op != static_cast<uint8_t>(Op::kGrant))
    return malformed("a grant's flags on another op");
  if ((q.flags & (kIfAbsent | kLazy)) && op != static_cast<uint8_t>(Op::kUpdate))
    return malformed("kIfAbsent or kLazy on a non-update");
  if ((q.op == Op::kNamespace || q.op == Op::kNamespaceRead) && (q.length == 0 || q.length > kMaxNamespaceBytes))
    return malformed("a namespace request is 1 B .. 64 KiB");
  if (q.op == Op::kWatch && q.length != 0) return malformed("a watch carries no payload");
  if (!csum_count_ok(ncsum, q.length)) return malformed("too many checksums");
  std::string_view cap, dkey, akey, anchor, csums, rkey, grant;
  uint16_t rklen = 0;
  uint8_t glen = 0;
  if (!r.get_bytes(caplen, &cap) || !r.get_bytes(dlen, &dkey) || !r.get_bytes(alen, &akey) ||
      !r.get_bytes(anlen, &anchor) || !r.get_bytes(ncsum * size_t{4}, &csums) || !r.get_le(&q.remote_addr) ||
      !r.get_le(&rklen))
    return malformed("lengths do not match the message");
  if (rklen > kMaxRkeyBytes) return malformed("remote key too long");
  if (!r.get_bytes(rklen, &rkey) || !r.get_le(&glen) || !r.get_bytes(glen, &grant) || r.remaining() != 0)
    return malformed("lengths do not match the message");
  const bool data_op = q.op == Op::kUpdate || q.op == Op::kFetch;
  if (rklen && !data_op && q.op != Op::kGrant) return malformed("a memory descriptor on a keyless op");
  if ((rklen || glen) && q.kind != Kind::kArray) return malformed("a memory descriptor on a single value");
  if (q.op == Op::kGrant) {
    if (glen != kGrantBytes) return malformed("a grant without its id and scope");
    const uint32_t mode = q.flags & (kGrantFetch | kGrantUpdate);
    const bool revoke = q.length == 0 && rklen == 0 && mode == 0;
    if (!revoke && (q.length == 0 || rklen == 0 || (mode != kGrantFetch && mode != kGrantUpdate)))
      return malformed("a grant names memory, a length and one way (or none of them, to revoke)");
    if (q.offset > kMaxGrantMs) return malformed("a grant's lifetime is at most 300 s");
  } else if (glen) {
    if (!data_op || glen != kGrantRefBytes) return malformed("a grant reference on another op, or cut short");
    if (rklen) return malformed("a grant reference with a memory descriptor");
  }
  q.grant.assign(grant);
  q.rkey.assign(rkey);
  q.capability.assign(cap);
  q.dkey.assign(dkey);
  q.akey.assign(akey);
  q.anchor.assign(anchor);
  q.csums.resize(ncsum);
  if (ncsum) std::memcpy(q.csums.data(), csums.data(), csums.size());
  return q;
}

std::string encode_reply(const Reply& p) {
  std::string s;
  put_le<uint32_t>(&s, kReplyMagic);
  put_le<uint8_t>(&s, kDataPlaneVersion);
  put_le<uint8_t>(&s, 0);
  put_le<uint16_t>(&s, static_cast<uint16_t>(p.status));
  put_le<uint64_t>(&s, p.request_id);
  put_le<uint64_t>(&s, p.epoch);
  put_le<uint64_t>(&s, p.length);
  std::string_view msg = std::string_view(p.message).substr(0, 1024);
  put_le<uint16_t>(&s, static_cast<uint16_t>(msg.size()));
  put_le<uint32_t>(&s, static_cast<uint32_t>(p.csums.size()));
  s += msg;
  for (uint32_t c : p.csums) put_le<uint32_t>(&s, c);
  return s;
}

Result<Reply> decode_reply(std::string_view in) {
  if (in.size() > kMaxHeaderBytes) return malformed("header too large");
  ByteReader r(in);
  uint32_t magic, ncsum;
  uint8_t version = 0, pad = 0;
  uint16_t status, mlen;
  Reply p;
  if (!r.get_le(&magic) || magic != kReplyMagic) return malformed("not an rfos reply");
  if (!r.get_le(&version) || version != kDataPlaneVersion) return malformed("unknown version");
  if (!r.get_le(&pad) || !r.get_le(&status) || !r.get_le(&p.request_id) || !r.get_le(&p.epoch) ||
      !r.get_le(&p.length) || !r.get_le(&mlen) || !r.get_le(&ncsum))
    return malformed("truncated");
  // Accepted means canonical: what encode_reply writes, and nothing else (found by the fuzzer's corpus).
  if (pad != 0) return malformed("reserved byte set");
  if (mlen > 1024) return malformed("message too long");
  if (!csum_count_ok(ncsum, p.length)) return malformed("too many checksums");
  std::string_view msg, csums;
  if (!r.get_bytes(mlen, &msg) || !r.get_bytes(ncsum * size_t{4}, &csums) || r.remaining() != 0)
    return malformed("lengths do not match the message");
  p.status = static_cast<StatusCode>(status);
  if (status_code_name(p.status) == "Unknown") return malformed("unknown status code");
  p.message.assign(msg);
  p.csums.resize(ncsum);
  if (ncsum) std::memcpy(p.csums.data(), csums.data(), csums.size());
  return p;
}

namespace {
// Every page (extents, objects, keys) starts alike: u8 flags (bit 0: done), u16 anchor length, the anchor, u32
// entry count.
void put_page_head(std::string* s, uint8_t flags, std::string_view anchor, size_t count) {
  put_le<uint8_t>(s, flags);
  put_le<uint16_t>(s, static_cast<uint16_t>(anchor.size()));
  s->append(anchor);
  put_le<uint32_t>(s, static_cast<uint32_t>(count));
}

bool get_page_head(ByteReader& r, uint8_t max_flags, uint8_t* flags, std::string_view* anchor, uint32_t* count) {
  uint16_t alen = 0;
  return r.get_le(flags) && *flags <= max_flags && r.get_le(&alen) && alen <= kMaxAnchorBytes &&
         r.get_bytes(alen, anchor) && r.get_le(count);
}
}  // namespace

std::string encode_extent_page(const ExtentPage& p) {
  std::string s;
  put_page_head(&s, p.done ? 1 : 0, p.anchor, p.extents.size());
  for (const auto& [offset, length] : p.extents) {
    put_le<uint64_t>(&s, offset);
    put_le<uint64_t>(&s, length);
  }
  return s;
}

Result<ExtentPage> decode_extent_page(std::string_view in) {
  ByteReader r(in);
  ExtentPage p;
  uint8_t done = 0;
  uint32_t n = 0;
  std::string_view anchor;
  if (!get_page_head(r, 1, &done, &anchor, &n) || n > kMaxExtentsPerPage || r.remaining() != n * size_t{16})
    return malformed("extent page");
  p.done = done == 1;
  p.anchor.assign(anchor);
  p.extents.resize(n);
  for (auto& [offset, length] : p.extents) {
    r.get_le(&offset);
    r.get_le(&length);
    if (length == 0 || offset + length < offset) return malformed("extent page entry");
  }
  return p;
}

std::string encode_object_page(const ObjectPage& p) {
  std::string s;
  put_page_head(&s, p.done ? 1 : 0, p.anchor, p.oids.size());
  for (const ObjectId& o : p.oids) {
    put_le<uint64_t>(&s, o.hi);
    put_le<uint64_t>(&s, o.lo);
  }
  return s;
}

Result<ObjectPage> decode_object_page(std::string_view in) {
  ByteReader r(in);
  ObjectPage p;
  uint8_t done = 0;
  uint32_t n = 0;
  std::string_view anchor;
  if (!get_page_head(r, 1, &done, &anchor, &n) || n > kMaxObjectsPerPage || r.remaining() != n * size_t{16})
    return malformed("object page");
  p.done = done == 1;
  p.anchor.assign(anchor);
  p.oids.resize(n);
  for (ObjectId& o : p.oids) {
    r.get_le(&o.hi);
    r.get_le(&o.lo);
  }
  return p;
}

std::string encode_key_page(const KeyPage& p) {
  std::string s;
  put_page_head(&s, (p.done ? 1 : 0) | (p.with_values ? 2 : 0), p.anchor, p.keys.size());
  for (size_t i = 0; i < p.keys.size(); ++i) {
    put_le<uint16_t>(&s, static_cast<uint16_t>(p.keys[i].size()));
    s += p.keys[i];
    if (!p.with_values) continue;
    const std::string& v = i < p.values.size() ? p.values[i] : std::string();
    put_le<uint32_t>(&s, static_cast<uint32_t>(v.size()));
    s += v;
  }
  return s;
}

Result<KeyPage> decode_key_page(std::string_view in) {
  ByteReader r(in);
  KeyPage p;
  uint8_t done = 0;
  uint32_t n = 0;
  std::string_view anchor;
  if (!get_page_head(r, 3, &done, &anchor, &n) || n > in.size() / 2) return malformed("key page header");
  p.done = done & 1;
  p.with_values = done & 2;
  p.anchor.assign(anchor);
  p.keys.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t klen = 0;
    std::string_view k;
    if (!r.get_le(&klen) || klen > kMaxKeyBytes || !r.get_bytes(klen, &k)) return malformed("key page entry");
    p.keys.emplace_back(k);
    if (!p.with_values) continue;
    uint32_t vlen = 0;
    std::string_view v;
    if (!r.get_le(&vlen) || !r.get_bytes(vlen, &v)) return malformed("key page value");
    p.values.emplace_back(v);
  }
  if (r.remaining() != 0) return malformed("key page has trailing bytes");
  return p;
}

}  // namespace rfos::wire
