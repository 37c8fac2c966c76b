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
}

BufferArena::~BufferArena() { munmap(base_, bytes_); }

int BufferArena::size_class(size_t bytes) {
  size_t rounded = std::bit_ceil(bytes < kMinBytes ? kMinBytes : bytes);
  return std::countr_zero(rounded) - std::countr_zero(kMinBytes);
}

uint8_t* BufferArena::alloc(size_t bytes) {
  if (bytes > kSlotBytes) return nullptr;
  int cls = size_class(bytes);
  size_t class_bytes = kMinBytes << cls;
  std::lock_guard lock(mu_);
  auto& list = free_[cls];
  if (list.empty()) {
    if (next_slot_ == slots_.size()) return nullptr;
    uint8_t* slot = base_ + next_slot_++ * kSlotBytes;
    for (size_t off = kSlotBytes; off > 0; off -= class_bytes) list.push_back(slot + off - class_bytes);
  }
  uint8_t* buf = list.back();
  list.pop_back();
  used_bytes_ += class_bytes;
  return buf;
}

void BufferArena::free(uint8_t* buf, size_t bytes) {
  if (buf == nullptr) return;
  int cls = size_class(bytes);
  std::lock_guard lock(mu_);
  free_[cls].push_back(buf);
  used_bytes_ -= kMinBytes << cls;
}

size_t BufferArena::free_bytes() const {
  std::lock_guard lock(mu_);
  return bytes_ - used_bytes_;
}

}  // namespace rfos::engine::blockio
