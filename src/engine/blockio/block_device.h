// The block file of one target: a preallocated file (or, later, a raw NVMe namespace) read and written with
// io_uring, O_DIRECT where the file system allows it, from the registered BufferArena (fixed buffers) and a
// registered file descriptor.
//
// Rings are pooled: a caller borrows one for the duration of a batch of I/O, so concurrent callers never
// share a submission queue and each ring has the arena registered once. A target reactor that owns a thread
// keeps one ring for itself.
//
// Thread-safety: all methods are safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/blockio/buffer_arena.h"

namespace rfos::engine::blockio {

struct IoRequest {
  bool write = false;
  uint8_t* buf = nullptr;  // inside the arena, block-aligned
  uint64_t offset = 0;     // bytes, block-aligned
  uint32_t len = 0;        // bytes, block multiple
};

struct BlockDeviceOptions {
  std::string path;
  uint64_t bytes = 0;  // size of a new file (a block multiple); an existing file keeps its size
  bool create = true;
  bool direct_io = true;  // fall back to buffered I/O when the file system refuses O_DIRECT
  bool prezero = true;    // zero a newly created file (no unwritten extents to convert on first write)
  uint32_t queue_depth = 64;
};

class Ring;

class BlockDevice {
 public:
  static constexpr uint32_t kBlockBytes = 4096;

  // Errors: kInvalidArgument, kNotFound (missing and !create), kIoError.
  static Result<std::unique_ptr<BlockDevice>> open(const BlockDeviceOptions& options, BufferArena* arena);
  ~BlockDevice();

  // Submits every request and waits for all of them (short transfers are resubmitted).
  // Errors: kIoError with the first failure; the other requests still complete before it returns.
  Status submit_and_wait(std::span<const IoRequest> requests);
  // Makes completed writes durable (fdatasync).
  Status sync();

  uint64_t block_count() const { return bytes_ / kBlockBytes; }
  bool direct_io() const { return direct_; }
  bool created() const { return created_; }

 private:
  BlockDevice(int fd, uint64_t bytes, bool direct, bool created, BufferArena* arena, uint32_t depth);
  Result<std::unique_ptr<Ring>> make_ring();

  const int fd_;
  const uint64_t bytes_;
  const bool direct_;
  const bool created_;
  BufferArena* const arena_;
  const uint32_t queue_depth_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Ring>> idle_rings_;
};

}  // namespace rfos::engine::blockio
