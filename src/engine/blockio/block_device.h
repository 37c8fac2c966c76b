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

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/blockio/buffer_arena.h"

struct io_uring_sqe;

namespace rfos::engine::blockio {

struct IoRequest {
  bool write = false;
  uint8_t* buf = nullptr;  // inside the arena, block-aligned
  uint64_t offset = 0;     // bytes, block-aligned
  uint32_t len = 0;        // bytes, block multiple
};

// A test seam (engine/power_cut.h): told of every write of the block file, when it is issued and when it
// finished, and of every sync, so a simulated power cut can undo what was not durable yet.
class WriteLog {
 public:
  virtual ~WriteLog() = default;
  virtual void write_issued(uint64_t offset, uint64_t len) = 0;
  virtual void write_finished(uint64_t offset, uint64_t len) = 0;
  // A sync covers the writes that finished before it started: sync_started's token goes to sync_done.
  virtual uint64_t sync_started() = 0;
  virtual void sync_done(uint64_t token) = 0;
};

struct BlockDeviceOptions {
  std::string path;
  uint64_t bytes = 0;  // size of a new file (a block multiple); an existing file keeps its size
  bool create = true;
  bool direct_io = true;  // fall back to buffered I/O when the file system refuses O_DIRECT
  bool prezero = true;    // zero a newly created file (no unwritten extents to convert on first write)
  uint32_t queue_depth = 64;
  // Bytes of reads an AsyncRing keeps at the device at once (0: no limit); one read always goes. See
  // AsyncRing::submit.
  uint32_t read_window_bytes = 1u << 20;
  WriteLog* write_log = nullptr;  // tests only
};

class Ring;
class BlockDevice;

// The ring of one thread that runs its own event loop (a target's): batches are submitted without waiting,
// and poll() reaps what completed (resubmitting short transfers) and runs each finished batch's callback on
// that thread. Never shared between threads.
class AsyncRing {
 public:
  ~AsyncRing();  // waits for the I/O still in flight (its buffers must outlive it), dropping the callbacks
  AsyncRing(const AsyncRing&) = delete;
  AsyncRing& operator=(const AsyncRing&) = delete;

  // Queues the batch; it goes to the kernel at the next poll() (or drain()), together with every batch queued
  // before it: one system call and one device notification for all the requests a loop iteration made.
  // Reads beyond the read window (BlockDeviceOptions::read_window_bytes) wait, in order, until earlier reads
  // complete: a device already at its bandwidth with one large read gains nothing from more, and reads that
  // share it all finish late and together, so their network transfers start together too instead of
  // overlapping the next reads (docs/engine-format.md, "Reads at the device", has the measurements). Writes
  // are not held back: concurrent ones share a group commit.
  // `done` runs from a later poll() with the batch's first error (kIoError), after all its requests ended.
  void submit(std::vector<IoRequest> requests, std::function<void(Status)> done);
  // Submits what is queued and reaps completions without blocking; returns how many batches finished.
  int poll();
  // Blocks until every batch has finished (running their callbacks).
  void drain();
  // Readable once completions came since the last arm() (for poll(2) beside other event sources).
  int event_fd() const { return event_fd_; }
  // True when poll() would find something, without a system call.
  bool ready() const;
  // Before a thread sleeps on event_fd(): clears its count and returns ready(). A completion after the clear
  // makes it readable again, one before shows in the result. poll() leaves the count alone, since reading it
  // is a system call (about 1 us on a virtual machine) on every turn of a loop that spins.
  bool arm();
  size_t in_flight() const { return batches_; }
  // Reads queued behind the read window.
  size_t reads_waiting() const { return windowed_.size(); }

 private:
  friend class BlockDevice;
  struct Batch;
  struct Slot {  // one request of a batch in the ring
    Batch* batch;
    size_t index;
    uint32_t read_bytes = 0;  // what it holds of the read window
  };
  AsyncRing(std::unique_ptr<Ring> ring, int event_fd, const BlockDevice* dev);
  void push(Batch* b, size_t i);
  void flush();
  // Completions the kernel holds until this thread enters it (the ring's IORING_SETUP_TASKRUN_FLAG).
  bool completions_posting() const;

  std::unique_ptr<Ring> ring_;
  int event_fd_ = -1;
  const BlockDevice* dev_;
  uint32_t sq_inflight_ = 0;
  size_t batches_ = 0;
  std::vector<Slot> backlog_;   // requests waiting for room in the ring
  uint64_t read_bytes_ = 0;     // reads at the device
  std::vector<Slot> windowed_;  // reads waiting for the read window, in order
};

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
  // OK when a finished write needs nothing but a device cache flush to be on the media: the file is on ext4 or
  // XFS (where O_DIRECT reaches the device), opened O_DIRECT, and FIEMAP shows every byte in written extents
  // that are neither unwritten, delayed, shared (reflinked, copy-on-write) nor inline, with no holes.
  // kNotSupported saying which assumption fails otherwise.
  Status check_in_place_writes() const;
  // A ring for one event-loop thread (see AsyncRing). Errors: kIoError.
  Result<std::unique_ptr<AsyncRing>> make_async_ring();

  uint64_t block_count() const { return bytes_ / kBlockBytes; }
  bool direct_io() const { return direct_; }
  bool created() const { return created_; }
  // Whether rings use the arena as registered (fixed) buffers. False once a registration did not fit the
  // locked-memory limit: I/O then goes through plain reads and writes of the same buffers (the kernel pins
  // their pages per I/O instead of once), and the server says at start how to raise the limit.
  bool fixed_buffers() const { return fixed_buffers_.load(std::memory_order_acquire); }

 private:
  friend class AsyncRing;
  BlockDevice(int fd, uint64_t bytes, bool direct, bool created, BufferArena* arena, uint32_t depth,
              uint32_t read_window, WriteLog* write_log);
  // A request is done (whichever way): tells the write log of a write.
  void finished(const IoRequest& r) const {
    if (write_log_ && r.write) write_log_->write_finished(r.offset, r.len);
  }
  Result<std::unique_ptr<Ring>> make_ring();
  Status check_range(const IoRequest& r) const;
  // Fills `sqe` for what is left of `r` after `done` bytes.
  void prep(io_uring_sqe* sqe, const IoRequest& r, uint32_t done, uint64_t user_data) const;
  // Accounts one completion (`res` as the kernel gave it) of `r`: true when the rest must be submitted again;
  // a failure goes to *status unless it already holds one.
  static bool account(const IoRequest& r, int res, uint32_t* done, Status* status);

  const int fd_;
  const uint64_t bytes_;
  const bool direct_;
  const bool created_;
  BufferArena* const arena_;
  const uint32_t queue_depth_;
  const uint32_t read_window_;
  WriteLog* const write_log_;
  std::atomic<bool> fixed_buffers_{true};
  std::mutex mu_;
  std::vector<std::unique_ptr<Ring>> idle_rings_;
};

}  // namespace rfos::engine::blockio
