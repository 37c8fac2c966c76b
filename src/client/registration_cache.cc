#include "client/registration_cache.h"

namespace rfos::client {

// Regions may nest or overlap, so every one starting at or below p is a candidate (there are few).
RegistrationCache::Iterator RegistrationCache::find(const void* p, size_t len) {
  auto a = reinterpret_cast<uintptr_t>(p);
  for (auto it = regions_.upper_bound(a); it != regions_.begin();) {
    --it;
    if (a + len <= it->first + it->second.len) {
      it->second.used = ++use_clock_;
      return it;
    }
  }
  return regions_.end();
}

void RegistrationCache::drop(Iterator it) {
  if (it->second.allocated)
    worker_->free_memory(it->second.reg, reinterpret_cast<void*>(it->first), it->second.len);
  else
    worker_->deregister_memory(it->second.reg);
  regions_.erase(it);
}

void RegistrationCache::clear() {
  while (!regions_.empty()) drop(regions_.begin());
}

Result<RegistrationCache::Iterator> RegistrationCache::add(const void* p, size_t len, bool pinned) {
  auto a = reinterpret_cast<uintptr_t>(p);
  if (!pinned) {
    uintptr_t page = 4096;
    len = ((a + len + page - 1) & ~(page - 1)) - (a & ~(page - 1));
    a &= ~(page - 1);
  }
  // Cached registrations overlapping an application's buffer are of memory since freed and reused: they go.
  for (auto it = regions_.begin(); pinned && it != regions_.end();) {
    bool overlaps = it->first < a + len && a < it->first + it->second.len;
    if (overlaps && !it->second.pinned && !in_use_(it->first))
      drop(it++);
    else
      ++it;
  }
  if (auto same = regions_.find(a); same != regions_.end()) {
    if (same->second.pinned || in_use_(a)) return error(StatusCode::kBusy, "a registered buffer starts here");
    drop(same);  // a smaller cached one: the new one covers it
  }
  if (!pinned) {
    size_t cached = 0;
    auto oldest = regions_.end();
    for (auto it = regions_.begin(); it != regions_.end(); ++it) {
      if (it->second.pinned) continue;
      ++cached;
      if (oldest == regions_.end() || it->second.used < oldest->second.used) oldest = it;
    }
    if (cached >= kMaxCached && !in_use_(oldest->first)) drop(oldest);
  }
  RFOS_ASSIGN_OR_RETURN(transport::Registration reg, worker_->register_memory(reinterpret_cast<void*>(a), len));
  return regions_.emplace(a, Region{len, std::move(reg), pinned, ++use_clock_}).first;
}

Result<void*> RegistrationCache::allocate(size_t len) {
  void* addr = nullptr;
  RFOS_ASSIGN_OR_RETURN(transport::Registration reg, worker_->alloc_memory(len, &addr));
  regions_.emplace(reinterpret_cast<uintptr_t>(addr), Region{len, std::move(reg), true, ++use_clock_, true});
  return addr;
}

Status RegistrationCache::release(const void* addr, bool allocated) {
  auto it = regions_.find(reinterpret_cast<uintptr_t>(addr));
  if (it == regions_.end() || !it->second.pinned || it->second.allocated != allocated)
    return error(StatusCode::kNotFound,
                 allocated ? "no buffer allocated at that address" : "no buffer registered at that address");
  if (in_use_(it->first)) return error(StatusCode::kBusy, "I/O using the buffer is still in flight");
  drop(it);
  return Status::ok();
}

void RegistrationCache::revoke(uintptr_t addr) {
  if (auto r = regions_.find(addr); addr && r != regions_.end() && !r->second.allocated) drop(r);
}

}  // namespace rfos::client
