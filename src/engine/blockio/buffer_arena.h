// The engine's registered I/O memory: one anonymous mapping, split into 1 MiB slots that io_uring (and later
// a transport) registers once. Buffers are powers of two from 4 KiB to 1 MiB, 4 KiB-aligned. A slot serves
// one size at a time; a size that runs out takes a fresh slot, or else one that another size has left
// entirely unused, so the arena never strands memory in the wrong size.
//
// Thread-safety: alloc/free are safe from any thread (one short mutex).
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace rfos::engine::blockio {

class BufferArena {
 public:
  static constexpr size_t kSlotBytes = 1u << 20;
  static constexpr size_t kMinBytes = 4096;

  // bytes is rounded up to whole slots. Errors: kInvalidArgument, kIoError (mmap failed).
  static Result<std::unique_ptr<BufferArena>> create(size_t bytes);
  ~BufferArena();

  // A buffer of at least `bytes` (<= kSlotBytes), or nullptr when the arena is exhausted (retry later).
  // The buffer never crosses a slot boundary.
  uint8_t* alloc(size_t bytes);
  // Returns a buffer from alloc with the same `bytes`.
  void free(uint8_t* buf, size_t bytes);

  // One iovec per slot, for io_uring_register_buffers. The index of the slot holding `p` is its buf_index.
  const std::vector<iovec>& slots() const { return slots_; }
  int slot_index(const void* p) const {
    return static_cast<int>((static_cast<const uint8_t*>(p) - base_) / kSlotBytes);
  }
  size_t bytes() const { return bytes_; }
  size_t free_bytes() const;

 private:
  static constexpr int kClasses = 9;  // 4 KiB .. 1 MiB
  struct Slot {
    int cls = -1;                    // -1: unassigned
    uint32_t used = 0;               // buffers handed out
    std::vector<uint16_t> free_idx;  // buffers not handed out (indices within the slot)
  };
  static constexpr size_t kHugePageBytes = 2u << 20;
  BufferArena(uint8_t* base, size_t bytes, void* map, size_t map_bytes);
  static int size_class(size_t bytes);
  // Assigns an unassigned or wholly unused slot to `cls`; false when every slot is in use.
  bool assign_slot(int cls);

  uint8_t* const base_;
  const size_t bytes_;
  void* const map_;  // the whole mapping, of which [base_, base_ + bytes_) is the huge-page-aligned part
  const size_t map_bytes_;
  std::vector<iovec> slots_;
  mutable std::mutex mu_;
  std::vector<Slot> state_;
  std::array<std::vector<size_t>, kClasses> partial_;  // slots of each size with a free buffer
  size_t used_bytes_ = 0;
};

}  // namespace rfos::engine::blockio
