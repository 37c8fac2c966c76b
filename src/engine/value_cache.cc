#include "engine/value_cache.h"

#include "common/coding.h"

namespace rfos::engine {

size_t ValueCache::shard_of(uint32_t cid, const ObjectId& oid) {
  uint64_t h = (oid.hi * 0x9e3779b97f4a7c15ull) ^ (oid.lo * 0xc2b2ae3d27d4eb4full) ^ cid;
  return static_cast<size_t>((h ^ (h >> 29)) % kShards);
}

std::string ValueCache::object_part(uint32_t cid, const ObjectId& oid) {
  std::string s;
  put_be32(&s, cid);
  put_be64(&s, oid.hi);
  put_be64(&s, oid.lo);
  return s;
}

std::string ValueCache::dkey_part(uint32_t cid, const ObjectId& oid, std::string_view dkey) {
  std::string s = object_part(cid, oid);
  put_be32(&s, static_cast<uint32_t>(dkey.size()));
  s.append(dkey);
  return s;
}

std::string ValueCache::encode(const Key& k) {
  std::string s = dkey_part(k.cid, k.oid, k.dkey);
  s.push_back(k.size ? 1 : 0);
  s.append(k.akey);
  return s;
}

ValueCache::Ticket ValueCache::ticket(uint32_t cid, const ObjectId& oid) const {
  // The shard's drops first: a commit that dropped after this load makes the insert a no-op, and one that
  // dropped before it had counted itself in commits_ already.
  Ticket t;
  t.gen = shards_[shard_of(cid, oid)].gen.load(std::memory_order_acquire);
  t.commits = commits_.load(std::memory_order_acquire);
  return t;
}

ValueCache::Moment ValueCache::moment() const {
  Moment m;
  for (size_t i = 0; i < kShards; ++i) m.gens[i] = shards_[i].gen.load(std::memory_order_acquire);
  m.commits = commits_.load(std::memory_order_acquire);
  return m;
}

bool ValueCache::find(const Key& k, uint64_t seen, std::optional<std::string>* value) const {
  const Shard& s = shards_[shard_of(k.cid, k.oid)];
  std::string key = encode(k);
  std::lock_guard lock(s.mu);
  auto it = s.slots.find(key);
  if (it == s.slots.end() || it->second.since > seen) return false;
  *value = it->second.value;
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ValueCache::put(Shard& s, std::string key, Slot slot) {
  auto it = s.slots.find(key);
  size_t was = it == s.slots.end() ? 0 : cost(it->first, it->second), now = cost(key, slot);
  if (now > was && bytes_.load(std::memory_order_relaxed) + (now - was) > kMaxBytes) {
    if (s.bytes <= kMaxBytes / kShards) return;  // within its share: it keeps what it has
    bytes_.fetch_sub(s.bytes, std::memory_order_relaxed);
    s.bytes = 0;
    s.slots.clear();
    it = s.slots.end();
    was = 0;
  }
  if (it != s.slots.end()) {
    it->second = std::move(slot);
  } else {
    s.slots.emplace(std::move(key), std::move(slot));
  }
  s.bytes += now - was;
  bytes_.fetch_add(now - was, std::memory_order_relaxed);
}

void ValueCache::insert(const Ticket& t, const Key& k, std::optional<std::string> value) {
  if (value && value->size() > kMaxValueBytes) return;
  Shard& s = shards_[shard_of(k.cid, k.oid)];
  std::lock_guard lock(s.mu);
  if (s.writing > 0 || s.gen.load(std::memory_order_relaxed) != t.gen) return;
  put(s, encode(k), Slot{std::move(value), t.commits});
}

void ValueCache::fill(uint64_t commits, const Key& k, std::string value) {
  if (value.size() > kMaxValueBytes) return;
  Shard& s = shards_[shard_of(k.cid, k.oid)];
  std::lock_guard lock(s.mu);
  put(s, encode(k), Slot{std::move(value), commits});
}

void ValueCache::drop_prefix(Drop when, Shard& s, const std::string& prefix) {
  std::lock_guard lock(s.mu);
  s.writing += when == Drop::kBeforeWrite ? 1 : -1;
  s.gen.fetch_add(1, std::memory_order_acq_rel);
  auto it = s.slots.lower_bound(prefix);
  while (it != s.slots.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    size_t c = cost(it->first, it->second);
    s.bytes -= c;
    bytes_.fetch_sub(c, std::memory_order_relaxed);
    it = s.slots.erase(it);
  }
}

void ValueCache::drop_object(Drop when, uint32_t cid, const ObjectId& oid) {
  drop_prefix(when, shards_[shard_of(cid, oid)], object_part(cid, oid));
}

void ValueCache::drop_dkey(Drop when, uint32_t cid, const ObjectId& oid, std::string_view dkey) {
  drop_prefix(when, shards_[shard_of(cid, oid)], dkey_part(cid, oid, dkey));
}

void ValueCache::drop_all(Drop when) {
  for (Shard& s : shards_) drop_prefix(when, s, std::string());
}

}  // namespace rfos::engine
