// The registration cache: buffers registered with the fabric, by start address, for the explicit data path.
// Three kinds: pinned (register_memory: stays until unregister), allocated (alloc_memory: the fabric's memory,
// freed when dropped), and cached (registered on demand by the explicit path: kept for reuse, at most
// kMaxCached of them, least recently used out first). A region a call in flight uses is never dropped under it
// (the `in_use` predicate, the call engine's).
//
// Thread-safety: one thread (the container's).
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "common/status.h"
#include "transport/transport.h"

namespace rfos::client {

class RegistrationCache {
 public:
  static constexpr size_t kMaxCached = 64;
  struct Region {
    size_t len = 0;
    transport::Registration reg;
    bool pinned = false;  // registered (or allocated) by the application
    uint64_t used = 0;
    bool allocated = false;  // memory of the fabric's (alloc_memory): freed, not only deregistered, when dropped
  };
  using Iterator = std::map<uintptr_t, Region>::iterator;

  RegistrationCache(transport::Worker* worker, std::function<bool(uintptr_t)> in_use)
      : worker_(worker), in_use_(std::move(in_use)) {}
  ~RegistrationCache() { clear(); }
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // The region holding [p, p+len), end() when none; marks it used.
  Iterator find(const void* p, size_t len);
  Iterator end() { return regions_.end(); }
  // Registers [p, p+len): pinned, or cached (widened to whole pages, so neighbouring buffers of one allocation
  // share it). kBusy when a region in use or pinned already starts there.
  Result<Iterator> add(const void* p, size_t len, bool pinned);
  // A buffer of the fabric's of len bytes, registered and pinned.
  Result<void*> allocate(size_t len);
  // Drops the pinned (or, with `allocated`, the allocated) region starting at addr: kNotFound when there is
  // none, kBusy while I/O uses it.
  Status release(const void* addr, bool allocated);
  // Drops a cached region at `addr`, if it is one (a call timed out holding its descriptor: RDMA revokes the
  // key; UCX's tcp and shm emulation cannot). Memory of the fabric's stays: it is the caller's to free.
  void revoke(uintptr_t addr);
  size_t size() const { return regions_.size(); }
  void clear();

 private:
  void drop(Iterator it);

  transport::Worker* worker_;
  std::function<bool(uintptr_t)> in_use_;
  std::map<uintptr_t, Region> regions_;
  uint64_t use_clock_ = 0;
};

}  // namespace rfos::client
