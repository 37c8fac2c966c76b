#include "engine/blockio/buffer_arena.h"

#include <sys/mman.h>

#include <bit>
#include <cstring>

namespace rfos::engine::blockio {

Result<std::unique_ptr<BufferArena>> BufferArena::create(size_t bytes) {
  if (bytes == 0) return error(StatusCode::kInvalidArgument, "buffer arena size must be positive");
  bytes = (bytes + kSlotBytes - 1) / kSlotBytes * kSlotBytes;
  // Huge pages where the kernel gives them (transparent, on request): a 1 MiB buffer of 4 KiB pages is 256
  // pieces of memory, more than a virtio disk takes in one request (254 here), so every 1 MiB read or write
  // went to the device as two; on a huge page it is one piece. The mapping is aligned to the huge page size
  // so that every slot lies inside one.
  size_t map_bytes = bytes + kHugePageBytes;
  void* m = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return error(StatusCode::kIoError, std::string("mmap of buffer arena: ") + strerror(errno));
  auto at = (reinterpret_cast<uintptr_t>(m) + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  auto* base = reinterpret_cast<uint8_t*>(at);
  madvise(base, bytes, MADV_HUGEPAGE);  // advice only: without it (THP off) the arena still works
  std::memset(base, 0, bytes);          // fault it in now, not on the I/O path
  return std::unique_ptr<BufferArena>(new BufferArena(base, bytes, m, map_bytes));
}

BufferArena::BufferArena(uint8_t* base, size_t bytes, void* map, size_t map_bytes)
    : base_(base), bytes_(bytes), map_(map), map_bytes_(map_bytes) {
  for (size_t off = 0; off < bytes; off += kSlotBytes) slots_.push_back(iovec{base + off, kSlotBytes});
  state_.resize(slots_.size());
}

BufferArena::~BufferArena() { munmap(map_, map_bytes_); }

int BufferArena::size_class(size_t bytes) {
  size_t rounded = std::bit_ceil(bytes < kMinBytes ? kMinBytes : bytes);
  return std::countr_zero(rounded) - std::countr_zero(kMinBytes);
}

bool BufferArena::assign_slot(int cls) {
  // Prefer a never-used slot, then one that another size holds but does not use (rare: only under a shift
  // of the workload's sizes, so a linear scan is fine).
  size_t pick = state_.size();
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].cls == -1) {
      pick = i;
      break;
    }
    if (pick == state_.size() && state_[i].used == 0 && state_[i].cls != cls) pick = i;
  }
  if (pick == state_.size()) return false;
  Slot& s = state_[pick];
  if (s.cls != -1) std::erase(partial_[s.cls], pick);
  s.cls = cls;
  s.used = 0;
  size_t n = kSlotBytes / (kMinBytes << cls);
  s.free_idx.resize(n);
  for (size_t i = 0; i < n; ++i) s.free_idx[i] = static_cast<uint16_t>(n - 1 - i);
  partial_[cls].push_back(pick);
  return true;
}

uint8_t* BufferArena::alloc(size_t bytes) {
  if (bytes > kSlotBytes) return nullptr;
  int cls = size_class(bytes);
  size_t class_bytes = kMinBytes << cls;
  std::lock_guard lock(mu_);
  if (partial_[cls].empty() && !assign_slot(cls)) return nullptr;
  size_t si = partial_[cls].back();
  Slot& s = state_[si];
  uint16_t idx = s.free_idx.back();
  s.free_idx.pop_back();
  ++s.used;
  if (s.free_idx.empty()) partial_[cls].pop_back();
  used_bytes_ += class_bytes;
  return base_ + si * kSlotBytes + idx * class_bytes;
}

void BufferArena::free(uint8_t* buf, size_t bytes) {
  if (buf == nullptr) return;
  int cls = size_class(bytes);
  size_t class_bytes = kMinBytes << cls;
  std::lock_guard lock(mu_);
  size_t si = static_cast<size_t>(slot_index(buf));
  Slot& s = state_[si];
  if (s.free_idx.empty()) partial_[cls].push_back(si);
  s.free_idx.push_back(static_cast<uint16_t>((buf - base_ - si * kSlotBytes) / class_bytes));
  --s.used;
  used_bytes_ -= class_bytes;
}

size_t BufferArena::free_bytes() const {
  std::lock_guard lock(mu_);
  return bytes_ - used_bytes_;
}

}  // namespace rfos::engine::blockio
