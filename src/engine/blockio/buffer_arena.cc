#include "engine/blockio/buffer_arena.h"

#include <sys/mman.h>

#include <bit>
#include <cstring>

namespace rfos::engine::blockio {

Result<std::unique_ptr<BufferArena>> BufferArena::create(size_t bytes) {
  if (bytes == 0) return error(StatusCode::kInvalidArgument, "buffer arena size must be positive");
  bytes = (bytes + kSlotBytes - 1) / kSlotBytes * kSlotBytes;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return error(StatusCode::kIoError, std::string("mmap of buffer arena: ") + strerror(errno));
  return std::unique_ptr<BufferArena>(new BufferArena(static_cast<uint8_t*>(p), bytes));
}

BufferArena::BufferArena(uint8_t* base, size_t bytes) : base_(base), bytes_(bytes) {
  for (size_t off = 0; off < bytes; off += kSlotBytes) slots_.push_back(iovec{base + off, kSlotBytes});
  state_.resize(slots_.size());
}

BufferArena::~BufferArena() { munmap(base_, bytes_); }

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
