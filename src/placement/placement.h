// Placement: which target of a pool holds (oid, dkey). A pure function of the pool map's size, the object id
// and the dkey, computed by every client: no lookup service on the data path. Jump consistent hash (Lamping &
// Veach), so growing the map moves only 1/n of the keys.
//
// Object classes (top 8 bits of oid.hi, but the highest, ObjectId::kOrderedDkeys): S1 keeps a whole object on one
// target; SX stripes its dkeys over all.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/ids.h"

namespace rfos::placement {

enum class ObjectClass : uint8_t { kS1 = 1, kSX = 2 };

inline ObjectClass object_class(const ObjectId& oid) {
  return static_cast<ObjectClass>((oid.hi >> 56) & 0x7f) == ObjectClass::kS1 ? ObjectClass::kS1 : ObjectClass::kSX;
}

// The id with its class set to `c` (and dkeys in byte order where `ordered`).
inline ObjectId with_class(ObjectId oid, ObjectClass c, bool ordered = false) {
  oid.hi = (oid.hi & ((1ull << 56) - 1)) | (uint64_t(c) << 56) | (ordered ? ObjectId::kOrderedDkeys : 0);
  return oid;
}

inline uint64_t mix(uint64_t h) {  // splitmix64 finalizer
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

inline uint64_t fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

inline uint32_t jump_hash(uint64_t key, uint32_t buckets) {
  int64_t b = -1, j = 0;
  while (j < buckets) {
    b = j;
    key = key * 2862933555777941757ull + 1;
    j = static_cast<int64_t>((b + 1) * (double(1ll << 31) / double((key >> 33) + 1)));
  }
  return static_cast<uint32_t>(b);
}

// The target of (oid, dkey) in a pool of `targets` targets.
inline uint32_t target_of(const ObjectId& oid, std::string_view dkey, uint32_t targets) {
  uint64_t h = mix(oid.hi ^ mix(oid.lo));
  if (object_class(oid) == ObjectClass::kSX) h = mix(h ^ fnv1a(dkey));
  return jump_hash(h, targets);
}

}  // namespace rfos::placement
