// The engine's cache of single values and array sizes at the latest epoch (engine_impl.h: Engine::Impl::values).
//
// Namespace records are single values (a directory entry, an inode), and a namespace operation reads two or
// three of them that the operations before it just wrote: a directory's inode, the entry, the entry's inode.
// Each read from the index is a few seeks (4-7 us each on a small machine); from here it is a map lookup. The
// cache holds what a fetch at the latest epoch would return now: a value, or "none" (kNotFound). An array's
// size (Key::size; a file's size is its first chunk's, and every lookup and directory page entry asks for it,
// each a walk over the array's records) is kept the same way, as its 8 bytes, or none.
//
// Staying right: every commit drops the cached keys of every object level it writes (its whole object for an
// object punch, its dkey otherwise; a range delete, a container destroyed, drops everything) twice: before its
// index write, which also marks their shards as being written, and after it, once the commit is counted
// (committed()), which lets the shards go; then a batch (Engine::apply) fills in the single values it put,
// when nothing at a later epoch can hide them; all before the commit reports. While a shard is being written
// nothing is inserted into it, and nothing that commit changes is found. A reader that missed may insert what
// it read only if nothing in its shard was dropped between its ticket (taken before its index read) and the
// insert: a commit it raced either came before its ticket (its read saw it) or makes the insert a no-op. A
// read view (a namespace operation's one moment of the index) takes a Moment before its iterator: it is
// answered only from entries current since before it was made (not with a value a commit it may not see
// filled in), and may insert what it read under the Moment's tickets.
//
// Thread-safety: all members may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/ids.h"

namespace rfos::engine {

class ValueCache {
 public:
  static constexpr size_t kShards = 64;
  // Bytes held at most, keys, values and bookkeeping counted (an inode's entry costs about 250: some 65k of
  // them). A shard is an object's (a directory's entries share one): when the cache is full, a shard holding
  // more than its share starts over, and a smaller one keeps no more.
  static constexpr size_t kMaxBytes = 16u << 20;
  static constexpr size_t kMaxValueBytes = 4096;  // larger values are not kept
  static constexpr size_t kSlotOverhead = 96;     // a map node, its key's and value's headers

  struct Key {
    uint32_t cid = 0;
    ObjectId oid;
    std::string_view dkey, akey;
    bool size = false;  // the array's size at (dkey, akey), not a single value there
  };
  // What a reader knew before it read the index.
  struct Ticket {
    uint64_t gen = 0;      // its shard's drops so far
    uint64_t commits = 0;  // commits so far
  };
  // Every shard's drops and the commits at one moment (a read view's).
  struct Moment {
    std::array<uint64_t, kShards> gens{};
    uint64_t commits = 0;
  };
  static constexpr uint64_t kNow = UINT64_MAX;  // find() for a reader of the index as it is now

  Ticket ticket(uint32_t cid, const ObjectId& oid) const;
  Moment moment() const;
  Ticket ticket(const Moment& m, uint32_t cid, const ObjectId& oid) const {
    return {m.gens[shard_of(cid, oid)], m.commits};
  }

  // True when `k` is cached and was current when a reader that had seen `seen` commits began (kNow: any);
  // *value is then the value, or nullopt for none.
  bool find(const Key& k, uint64_t seen, std::optional<std::string>* value) const;
  // What a reader holding `t` read at `k` (nullopt: none); ignored when something of its shard was dropped
  // since `t` or the value is too large.
  void insert(const Ticket& t, const Key& k, std::optional<std::string> value);

  // At commit: the drops kBeforeWrite, the index write, committed(), the same drops kAfterWrite, the fills.
  enum class Drop { kBeforeWrite, kAfterWrite };
  uint64_t committed() { return commits_.fetch_add(1, std::memory_order_acq_rel) + 1; }
  void drop_object(Drop when, uint32_t cid, const ObjectId& oid);
  void drop_dkey(Drop when, uint32_t cid, const ObjectId& oid, std::string_view dkey);
  void drop_all(Drop when);
  void clear() {
    drop_all(Drop::kBeforeWrite);
    drop_all(Drop::kAfterWrite);
  }
  // A value a commit (number `commits`, from committed()) put and nothing later hides.
  void fill(uint64_t commits, const Key& k, std::string value);

  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::optional<std::string> value;
    uint64_t since = 0;  // current since this many commits
  };
  struct Shard {
    mutable std::mutex mu;
    std::atomic<uint64_t> gen{0};
    int writing = 0;                                 // commits between their drops before and after their index write
    std::map<std::string, Slot, std::less<>> slots;  // by encoded key: cid, oid, dkey's length, dkey, size, akey
    size_t bytes = 0;                                // what its slots cost (cost())
  };
  static size_t shard_of(uint32_t cid, const ObjectId& oid);
  static std::string object_part(uint32_t cid, const ObjectId& oid);
  static std::string dkey_part(uint32_t cid, const ObjectId& oid, std::string_view dkey);
  static std::string encode(const Key& k);
  static size_t cost(const std::string& key, const Slot& slot) {
    return key.size() + (slot.value ? slot.value->size() : 0) + kSlotOverhead;
  }
  void put(Shard& s, std::string key, Slot slot);
  void drop_prefix(Drop when, Shard& s, const std::string& prefix);

  std::array<Shard, kShards> shards_;
  std::atomic<size_t> bytes_{0};
  std::atomic<uint64_t> commits_{0};
  mutable std::atomic<uint64_t> hits_{0};
};

}  // namespace rfos::engine
